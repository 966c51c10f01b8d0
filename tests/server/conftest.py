"""Fixtures for the server's API tests: a real `tfkube server` process per database
(SQLite and PostgreSQL), shared by the tests of a module; an admin signed in through the
one-time set-up link; a team with a member per test.

PostgreSQL: a throwaway cluster for the session (`_postgres.py`). Without it the
PostgreSQL half is skipped, except under CI=true where that is a failure.
"""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import TAG, tagged_processes  # tests/conftest.py

from ._postgres import Postgres, PostgresUnavailable, start_postgres
from ._server import PASSWORD, Api, ServerProc, api_for, env_with, free_port, unique

IN_CI = os.environ.get("CI", "").lower() == "true"
DATABASES = ["sqlite", "postgresql"]


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres | None]:
    try:
        pg = start_postgres()
    except PostgresUnavailable as exc:
        if IN_CI:
            pytest.fail(f"CI=true and PostgreSQL is unavailable: {exc}", pytrace=False)
        yield None
        return
    try:
        yield pg
    finally:
        pg.stop()


def start_server(
    tmp: Path, database: str, postgres: Postgres | None, extra: list[str] | None = None
) -> tuple[ServerProc, Api, str]:
    """-> (the server, its admin's API client, the tag its processes carry)."""
    url = None
    if database == "postgresql":
        if postgres is None:
            pytest.skip("PostgreSQL is not installed (tools/postgres/ensure.sh)")
        url = postgres.create_database()
    tag = uuid.uuid4().hex
    home = tmp / "home"
    server = ServerProc(
        tmp / "data", free_port(), url, env_with(TAG, tag, home), extra=list(extra or [])
    )
    try:
        server.start()
        assert server.setup_token, "the server printed no set-up link"
        r = httpx.post(
            f"{server.url}/api/v1/setup",
            json={"token": server.setup_token, "name": "admin", "password": PASSWORD},
        )
        assert r.status_code == 201, r.text
        return server, api_for(server.url, "admin"), tag
    except BaseException:
        server.stop()
        raise


def stop_server(server: ServerProc, admin: Api, tag: str) -> None:
    """Delete every job (so nothing it started runs on), stop the server, check."""
    try:
        jobs = admin.get("/api/v1/jobs", params={"limit": 500}).json().get("items", [])
        for job in jobs:
            admin.delete(f"/api/v1/jobs/{job['id']}")
    finally:
        admin.close()
        server.stop()
    deadline = time.monotonic() + 10
    left = tagged_processes(tag)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = tagged_processes(tag)
    described = [(p.pid, p.cmdline()) for p in left]
    for p in left:
        p.kill()
    assert not described, f"processes left behind: {described}"


@pytest.fixture(scope="module", params=DATABASES)
def platform(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    postgres: Postgres | None,
) -> Iterator[tuple[ServerProc, Api]]:
    """The module's server; a module may give its own arguments as `SERVER_ARGS`."""
    tmp = tmp_path_factory.mktemp(f"server-{request.param}")
    extra = list(getattr(request.module, "SERVER_ARGS", ["--cpus", "2"]))
    server, admin, tag = start_server(tmp, request.param, postgres, extra)
    try:
        yield server, admin
    finally:
        stop_server(server, admin, tag)


@pytest.fixture
def server(platform: tuple[ServerProc, Api]) -> ServerProc:
    return platform[0]


@pytest.fixture
def admin(platform: tuple[ServerProc, Api]) -> Api:
    return platform[1]


class TeamCtx:
    def __init__(self, name: str, member: Api, viewer: Api) -> None:
        self.name = name
        self.member = member
        self.viewer = viewer


@pytest.fixture
def team(server: ServerProc, admin: Api) -> Iterator[TeamCtx]:
    """A fresh team with a member and a viewer (each with an API token)."""
    name = admin.new_team()
    member, viewer = admin.new_user(), admin.new_user()
    admin.add_member(name, member, "member")
    admin.add_member(name, viewer, "viewer")
    ctx = TeamCtx(name, api_for(server.url, member), api_for(server.url, viewer))
    yield ctx
    ctx.member.close()
    ctx.viewer.close()


def targz(files: dict[str, str | bytes], modes: dict[str, int] | None = None) -> bytes:
    """The same files give the same bytes: no time in the tar members or the gzip header."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, content in files.items():
            data = content.encode() if isinstance(content, str) else content
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = (modes or {}).get(name, 0o755 if name.endswith(".sh") else 0o644)
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(buffer.getvalue(), mtime=0)


def upload(
    api: Api, team: str, name: str, data: bytes, filename: str = "code.tar.gz", **params: str
) -> httpx.Response:
    return api.post(
        f"/api/v1/teams/{team}/artifacts",
        params={"name": name, "filename": filename, **params},
        content=data,
        headers={"Content-Type": "application/octet-stream"},
    )


def wait_job(api: Api, job_id: str, phases: set[str], timeout: float = 120) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = api.ok(api.get(f"/api/v1/jobs/{job_id}"))
        if job["phase"] in phases and not job["queued"]:
            return dict(job)
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} never reached {phases}: {job}")


__all__ = ["TeamCtx", "targz", "unique", "upload", "wait_job"]
