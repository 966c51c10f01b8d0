"""Workload HTML never runs on the dashboard's origin (issue 17, item 4).

A real `tfkube server` (local engine, SQLite), a job's real TensorBoard and a user's real
JupyterLab. First over HTTP (httpx, Host headers on 127.0.0.1): the dashboard's origin
sends a signed-in browser to the target's own origin with a one-time grant; the grant
opens that target only, once; the pass it gives opens that target only, and ends when
its login session ends; a workload origin serves nothing else (no API, no dashboard, no
other target); what API clients still get on the dashboard's origin cannot run script.

Then in Debian's Chromium: the notebook's owner opens a notebook whose (trusted) HTML
output carries a script, as a teammate's code or a member's page would; the script tries
to read the dashboard's API with the viewer's session and to mint itself an API token
with the CSRF token of a dashboard page. It must get nothing, and no token may exist.
TensorBoard and JupyterLab themselves keep working in the browser.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

import tfkube
from server._server import PASSWORD, Api, ServerProc, api_for, login
from server.conftest import start_server, stop_server, targz, upload, wait_job


class World:
    def __init__(self, server: ServerProc, admin: Api) -> None:
        self.server, self.admin = server, admin
        self.team = admin.new_team()
        self.owner, self.mate = admin.new_user(), admin.new_user()
        admin.add_member(self.team, self.owner, "member")
        admin.add_member(self.team, self.mate, "member")
        self.api = api_for(server.url, self.owner)
        self.api.ok(
            upload(self.api, self.team, "plain", targz({"run.sh": "#!/bin/sh\necho hi\n"})), 201
        )
        job = self.api.ok(
            self.api.post(
                f"/api/v1/teams/{self.team}/jobs",
                json={"name": "board", "workers": 1, "code": "plain"},
            ),
            201,
        )
        self.job = str(job["id"])
        wait_job(self.api, self.job, {"Succeeded"}, timeout=180)

    @property
    def port(self) -> int:
        return self.server.port

    def host(self, kind: str, target: str) -> str:
        return f"{kind}-{target}.localhost:{self.port}"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    server, admin, tag = start_server(tmp_path_factory.mktemp("origins"), "sqlite", None)
    w = None
    try:
        w = World(server, admin)
        yield w
    finally:
        if w is not None:
            w.api.close()
        stop_server(server, admin, tag)


def _on(
    world: World, host: str, path: str, method: str = "GET", cookies: dict[str, str] | None = None
) -> httpx.Response:
    """A request to a workload origin (*.localhost is this machine: sent to 127.0.0.1)."""
    headers = {"Host": host}
    if cookies:
        headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in cookies.items())
    with httpx.Client(base_url=world.server.url, timeout=180) as http:
        return http.request(method, path, headers=headers)


def _pass_of(response: httpx.Response) -> str:
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=lax" in cookie
    assert "Domain" not in cookie  # the target's host only
    match = re.match(r"tfkube_workload=([^;]+)", cookie)
    assert match, cookie
    return match.group(1)


def test_the_dashboards_origin_sends_browsers_to_the_targets_own(world: World) -> None:
    session, csrf = login(world.server.url, world.owner)
    try:
        top = f"/proxy/tensorboard/{world.job}/"
        r = session.get(top, timeout=180)
        assert r.status_code == 303, f"served on the dashboard's origin: {r.status_code}"
        to = urlsplit(r.headers["location"])
        host = world.host("tensorboard", world.job)
        assert (to.scheme, to.netloc, to.path) == ("http", host, "/.tfkube/enter")
        query = parse_qs(to.query)
        assert query["next"] == [top]

        entered = _on(world, host, f"/.tfkube/enter?{to.query}")
        assert entered.status_code == 303, entered.text
        assert entered.headers["location"] == top
        value = _pass_of(entered)
        assert _on(world, host, f"/.tfkube/enter?{to.query}").status_code == 403  # once only

        page = _on(world, host, top, cookies={"tfkube_workload": value})
        assert page.status_code == 200, page.text[:300]
        assert "tensorboard" in page.text.lower()
        assert "sandbox" not in page.headers.get("content-security-policy", "")

        # The same grant or pass for another target opens nothing there.
        other = world.host("tensorboard", "f" * 16)
        r = _on(world, other, f"/.tfkube/enter?{to.query}")
        assert r.status_code == 403
        r = _on(world, other, f"/proxy/tensorboard/{'f' * 16}/", cookies={"tfkube_workload": value})
        assert r.status_code == 303  # back to the dashboard's origin to sign in and ask
        assert r.headers["location"].startswith(f"{world.server.url}/proxy/tensorboard/ffff")
        r = _on(
            world,
            other,
            f"/proxy/tensorboard/{'f' * 16}/data/runs",
            method="POST",
            cookies={"tfkube_workload": value},
        )
        assert r.status_code == 401

        # The dashboard's own session cookie is not a pass.
        dashboard_cookie = session.cookies.get("tfkube_session")
        r = _on(world, host, top, cookies={"tfkube_session": str(dashboard_cookie)})
        assert r.status_code == 303

        # Signing out ends the pass too.
        out = session.post("/api/v1/auth/logout", headers={"X-CSRF-Token": csrf})
        assert out.status_code == 204, out.text
        r = _on(world, host, top, cookies={"tfkube_workload": value})
        assert r.status_code == 303
    finally:
        session.close()


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/jobs",
        "/login",
        "/api/v1/teams",
        "/api/v1/users",
        "/api/v1/tokens",
        "/proxy/model/0123456789abcdef/v1/models/x",
        "/proxy/tensorboard/ffffffffffffffff/",
        "/proxy/notebook/ffffffffffffffff/lab",
        "/static/app.js",
    ],
)
def test_a_workload_origin_serves_nothing_else(world: World, path: str) -> None:
    r = _on(world, world.host("tensorboard", world.job), path)
    assert r.status_code == 404, (path, r.status_code, r.text[:200])


def test_what_stays_on_the_dashboards_origin_cannot_run_script(world: World) -> None:
    """API clients (Bearer) still reach TensorBoard here, as before, but as inert bytes;
    a browser's session cannot drive a TensorBoard or a notebook here at all."""
    top = f"/proxy/tensorboard/{world.job}/"
    r = world.api.get(top, timeout=180)
    assert r.status_code == 200
    assert r.headers["content-security-policy"] == "sandbox; default-src 'none'"
    assert r.headers["x-content-type-options"] == "nosniff"
    tags = world.api.get(f"{top}data/plugin/scalars/tags", timeout=180)
    assert tags.status_code == 200
    assert tags.headers["content-security-policy"] == "sandbox; default-src 'none'"
    session, csrf = login(world.server.url, world.owner)
    try:
        r = session.post(
            f"{top}data/runs", headers={"X-CSRF-Token": csrf, "Origin": world.server.url}
        )
        assert r.status_code == 403
    finally:
        session.close()
    assert httpx.get(f"{world.server.url}{top}").status_code == 401


# -- in a real browser ------------------------------------------------------------------------

PROBE = """
<script>
(async () => {
  const probe = {origin: location.origin, results: []};
  async function attempt(name, url, options) {
    try {
      const r = await fetch(url, Object.assign({credentials: "include"}, options || {}));
      const text = await r.text();
      probe.results.push({name: name, status: r.status, body: text.slice(0, 300)});
      return text;
    } catch (e) {
      probe.results.push({name: name, status: "error", body: String(e)});
      return "";
    }
  }
  for (const base of ["", "DASHBOARD"]) {
    await attempt("teams " + base, base + "/api/v1/teams");
    const page = await attempt("jobs page " + base, base + "/jobs");
    const m = /name="csrf-token" content="([^"]+)"/.exec(page);
    await attempt("mint a token " + base, base + "/api/v1/tokens", {
      method: "POST",
      headers: {"Content-Type": "application/json", "X-CSRF-Token": m ? m[1] : ""},
      body: JSON.stringify({name: "stolen"}),
    });
  }
  window.__probe = probe;
})();
</script>
"""


def _hostile_notebook(dashboard: str) -> dict[str, Any]:
    """A notebook whose saved output is HTML with a script; `trusted` as the outputs of
    anything its owner ran are (a teammate's helper that displays a page, say)."""
    html = PROBE.replace("DASHBOARD", dashboard)
    return {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {},
        "cells": [
            {
                "cell_type": "code",
                "id": "probe",
                "execution_count": 1,
                "metadata": {"trusted": True},
                "source": "show_report()",
                "outputs": [
                    {
                        "output_type": "display_data",
                        "metadata": {},
                        "data": {"text/html": html, "text/plain": "<report>"},
                    }
                ],
            }
        ],
    }


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from web._browser import chromium

    with chromium() as b:
        yield b


def _signed_in(browser: Any, world: World, user: str) -> Any:
    from web._browser import LAPTOP, sign_in

    context = browser.new_context(viewport=LAPTOP, base_url=world.server.url)
    context.set_default_timeout(120_000)
    sign_in(context.new_page(), world.server.url, user, PASSWORD)
    return context


def test_a_notebook_pages_script_cannot_act_for_its_viewer(browser: Any, world: World) -> None:
    from web._browser import poll, shot

    with tfkube.Client(world.server.url, world.api.token, team=world.team) as c:
        notebook = c.notebook()
    base = f"/proxy/notebook/{notebook.id}"
    put = world.api.http.put(
        f"{base}/api/contents/report.ipynb",
        json={"type": "notebook", "format": "json", "content": _hostile_notebook(world.server.url)},
        timeout=180,
    )
    assert put.status_code in {200, 201}, put.text
    before = {t["id"] for t in world.api.ok(world.api.get("/api/v1/tokens"))}

    context = _signed_in(browser, world, world.owner)
    try:
        page = context.pages[0]
        page.goto(f"{base}/lab/tree/report.ipynb")
        page.wait_for_url(re.compile(r".*/proxy/notebook/[0-9a-f]{16}/lab.*"), timeout=180_000)
        probe = poll(
            "the report's script to run",
            lambda: page.evaluate("window.__probe || null"),
            300,
            1,
        )
        shot(page, "security-notebook-probe", full_page=False)
    finally:
        context.close()

    readable = [r for r in probe["results"] if r["status"] in {200, 201}]
    assert not readable, json.dumps(probe, indent=1)
    after = world.api.ok(world.api.get("/api/v1/tokens"))
    assert not [t for t in after if t["id"] not in before and t["name"] == "stolen"], after
    assert urlsplit(probe["origin"]).hostname == f"notebook-{notebook.id}.localhost", probe


def test_tensorboard_and_jupyterlab_work_in_a_browser(browser: Any, world: World) -> None:
    from web._browser import poll

    context = _signed_in(browser, world, world.owner)
    try:
        page = context.pages[0]
        page.goto(f"/proxy/tensorboard/{world.job}/")
        assert urlsplit(page.url).netloc == world.host("tensorboard", world.job)
        poll("TensorBoard's page", lambda: "TensorBoard" in page.title(), 180)
        with tfkube.Client(world.server.url, world.api.token, team=world.team) as c:
            notebook = c.notebook()
        page.goto(f"/proxy/notebook/{notebook.id}/lab")
        assert urlsplit(page.url).netloc == world.host("notebook", notebook.id)
        listing = page.locator(".jp-DirListing-content").get_by_text("team-artifacts")
        listing.first.wait_for(timeout=240_000)  # the lab's contents API, through its pass
    finally:
        context.close()
    # A teammate has no pass there, and the dashboard's origin answers 404 for her.
    mate = _signed_in(browser, world, world.mate)
    try:
        page = mate.pages[0]
        response = page.goto(
            f"http://{world.host('notebook', notebook.id)}/proxy/notebook/{notebook.id}/lab"
        )
        assert response is not None
        assert response.status == 404
    finally:
        mate.close()
