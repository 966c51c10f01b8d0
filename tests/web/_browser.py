"""Debian's Chromium driven by Playwright (from PyPI), as the dashboard's tests use it.

Playwright's own browser download does not work offline, so the tests launch the
system's `/usr/bin/chromium` (installed by `make chromium` / tools/web/ensure-chromium.sh)
headless, with the flags this machine's closed network needs. Each launch gets a fresh
profile (Playwright makes a new temporary user-data-dir per launch and removes it).
Without Chromium the tests are skipped with a hint, except under CI=true where that is
a failure. Screenshots go to `$TFKUBE_TEST_ARTIFACTS/screenshots` (default
`.test-artifacts/` in the checkout, gitignored).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("TFKUBE_CHROMIUM", "/usr/bin/chromium"))
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
LAPTOP = {"width": 1366, "height": 860}
PHONE = {"width": 390, "height": 844}
IN_CI = os.environ.get("CI", "").lower() == "true"


def artifacts() -> Path:
    root = Path(os.environ.get("TFKUBE_TEST_ARTIFACTS", REPO / ".test-artifacts"))
    folder = root / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def shot(page: Any, name: str, full_page: bool = True) -> Path:
    """A screenshot of what the page shows now, kept with the test artifacts."""
    path = artifacts() / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium (Debian's), stopped afterwards."""
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} is missing; install it with `make chromium`"
        if IN_CI:
            pytest.fail(f"CI=true and {message}", pytrace=False)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


def poll(what: str, check: Callable[[], Any], timeout: float, every: float = 0.5) -> Any:
    """Wait for `check()` to be truthy (generous deadlines: the machine is shared)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def sign_in(page: Any, base: str, name: str, password: str) -> None:
    page.goto(f"{base}/login")
    page.get_by_label("User name").fill(name)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{base}/jobs**")


class Failures:
    """What a browser context's pages asked for and did not get (an answer of 400 or more,
    or a request that failed), for a failure's message: a page that shows an error dialog
    says which request it came from."""

    def __init__(self, context: Any) -> None:
        self.seen: list[str] = []
        context.on("response", self._response)
        context.on("requestfailed", self._failed)

    def _response(self, response: Any) -> None:
        if response.status >= 400:
            self.seen.append(f"{response.status} {response.request.method} {response.url}")

    def _failed(self, request: Any) -> None:
        self.seen.append(f"failed ({request.failure}) {request.method} {request.url}")

    def __str__(self) -> str:
        return "\n".join(self.seen[-40:]) or "(no failed request)"
