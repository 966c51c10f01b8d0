"""Upgrading a running installation (issue 18 point 6), on the local engine, SQLite and
PostgreSQL: the released tfkube of 2026-12-02 (commit `RELEASE`, its schema at revision
0011) runs a server with a finished job and a job still training; the server is stopped
and today's tfkube started on the same data and database. Its migrations run (0012
to today's head), the users, teams, tokens and the finished job with its log are all there, and the
running job (its supervisor a daemon the old server forked) finishes untouched: every line
of its log once, in order, Succeeded with 0 restarts. Then a database a newer tfkube upgraded (its
revision unknown here) is refused before anything is changed, with a message that says
what to do; the database is as it was.

The old release is the repository's own history (`git archive`), run from its source with
this virtualenv's libraries, as a platform team would run the previous image.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

import tfkube
from conftest import TAG, tagged_processes
from release import RELEASE_HEAD, release_source
from tfkube.client import ServerError

from ._postgres import Postgres
from ._server import ServerProc, api_for, env_with, first_admin, free_port
from .conftest import DATABASES, stop_server

TICKS = 20
"""The job that trains across the upgrade logs a line a second: time for the old server to
stop and the new one to start and see it running, on a slow machine too."""
RUN_SH = f"""#!/bin/sh
i=0
while [ $i -lt "${{TICKS:-{TICKS}}}" ]; do
  i=$((i + 1))
  echo "tick $i"
  sleep 1
done
echo "DONE"
"""


@pytest.fixture(scope="module")
def release_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return release_source(tmp_path_factory.mktemp("release"))


def _revision(url: str) -> list[str]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as c:
            return [row[0] for row in c.execute(sa.text("SELECT version_num FROM alembic_version"))]
    finally:
        engine.dispose()


def _sqlalchemy_url(database_url: str | None, data: Path) -> str:
    if database_url is None:
        return f"sqlite:///{data / 'tfkube.db'}"
    return "postgresql+psycopg://" + database_url.split("://", 1)[1]


def _log_text(c: tfkube.Client, job_id: str) -> str:
    try:
        return "\n".join(c.logs(job_id, "worker-0"))
    except ServerError:  # no log yet
        return ""


@pytest.fixture(params=DATABASES)
def database(request: pytest.FixtureRequest, postgres: Postgres | None) -> Iterator[str | None]:
    if request.param == "postgresql":
        if postgres is None:
            pytest.skip("PostgreSQL is not installed (tools/postgres/ensure.sh)")
        yield postgres.create_database()
    else:
        yield None


def test_an_upgrade_keeps_history_and_running_jobs_and_a_downgrade_is_refused(
    release_src: Path, database: str | None, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex
    try:
        _upgrade(release_src, database, tmp_path, tag)
    finally:  # a failure half-way leaves the job's supervisor: stopped by its PID
        for proc in tagged_processes(tag):
            proc.kill()


def _upgrade(release_src: Path, database: str | None, tmp_path: Path, tag: str) -> None:
    data = tmp_path / "data"
    env = env_with(TAG, tag, tmp_path / "home")
    old_env = {**env, "PYTHONPATH": str(release_src)}
    db_url = _sqlalchemy_url(database, data)
    port = free_port()

    old = ServerProc(data, port, database, old_env, extra=["--cpus", "2"])
    old.start()
    try:
        admin = first_admin(old)
        assert _revision(db_url) == [RELEASE_HEAD]
        team = admin.new_team()
        user = admin.new_user()
        admin.add_member(team, user, "member")
        member = api_for(old.url, user)
        code = tmp_path / "ticks"
        code.mkdir()
        (code / "run.sh").write_text(RUN_SH)
        (code / "run.sh").chmod(0o755)

        def manifest(name: str, ticks: int) -> dict[str, object]:
            return {
                "apiVersion": "tfkube.io/v1alpha1",
                "kind": "TFJob",
                "metadata": {"name": name},
                "spec": {
                    "code": {"source": "artifact:ticks"},
                    "replicas": {"worker": {"replicas": 1, "env": {"TICKS": str(ticks)}}},
                },
            }

        with tfkube.Client(old.url, member.token, team=team) as c:
            c.upload(code, "ticks")
            before = c.wait(c.submit(manifest("before", 1)).id, timeout=120, poll=0.3)
            assert before.phase == "Succeeded", (before.reason, before.message)
            across = c.submit(manifest("across", TICKS))
            deadline = time.monotonic() + 120
            while "tick 2" not in _log_text(c, across.id):
                assert time.monotonic() < deadline, c.get(across.id)
                time.sleep(0.3)
        admin.close()
        member.close()
    finally:
        old.stop()

    # Today's tfkube on the same data and database: no PYTHONPATH, this checkout's package.
    new = ServerProc(data, port, database, env, extra=["--cpus", "2"])
    new.start()
    admin = api_for(new.url, "admin")
    try:
        assert _revision(db_url) != [RELEASE_HEAD]  # migrated to this tfkube's head
        with tfkube.Client(new.url, member.token, team=team) as c:  # the old token works
            kept = c.get(before.id)
            assert kept.phase == "Succeeded"
            assert "DONE" in "\n".join(c.logs(before.id, "worker-0"))
            seen = c.get(across.id)
            assert seen.phase == "Running", (seen.phase, seen.reason, seen.message)
            done = c.wait(across.id, timeout=180, poll=0.5)
            assert done.phase == "Succeeded", (done.reason, done.message)
            assert done.restarts == 0
            log = [line for line in c.logs(across.id, "worker-0") if line.strip()]
            ticks = [line for line in log if line.startswith("tick ")]
            assert ticks == [f"tick {i}" for i in range(1, TICKS + 1)], log
            assert log.index("DONE") > log.index(f"tick {TICKS}"), log
    finally:
        stop_server(new, admin, tag)

    # A newer tfkube's schema: refused before anything changes.
    engine = sa.create_engine(db_url)
    try:
        with engine.begin() as c:
            c.execute(sa.text("UPDATE alembic_version SET version_num = '0999_future'"))
            tables = set(sa.inspect(c).get_table_names())
    finally:
        engine.dispose()
    refused = subprocess.run(
        [sys.executable, "-m", "tfkube", "server", "--data-dir", str(data), "--port", str(port)]
        + (["--database-url", database] if database else []),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert refused.returncode == 1, refused.stderr
    said = " ".join(refused.stderr.split())
    assert "revision 0999_future, newer than this tfkube" in said, refused.stderr
    assert "a downgrade is not supported" in said, refused.stderr
    assert "Traceback" not in refused.stderr, refused.stderr
    assert _revision(db_url) == ["0999_future"]
    engine = sa.create_engine(db_url)
    try:
        assert set(sa.inspect(engine).get_table_names()) == tables
    finally:
        engine.dispose()
