"""Only one caller hands a queued job to its engine: the request that submitted it and
the sync loop (or two servers on one database) race for it on Kubernetes, and the loser
must leave it alone. A real SQLite database, the server's own schema."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from tfkube.server.core.db import make_engine, migrate, session_factory
from tfkube.server.core.tables import Job, Team
from tfkube.server.jobs.service import QUEUED, START_LEASE_SECONDS, STARTING, JobService

Sessions = Callable[[], AbstractContextManager[Session]]


@pytest.fixture
def sessions(tmp_path: Path) -> Iterator[Sessions]:
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    migrate(engine)
    try:
        yield session_factory(engine)
    finally:
        engine.dispose()


def _queued(sessions: Sessions, **fields: Any) -> None:
    now = time.time()
    with sessions() as db:
        team = Team(name="t", namespace="tfkube-t", quota={}, created_at=now)
        db.add(team)
        db.flush()
        row = {"phase": "Pending", "replicas": [], "updated_at": now, **fields}
        db.add(
            Job(
                id="j1",
                team_id=team.id,
                name="j",
                created_at=now,
                spec="",
                state=QUEUED,
                request={},
                **row,
            )
        )
        db.commit()


def test_one_start_claim_per_queued_job(sessions: Sessions) -> None:
    _queued(sessions)
    with sessions() as first, sessions() as second:
        mine, theirs = first.get(Job, "j1"), second.get(Job, "j1")  # both read it queued
        assert JobService._claim_start(first, mine)
        assert not JobService._claim_start(second, theirs)
        # Read after the claim, while the first is still starting it: still not theirs.
        with sessions() as third:
            assert not JobService._claim_start(third, third.get(Job, "j1"))
        mine.state = "live"
        first.commit()
    with sessions() as later:
        assert not JobService._claim_start(later, later.get(Job, "j1"))


def test_a_start_that_never_ended_can_be_taken_again(sessions: Sessions) -> None:
    """A server that died while starting a job leaves its lease; it expires."""
    _queued(sessions, reason=STARTING, updated_at=time.time() - START_LEASE_SECONDS - 1)
    with sessions() as db:
        assert JobService._claim_start(db, db.get(Job, "j1"))
        assert not JobService._claim_start(db, db.get(Job, "j1"))
