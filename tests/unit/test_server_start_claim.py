"""Only one caller hands a queued job to its engine: the request that submitted it and
the sync loop (or two servers on one database) race for it on Kubernetes, and the loser
must leave it alone. A real SQLite database, the server's own schema."""

from __future__ import annotations

import time

from tfkube.server._db import make_engine, migrate, session_factory
from tfkube.server._jobs import QUEUED, JobService
from tfkube.server._tables import Job, Team


def test_one_start_claim_per_queued_job(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    migrate(engine)
    sessions = session_factory(engine)
    now = time.time()
    with sessions() as db:
        team = Team(name="t", namespace="tfkube-t", quota={}, created_at=now)
        db.add(team)
        db.flush()
        db.add(
            Job(
                id="j1",
                team_id=team.id,
                name="j",
                created_at=now,
                spec="",
                state=QUEUED,
                request={},
                phase="Pending",
                replicas=[],
                updated_at=now,
            )
        )
        db.commit()
    try:
        with sessions() as first, sessions() as second:
            mine, theirs = first.get(Job, "j1"), second.get(Job, "j1")  # both read it queued
            assert JobService._claim_start(first, mine)
            assert not JobService._claim_start(second, theirs)
            mine.state = "live"
            first.commit()
        with sessions() as later:
            assert not JobService._claim_start(later, later.get(Job, "j1"))
    finally:
        engine.dispose()
