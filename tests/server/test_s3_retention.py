"""The retention pass (`server/retention.py`) against a real database (SQLite and
PostgreSQL, migration 0012 applied) and the real S3 store (SeaweedFS): local copies of
archived jobs removed after `--keep-local` days, archives deleted from the bucket after
`--archive-retention` days, each job's row saying where its outputs live after; a job
never archived keeps its only copy, a job a model server was made from its exports."""

from __future__ import annotations

from pathlib import Path

import pytest

from s3store import S3Store
from tfkube.server.core.db import make_engine, migrate, session_factory
from tfkube.server.core.store import StoreConfig
from tfkube.server.core.tables import Job, ModelServer, Team
from tfkube.server.outputs.archive import ARCHIVE, BOTH, GONE, LOCAL
from tfkube.server.retention import Retention
from tfkube.server.s3blobs import OutputArchiver, S3BlobStore

from ._postgres import Postgres
from .conftest import DATABASES

DAY = 86400.0
NOW = 1_800_000_000.0


@pytest.mark.parametrize("database", DATABASES)
def test_retention_removes_local_copies_and_archives_by_age(
    database: str, tmp_path: Path, s3_store: S3Store, postgres: Postgres | None
) -> None:
    if database == "postgresql":
        if postgres is None:
            pytest.skip("PostgreSQL is not installed (tools/postgres/ensure.sh)")
        url = postgres.create_database()
    else:
        url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    bucket = s3_store.bucket()
    config = StoreConfig(bucket=bucket, prefix="site/", endpoint=s3_store.endpoint)
    archiver = OutputArchiver(S3BlobStore(tmp_path / "cache", s3_store.client, config))
    engine = make_engine(url)
    migrate(engine)
    sessions = session_factory(engine)
    # job -> (where its outputs are, archived how many days ago)
    jobs = {
        "fresh": (BOTH, 0.5),
        "old": (BOTH, 3.0),
        "ancient": (BOTH, 40.0),
        "only-archive": (ARCHIVE, 31.0),
        "never-archived": (LOCAL, None),
        "served": (BOTH, 3.0),  # a model server reads its exports: its local copy stays
    }
    with sessions() as db:
        db.add(Team(id=1, name="a", namespace="tfkube-a", quota={}, created_at=NOW))
        db.flush()
        for job_id, (at, age) in jobs.items():
            folder = tmp_path / "outputs" / job_id
            if at != ARCHIVE:
                (folder / ".tfkube" / "logs" / "worker-0").mkdir(parents=True)
                (folder / ".tfkube" / "logs" / "worker-0" / "0.log").write_text("trained\n")
            key = None
            if age is not None:
                key = f"site/outputs/a/{job_id}.tar"
                s3_store.client.put_object(Bucket=bucket, Key=key, Body=b"archive")
            db.add(
                Job(
                    id=job_id, team_id=1, name=job_id, created_at=NOW, spec="", state="ended",
                    request={}, phase="Succeeded", replicas=[], updated_at=NOW,
                    output_dir=str(folder), outputs_at=at, archive_key=key,
                    archived_at=None if age is None else NOW - age * DAY,
                )
            )  # fmt: skip
        db.add(
            ModelServer(
                id="ms", team_id=1, job_id="served", job_name="served", name="m",
                model_base_path=str(tmp_path / "outputs" / "served" / "export"), resources={},
                state="stopped", handle={}, created_at=NOW,
            )
        )  # fmt: skip
        db.commit()
    try:
        retention = Retention(sessions, archiver, 1.0, 30.0, interval=1)
        assert retention.tick(NOW) == 3
        assert retention.tick(NOW) == 0  # nothing left to do at the same time
        with sessions() as db:
            after = {row.id: row.outputs_at for row in db.query(Job)}
        assert after == {
            "fresh": BOTH,
            "old": ARCHIVE,
            "ancient": GONE,
            "only-archive": GONE,
            "never-archived": LOCAL,
            "served": BOTH,
        }
        local = {p.name for p in (tmp_path / "outputs").iterdir()}
        assert local == {"fresh", "never-archived", "served"}
        listed = s3_store.client.list_objects_v2(Bucket=bucket, Prefix="site/")
        kept = sorted(o["Key"] for o in listed.get("Contents", []))
        assert kept == [f"site/outputs/a/{j}.tar" for j in ("fresh", "old", "served")]
    finally:
        archiver.close()
        engine.dispose()


def test_a_first_format_archive_is_replaced_and_deleted_with_the_job(
    tmp_path: Path, s3_store: S3Store
) -> None:
    """A job archived as `.tar.gz` (before archives were read back) is archived again as a
    plain tar (its row has no `archived_at`); the old object goes then, and a deleted
    job's goes with it."""
    bucket = s3_store.bucket()
    config = StoreConfig(bucket=bucket, prefix="site/", endpoint=s3_store.endpoint)
    archiver = OutputArchiver(S3BlobStore(tmp_path / "cache", s3_store.client, config))
    folder = tmp_path / "outputs" / "j1"
    (folder / ".tfkube" / "logs" / "worker-0").mkdir(parents=True)
    (folder / ".tfkube" / "logs" / "worker-0" / "0.log").write_text("trained\n")

    def keys() -> list[str]:
        listed = s3_store.client.list_objects_v2(Bucket=bucket, Prefix="site/")
        return sorted(o["Key"] for o in listed.get("Contents", []))

    for job_id in ("j1", "j2"):
        s3_store.client.put_object(Bucket=bucket, Key=f"site/outputs/a/{job_id}.tar.gz", Body=b"x")
    assert archiver.archive("a", "j1", str(folder)) == "site/outputs/a/j1.tar"
    assert keys() == ["site/outputs/a/j1.tar", "site/outputs/a/j2.tar.gz"]
    archiver.remove("a", "j2")  # deleted before it was archived again
    archiver.remove("a", "j1")
    assert keys() == []
    archiver.close()
