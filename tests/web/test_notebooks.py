"""A notebook from the dashboard, in a real Chromium against a real `tfkube server`: bob
opens **Notebooks**, clicks **New notebook**, JupyterLab opens through the server's proxy,
a cell submits the between-graph example with `tfkube.Client()` (no arguments: signed in
from its environment) and follows it to Succeeded (real TensorFlow). His teammate carol
gets 404 for the same URL.

The server is set up through the API here (tests/web/test_dashboard.py does it in the
browser)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

import tfkube
from server._server import PASSWORD, api_for

from ._browser import LAPTOP, Failures, poll, shot, sign_in
from .conftest import Site

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mnist-between-graph"
CELL = """import tfkube
c = tfkube.Client()
job = c.submit(name="from-a-notebook", workers=2, ps=1, code="mnist", args=["--train_steps=200"])
print("submitted", job.name)
print("phase", c.wait(job.id, timeout=600).phase)
"""


def _set_up(site: Site) -> None:
    """The first admin, bob and carol in team vision, the example uploaded by bob."""
    assert site.server.setup_token
    r = httpx.post(
        f"{site.url}/api/v1/setup",
        json={"token": site.server.setup_token, "name": site.admin, "password": PASSWORD},
    )
    assert r.status_code == 201, r.text
    admin = site.api(site.admin)
    try:
        admin.new_team("vision")
        for user in ("bob", "carol"):
            admin.new_user(user)
            admin.add_member("vision", user, "member")
    finally:
        admin.close()
    bob = api_for(site.url, "bob")
    try:
        with tfkube.Client(site.url, bob.token, team="vision") as c:
            c.upload(EXAMPLE, "mnist")
    finally:
        bob.close()


def _context(browser: Any, site: Site, user: str) -> Any:
    context = browser.new_context(viewport=LAPTOP, base_url=site.url)
    context.set_default_timeout(60_000)
    page = context.new_page()
    sign_in(page, site.url, user, PASSWORD)
    return context


@pytest.fixture(scope="module")
def ready(site: Site) -> Site:
    _set_up(site)
    return site


@pytest.mark.tf
def test_a_notebook_from_the_dashboard_submits_and_follows_a_job(browser: Any, ready: Site) -> None:
    site = ready
    context = _context(browser, site, "bob")
    try:
        page = context.pages[0]
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Notebooks").click()
        row = page.locator("table.notebooks tr[data-team='vision']")
        assert "none yet" in row.inner_text()
        shot(page, "30-notebooks")
        row.get_by_role("button", name="New notebook").click()
        page.wait_for_url(re.compile(r".*/proxy/notebook/[0-9a-f]{16}/lab.*"), timeout=180_000)
        notebook_url = page.url.split("/lab")[0] + "/lab"

        # JupyterLab's launcher: a Python notebook, one cell, run.
        card = page.locator('.jp-LauncherCard[data-category="Notebook"]').first
        card.wait_for(timeout=180_000)
        shot(page, "31-jupyterlab", full_page=False)
        card.click()
        editor = page.locator(".jp-NotebookPanel .jp-Cell .cm-content").first
        editor.wait_for(timeout=120_000)
        # Run only once the kernel is connected and idle (the status bar's "Python 3
        # (ipykernel) | Idle"): JupyterLab does not run a cell while its kernel initializes.
        status = page.locator("#jp-main-statusbar").get_by_text(re.compile(r"\| Idle$"))
        status.first.wait_for(timeout=180_000)
        editor.click()
        page.keyboard.insert_text(CELL)
        page.keyboard.press("Shift+Enter")
        output = page.locator(".jp-NotebookPanel .jp-OutputArea-output").first
        try:
            poll("the cell to submit the job", lambda: "submitted" in _text(output), 120, 1)
            poll("the job to succeed", lambda: "phase" in _text(output), 900, 2)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{_diagnose(page, site)}") from None
        finally:
            shot(page, "32-notebook-cell", full_page=False)
        assert "phase Succeeded" in _text(output), _diagnose(page, site)
    finally:
        context.close()

    bob = api_for(site.url, "bob")
    try:
        jobs = bob.get("/api/v1/jobs", params={"name": "from-a-notebook"}).json()["items"]
        assert [(j["owner"], j["phase"]) for j in jobs] == [("bob", "Succeeded")]
    finally:
        bob.close()

    # Only its owner: carol (same team) gets 404 for its URL and sees no notebook of hers.
    carol = _context(browser, site, "carol")
    try:
        page = carol.pages[0]
        response = page.goto(notebook_url)
        assert response is not None
        assert response.status == 404
        page.goto("/notebooks")
        assert "none yet" in page.locator("table.notebooks tr[data-team='vision']").inner_text()
    finally:
        carol.close()


NEWS = "@jupyterlab/apputils-extension:notification"
"""JupyterLab's announcements: the news feed and the update check."""


def test_a_notebook_asks_no_news_and_a_browser_leaving_it_is_quiet(
    browser: Any, ready: Site
) -> None:
    """The notebook's JupyterLab never fetches news nor asks whether to (its setting says
    Never, on an offline server), and a browser that closes a notebook with a running
    kernel leaves no traceback in the server's log (the proxy closed a WebSocket whose
    caller had gone). carol's own new notebook: JupyterLab restores a user's last layout,
    and bob's shows his notebook rather than the launcher."""
    site = ready
    context = _context(browser, site, "carol")
    failures = Failures(context)
    closed = False
    try:
        page = context.pages[0]
        page.goto("/notebooks")
        row = page.locator("table.notebooks tr[data-team='vision']")
        row.get_by_role("button", name="New notebook").click()
        page.wait_for_url(re.compile(r".*/proxy/notebook/[0-9a-f]{16}/lab.*"), timeout=180_000)
        lab = page.url.split("/lab")[0] + "/lab"
        card = page.locator('.jp-LauncherCard[data-category="Notebook"]').first
        card.wait_for(timeout=180_000)
        # Asked from the page: its origin (notebook-<id>.localhost) is Chromium's to resolve.
        answer = page.evaluate(
            "async (url) => (await fetch(url)).json()", f"{lab}/api/settings/{NEWS}"
        )
        defaults = {k: v.get("default") for k, v in answer["schema"]["properties"].items()}
        settings = {**defaults, **answer["settings"]}  # what JupyterLab goes by
        assert settings["fetchNews"] == "false"
        assert settings["checkForUpdates"] is False
        card.click()  # a notebook: its kernel's WebSocket goes through the proxy
        status = page.locator("#jp-main-statusbar").get_by_text(re.compile(r"\| Idle$"))
        status.first.wait_for(timeout=180_000)
        assert page.get_by_text(re.compile("Jupyter news", re.IGNORECASE)).count() == 0
        shot(page, "33-notebook-quiet", full_page=False)
        context.close()  # the browser leaves while the kernel's WebSocket is open
        closed = True
        time.sleep(5)  # the proxy notices the closed connections
        log = site.server.log.read_text(errors="replace")
        assert "Traceback" not in log, log[log.find("Traceback") - 500 :][:6000]
        assert "Exception in ASGI application" not in log
    except Exception as exc:
        # What failed first, the error's first line next, the server's log last: a CI
        # report that keeps only the start of a failure still says which request it was.
        log = site.server.log.read_text(errors="replace")[-4000:]
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise AssertionError(
            f"requests that failed:\n{failures}\n{type(exc).__name__}: {first}\n"
            f"the server's log (its end):\n{log}"
        ) from None
    finally:
        if not closed:
            context.close()


def _diagnose(page: Any, site: Site) -> str:
    """What the notebook showed and its JupyterLab's log, for a failure's message."""
    log = site.server.data_dir / "teams" / "vision" / "notebooks" / ".bob-notebook.log"
    tail = log.read_text(errors="replace")[-3000:] if log.is_file() else "(no log)"
    return f"notebook: {_text(page.locator('.jp-NotebookPanel'))}\nJupyterLab's log: {tail}"


def _text(locator: Any) -> str:
    return locator.inner_text() if locator.count() else ""
