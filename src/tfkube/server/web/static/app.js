// tfkube dashboard: the small amount of behaviour the server-rendered pages need.
//
// Rules this file keeps:
// - Every change goes to the REST API (/api/v1/...) with the session's CSRF token.
// - Text from users or jobs (log lines, messages, names) is only ever set with
//   textContent, never as HTML. HTML comes from the server's templates (autoescaped),
//   swapped in by htmx.
// - No eval, no inline scripts (the pages' Content-Security-Policy forbids both).
"use strict";

(() => {
  const $ = (sel, root = document) => root.querySelector(sel);
  const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));
  const csrf = () => $('meta[name="csrf-token"]')?.content || "";

  // -- the REST API ---------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, detail, errors) {
      super(detail);
      this.status = status;
      this.detail = detail;
      this.errors = errors || [];
    }
  }

  async function api(method, url, body) {
    const headers = { Accept: "application/json", "X-CSRF-Token": csrf() };
    const init = { method, headers, credentials: "same-origin" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(url, init);
    const text = await response.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch (_) {
      data = null;
    }
    if (!response.ok) {
      if (response.status === 401 && !url.startsWith("/api/v1/auth/login")) {
        location.assign("/login?next=" + encodeURIComponent(location.pathname + location.search));
      }
      const detail = (data && data.detail) || `${response.status} ${response.statusText}`;
      throw new ApiError(response.status, String(detail), data && data.errors);
    }
    return data;
  }

  function toast(message, bad = false) {
    const el = $("[data-toast]");
    if (!el) return;
    el.textContent = message;
    el.classList.toggle("bad", bad);
    el.hidden = false;
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => (el.hidden = true), bad ? 8000 : 3000);
  }

  // Fill `{name}` in a URL template from an object (values URL-encoded).
  const fill = (template, values) =>
    template.replace(/\{(\w+)\}/g, (_, key) => encodeURIComponent(values[key] ?? ""));

  // After an action: "reload", "refresh" (the live pieces), "show-token", or a URL template.
  function then(how, result) {
    if (!how) return;
    if (how === "reload") location.reload();
    else if (how === "refresh") refreshLive(true);
    else if (how === "show-token") showToken(result);
    else if (how === "show-secret") showSecret(result);
    else location.assign(fill(how, result || {}));
  }

  // -- forms that talk to the API ---------------------------------------------------------------

  function setPath(obj, path, value) {
    const parts = path.split(".");
    let at = obj;
    for (const part of parts.slice(0, -1)) at = at[part] = at[part] || {};
    at[parts[parts.length - 1]] = value;
  }

  function formValues(form) {
    const body = {};
    const url = {};
    for (const el of form.elements) {
      if (!el.name || el.disabled || el.type === "submit" || el.type === "button") continue;
      if (el.type === "radio" && !el.checked) continue;
      if (el.type === "checkbox" && el.dataset.list !== undefined) {
        // Checkboxes sharing a name, each a value of one list (e.g. events to be told of).
        body[el.name] = body[el.name] || [];
        if (el.checked) body[el.name].push(el.value);
        continue;
      }
      let value;
      if (el.type === "checkbox") value = el.checked;
      else if (el.type === "number" || el.dataset.number !== undefined) {
        value = el.value === "" ? null : Number(el.value);
        if (value !== null && el.dataset.scale) value = Math.round(value * Number(el.dataset.scale));
      }
      else if (el.dataset.lines !== undefined)
        value = el.value.split("\n").map((s) => s.trim()).filter(Boolean);
      else value = el.value;
      if (el.dataset.urlOnly !== undefined) {
        url[el.name] = value;
        continue;
      }
      if (value === null || (value === "" && el.dataset.optional !== undefined)) continue;
      setPath(body, el.name, value);
    }
    // data-ensure="quota": send {} for an object whose fields were all left empty.
    for (const key of (form.dataset.ensure || "").split(",").filter(Boolean)) body[key] ??= {};
    return { body, url };
  }

  function clearErrors(root) {
    $$("[data-error-for]", root).forEach((el) => (el.textContent = ""));
    $$("[aria-invalid]", root).forEach((el) => el.removeAttribute("aria-invalid"));
    const list = $("[data-error-list]", root);
    if (list) list.replaceChildren();
  }

  // Put each {field, message} next to the field it names; the rest in the general box.
  function showErrors(root, error) {
    const general = $('[data-error-for="_"]', root);
    const list = $("[data-error-list]", root);
    let first = null;
    const unplaced = [];
    for (const problem of error.errors || []) {
      const field = String(problem.field || "");
      const candidates = [field, field.split(".")[0], field.split(".").slice(-1)[0]];
      const slot = candidates.map((f) => $(`[data-error-for="${CSS.escape(f)}"]`, root)).find(Boolean);
      if (slot && !list) {
        slot.textContent = slot.textContent ? `${slot.textContent} ${problem.message}` : problem.message;
        const input = root.querySelector(`[name="${CSS.escape(field)}"], [data-name="${CSS.escape(field)}"]`);
        if (input) {
          input.setAttribute("aria-invalid", "true");
          first = first || input;
        }
      } else unplaced.push(problem);
    }
    if (list && unplaced.length) {
      for (const problem of unplaced) {
        const li = document.createElement("li");
        const code = document.createElement("code");
        code.textContent = problem.field;
        li.append(code, document.createTextNode(": " + problem.message));
        list.append(li);
      }
    } else if (unplaced.length && general) {
      general.textContent = unplaced.map((p) => `${p.field}: ${p.message}`).join("; ");
    }
    if (!(error.errors || []).length && general) general.textContent = error.detail;
    if (first) first.focus();
    else (general || list)?.scrollIntoView({ block: "nearest" });
  }

  // A field the API refused is cleared of its error as soon as someone changes it: the
  // red mark and the message say "this is wrong", which stops being true once it is edited.
  function fieldEdited(event) {
    const input = event.target.closest("[aria-invalid], input[type=radio][name]");
    const form = input && input.closest("form[data-api-form], [data-upload]");
    if (!form) return;
    input.removeAttribute("aria-invalid");
    if (input.type === "radio")  // one choice answers the whole group
      $$(`input[type=radio][name="${CSS.escape(input.name)}"]`, form).forEach((el) => el.removeAttribute("aria-invalid"));
    const name = input.getAttribute("name") || input.dataset.name || "";
    const candidates = [name, name.split(".")[0], name.split(".").slice(-1)[0]];
    for (const key of candidates) {
      const slot = key && $(`[data-error-for="${CSS.escape(key)}"]`, form);
      if (slot) {
        slot.textContent = "";
        break;
      }
    }
  }
  document.addEventListener("input", fieldEdited);
  document.addEventListener("change", fieldEdited);

  document.addEventListener("submit", async (event) => {
    const form = event.target.closest("form[data-api-form]");
    if (!form) return;
    event.preventDefault();
    clearErrors(form);
    // A required choice (radio buttons) left open is asked for here: there is no field to send.
    const open = [...form.querySelectorAll("input[type=radio][required]")].find(
      (el) => !form.querySelector(`input[type=radio][name="${CSS.escape(el.name)}"]:checked`));
    if (open) {
      showErrors(form, { errors: [{ field: open.name, message: open.dataset.missing || "Choose one." }] });
      return;
    }
    const { body, url } = formValues(form);
    const button = form.querySelector('[type="submit"]');
    if (button) button.disabled = true;
    try {
      const target = fill(form.dataset.apiForm, url);
      const result = await api(form.dataset.method || "POST", target, body);
      then(form.dataset.then, result);
    } catch (error) {
      if (!(error instanceof ApiError)) throw error;
      showErrors(form, error);
    } finally {
      if (button) button.disabled = false;
    }
  });

  // Buttons: data-action="METHOD /api/..." [data-confirm] [data-body] [data-body-inputs]
  // [data-then]. data-body-inputs: ids of inputs whose name: value join the body (the
  // value read as JSON where the input has data-json: `null`, numbers).
  document.addEventListener("click", async (event) => {
    const button = event.target.closest("[data-action]");
    if (!button || button.disabled) return;
    event.preventDefault();
    if (button.dataset.confirm && !confirm(button.dataset.confirm)) return;
    const [method, url] = button.dataset.action.split(" ");
    button.disabled = true;
    try {
      let body = button.dataset.body ? JSON.parse(button.dataset.body) : undefined;
      for (const id of (button.dataset.bodyInputs || "").split(" ").filter(Boolean)) {
        const input = document.getElementById(id);
        if (!input) continue;
        const value = "json" in input.dataset ? JSON.parse(input.value) : input.value;
        body = { ...(body || {}), [input.name]: value };
      }
      const result = await api(method, url, body);
      then(button.dataset.then, result);
    } catch (error) {
      if (!(error instanceof ApiError)) throw error;
      toast(error.detail, true);
    } finally {
      button.disabled = false;
    }
  });

  document.addEventListener("click", async (event) => {
    if (!event.target.closest("[data-sign-out]")) return;
    try {
      await api("POST", "/api/v1/auth/logout");
    } finally {
      location.assign("/login");
    }
  });

  // The user menu (top right) closes on a click elsewhere and on Escape.
  document.addEventListener("click", (event) => {
    for (const menu of $$("details[data-menu][open]"))
      if (!menu.contains(event.target)) menu.open = false;
  });
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    for (const menu of $$("details[data-menu][open]")) {
      menu.open = false;
      menu.querySelector("summary").focus();
    }
  });

  // Team page: a member's role, changed in place.
  document.addEventListener("change", async (event) => {
    const select = event.target.closest("[data-role-of]");
    if (select) {
      const url = `/api/v1/teams/${encodeURIComponent(select.dataset.team)}/members/${encodeURIComponent(select.dataset.roleOf)}`;
      try {
        await api("PUT", url, { role: select.value });
        toast(`${select.dataset.roleOf} is now ${select.value}`);
      } catch (error) {
        toast(error.detail || String(error), true);
      }
    }
    const auto = event.target.closest("[data-autosubmit]");
    if (auto) auto.form.submit();
  });

  function showSecret(result) {
    const box = $("[data-new-secret]");
    if (!box || !result) return location.reload();
    $("[data-secret-value]", box).textContent = result.secret;
    box.hidden = false;
  }

  function showToken(result) {
    const box = $("[data-new-token]");
    if (!box || !result) return location.reload();
    $("[data-token-value]", box).textContent = result.token;
    box.hidden = false;
    box.scrollIntoView({ block: "nearest" });
  }

  document.addEventListener("click", async (event) => {
    const button = event.target.closest("[data-copy], [data-copy-from]");
    if (!button) return;
    const text = button.dataset.copy ?? $(button.dataset.copyFrom)?.textContent ?? "";
    try {
      await navigator.clipboard.writeText(text);
      toast("Copied");
    } catch (_) {
      toast("Copy did not work here: select the text and copy it", true);
    }
  });

  // -- tabs (New job: Form | YAML) --------------------------------------------------------------

  function selectTab(tab) {
    const tabs = $$('[role="tab"]', tab.closest('[role="tablist"]'));
    for (const t of tabs) {
      const on = t === tab;
      t.setAttribute("aria-selected", String(on));
      t.tabIndex = on ? 0 : -1;
      document.getElementById(t.getAttribute("aria-controls")).hidden = !on;
    }
  }
  document.addEventListener("click", (event) => {
    const tab = event.target.closest("[data-tab]");
    if (tab) selectTab(tab);
  });
  document.addEventListener("keydown", (event) => {
    const tab = event.target.closest("[data-tab]");
    if (!tab || !["ArrowLeft", "ArrowRight", "Home", "End"].includes(event.key)) return;
    const tabs = $$('[role="tab"]', tab.closest('[role="tablist"]'));
    let i = tabs.indexOf(tab);
    if (event.key === "ArrowLeft") i = (i - 1 + tabs.length) % tabs.length;
    else if (event.key === "ArrowRight") i = (i + 1) % tabs.length;
    else i = event.key === "Home" ? 0 : tabs.length - 1;
    selectTab(tabs[i]);
    tabs[i].focus();
    event.preventDefault();
  });

  // -- uploads: a folder or an archive -> multipart POST, with progress -----------------------------

  const SKIP = /(^|\/)(\.git|__pycache__|\.ipynb_checkpoints|\.DS_Store|\.venv|node_modules)(\/|$)/;

  // The folder's files with paths relative to the folder itself (the browser gives
  // "folder/sub/file"), leaving out version-control and cache clutter.
  function folderFiles(input) {
    const files = Array.from(input.files || []);
    const tops = new Set(files.map((f) => (f.webkitRelativePath || f.name).split("/")[0]));
    const strip = tops.size === 1 && files.every((f) => (f.webkitRelativePath || "").includes("/"));
    const kept = [];
    let skipped = 0;
    for (const f of files) {
      let path = f.webkitRelativePath || f.name;
      if (strip) path = path.slice(path.indexOf("/") + 1);
      if (SKIP.test(path)) skipped++;
      else kept.push([path, f]);
    }
    return { kept, skipped, top: strip ? [...tops][0] : "" };
  }

  function uploadParts(widget) {
    const value = (name) => widget.querySelector(`[data-name="${name}"]`);
    const folder = value("folder");
    const archive = value("archive");
    if (archive && archive.files.length) return { archive: archive.files[0] };
    if (folder && folder.files.length) return folderFiles(folder);
    return null;
  }

  function describeUpload(widget) {
    const parts = uploadParts(widget);
    const summary = $("[data-upload-summary]", widget);
    const nameInput = widget.querySelector('[data-name="name"]');
    if (!parts) return (summary.textContent = "");
    if (parts.archive) {
      summary.textContent = `${parts.archive.name}, ${humanSize(parts.archive.size)}`;
      if (!nameInput.value) nameInput.value = suggestName(parts.archive.name.replace(/\.(tar\.gz|tgz|tar|zip)$/i, ""));
    } else {
      const bytes = parts.kept.reduce((n, [, f]) => n + f.size, 0);
      summary.textContent =
        `${parts.kept.length} files, ${humanSize(bytes)}` +
        (parts.skipped ? ` (${parts.skipped} left out: .git, __pycache__ and the like)` : "");
      if (!nameInput.value && parts.top) nameInput.value = suggestName(parts.top);
    }
  }

  const suggestName = (text) =>
    text.toLowerCase().replace(/[^a-z0-9_.-]+/g, "-").replace(/^[-_.]+|[-_.]+$/g, "").slice(0, 64);

  function humanSize(n) {
    if (n < 1000) return `${n} B`;
    const units = ["kB", "MB", "GB", "TB"];
    let v = n;
    let u = -1;
    do {
      v /= 1000;
      u++;
    } while (v >= 1000 && u < units.length - 1);
    return `${v < 10 ? v.toFixed(1) : Math.round(v)} ${units[u]}`;
  }

  document.addEventListener("change", (event) => {
    const widget = event.target.closest("[data-upload]");
    if (!widget || !event.target.matches('input[type="file"]')) return;
    // One source at a time: choosing a folder clears the archive and the other way round.
    for (const other of $$('input[type="file"]', widget)) if (other !== event.target) other.value = "";
    describeUpload(widget);
  });
  document.addEventListener("change", (event) => {
    const kind = event.target.closest('[data-upload] [data-name="kind"]');
    if (kind) {
      const code = $("[data-code-only]", kind.closest("[data-upload]"));
      if (code) code.hidden = kind.value !== "code";
    }
  });

  function upload(widget) {
    clearErrors(widget);
    const value = (name) => widget.querySelector(`[data-name="${name}"]`)?.value || "";
    const parts = uploadParts(widget);
    if (!parts) {
      $('[data-error-for="file"]', widget).textContent = "Choose a folder or an archive first.";
      return;
    }
    const team = value("team") || $("#team")?.value || "";
    const kind = value("kind") || "code";
    const form = new FormData();
    form.append("name", value("name"));
    form.append("kind", kind);
    // An empty entrypoint is the server's default (tfkube.contract.DEFAULT_ENTRYPOINT).
    if (kind === "code" && value("entrypoint")) form.append("entrypoint", value("entrypoint"));
    if (parts.archive) form.append("file", parts.archive, parts.archive.name);
    else for (const [path, file] of parts.kept) form.append("files", file, path);

    const bar = $(".upload-progress", widget);
    const button = $("[data-upload-go]", widget);
    bar.hidden = false;
    button.disabled = true;
    const xhr = new XMLHttpRequest(); // fetch() cannot report upload progress
    xhr.open("POST", `/api/v1/teams/${encodeURIComponent(team)}/artifacts`);
    xhr.setRequestHeader("X-CSRF-Token", csrf());
    xhr.setRequestHeader("Accept", "application/json");
    xhr.upload.onprogress = (e) => {
      if (e.lengthComputable) bar.firstElementChild.style.width = `${(100 * e.loaded) / e.total}%`;
    };
    xhr.onloadend = () => {
      button.disabled = false;
      bar.hidden = true;
      let data = null;
      try {
        data = JSON.parse(xhr.responseText);
      } catch (_) {
        data = null;
      }
      if (xhr.status === 201) return uploaded(widget, data);
      const error = new ApiError(xhr.status, (data && data.detail) || `upload failed (${xhr.status || "network error"})`, data && data.errors);
      if (!error.errors.length) error.errors = [{ field: "_", message: error.detail }];
      showErrors(widget, error);
    };
    xhr.send(form);
  }

  function uploaded(widget, artifact) {
    const unpacked = artifact.unpacked_size ?? null;
    toast(
      `Uploaded ${artifact.name} version ${artifact.version}: ${artifact.files} files` +
        (unpacked === null ? "" : `, ${humanSize(unpacked)} (${humanSize(artifact.size)} compressed)`)
    );
    if (widget.dataset.uploadThen !== "code-select") return location.reload();
    const select = $("#code");
    const ref = `${artifact.name}:${artifact.version}`;
    let option = $$("option", select).find((o) => o.value === ref);
    if (!option) {
      option = document.createElement("option");
      option.value = ref;
      const unpacked = artifact.unpacked_size ?? null;
      option.textContent = `${artifact.name} · version ${artifact.version} (just uploaded) · ${artifact.files} files` + (unpacked === null ? "" : `, ${humanSize(unpacked)}`);
      select.append(option);
    }
    select.value = ref;
    widget.closest("details")?.removeAttribute("open");
    select.focus();
  }

  document.addEventListener("click", (event) => {
    const go = event.target.closest("[data-upload-go]");
    if (go) upload(go.closest("[data-upload]"));
  });
  document.addEventListener("keydown", (event) => {
    // Enter in the upload widget uploads (it may sit inside another form).
    if (event.key === "Enter" && event.target.closest("[data-upload]") && event.target.matches("input")) {
      event.preventDefault();
      upload(event.target.closest("[data-upload]"));
    }
  });

  // -- live pieces: htmx refreshes server-rendered fragments ---------------------------------------

  // Elements with data-poll="N" get a "tick" event every N seconds while the page is
  // visible and the user is not typing or selecting text inside them: a refresh never
  // pulls a half-typed filter or a selection from under someone. (Links and buttons keep
  // their focus across a refresh: they carry ids, and htmx refocuses by id.)
  const lastTick = new WeakMap();
  function busy(el) {
    const active = document.activeElement;
    if (active && el.contains(active) && active.matches("input:not([type=checkbox]), select, textarea")) {
      return true;
    }
    const sel = document.getSelection();
    return Boolean(sel && !sel.isCollapsed && el.contains(sel.anchorNode));
  }
  setInterval(() => {
    if (document.visibilityState !== "visible" || !window.htmx) return;
    const now = Date.now();
    for (const el of $$("[data-poll]")) {
      const every = 1000 * Number(el.dataset.poll || 5);
      if (!lastTick.has(el)) lastTick.set(el, now);
      if (now - lastTick.get(el) < every || busy(el)) continue;
      lastTick.set(el, now);
      htmx.trigger(el, "tick");
    }
  }, 1000);

  // A refresh already on its way when someone starts typing or selecting inside the fragment
  // is dropped when it lands: swapping it in would replace the search box under their
  // fingers, losing what they typed and the search it was about to send. The next tick
  // brings the fragment a few seconds later.
  document.addEventListener("htmx:beforeSwap", (event) => {
    const cause = event.detail.requestConfig?.triggeringEvent?.type;
    if ((cause === "tick" || cause === "refresh") && busy(event.detail.target)) {
      event.detail.shouldSwap = false;
    }
  });

  // A choice made in a fragment (the Serve button's model server) outlives its refresh:
  // each select with an id gets its value back after the swap.
  const chosen = new Map();
  document.addEventListener("htmx:beforeSwap", (event) => {
    for (const select of event.detail.target.querySelectorAll("select[id]"))
      chosen.set(select.id, select.value);
  });
  document.addEventListener("htmx:afterSwap", () => {
    // By id in the page: an outerHTML swap has put a new element where the target was.
    for (const [id, value] of chosen) {
      const select = document.getElementById(id);
      if (select && [...select.options].some((o) => o.value === value)) select.value = value;
    }
    chosen.clear();
  });

  let refreshTimer = null;
  function refreshLive(now = false) {
    // Coalesce bursts of changes (a 1,000-replica job changes often) into one refresh a second.
    if (!window.htmx) return;
    const run = () => {
      refreshTimer = null;
      const live = ["#job-summary", "#replica-table", "#job-events", "#job-outputs", "#model-list"];
      for (const sel of live) {
        const el = $(sel);
        if (el && (now || !busy(el))) htmx.trigger(el, "refresh");
      }
    };
    if (now) return run();
    if (!refreshTimer) refreshTimer = setTimeout(run, 1000);
  }

  // A job page follows its job through the server's SSE stream: each change refreshes the
  // pieces (server-rendered); the end stops everything after a last refresh.
  function watchJob(page) {
    if (page.dataset.live !== "true" || !window.EventSource) return;
    const source = new EventSource(page.dataset.watch);
    let first = true;
    source.addEventListener("job", () => {
      if (first) first = false;
      else refreshLive();
    });
    source.addEventListener("event", () => refreshLive());
    source.addEventListener("end", () => {
      source.close();
      page.dataset.live = "false";
      refreshLive(true);
      charts.refresh();
      logs.jobEnded();
    });
    source.onerror = () => {
      // The browser reconnects by itself (resuming after the last event id); if the job
      // is gone, the polling pieces still show what is there.
    };
  }

  // -- charts: loss, accuracy, steps/s against step (uPlot) ---------------------------------------

  const PREFERRED = ["loss", "accuracy", "steps/s"];
  const COLORS = ["#2563eb", "#16a34a", "#db2777", "#ea580c", "#7c3aed", "#0891b2"];

  const charts = {
    root: null,
    plots: new Map(),
    timer: null,
    start(root) {
      this.root = root;
      this.refresh();
      this.timer = setInterval(() => {
        if (document.visibilityState === "visible" && $(".job-page")?.dataset.live === "true") this.refresh();
      }, 5000);
      window.addEventListener("resize", () => this.resize());
    },
    async refresh() {
      if (!this.root) return;
      let data;
      try {
        data = await api("GET", this.root.dataset.charts);
      } catch (_) {
        this.root.dataset.loaded = "true";
        return;
      }
      this.draw(chartSeries(data.series || []));
      this.root.dataset.loaded = "true";
    },
    // Each chart fills its cell of the CSS grid (3 across on a laptop, 1 on a phone).
    width(figure) {
      return Math.max(200, Math.floor(figure.clientWidth));
    },
    resize() {
      for (const { plot, figure } of this.plots.values()) {
        plot.setSize({ width: this.width(figure), height: 200 });
      }
    },
    draw(groups) {
      const empty = $("[data-charts-empty]", this.root);
      if (empty) empty.hidden = groups.length > 0;
      if (!window.uPlot) return;
      for (const group of groups) {
        let entry = this.plots.get(group.tag);
        const data = alignRuns(group.runs);
        if (entry && entry.runs.join() !== group.runs.map((r) => r.run).join()) {
          entry.figure.remove();
          this.plots.delete(group.tag);
          entry = null;
        }
        if (!entry) {
          const figure = document.createElement("figure");
          figure.className = "chart";
          figure.dataset.tag = group.tag;
          const caption = document.createElement("figcaption");
          figure.append(caption);
          this.root.append(figure);
          const series = [{ label: "step" }].concat(
            group.runs.map((r, i) => ({
              label: r.label || (r.run === "." ? group.tag : `${group.tag} (${r.run})`),
              stroke: COLORS[i % COLORS.length],
              width: 2,
              spanGaps: true,
              points: { show: false },
            }))
          );
          const plot = new uPlot(
            {
              width: this.width(figure),
              height: 200,
              legend: { show: group.runs.length > 1 },
              cursor: { drag: { x: true, y: false } },
              scales: { x: { time: false } },
              axes: [{ label: "step", size: 36 }, { size: 52 }],
              series,
            },
            data,
            figure
          );
          entry = { figure, plot, caption, runs: group.runs.map((r) => r.run) };
          this.plots.set(group.tag, entry);
        } else entry.plot.setData(data);
        const points = group.runs.reduce((n, r) => n + r.points.length, 0);
        const last = group.runs[0].points[group.runs[0].points.length - 1];
        entry.figure.dataset.points = String(points);
        // Figures logged while training (often on one batch): never the job's result.
        entry.caption.textContent = group.caption
          ? group.caption
          : last
            ? `${group.title}: ${formatValue(last.value)} at step ${last.step.toLocaleString()} (during training)`
            : group.title;
      }
      const order = groups.map((g) => g.tag);
      for (const tag of order) {
        const entry = this.plots.get(tag);
        if (entry) this.root.append(entry.figure);
      }
    },
  };

  // -- resources: CPU and memory per replica over time (uPlot) ------------------------------------

  const usage = {
    root: null,
    plots: new Map(),
    start(root) {
      this.root = root;
      this.refresh();
      setInterval(() => {
        if (document.visibilityState === "visible" && $(".job-page")?.dataset.live === "true") this.refresh();
      }, 5000);
      window.addEventListener("resize", () => {
        for (const { plot, figure } of this.plots.values()) plot.setSize({ width: charts.width(figure), height: 200 });
      });
    },
    async refresh() {
      if (!this.root) return;
      let data;
      try {
        data = await api("GET", this.root.dataset.usage);
      } catch (_) {
        this.root.dataset.loaded = "true";
        return;
      }
      const empty = $("[data-usage-empty]", this.root);
      const replicas = (data.replicas || []).filter((r) => r.points.length);
      if (!data.available && empty) empty.textContent = data.reason;
      if (empty) empty.hidden = replicas.length > 0;
      if (replicas.length && window.uPlot) {
        this.draw("cpu", "CPU (cores)", replicas, (p) => p[1]);
        this.draw("memory", "Memory (MiB)", replicas, (p) => p[2] / 1048576);
      }
      this.root.dataset.loaded = "true";
    },
    // One chart per measure, a line per replica, against time (the supervisor samples every
    // replica at the same moments, so their times line up).
    draw(key, title, replicas, value) {
      const times = [...new Set(replicas.flatMap((r) => r.points.map((p) => p[0])))].sort((a, b) => a - b);
      const index = new Map(times.map((t, i) => [t, i]));
      const data = [times].concat(
        replicas.map((r) => {
          const column = new Array(times.length).fill(null);
          for (const p of r.points) column[index.get(p[0])] = value(p);
          return column;
        })
      );
      let entry = this.plots.get(key);
      const names = replicas.map((r) => r.replica).join();
      if (entry && entry.names !== names) {
        entry.figure.remove();
        this.plots.delete(key);
        entry = null;
      }
      if (!entry) {
        const figure = document.createElement("figure");
        figure.className = "chart";
        figure.dataset.usage = key;
        const caption = document.createElement("figcaption");
        figure.append(caption);
        this.root.append(figure);
        const series = [{ label: "time" }].concat(
          replicas.map((r, i) => ({
            label: r.replica,
            stroke: COLORS[i % COLORS.length],
            width: 2,
            spanGaps: false,
            points: { show: false },
          }))
        );
        const plot = new uPlot(
          {
            width: charts.width(figure),
            height: 200,
            legend: { show: true, live: false },
            cursor: { drag: { x: true, y: false } },
            // One sample so far: a minute around it, not uPlot's years.
            scales: { x: { time: true, range: (_u, min, max) => (max > min ? [min, max] : [min - 30, max + 30]) } },
            axes: [{ size: 50 }, { size: 52 }],
            series,
          },
          data,
          figure
        );
        entry = { figure, plot, caption, names };
        this.plots.set(key, entry);
      } else entry.plot.setData(data);
      const newest = replicas.map((r) => `${r.replica} ${formatValue(value(r.points[r.points.length - 1]))}`);
      entry.figure.dataset.points = String(replicas.reduce((n, r) => n + r.points.length, 0));
      entry.caption.textContent = `${title}, latest: ${newest.join(", ")}`;
    },
  };

  const formatValue = (v) => (Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 1 ? v.toFixed(2) : v.toPrecision(3));

  // Series from the API -> chart groups: one chart per tag (a line per run), plus
  // steps/s from the wall times of the loss points when the job writes no rate itself.
  function chartSeries(series) {
    const byTag = new Map();
    for (const s of series) {
      if (!s.points.length) continue;
      let tag = s.tag;
      if (/global_step\/sec|steps?_per_sec/.test(tag)) tag = "steps/s";
      if (!byTag.has(tag)) byTag.set(tag, []);
      byTag.get(tag).push({ run: s.run, points: s.points });
    }
    if (!byTag.has("steps/s")) {
      const base = byTag.get("loss") || [...byTag.values()][0];
      if (base) {
        const pts = base[0].points;
        const rate = [];
        for (let i = 1; i < pts.length; i++) {
          const dt = pts[i].wall_time - pts[i - 1].wall_time;
          const ds = pts[i].step - pts[i - 1].step;
          if (dt > 0 && ds > 0) rate.push({ step: pts[i].step, value: ds / dt });
        }
        if (rate.length) byTag.set("steps/s", [{ run: ".", points: rate }]);
      }
    }
    const tags = [...byTag.keys()].sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
    return tags.slice(0, 9).map((tag) => ({ tag, title: titleOf(tag), runs: byTag.get(tag) }));
  }
  const rank = (tag) => (PREFERRED.indexOf(tag) === -1 ? 99 : PREFERRED.indexOf(tag));
  const titleOf = (tag) =>
    ({ loss: "Loss (lower is better)", accuracy: "Accuracy", "steps/s": "Training speed (steps/s)" })[tag] || tag;

  // -- comparing jobs: one chart per summary, one line per job (the compare API's curves) --------

  const compareCharts = Object.assign(Object.create(charts), {
    plots: new Map(),
    start(root) {
      this.root = root;
      this.refresh();
      window.addEventListener("resize", () => this.resize());
    },
    async refresh() {
      let data;
      try {
        data = await api("GET", this.root.dataset.compareCharts);
      } catch (error) {
        const empty = $("[data-charts-empty]", this.root);
        if (empty) empty.textContent = `Could not read the jobs' summaries: ${error.detail || error}`;
        this.root.dataset.loaded = "true";
        return;
      }
      const byTag = new Map();
      data.jobs.forEach((job, i) => {
        const curves = (data.scalars || [])[i];
        for (const group of chartSeries((curves && curves.series) || [])) {
          if (!byTag.has(group.tag)) byTag.set(group.tag, { tag: group.tag, title: group.title, runs: [] });
          for (const run of group.runs) {
            const label = run.run === "." ? job.name : `${job.name} (${run.run})`;
            byTag.get(group.tag).runs.push({ run: `${job.id}/${run.run}`, label, points: run.points });
          }
        }
      });
      const groups = [...byTag.values()]
        .sort((a, b) => rank(a.tag) - rank(b.tag) || a.tag.localeCompare(b.tag))
        .slice(0, 12);
      for (const group of groups) {
        const jobs = new Set(group.runs.map((r) => r.run.split("/")[0])).size;
        group.caption = `${group.title}: ${jobs} of ${data.jobs.length} jobs`;
      }
      const empty = $("[data-charts-empty]", this.root);
      if (empty) empty.textContent = "None of these jobs wrote TensorBoard summaries (loss, accuracy, …) to its log folder.";
      this.draw(groups);
      this.root.dataset.loaded = "true";
    },
  });

  function alignRuns(runs) {
    const steps = [...new Set(runs.flatMap((r) => r.points.map((p) => p.step)))].sort((a, b) => a - b);
    const columns = runs.map((r) => {
      const at = new Map(r.points.map((p) => [p.step, p.value]));
      return steps.map((s) => (at.has(s) ? at.get(s) : null));
    });
    return [steps, ...columns];
  }

  // -- logs: one replica, one start; follow, search, kept after the end ----------------------------

  const MAX_LINES = 20000;
  const TAIL_BYTES = 1 << 20;
  const WINDOW_BEFORE = 32 * 1024;
  const WINDOW_AFTER = 96 * 1024;

  const logs = {
    root: null,
    lines: [],
    partial: "",
    source: null,
    offset: 0,
    generation: 0,
    start(root) {
      this.root = root;
      this.pick = $("[data-log-pick]", root);
      this.attempt = $("[data-log-attempt]", root);
      this.search = $("[data-log-search]", root);
      this.follow = $("[data-log-follow]", root);
      this.text = $("[data-log-text]", root);
      this.status = $("[data-log-status]", root);
      this.download = $("[data-log-download]", root);
      this.pick.addEventListener("change", () => this.fillAttempts() || this.load());
      this.attempt.addEventListener("change", () => this.load());
      this.follow.addEventListener("change", () => this.load());
      this.search.addEventListener("input", () => this.render());
      this.fillAttempts();
      const at = root.dataset.openAt ? JSON.parse(root.dataset.openAt) : null;
      if (at) this.openAt(this.pick.value, at.attempt, at.at, at.line, false);
      else this.load();
    },
    // One line of one start of a replica (a search hit): the log around it, that line
    // marked and scrolled to. Only a window of the file is read, however long the log.
    async openAt(replica, attempt, at, line, scroll = true) {
      this.stop();
      const generation = ++this.generation;
      this.choose(replica);
      if (!$$("option", this.attempt).some((o) => o.value === String(attempt))) {
        const option = document.createElement("option");
        option.value = String(attempt);
        option.textContent = `#${attempt + 1}`;
        this.attempt.append(option);
        this.attempt.closest(".field").hidden = false;
      }
      this.attempt.value = String(attempt);
      this.follow.checked = false;
      this.search.value = "";
      this.download.href = this.url();
      this.download.setAttribute("download", `${replica}-${attempt + 1}.log`);
      this.status.textContent = "Loading…";
      const from = Math.max(0, at - WINDOW_BEFORE);
      const read = async (offset, limit) => {
        if (limit <= 0) return "";
        const response = await fetch(this.shown(`&offset=${offset}&limit=${limit}`), { credentials: "same-origin" });
        if (!response.ok) throw new Error(`${response.status}`);
        return response.text();
      };
      let before, after;
      try {
        [before, after] = await Promise.all([read(from, at - from), read(at, WINDOW_AFTER)]);
      } catch (_) {
        if (generation === this.generation) this.status.textContent = "Could not read this log.";
        return;
      }
      if (generation !== this.generation) return;
      const head = before ? before.split("\n") : [];
      head.pop(); // what follows the last newline before the hit: nothing
      if (from > 0) head.shift(); // a line cut by the window
      const tail = after.split("\n");
      if (tail[tail.length - 1] === "") tail.pop();
      else if (new TextEncoder().encode(after).length >= WINDOW_AFTER && tail.length > 1) tail.pop();
      this.lines = head.concat(tail);
      this.partial = "";
      this.mark = { index: head.length, line };
      this.render();
      this.root.dataset.loaded = "true";
      this.root.dataset.openedAt = `${replica}:${attempt}:${line}`;
      this.status.textContent = `Line ${line.toLocaleString()} of ${replica}, start #${attempt + 1}, with the lines around it: Download for the whole log.`;
      const marked = $("[data-log-mark]", this.text);
      if (marked) {
        this.text.scrollTop = Math.max(0, marked.offsetTop - this.text.offsetTop - this.text.clientHeight / 3);
        if (scroll) this.root.scrollIntoView({ block: "start" });
      }
    },
    fillAttempts() {
      const option = this.pick.selectedOptions[0];
      const attempts = (option?.dataset.attempts || "0").split(",").map(Number);
      this.attempt.replaceChildren(
        ...attempts
          .slice()
          .reverse()
          .map((a, i) => {
            const o = document.createElement("option");
            o.value = String(a);
            o.textContent = i === 0 ? `#${a + 1} (latest)` : `#${a + 1}`;
            return o;
          })
      );
      this.attempt.closest(".field").hidden = attempts.length < 2;
    },
    // The listing tells which starts each replica has (new ones appear while it runs).
    learnAttempts(files) {
      const seen = new Map();
      for (const f of files) seen.set(f.replica, [...(seen.get(f.replica) || []), f.attempt]);
      let changed = false;
      for (const option of this.pick.options) {
        const tries = (seen.get(option.value) || []).sort((a, b) => a - b).join(",");
        if (tries && option.dataset.attempts !== tries) {
          option.dataset.attempts = tries;
          changed = changed || option.selected;
        }
      }
      if (changed) {
        const keep = this.attempt.value;
        this.fillAttempts();
        if ($$("option", this.attempt).some((o) => o.value === keep)) this.attempt.value = keep;
      }
    },
    // Pick a replica in the panel (offered even where a big job's list leaves it out).
    choose(replica) {
      if (!$$("option", this.pick).some((o) => o.value === replica)) {
        const option = document.createElement("option");
        option.value = replica;
        option.textContent = replica;
        this.pick.append(option);
      }
      this.pick.value = replica;
      this.fillAttempts();
    },
    show(replica) {
      this.choose(replica);
      this.load();
      this.root.scrollIntoView({ block: "start" });
    },
    url(extra = "") {
      const replica = encodeURIComponent(this.pick.value);
      return `${this.root.dataset.logs}/${replica}?attempt=${this.attempt.value}${extra}`;
    },
    // What the page shows names the server's folders as the job knows them ($TFKUBE_LOG_DIR,
    // ...); Download gives the log as written.
    shown(extra = "") {
      return this.url(`&job_paths=true${extra}`);
    },
    stop() {
      if (this.source) this.source.close();
      this.source = null;
    },
    async load() {
      this.stop();
      const generation = ++this.generation;
      this.mark = null;
      delete this.root.dataset.openedAt;
      this.lines = [];
      this.partial = "";
      this.offset = 0;
      this.download.href = this.url();
      this.download.setAttribute("download", `${this.pick.value}-${Number(this.attempt.value) + 1}.log`);
      this.status.textContent = "Loading…";
      let files = [];
      try {
        files = await api("GET", this.root.dataset.logs);
      } catch (_) {
        files = [];
      }
      if (generation !== this.generation) return;
      this.learnAttempts(files);
      const file = files.find((f) => f.replica === this.pick.value && String(f.attempt) === this.attempt.value);
      const size = file ? file.size : 0;
      const from = size > TAIL_BYTES ? size - TAIL_BYTES : 0;
      const live = $(".job-page")?.dataset.live === "true" && this.follow.checked;
      if (live && window.EventSource) {
        // No kept log file (yet): a pod's log on Kubernetes without a shared outputs folder,
        // or a replica that has not written one. Ask once, plainly, rather than opening a
        // stream the server can only refuse and then asking again.
        return file ? this.followFrom(from, generation) : this.readInstead(generation);
      }
      try {
        const response = await fetch(this.shown(`&offset=${from}`), { credentials: "same-origin" });
        const body = await response.text();
        if (generation !== this.generation) return;
        if (!response.ok) {
          this.root.dataset.loaded = "true";
          this.status.textContent = "No log for this replica yet.";
          return this.render();
        }
        this.append(body, from > 0);
        this.root.dataset.loaded = "true";
        this.status.textContent = from > 0 ? `Showing the last ${humanSize(TAIL_BYTES)} of ${humanSize(size)}: download for all of it.` : "";
      } catch (_) {
        this.status.textContent = "Could not read the log.";
      }
    },
    followFrom(offset, generation) {
      this.offset = offset;
      const source = new EventSource(this.shown(`&offset=${offset}`));
      this.source = source;
      // Loaded once the server answered: the stream opened, or the read in its stead.
      source.addEventListener("open", () => {
        if (generation !== this.generation) return;
        this.status.textContent = "Following: new lines appear as the replica writes them.";
        this.root.dataset.loaded = "true";
      });
      let dropFirst = offset > 0;
      source.addEventListener("line", (e) => {
        if (generation !== this.generation) return source.close();
        // Where the line ends in the file as written (its id): shown lines may differ.
        this.offset = e.lastEventId ? Number(e.lastEventId) : this.offset + new TextEncoder().encode(e.data + "\n").length;
        if (dropFirst) {
          dropFirst = false; // a cut line from the middle of the file
          return;
        }
        this.pushLines([e.data]);
      });
      source.addEventListener("end", () => {
        source.close();
        if (generation === this.generation) this.status.textContent = "The replica's log is complete.";
      });
      source.onerror = () => {
        source.close();
        if (generation === this.generation) this.readInstead(generation);
      };
    },
    // No stream: either no log yet (try again soon), or a log that cannot be followed (a
    // pod's log on Kubernetes without a shared outputs folder): show it as it is.
    async readInstead(generation) {
      let response = null;
      try {
        response = await fetch(this.shown(`&offset=${this.offset}`), { credentials: "same-origin" });
      } catch (_) {
        response = null;
      }
      if (generation !== this.generation) return;
      this.root.dataset.loaded = "true";
      const type = response?.headers.get("content-type") || "";
      if (response?.ok && !type.includes("event-stream")) {
        this.append(await response.text(), false);
        this.status.textContent = "This log cannot be followed live here; reload for newer lines.";
        return;
      }
      if (!this.lines.length) this.status.textContent = "No log for this replica yet: trying again every few seconds.";
      setTimeout(() => {
        if (generation === this.generation) this.followFrom(this.offset, generation);
      }, 3000);
    },
    jobEnded() {
      if (this.root && this.source) {
        this.status.textContent = "The job ended; the log stays here.";
      }
    },
    append(text, cut) {
      const all = this.partial + text;
      const parts = all.split("\n");
      this.partial = parts.pop();
      if (cut) parts.shift();
      if (this.partial) {
        parts.push(this.partial);
        this.partial = "";
      }
      this.pushLines(parts);
    },
    pushLines(lines) {
      this.lines.push(...lines);
      if (this.lines.length > MAX_LINES) this.lines.splice(0, this.lines.length - MAX_LINES);
      this.render();
    },
    render() {
      const query = this.search.value.trim().toLowerCase();
      const shown = query ? this.lines.filter((l) => l.toLowerCase().includes(query)) : this.lines;
      const atBottom = this.text.scrollTop + this.text.clientHeight >= this.text.scrollHeight - 30;
      if (this.mark && !query && this.mark.index < this.lines.length) {
        // A search hit's line, marked (as text: the log's own words never become markup).
        const at = this.mark.index;
        const line = document.createElement("mark");
        line.dataset.logMark = String(this.mark.line);
        line.title = `line ${this.mark.line.toLocaleString()}`;
        line.textContent = this.lines[at];
        const before = this.lines.slice(0, at).join("\n");
        const after = this.lines.slice(at + 1).join("\n");
        this.text.replaceChildren(
          document.createTextNode(at ? before + "\n" : ""),
          line,
          document.createTextNode(after ? "\n" + after : "")
        );
        return;
      }
      this.text.textContent = shown.join("\n");
      if (query) this.status.textContent = `${shown.length.toLocaleString()} of ${this.lines.length.toLocaleString()} lines contain “${this.search.value.trim()}”.`;
      if (this.follow.checked && (atBottom || !query)) this.text.scrollTop = this.text.scrollHeight;
    },
  };

  // -- searching every replica's every start on the server, each hit linked to its line ----------

  const HITS_PER_ANSWER = 50;
  const finder = {
    start(form) {
      this.form = form;
      this.box = $("[data-log-hits]");
      this.list = $("[data-log-hits-list]");
      this.status = $("[data-log-hits-status]");
      this.more = $("[data-log-hits-more]");
      this.generation = 0;
      form.addEventListener("submit", (event) => {
        event.preventDefault();
        const q = form.elements.q.value.trim();
        if (!q) return;
        this.query = q;
        this.cursor = null;
        this.found = 0;
        this.list.replaceChildren();
        this.box.hidden = false;
        this.go(++this.generation);
      });
      this.more.addEventListener("click", () => this.go(this.generation));
    },
    // Answers are bounded on the server (about 16 MiB read, 50 hits each): ask again from
    // where the last one stopped while it found little, then let the user ask for more.
    async go(generation) {
      this.more.hidden = true;
      this.status.textContent = "Searching…";
      for (let asked = 0; asked < 8; asked++) {
        const params = new URLSearchParams({ q: this.query, limit: String(HITS_PER_ANSWER), job_paths: "true" });
        if (this.cursor) params.set("cursor", this.cursor);
        let answer;
        try {
          answer = await api("GET", `${this.form.dataset.logFind}?${params}`);
        } catch (error) {
          if (generation === this.generation) this.status.textContent = error.detail || String(error);
          return;
        }
        if (generation !== this.generation) return;
        for (const hit of answer.hits) this.list.append(this.item(hit));
        this.found += answer.hits.length;
        this.cursor = answer.next;
        const where = `${answer.searched_files.toLocaleString()} of ${answer.total_files.toLocaleString()} logs searched`;
        const lines = `${this.found.toLocaleString()} ${this.found === 1 ? "line holds" : "lines hold"} “${this.query}”`;
        this.status.textContent = answer.next ? `${lines} so far (${where}).` : `${lines} (every log searched: ${answer.total_files.toLocaleString()}).`;
        if (!answer.total_files)
          this.status.textContent = "This job keeps no logs on the server yet, so there is nothing to search.";
        this.box.dataset.done = answer.next ? "false" : "true";
        if (!answer.next || answer.hits.length) break;
      }
      this.more.hidden = !this.cursor;
    },
    item(hit) {
      const li = document.createElement("li");
      const link = document.createElement("a");
      const params = new URLSearchParams({ replica: hit.replica, attempt: String(hit.attempt), at: String(hit.offset), line: String(hit.line) });
      link.href = `${this.form.dataset.jobPage}?${params}#logs`;
      link.dataset.hit = JSON.stringify([hit.replica, hit.attempt, hit.offset, hit.line]);
      link.textContent = `${hit.replica} · start #${hit.attempt + 1} · line ${hit.line.toLocaleString()}`;
      const text = document.createElement("code");
      text.textContent = hit.text;
      li.append(link, " ", text);
      return li;
    },
  };

  document.addEventListener("click", (event) => {
    const link = event.target.closest("[data-hit]");
    if (!link || !logs.root || event.ctrlKey || event.metaKey || event.shiftKey) return;
    event.preventDefault();
    const [replica, attempt, offset, line] = JSON.parse(link.dataset.hit);
    history.replaceState(null, "", link.href); // the address opens the same line
    logs.openAt(replica, attempt, offset, line);
  });

  document.addEventListener("click", (event) => {
    const link = event.target.closest("[data-show-log]");
    if (!link || !logs.root) return;
    event.preventDefault();
    logs.show(link.dataset.showLog);
  });

  // -- the jobs list: the jobs ticked to compare, kept across the list's live refreshes ----------

  const picked = new Set();
  function showPicked() {
    for (const box of $$("[data-pick]")) box.checked = picked.has(box.value);
    const go = $("[data-compare-go]");
    const hint = $("[data-compare-hint]");
    if (!go || !hint) return;
    go.disabled = picked.size < 2 || picked.size > 10;
    hint.textContent =
      picked.size === 0
        ? "Tick 2 to 10 jobs to compare their results, curves and settings."
        : picked.size === 1
          ? "1 job ticked: tick at least one more."
          : picked.size > 10
            ? `${picked.size} jobs ticked: compare at most 10.`
            : `${picked.size} jobs ticked.`;
  }
  document.addEventListener("change", (event) => {
    const box = event.target.closest("[data-pick]");
    if (!box) return;
    if (box.checked) picked.add(box.value);
    else picked.delete(box.value);
    showPicked();
  });
  document.addEventListener("submit", (event) => {
    const form = event.target.closest("form[data-compare-form]");
    if (!form) return;
    event.preventDefault();
    // One short address to share: /compare?jobs=a,b,c in the order ticked.
    if (picked.size >= 2 && picked.size <= 10)
      location.assign(`/compare?jobs=${[...picked].map(encodeURIComponent).join(",")}`);
  });

  // -- start ---------------------------------------------------------------------------------------

  function init() {
    document.documentElement.classList.add("js");
    const page = $(".job-page");
    if (page) watchJob(page);
    const chartRoot = $("[data-charts]");
    if (chartRoot) charts.start(chartRoot);
    const usageRoot = $("[data-usage]");
    if (usageRoot) usage.start(usageRoot);
    const compareRoot = $("[data-compare-charts]");
    if (compareRoot) compareCharts.start(compareRoot);
    if ($("[data-compare-form]")) showPicked();
    document.body.addEventListener("htmx:afterSwap", (e) => {
      if (e.target.id === "job-list") showPicked();
    });
    const logRoot = $("[data-logs]");
    if (logRoot) logs.start(logRoot);
    const findForm = $("[data-log-find]");
    if (findForm) finder.start(findForm);
    document.body.addEventListener("htmx:responseError", (e) => {
      if (e.detail.xhr.status === 404 && $(".job-page")) toast("This job no longer exists.", true);
    });
    // The phase chips and the phase select show one filter: keep them in step.
    document.body.addEventListener("htmx:afterSwap", (e) => {
      const list = e.target.id === "job-list" ? e.target : null;
      const select = $("#phase");
      if (list && select) select.value = list.dataset.phase || "";
    });
    // A job page whose job ended while it was open: the summary says so; stop the charts.
    document.body.addEventListener("htmx:afterSwap", (e) => {
      const summary = e.target.id === "job-summary" ? e.target : null;
      if (summary && page && summary.dataset.active === "false" && page.dataset.live === "true") {
        page.dataset.live = "false";
        charts.refresh();
      }
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
