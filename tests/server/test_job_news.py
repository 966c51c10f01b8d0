"""A job's news wherever the server records its change: here a job the local engine
already ended when its submit returned (a short job on a busy machine, where the
server's thread did not run for the job's whole life) still tells its owner it
succeeded. Before, only the sync loop's changes made notifications, and the sync loop
never saw this job live: under CI load `test_compare_search_and_notifications` got one
message of two.

In-process: the server's own platform (`build_platform`: a real SQLite database, the
real local engine running the job's processes, the real notifier's queue); the engine's
jobs are wrapped so that submit answers only once the job has ended, which is the
timing the busy machine gave by chance."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from tfkube.server.accounts import create_team, create_user
from tfkube.server.app import build_platform
from tfkube.server.core.config import ServerSettings
from tfkube.server.core.tables import Notification, NotificationPrefs
from tfkube.server.platform import Platform
from tfkube.server.tenants import prepare_team, tenant_of
from tfkube.spec import load_job_text

JOB = """
apiVersion: tfkube.io/v1alpha1
kind: TFJob
metadata: {name: quick}
spec:
  replicas:
    worker:
      replicas: 1
      command: ["/bin/sh", "-c", "echo done"]
"""


class _EndedFirst:
    """A team's jobs on the local engine, whose submit answers once the job ended."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def submit(self, job: Any, *args: Any, **kwargs: Any) -> Any:
        view = self.inner.submit(job, *args, **kwargs)
        deadline = time.monotonic() + 120
        while not view.done:
            assert time.monotonic() < deadline, f"the job did not end: {view}"
            time.sleep(0.1)
            view = self.inner.get(job.name)
        return view


class _Engine:
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def jobs(self, tenant: Any) -> Any:
        return _EndedFirst(self.inner.jobs(tenant))


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    made = build_platform(ServerSettings(data_dir=tmp_path / "data"))
    try:
        yield made
    finally:
        made.database.dispose()


def test_a_job_ended_before_its_start_returned_still_tells_its_owner(platform: Platform) -> None:
    service = platform.jobs
    service.engine = _Engine(platform.engine)  # type: ignore[assignment]
    with platform.sessions() as db:
        user = create_user(db, "ada", "a long enough password")
        team = create_team(db, "news")
        db.commit()
        prepare_team(platform.engine, db, team)
        db.add(
            NotificationPrefs(
                user_id=user.id,
                events=["succeeded"],
                webhook_url="http://127.0.0.1:9/hook",
                updated_at=time.time(),
            )
        )
        db.commit()
        row = service.submit(db, team, user.id, load_job_text(JOB, "the test's job"))
        service.tick()  # admits and starts it: its engine's first answer is its end
        db.expire_all()
        db.refresh(row)
        assert (row.phase, row.state) == ("Succeeded", "ended"), (row.phase, row.message)
        service.tick()  # nothing more to see
        notes = db.scalars(select(Notification).where(Notification.job_id == row.id)).all()
        assert [(n.event, n.channel) for n in notes] == [("succeeded", "webhook")]
        platform.engine.jobs(tenant_of(team)).delete(row.name)
