"""A job's replica claims (code, data) open nothing once the job has ended, even while its
pods still stop.

The attack (seen in CI: tests/security/test_node_cache_key.py, once in many runs): a member
stops a job, the server reads it Failed, yet its pods take a while to stop (a Kubernetes
grace period, a kubelet that is slow to end them). Until they were all gone the server kept
the job `live` (`JobView.done`: terminal *and* settled), and the doors checked only that:
a stopped job's claim, copied out of its pod, kept fetching the team's code and data.

Deterministic here: the real app, its real SQLite database and blob store, no loops (no
lifespan, so no sync loop moves the row), and the row set as the sync loop leaves it in
that window: phase terminal, state `live`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from tfkube.server.app import build_platform, create_app
from tfkube.server.core.config import ServerSettings
from tfkube.server.core.security import DATA_CLAIM, CodeClaim, sign_claim
from tfkube.server.core.tables import Blob, Job, Team
from tfkube.server.platform import Platform

JOB = "0123456789abcdef"


@pytest.fixture
def door(tmp_path: Path) -> Iterator[tuple[Platform, FastAPI, str]]:
    """The app (no lifespan: nothing moves the row but the test), a team with one live
    job whose code and data set are one stored blob -> (platform, app, the blob's sha)."""
    platform = build_platform(ServerSettings(data_dir=tmp_path / "server", port=1))
    staged = platform.blobs.temp()
    staged.write_bytes(b"the team's code and data")
    sha, size = platform.blobs.keep(staged)
    now = time.time()
    with platform.sessions() as db:
        db.add(Team(id=1, name="a", namespace="tfkube-a", quota={}, created_at=now))
        db.add(Blob(sha256=sha, size=size, created_at=now))
        db.flush()
        db.add(
            Job(
                id=JOB, team_id=1, name="j", created_at=now, spec="", code_sha256=sha,
                data_sha256=sha, state="live", request={}, phase="Running", replicas=[],
                updated_at=now,
            )
        )  # fmt: skip
        db.commit()
    try:
        yield platform, create_app(platform.settings, platform), sha
    finally:
        platform.engine.close()
        platform.database.dispose()


def ask(app: FastAPI, path: str, headers: dict[str, str]) -> httpx.Response:
    """One GET to the app in this process (the ASGI transport runs no lifespan)."""

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            return await c.get(path, headers=headers)

    return asyncio.run(go())


def _set(platform: Platform, **columns: object) -> None:
    with platform.sessions() as db:
        row = db.get(Job, JOB)
        assert row is not None
        for name, value in columns.items():
            setattr(row, name, value)
        db.commit()


@pytest.mark.parametrize("phase", ["Failed", "Succeeded"])
def test_a_jobs_claims_close_when_its_phase_ends_not_when_its_pods_are_gone(
    door: tuple[Platform, FastAPI, str], phase: str
) -> None:
    platform, app, sha = door
    exp = time.time() + 3600
    code = {"Authorization": f"Bearer {sign_claim(platform.key, CodeClaim(JOB, sha, exp))}"}
    data = {"Authorization": f"Bearer {sign_claim(platform.key, CodeClaim(JOB, DATA_CLAIM, exp))}"}
    paths = [(f"/api/v1/code/{sha}", code), (f"/api/v1/data/{JOB}/worker-0", data)]
    paths.append((f"/api/v1/data/{JOB}/worker-0/key", data))
    for path, claim in paths:  # running: each claim opens its door
        assert ask(app, path, claim).status_code == 200, path

    _set(platform, phase=phase)  # read terminal; its pods still stop: state stays live
    for path, claim in paths:
        answer = ask(app, path, claim)
        assert answer.status_code == 404, (path, answer.status_code)
        assert b"the team's code and data" not in answer.content
        assert b'"key"' not in answer.content

    _set(platform, state="ended")  # and once its pods are gone too
    for path, claim in paths:
        assert ask(app, path, claim).status_code == 404, path
