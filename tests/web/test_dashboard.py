"""The dashboard in a real Chromium against a real `tfkube server` (local engine, real
TensorFlow), the way a new user meets it: the one-time set-up link, a team and a second
user, an upload of the between-graph example, a job from the four fields, watching it to
Succeeded (chart, logs after the end, TensorBoard through the proxy, the final checkpoint),
a failing job, another team's user, and text that looks like markup.

Each step waits for what the product promises with generous deadlines (the machine is
shared); screenshots of every page go to the test artifacts (tests/web/_browser.py)."""

from __future__ import annotations

import io
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import numpy as np
import pytest

from server._server import PASSWORD
from server.conftest import targz, upload, wait_job

from ._browser import LAPTOP, PHONE, poll, shot, sign_in
from ._scale import crowd
from .conftest import Site

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mnist-between-graph"
JOB_URL = re.compile(r".*/jobs/[0-9a-f]{16}$")
PREDICT = """async ([url, rows]) => {
    const body = JSON.stringify({instances: rows});
    const r = await fetch(url + ":predict", {method: "POST", body: body});
    return [r.status, await r.json()];
}"""
"""A TensorFlow Serving client in the page: POST <url>:predict with the session's cookie."""
MARKUP = '<script>window.__tfkubeXss = 1</script><img src=x onerror="window.__tfkubeXss = 2">'


@dataclass
class People:
    bob: dict[str, Any]
    """bob's signed-in browser state (member of team vision)."""
    carol: dict[str, Any]
    """carol's (member of team other only)."""


def user_menu(page: Any) -> Any:
    """The menu under the signed-in user's name, top right (its summary, to open it)."""
    return page.get_by_role("banner").locator("details.who > summary")


def search_people(page: Any, text: str) -> None:
    """Type into the team page's picker and wait for the people it finds."""
    page.get_by_label("Find a person").fill(text)
    quoted = f"\N{LEFT DOUBLE QUOTATION MARK}{text}\N{RIGHT DOUBLE QUOTATION MARK}"
    page.locator("#people-found legend", has_text=quoted).wait_for()


def add_member(page: Any, team: str, user: str, role: str = "member") -> None:
    """On a team page: find the person by part of their name, choose them, add them."""
    search_people(page, user[:3])
    page.locator("#people-found").get_by_role("radio", name=user, exact=True).check()
    page.get_by_label("Role", exact=True).select_option(role)
    page.get_by_role("button", name=f"Add to {team}").click()
    page.locator("table.members").get_by_role("rowheader", name=re.compile(user)).wait_for()


def words(locator: Any) -> str:
    """The element's text with its whitespace collapsed (chips and pagers span lines)."""
    return " ".join((locator.text_content() or "").split())


def _open(
    browser: Any, site: Site, state: dict[str, Any], viewport: dict[str, int] = LAPTOP
) -> Any:
    context = browser.new_context(
        viewport=viewport, base_url=site.url, storage_state=state, accept_downloads=True
    )
    context.set_default_timeout(30_000)
    return context


@pytest.fixture(scope="module")
def people(browser: Any, site: Site) -> People:
    """First admin set-up -> a team and a second user -> sign in as that user; all in the
    browser (the first test checks what this leaves)."""
    context = browser.new_context(viewport=LAPTOP, base_url=site.url)
    page = context.new_page()
    page.goto(f"{site.url}/")
    assert "set-up link" in page.inner_text("main")
    shot(page, "00-setup-needed")
    assert site.server.setup_token
    page.goto(f"/setup?token={site.server.setup_token}")
    shot(page, "01-setup")
    page.get_by_label("Your user name").fill(site.admin)
    page.get_by_label("Password").fill("short")
    page.get_by_role("button", name="Create and sign in").click()
    page.locator('[data-error-for="password"]').filter(has_text="12").wait_for()
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Create and sign in").click()
    page.wait_for_url("**/jobs?welcome=1")
    assert "Upload your code" in page.inner_text("main")
    shot(page, "02-welcome")

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Admin").click()
    for team in ("vision", "other"):
        page.get_by_label("Team name").fill(team)
        page.get_by_role("button", name="Create team").click()
        page.locator("table.teams").get_by_role("link", name=team).wait_for()
    for user in ("bob", "carol"):
        page.get_by_label("User name").fill(user)
        page.locator("#u-password").fill(PASSWORD)
        page.get_by_role("button", name="Create user").click()
        page.locator("table.users").get_by_role("rowheader", name=user).wait_for()
    shot(page, "03-admin")
    for team, user in (("vision", "bob"), ("other", "carol")):
        page.goto(f"/team?team={team}")
        add_member(page, team, user)
    page.locator("summary", has_text="Change the quota").click()
    page.get_by_label("CPUs").fill("4")
    page.get_by_role("button", name="Save quota").click()
    poll("the new quota", lambda: "0 in use of 4" in words(page.locator(".quota")), 30)
    shot(page, "04-team")
    user_menu(page).click()
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(lambda url: url.endswith("/login"))
    context.close()

    states = {}
    for user in ("bob", "carol"):
        context = browser.new_context(viewport=LAPTOP, base_url=site.url)
        page = context.new_page()
        page.goto("/jobs/new")  # not signed in: the sign-in page, then back here
        page.wait_for_url("**/login?next=**")
        if user == "bob":
            shot(page, "05-sign-in")
        page.get_by_label("User name").fill(user)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(lambda url: url.endswith("/jobs/new") and "login" not in url)
        states[user] = context.storage_state()
        context.close()
    return People(bob=states["bob"], carol=states["carol"])


def test_first_admin_sets_up_a_team_and_a_user_who_signs_in(
    people: People, browser: Any, site: Site
) -> None:
    context = _open(browser, site, people.bob)
    page = context.new_page()
    page.goto("/jobs")
    assert page.locator(".who-name").inner_text() == "bob"
    assert "No jobs yet" in page.inner_text("main")
    assert page.get_by_role("link", name="Admin").count() == 0  # bob is no site admin
    page.goto("/team")
    assert "vision" in page.inner_text("h1")
    assert page.locator("#tokens-h").count() == 0  # tokens are the user's, not the team's
    page.locator("main").get_by_role("link", name="your account").wait_for()
    menu = user_menu(page)
    assert "bob" in menu.inner_text()
    menu.click()
    page.get_by_role("link", name="Your API tokens").click()
    page.wait_for_url("**/account")
    page.get_by_label("Name", exact=True).fill("laptop CLI")
    page.get_by_role("button", name="Create token").click()
    token = page.locator("[data-token-value]")
    poll("the new token", lambda: token.inner_text().startswith("tfk_"), 30)
    shot(page, "06-account-token")
    value = token.inner_text()
    with httpx.Client(base_url=site.url, headers={"Authorization": f"Bearer {value}"}) as api:
        assert api.get("/api/v1/users/me").json()["name"] == "bob"
        page.on("dialog", lambda dialog: dialog.accept())
        page.reload()
        page.locator("table.tokens").get_by_role("row", name=re.compile("laptop CLI")).get_by_role(
            "button", name="Revoke"
        ).click()
        poll("the token revoked", lambda: "revoked" in page.inner_text("table.tokens"), 30)
        assert api.get("/api/v1/users/me").status_code == 401
    context.close()


def test_members_are_added_with_a_picker(people: People, browser: Any, site: Site) -> None:
    """A team admin finds people by part of their name (a labelled search, a list of the
    people not in the team yet), chooses one and a role, and adds them."""
    admin = site.api(site.admin)
    try:
        for name in ("erin", "eric"):
            admin.new_user(name)
    finally:
        admin.close()
    context = browser.new_context(viewport=LAPTOP, base_url=site.url)
    page = context.new_page()
    sign_in(page, site.url, site.admin, PASSWORD)
    page.goto("/team?team=other")
    found = page.locator("#people-found")

    def offered() -> list[str]:
        return sorted(found.get_by_role("radio").evaluate_all("(l) => l.map((e) => e.value)"))

    assert "carol" not in offered()  # a member already
    assert {"bob", "eric", "erin"} <= set(offered())
    page.get_by_role("button", name="Add to other").click()  # nobody chosen yet
    missing = page.locator('[data-error-for="user"]')
    poll("asked to choose", lambda: "Choose a person" in missing.inner_text(), 10, 0.2)
    page.get_by_label("Find a person").fill("eri")
    poll("the search", lambda: offered() == ["eric", "erin"], 30)
    assert "“eri”" in words(found.locator("legend"))
    page.get_by_label("Find a person").fill("nobody-has-this")
    poll("no match", lambda: "No one outside the team" in found.inner_text(), 30)
    shot(page, "07-member-picker")
    search_people(page, "er")
    found.get_by_role("radio", name="erin").check()  # a choice clears the question at once
    poll("the question cleared", lambda: missing.inner_text().strip() == "", 5, 0.1)
    add_member(page, "other", "erin", "viewer")
    row = page.locator("table.members").get_by_role("row", name=re.compile("erin"))
    assert row.get_by_label("Role of erin").input_value() == "viewer"
    assert "erin" not in offered()
    context.close()
    # Only a team's admins are offered its picker: a member gets 403, someone of another
    # team 404 (as for everything of that team), and the Team page shows them no picker.
    member = _open(browser, site, people.bob)
    try:
        assert member.request.get("/team/part/people?team=vision&q=e").status == 403
        assert member.request.get("/team/part/people?team=other&q=e").status == 404
        page = member.new_page()
        page.goto("/team?team=vision")
        assert page.get_by_label("Find a person").count() == 0
    finally:
        member.close()


def _on_screen(locator: Any, screen: dict[str, int]) -> bool:
    """Whether the element lies wholly inside a screen of that size (no scrolling)."""
    box = locator.bounding_box()
    return box is not None and (
        box["x"] >= 0
        and box["y"] >= 0
        and box["x"] + box["width"] <= screen["width"]
        and box["y"] + box["height"] <= screen["height"]
    )


def test_phone_navigation_is_not_cut_off(people: People, browser: Any, site: Site) -> None:
    """At a phone's width (390 px) every link of the top navigation and the user menu are
    inside the screen: none hidden past the edge or behind a sideways scroll."""
    context = browser.new_context(viewport=PHONE, base_url=site.url)
    page = context.new_page()
    sign_in(page, site.url, site.admin, PASSWORD)  # a site admin: the longest navigation
    nav = page.get_by_role("navigation", name="Main")
    links = nav.get_by_role("link")
    assert links.count() == 7
    shot(page, "23-phone-nav", full_page=False)
    for i in range(links.count()):
        link = links.nth(i)
        name = link.inner_text()
        assert link.is_visible(), name
        assert _on_screen(link, PHONE), name
        hidden = link.evaluate(
            """(a) => { const r = a.getBoundingClientRect();
                  const hit = document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2);
                  return !(hit && a.contains(hit)); }"""
        )
        assert not hidden, f"{name} is covered"
    assert nav.evaluate("(n) => n.scrollWidth <= n.clientWidth")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"] + 1, f"the page scrolls sideways on a phone ({width}px)"
    menu = user_menu(page)
    menu.click()
    tokens = page.get_by_role("link", name="Your API tokens")
    assert _on_screen(tokens, PHONE)
    shot(page, "24-phone-user-menu", full_page=False)
    page.keyboard.press("Escape")  # the menu closes and uncovers the navigation
    assert not tokens.is_visible()
    links.filter(has_text="Admin").click()
    page.wait_for_url("**/admin")
    context.close()


WHERE_SCRIPT = (
    "#!/bin/sh\n"
    'echo "logs in $TFKUBE_LOG_DIR"\n'
    'echo "data in $TFKUBE_DATA_DIR"\n'
    'echo "working in $PWD"\n'
    'echo "program $0"\n'
    'ls "$TFKUBE_LOG_DIR/no-such-file" || true\n'
    'echo "cannot read $TFKUBE_DATA_DIR/train.csv"\n'
    "exit 2\n"
)


def test_a_log_names_the_jobs_folders_not_the_servers(
    people: People, browser: Any, site: Site
) -> None:
    """A log page shows the job's folders as the job knows them ($TFKUBE_LOG_DIR, ...):
    the server's data folder appears nowhere on the page; Download keeps the log as
    written."""
    from server.conftest import targz, upload, wait_job

    bob = site.api("bob")
    try:
        bob.ok(upload(bob, "vision", "where", targz({"run.sh": WHERE_SCRIPT})), 201)
        body = {"name": "where", "workers": 1, "code": "where", "restart_policy": "Never"}
        job_id = str(bob.ok(bob.post("/api/v1/teams/vision/jobs", json=body), 201)["id"])
        wait_job(bob, job_id, {"Failed"}, timeout=300)
    finally:
        bob.close()
    context = _open(browser, site, people.bob)
    page = context.new_page()
    page.goto(f"/jobs/{job_id}#logs")
    log = page.locator("[data-log-text]")
    poll("the log", lambda: "program" in log.inner_text(), 30)
    text = log.inner_text()
    assert "logs in $TFKUBE_LOG_DIR" in text
    assert "working in $TFKUBE_WORK_DIR" in text
    assert "$TFKUBE_LOG_DIR/no-such-file" in text
    shot(page, "25-log-job-paths")
    server_dirs = {str(site.server.data_dir), str(site.server.data_dir.resolve())}
    for folder in server_dirs:
        assert folder not in text
        assert folder not in page.content()
    written = page.request.get(page.locator("[data-log-download]").get_attribute("href") or "")
    assert any(folder in written.text() for folder in server_dirs)  # as written
    # Followed (SSE), each shown line carries where it ends in the file as written.
    followed = page.request.get(
        f"/api/v1/jobs/{job_id}/logs/worker-0?job_paths=true",
        headers={"Accept": "text/event-stream"},
    ).text()
    assert "data: logs in $TFKUBE_LOG_DIR" in followed
    ends = [int(line[4:]) for line in followed.splitlines() if line.startswith("id: ")]
    assert ends == sorted(ends)
    assert ends[-1] == len(written.body())
    page.goto("/jobs")  # the list, where its failure shows too
    page.locator("table.jobs tbody tr").filter(has_text="where").wait_for()
    for folder in server_dirs:
        assert folder not in page.content()
    context.close()


@pytest.fixture(scope="module")
def trained(people: People, browser: Any, site: Site) -> Iterator[tuple[Any, Any, str]]:
    """bob uploads the example folder and submits 1 PS + 2 workers with the four fields;
    yields (context, page on the job, job id) once the job page shows Succeeded."""
    context = _open(browser, site, people.bob)
    page = context.new_page()
    page.goto("/code")
    page.locator("#up-name").fill("mnist")
    page.locator("#up-folder").set_input_files(str(EXAMPLE))
    assert "3 files" in page.locator("[data-upload-summary]").inner_text()
    page.get_by_role("button", name="Upload").click()
    page.locator("table.artifacts").get_by_role("rowheader", name="mnist").wait_for()
    shot(page, "10-code")

    # The mnist row's link: other tests of the module may have uploaded code too.
    mnist = page.locator("table.artifacts tr").filter(
        has=page.get_by_role("rowheader", name="mnist", exact=True)
    )
    mnist.get_by_role("link", name="New job").click()
    page.locator("#name").fill("mnist")
    page.get_by_label("Workers").fill("2")
    page.get_by_label("Parameter servers").fill("1")
    page.locator("#code").select_option("mnist:1")
    shot(page, "11-new-job")
    page.get_by_role("button", name="Start job").click()
    page.wait_for_url(JOB_URL)
    job_id = page.url.rsplit("/", 1)[1]
    summary = page.locator("#job-summary")
    poll(
        "the job to start training (progress or Succeeded)",
        lambda: page.locator(".big-progress").count() or "Succeeded" in summary.inner_text(),
        600,
    )
    shot(page, "12-job-running")
    page.locator("#job-summary .badge.phase-succeeded").wait_for(timeout=600_000)
    yield context, page, job_id
    context.close()


@pytest.mark.tf
def test_upload_submit_watch_until_succeeded(trained: tuple[Any, Any, str]) -> None:
    _context, page, _job = trained
    loss = page.locator('figure.chart[data-tag="loss"]')
    poll("loss points in the chart", lambda: int(loss.get_attribute("data-points") or 0) > 0, 60)
    assert "Loss" in loss.locator("figcaption").inner_text()
    # Results first: the held-out accuracy the example reported (result.json), at the top;
    # the curves are said to be what was logged during training, not the result.
    card = page.locator("#job-summary [data-result]")
    card.wait_for()
    accuracy = float(card.locator('[data-metric="test_accuracy"]').inner_text())
    assert accuracy >= 0.9
    reported = page.request.get(f"/api/v1/jobs/{_job}").json()["result"]
    assert reported["test_accuracy"] == pytest.approx(accuracy, abs=1e-4)
    assert "Training curves" in page.locator("#charts-h").inner_text()
    assert "during training" in loss.locator("figcaption").inner_text()
    rows = page.locator("table.replicas tbody tr:not(.group)")
    assert rows.count() == 3
    assert page.locator("table.replicas").get_by_text("ps-0").count() == 1
    shot(page, "13-job-succeeded")
    page.goto("/jobs")
    shot(page, "13-jobs-list")
    page.go_back()


@pytest.mark.tf
def test_resource_charts_show_each_replicas_cpu_and_memory(trained: tuple[Any, Any, str]) -> None:
    _context, page, job = trained
    page.reload()
    cpu = page.locator('figure.chart[data-usage="cpu"]')
    memory = page.locator('figure.chart[data-usage="memory"]')
    for chart in (cpu, memory):
        poll(
            "samples in the chart", lambda c=chart: int(c.get_attribute("data-points") or 0) > 3, 60
        )
    # A line per replica in each chart's legend, and the newest figures in its caption.
    for key in ("ps-0", "worker-0", "worker-1"):
        assert cpu.locator(".u-legend").get_by_text(key).count() == 1
        assert key in memory.locator("figcaption").inner_text()
    assert "CPU (cores)" in cpu.locator("figcaption").inner_text()
    assert page.locator("[data-usage-empty]").is_hidden()
    shot(page, "13-job-resources")

    usage = page.request.get(f"/api/v1/jobs/{job}/usage").json()
    assert usage["available"] is True
    series = {s["replica"]: s["points"] for s in usage["replicas"]}
    assert set(series) == {"ps-0", "worker-0", "worker-1"}
    for points in series.values():
        assert len(points) >= 3
        assert all(0 <= cores < 8 and 10_000_000 < used < 8 << 30 for _, cores, used in points)
    # TensorFlow trained: the workers used CPU.
    assert max(cores for _, cores, _ in series["worker-0"]) > 0.1


PACED = (
    "#!/bin/sh\n"
    "# Each worker says its own steps twice a second: worker-0 takes 100 a tick, worker-1 5.\n"
    'step=0; per=100; [ "$TFKUBE_INDEX" = 1 ] && per=5\n'
    'while :; do step=$((step + per)); echo "tfkube-steps: $step"; sleep 0.5; done\n'
)


def test_a_straggler_is_flagged_on_the_job_page(people: People, browser: Any, site: Site) -> None:
    """Two workers, one taking a twentieth of the other's steps: the replica table marks it
    Straggler with its rate, the summary names it, and the events say it."""
    api = site.api("bob")
    api.ok(upload(api, "vision", "paced", targz({"run.sh": PACED})), 201)
    manifest = {
        "apiVersion": "tfkube.io/v1alpha1",
        "kind": "TFJob",
        "metadata": {"name": "paced"},
        "spec": {
            "replicas": {"worker": {"replicas": 2}},
            "code": {"source": "artifact:paced"},
            "runPolicy": {"stragglerSeconds": 4, "terminationGraceSeconds": 1},
        },
    }
    job = api.ok(api.post("/api/v1/teams/vision/jobs", json={"manifest": manifest}), 201)
    context = _open(browser, site, people.bob)
    try:
        page = context.new_page()
        page.goto(f"/jobs/{job['id']}")
        row = page.locator("table.replicas").get_by_role("row", name=re.compile("worker-1"))
        poll("worker-1 shown a straggler", lambda: "Straggler" in row.inner_text(), 90)
        rate = float(row.locator("[data-step-rate]").inner_text())
        assert 0 < rate < 20, rate
        fast = page.locator("table.replicas").get_by_role("row", name=re.compile("worker-0"))
        assert "Straggler" not in fast.inner_text()
        assert float(fast.locator("[data-step-rate]").inner_text()) > 100
        poll(
            "the summary naming it",
            lambda: "worker-1 at" in page.locator("#job-summary").inner_text(),
            30,
        )
        poll(
            "the event",
            lambda: "worker-1 is a straggler" in page.locator("#events").inner_text(),
            30,
        )
        shot(page, "14-job-straggler")
    finally:
        context.close()
        api.post(f"/api/v1/jobs/{job['id']}/stop")
        wait_job(api, job["id"], {"Failed", "Succeeded"})
        api.close()


@pytest.mark.tf
def test_worker_log_is_readable_after_the_end(trained: tuple[Any, Any, str]) -> None:
    _context, page, _job = trained
    page.reload()
    page.locator("table.replicas").get_by_role("row", name=re.compile("worker-1")).get_by_role(
        "link", name="Log"
    ).click()
    text = page.locator("[data-log-text]")
    poll("worker-1's log", lambda: "worker 1:" in text.inner_text(), 30)
    assert page.locator("#log-replica").input_value() == "worker-1"
    page.locator("#log-search").fill("steps in")
    poll(
        "the search to filter", lambda: "lines contain" in page.inner_text("[data-log-status]"), 10
    )
    assert all("steps in" in line for line in text.inner_text().splitlines() if line)
    shot(page, "14-job-logs")


@pytest.mark.tf
def test_tensorboard_opens_through_the_proxy(trained: tuple[Any, Any, str]) -> None:
    context, page, job_id = trained
    with context.expect_page() as opened:
        page.get_by_role("link", name="TensorBoard").click()
    board = opened.value
    board.wait_for_load_state()
    # On its own origin (docs/security.md): tensorboard-<job>.localhost on the server's port.
    port = urlsplit(page.url).port
    own = f"http://tensorboard-{job_id}.localhost:{port}/proxy/tensorboard/{job_id}/"
    assert board.url.startswith(own), board.url
    poll("TensorBoard's page", lambda: "TensorBoard" in board.title(), 120)
    poll("the loss scalar in TensorBoard", lambda: "loss" in board.inner_text("body"), 180, 2)
    shot(board, "15-tensorboard", full_page=False)
    board.close()


@pytest.mark.tf
def test_final_checkpoint_downloads(trained: tuple[Any, Any, str], tmp_path: Path) -> None:
    _context, page, _job = trained
    with page.expect_download() as download:
        page.get_by_role("link", name="Download final checkpoint").click()
    path = tmp_path / download.value.suggested_filename
    download.value.save_as(path)
    with tarfile.open(path) as tar:
        names = tar.getnames()
        index = tar.extractfile("checkpoint")
        assert index is not None
        latest = re.search(r'model_checkpoint_path: "([^"]+)"', index.read().decode())
    assert latest is not None
    assert f"{latest.group(1)}.index" in names
    step = int(latest.group(1).rsplit("-", 1)[1])
    assert step >= 1000  # trained to the end (asynchronous workers may add a step or two)


@pytest.mark.tf
def test_serve_from_the_job_page_and_predict(
    trained: tuple[Any, Any, str], people: People, browser: Any, site: Site
) -> None:
    """The trained job's exported model: Serve on its page -> Models shows it Ready with
    its URL -> this browser's session asks it for the held-out digits (TensorFlow
    Serving's REST API through the proxy) and gets the job's accuracy; another team's user
    gets 404; the request count shows."""
    from sklearn.datasets import load_digits

    _context, page, job_id = trained
    page.goto(f"/jobs/{job_id}")
    assert "Exported model: version" in page.locator("[data-exports]").inner_text()
    page.get_by_role("button", name="Serve").click()
    page.wait_for_url(re.compile(r".*/models#ms-[0-9a-f]{16}$"))
    row = page.locator("table.models tbody tr[data-model='mnist']")
    poll(
        "the model server to be Ready",
        lambda: row.locator("[data-status]").inner_text() == "Ready",
        240,
    )
    url = row.locator("[data-url]").inner_text()
    shot(page, "16-models")

    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(x))
    x, y = (x[order] / 16.0)[: len(x) // 5], y[order][: len(x) // 5]
    status, answer = page.evaluate(PREDICT, [url, x.tolist()])
    assert status == 200, answer
    served = float(np.mean(np.array([p["classes"] for p in answer["predictions"]]) == y))
    reported = page.request.get(f"/api/v1/jobs/{job_id}/outputs/result.json").json()
    assert abs(served - reported["test_accuracy"]) <= 0.005
    status, answer = page.evaluate(PREDICT, [url, [[1, 2, 3]]])
    assert status == 400
    assert "shape" in answer["error"]

    page.goto(f"/jobs/{job_id}")
    assert "Served as mnist (Ready" in page.locator("[data-served]").inner_text()
    page.goto("/models")
    poll("the request count", lambda: row.locator("[data-requests]").inner_text() == "2", 30, 1)

    other = _open(browser, site, people.carol)
    try:
        stranger = other.new_page()
        answer = stranger.request.get(url)
        assert answer.status == 404
        assert "error" in answer.json()
        stranger.goto("/models")
        assert "No model servers" in stranger.inner_text("main")
    finally:
        other.close()


@pytest.mark.tf
def test_phone_width_stays_readable(
    people: People, browser: Any, site: Site, trained: tuple[Any, Any, str]
) -> None:
    context = _open(browser, site, people.bob, PHONE)
    page = context.new_page()
    page.goto("/jobs")
    shot(page, "20-phone-jobs")
    page.get_by_role("link", name="mnist", exact=True).click()
    page.locator("#job-summary").wait_for()
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"] + 1, f"the job page scrolls sideways on a phone ({width}px)"
    shot(page, "21-phone-job")
    page.goto("/jobs/new")
    shot(page, "22-phone-new-job")
    context.close()


def _failing_code() -> bytes:
    run = (
        "#!/bin/sh\n"
        "echo 'loading the data set'\n"
        f"echo '{MARKUP}'\n"
        "echo 'ValueError: the input has shape (64, 8) but the model wants (64, 64)' >&2\n"
        "exit 3\n"
    )
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("run.sh")
        info.size, info.mode = len(run), 0o755
        tar.addfile(info, io.BytesIO(run.encode()))
    return buffer.getvalue()


@pytest.fixture(scope="module")
def failed(
    people: People, browser: Any, site: Site, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Any, Any, str]]:
    """A job whose code fails (restart policy Never), with markup in its description and
    in its log, submitted through the form's advanced section."""
    archive = tmp_path_factory.mktemp("broken") / "broken.tar.gz"
    archive.write_bytes(_failing_code())
    context = _open(browser, site, people.bob)
    page = context.new_page()
    page.goto("/jobs/new")
    details = page.locator("details.inline-upload")
    if details.get_attribute("open") is None:
        details.locator("summary").click()
    page.locator("#up-archive").set_input_files(str(archive))
    page.locator("#up-name").fill("broken")
    page.get_by_role("button", name="Upload").click()
    poll("the upload", lambda: page.locator("#code").input_value() == "broken:1", 60)
    page.locator("#name").fill("broken")
    page.get_by_label("Workers").fill("1")
    page.get_by_label("Parameter servers").fill("0")
    page.locator("details.advanced summary").click()
    page.get_by_label("Description (optional)").fill(f"tries {MARKUP} <b>bold</b>")
    page.get_by_label("When a replica fails").select_option("Never")
    page.get_by_role("button", name="Start job").click()
    page.wait_for_url(JOB_URL)
    page.locator("#job-summary .badge.phase-failed").wait_for(timeout=300_000)
    yield context, page, page.url
    context.close()


def test_failing_job_shows_failed_with_reason_and_log(failed: tuple[Any, Any, str]) -> None:
    _context, page, _url = failed
    summary = page.locator("#job-summary").inner_text()
    assert "Failed" in summary
    assert "worker-0" in summary  # the reason names the replica that failed
    poll(
        "the failing replica's log",
        lambda: "model wants (64, 64)" in page.locator("[data-log-text]").inner_text(),
        30,
    )
    assert page.locator("#log-replica").input_value() == "worker-0"
    row = page.locator("table.replicas").get_by_role("row", name=re.compile("worker-0"))
    assert "Failed" in row.inner_text()
    assert "3" in row.locator("td.num").nth(1).inner_text()  # the exit code
    shot(page, "30-job-failed")


def test_markup_in_a_description_and_a_log_line_renders_as_text(
    failed: tuple[Any, Any, str],
) -> None:
    _context, page, _url = failed
    page.reload()
    description = page.locator(".description")
    assert "<script>window.__tfkubeXss = 1</script>" in description.inner_text()
    assert "<b>bold</b>" in description.inner_text()
    assert description.locator("b, script, img").count() == 0
    text = page.locator("[data-log-text]")
    poll("the log", lambda: "<script>" in text.inner_text(), 30)
    assert text.locator("script, img").count() == 0
    assert page.evaluate("window.__tfkubeXss === undefined")
    page.goto("/jobs")
    assert page.evaluate("window.__tfkubeXss === undefined")


def test_run_again_then_delete(failed: tuple[Any, Any, str]) -> None:
    _context, page, url = failed
    page.goto(url)
    page.on("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Run again").click()
    page.wait_for_url(lambda new: JOB_URL.match(new) is not None and new != url)
    assert page.locator(".job-name").inner_text() == "broken-2"
    page.locator("#job-summary .badge.phase-failed").wait_for(timeout=300_000)
    page.get_by_role("button", name="Delete").click()
    page.wait_for_url(lambda new: new.endswith("/jobs"))
    assert page.get_by_role("link", name="broken-2").count() == 0
    assert page.get_by_role("link", name="broken", exact=True).count() == 1


def test_another_teams_user_gets_not_found(
    people: People, browser: Any, site: Site, failed: tuple[Any, Any, str]
) -> None:
    _context, _page, url = failed
    context = _open(browser, site, people.carol)
    page = context.new_page()
    response = page.goto(url)
    assert response is not None
    assert response.status == 404
    assert "Not found" in page.inner_text("h1")
    assert "broken" not in page.inner_text("body")
    page.goto("/jobs")
    assert "broken" not in page.inner_text("main")
    shot(page, "31-other-team-not-found")
    context.close()


def _outputs_script(score: str) -> str:
    """A job that writes what a training job leaves (an export, a checkpoint in pieces,
    event files, a note) and its result."""
    return (
        "#!/bin/sh\nset -e\n"
        'out="$TFKUBE_LOG_DIR"\n'
        'mkdir -p "$out/export/7/variables" "$out/train"\n'
        'echo pb > "$out/export/7/saved_model.pb"\n'
        'echo v > "$out/export/7/variables/variables.index"\n'
        'for p in index data-00000-of-00001 meta; do echo c > "$out/model.ckpt-7.$p"; done\n'
        'echo \'model_checkpoint_path: "model.ckpt-7"\' > "$out/checkpoint"\n'
        'echo e > "$out/train/events.out.tfevents.1.host"\n'
        'echo note > "$out/notes.txt"\n'
        f'echo \'{{"test_accuracy": {score}, "global_step": 7}}\' > "$out/r.tmp"\n'
        'mv "$out/r.tmp" "$out/result.json"\n'
    )


@pytest.fixture(scope="module")
def scored(people: People, site: Site, failed: tuple[Any, Any, str]) -> dict[str, str]:
    """Two quick shell jobs of bob's (no TensorFlow) that write outputs of every kind and
    a result (test_accuracy 0.5 and 0.8); -> name -> job id, once both succeeded."""
    from server.conftest import targz, upload, wait_job

    bob = site.api("bob")
    try:
        ids = {}
        for name, score in (("scored-a", "0.5"), ("scored-b", "0.8")):
            bob.ok(upload(bob, "vision", name, targz({"run.sh": _outputs_script(score)})), 201)
            body = {"name": name, "workers": 1, "code": name}
            ids[name] = str(bob.ok(bob.post("/api/v1/teams/vision/jobs", json=body), 201)["id"])
        for job_id in ids.values():
            wait_job(bob, job_id, {"Succeeded"}, timeout=300)
        return ids
    finally:
        bob.close()


def test_results_first_and_sortable(
    people: People, browser: Any, site: Site, scored: dict[str, str]
) -> None:
    context = _open(browser, site, people.bob)
    page = context.new_page()
    page.goto(f"/jobs/{scored['scored-b']}")
    card = page.locator("#job-summary [data-result]")
    assert card.locator('[data-metric="test_accuracy"]').inner_text() == "0.8"
    assert card.locator('[data-metric="global_step"]').inner_text() == "7"
    # Above the charts, whose heading says what they are.
    top = page.evaluate(
        "[document.querySelector('[data-result]').getBoundingClientRect().top,"
        " document.querySelector('#charts').getBoundingClientRect().top]"
    )
    assert top[0] < top[1]
    shot(page, "50-job-result")

    page.goto("/jobs")
    header = page.locator("table.jobs thead").get_by_role("link", name="test_accuracy")
    column = page.locator('table.jobs td[data-result="test_accuracy"]')
    with page.expect_response(lambda r: "sort=" in r.url) as sorted_list:
        header.click()  # the best first
    assert sorted_list.value.status == 200, sorted_list.value.text()[-2000:]
    page.wait_for_url(re.compile(r".*/jobs\?sort=-result\.test_accuracy$"))  # shareable
    # The best first (the TensorFlow example's, when it ran, is better than both).
    poll("descending", lambda: _order(page, "scored-b", "scored-a", "broken"), 30)
    values = [float(v) for v in column.all_inner_texts() if v.strip() not in ("", "\u2013")]
    assert values == sorted(values, reverse=True)
    assert "0.8" in column.all_inner_texts()
    sorted_by = page.locator("table.jobs th[aria-sort=descending]").text_content() or ""
    assert sorted_by.strip().startswith("test_accuracy")
    shot(page, "51-jobs-sorted-by-result")
    with page.expect_response(lambda r: "sort=result.test_accuracy" in r.url):
        header.click()  # then the other way; jobs without it stay last
    poll("ascending", lambda: _order(page, "scored-a", "scored-b", "broken"), 30)
    context.close()


def _order(page: Any, *names: str) -> bool:
    """Whether the jobs list shows these jobs in this order."""
    shown = page.locator("table.jobs td.name > a").all_inner_texts()
    return all(n in shown for n in names) and [shown.index(n) for n in names] == sorted(
        shown.index(n) for n in names
    )


def test_outputs_are_grouped_by_kind(
    people: People, browser: Any, site: Site, scored: dict[str, str]
) -> None:
    context = _open(browser, site, people.bob)
    page = context.new_page()
    page.goto(f"/jobs/{scored['scored-a']}#outputs")
    groups = page.locator("#job-outputs details.output-group")
    order = [groups.nth(i).get_attribute("data-group") for i in range(groups.count())]
    assert order == ["exports", "checkpoints", "summaries", "other"]
    exports = page.locator('details[data-group="exports"]')
    assert "Exported models" in exports.locator("summary").inner_text()
    assert exports.get_by_role("link", name="version 7").count() == 1
    checkpoints = page.locator('details[data-group="checkpoints"]')
    checkpoints.locator("summary").click()
    piece = checkpoints.locator('li[data-item="model.ckpt-7"]')
    assert "3 pieces" in piece.inner_text()
    with page.expect_download() as got:  # each piece downloads as it is
        piece.get_by_role("link", name="index").click()
    assert got.value.suggested_filename == "model.ckpt-7.index"
    summaries = page.locator('details[data-group="summaries"]')
    summaries.locator("summary").click()
    assert summaries.get_by_role("link", name="train/").count() == 1
    other = page.locator('details[data-group="other"]')
    assert other.get_by_role("link", name="notes.txt").count() == 1
    assert other.get_by_role("link", name="result.json").count() == 1
    assert other.get_by_role("link", name=re.compile("ckpt")).count() == 0
    shot(page, "52-outputs-by-kind")
    page.get_by_role("link", name="Browse folders").click()  # the folders as they are
    page.locator("#job-outputs a.folder", has_text="export/").wait_for()
    context.close()


def test_upload_sizes_say_what_they_measure(
    people: People, browser: Any, site: Site, scored: dict[str, str]
) -> None:
    context = _open(browser, site, people.bob)
    page = context.new_page()
    page.goto("/code")
    row = page.locator("table.artifacts tr", has=page.get_by_role("rowheader", name="scored-a"))
    size = words(row.locator("[data-size]"))
    unpacked = len(_outputs_script("0.5"))
    assert size.startswith(f"1 file, {unpacked} B"), size
    assert "as stored (compressed)" in size
    listed = page.request.get("/api/v1/artifacts?team=vision&name=scored-a").json()
    art = next(a for a in listed if a["name"] == "scored-a")
    assert art["unpacked_size"] == unpacked
    assert art["size"] != unpacked  # the archive's own size, said as such
    context.close()


def test_a_corrected_field_clears_its_error_at_once(
    people: People, browser: Any, site: Site, scored: dict[str, str]
) -> None:
    context = _open(browser, site, people.bob)
    page = context.new_page()
    page.goto("/jobs/new")
    page.locator("#code").select_option("scored-a:1")
    name = page.locator("#name")
    name.fill("Not A Name!")
    page.get_by_role("button", name="Start job").click()
    error = page.locator('div.field:has(#name) [data-error-for="name"]')
    poll("the name's error", lambda: error.inner_text().strip() != "", 30)
    assert name.get_attribute("aria-invalid") == "true"
    shot(page, "53-field-error")
    name.fill("a-good-name")  # no submit: the mark goes as soon as it is edited
    poll("the error cleared", lambda: error.inner_text().strip() == "", 5, 0.1)
    assert name.get_attribute("aria-invalid") is None
    context.close()


@pytest.fixture(scope="module")
def thousand_jobs(site: Site, people: People) -> str:
    """Team crowd with user dave and 1,000 jobs waiting in the queue; -> the team."""
    admin = site.api(site.admin)
    try:
        admin.new_team("crowd")
        admin.new_user("dave")
        admin.add_member("crowd", "dave", "member")
        dave = site.api("dave")
        try:
            crowd(admin, dave, "crowd", 1000)
        finally:
            dave.close()
    finally:
        admin.close()
    return "crowd"


def test_jobs_page_with_a_thousand_jobs(browser: Any, site: Site, thousand_jobs: str) -> None:
    context = browser.new_context(viewport=LAPTOP, base_url=site.url)
    context.set_default_timeout(60_000)
    page = context.new_page()
    page.goto("/login")
    page.get_by_label("User name").fill("dave")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(lambda url: url.endswith("/jobs"))
    chips = page.get_by_role("navigation", name="Jobs per phase")
    assert "All 1,000" in words(chips)
    assert "Pending 1,000" in words(chips)
    rows = page.locator("table.jobs tbody tr")
    assert rows.count() == 50
    assert "1\N{EN DASH}50 of 1,000" in words(page.locator(".pager"))
    first_page = rows.first.locator("td.name a").inner_text()
    assert first_page.startswith("sweep-")
    shot(page, "40-jobs-1000")
    page.get_by_role("navigation", name="Pages").get_by_role("link", name="20", exact=True).click()
    poll("page 20", lambda: "951\N{EN DASH}1,000 of 1,000" in words(page.locator(".pager")), 30)
    assert page.url.endswith("page=20")
    assert rows.first.locator("td.name a").inner_text() != first_page
    page.locator("#q").fill("sweep-077")
    poll("the text filter", lambda: rows.count() == 10, 30)
    assert "All 10" in words(chips)
    page.locator("#q").fill("")
    page.locator("#phase").select_option("Running")
    poll("the phase filter", lambda: "No job matches" in page.inner_text("#job-list"), 30)
    page.goto("/code")
    row = page.locator("table.artifacts").get_by_role("row", name=re.compile("tiny"))
    assert "in use" in row.inner_text()
    assert row.get_by_role("button", name="Delete").is_disabled()
    page.goto("/jobs?phase=Pending&page=3")
    assert rows.count() == 50
    assert "101\N{EN DASH}150 of 1,000" in words(page.locator(".pager"))
    context.close()


def test_a_waiting_job_looks_calm(browser: Any, site: Site, thousand_jobs: str) -> None:
    """A job that waits for its turn: one state, one sentence, no alarm (no "Need
    attention", nothing in red or amber) on its page or in the list."""
    context = browser.new_context(viewport=LAPTOP, base_url=site.url)
    context.set_default_timeout(60_000)
    page = context.new_page()
    page.goto("/login")
    page.get_by_label("User name").fill("dave")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(lambda url: url.endswith("/jobs"))
    badge = page.locator("table.jobs tbody tr").first.locator(".badge")
    assert badge.inner_text() == "Queued"
    page.locator("table.jobs td.name > a").first.click()
    page.wait_for_url(JOB_URL)
    summary = page.locator("#job-summary")
    assert words(summary.locator(".status-row [data-state]")) == "Queued"
    assert words(summary.locator("[data-state-sentence]")) == "Waiting for room to start"
    replicas = page.locator("#replica-table")
    assert "Need attention" not in replicas.inner_text()
    assert replicas.locator(".warn-text, .fail, .chip.warn").count() == 0
    calm = page.evaluate(
        """() => [...document.querySelectorAll('#job-summary .badge, #replica-table .badge')]
            .map((e) => getComputedStyle(e).color)"""
    )
    red = page.evaluate("getComputedStyle(document.documentElement).getPropertyValue('--bad')")
    amber = page.evaluate("getComputedStyle(document.documentElement).getPropertyValue('--wait')")
    colours = {_rgb(c) for c in calm}
    assert _rgb(red) not in colours
    assert _rgb(amber) not in colours
    shot(page, "41-queued-job-calm")
    context.close()


def _rgb(colour: str) -> str:
    """`#b42318` or `rgb(180, 35, 24)` -> `180,35,24`."""
    colour = colour.strip()
    if colour.startswith("#"):
        return ",".join(str(int(colour[i : i + 2], 16)) for i in (1, 3, 5))
    return ",".join(
        colour[colour.index("(") + 1 : colour.index(")")].replace(" ", "").split(",")[:3]
    )
