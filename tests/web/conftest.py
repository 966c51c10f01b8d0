"""Fixtures of the dashboard's browser tests: a real `tfkube server` (local engine,
SQLite) on loopback for the module, not yet set up (the first test does the set-up in
the browser), and Debian's Chromium through Playwright.

Every job the tests started is deleted at the end and nothing they started may be left
running (the processes carry a tag, as in tests/server)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from conftest import TAG  # tests/conftest.py
from server._server import PASSWORD, Api, ServerProc, api_for, env_with, first_admin, free_port
from server.conftest import stop_server

from ._browser import LAPTOP, chromium


@dataclass
class Site:
    server: ServerProc
    tag: str
    admin: str = "ada"

    @property
    def url(self) -> str:
        return self.server.url

    def api(self, user: str) -> Api:
        return api_for(self.url, user)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("web")
    tag = uuid.uuid4().hex
    server = ServerProc(
        tmp / "data", free_port(), None, env_with(TAG, tag, tmp / "home"), extra=["--cpus", "2"]
    )
    server.start()
    made = Site(server, tag)
    try:
        yield made
    finally:
        admin = None
        try:
            if httpx.get(f"{server.url}/api/v1/setup").json().get("needed") is False:
                admin = api_for(server.url, made.admin)
        except Exception:
            admin = None
        if admin is not None:
            stop_server(server, admin, tag)
        else:
            server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


@pytest.fixture
def laptop(browser: Any, site: Site) -> Iterator[Any]:
    """A fresh browser context (no cookies) at laptop size."""
    context = browser.new_context(viewport=LAPTOP, base_url=site.url, accept_downloads=True)
    context.set_default_timeout(30_000)
    try:
        yield context
    finally:
        context.close()


def two_teams(site: Site) -> tuple[Api, Api]:
    """Set the server up through the API (its admin is `site.admin`): team vision with
    bob, team other with carol, both members; -> their API clients (the caller closes)."""
    admin = first_admin(site.server, site.admin)
    try:
        for team in ("vision", "other"):
            admin.new_team(team)
        for user, team in (("bob", "vision"), ("carol", "other")):
            admin.new_user(user)
            admin.add_member(team, user, "member")
    finally:
        admin.close()
    return api_for(site.url, "bob"), api_for(site.url, "carol")


__all__ = ["PASSWORD", "Site", "two_teams"]
