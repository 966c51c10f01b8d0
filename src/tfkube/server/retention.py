"""Retention of ended jobs' outputs with `--store s3://` (`--keep-local DAYS`,
`--archive-retention DAYS`): a loop of the server that, every `retention_interval`
seconds, asks `outputs.archive.retention_step` what to do with each archived job and
does it: removes the local output folder (logs and outputs are then read back from the
archive: `outputs/archived.py`), deletes the archive, and records on the job's row where
its outputs live now (`Job.outputs_at`). A job a model server was made from (running or
stopped: it may start again) keeps its local copy: the server reads the exports there."""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session

from tfkube.server.artifacts import BlobStoreError
from tfkube.server.core.tables import Job, ModelServer
from tfkube.server.outputs.archive import ARCHIVE, BOTH, retention_step
from tfkube.server.s3blobs import OutputArchiver

log = logging.getLogger("tfkube.server")


class Retention:
    def __init__(
        self,
        sessions: Callable[[], Session],
        archiver: OutputArchiver,
        keep_local_days: float | None,
        archive_days: float | None,
        interval: float,
    ) -> None:
        self.sessions = sessions
        self.archiver = archiver
        self.keep_local_days = keep_local_days
        self.archive_days = archive_days
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def needed(self) -> bool:
        return self.keep_local_days is not None or self.archive_days is not None

    def tick(self, now: float | None = None) -> int:
        """One pass; -> how many jobs changed."""
        now = time.time() if now is None else now
        changed = 0
        with self.sessions() as db:
            rows = db.scalars(
                select(Job).where(Job.archived_at.is_not(None), Job.outputs_at.in_([BOTH, ARCHIVE]))
            ).all()
            served = set(
                db.scalars(select(ModelServer.job_id).where(ModelServer.job_id.is_not(None)))
            )
            for row in rows:
                drop_local, drop_archive, after = retention_step(
                    row.outputs_at,
                    row.archived_at,
                    now,
                    self.keep_local_days,
                    self.archive_days,
                    served=row.id in served,
                )
                if after == row.outputs_at:
                    continue
                if drop_archive and row.archive_key:
                    try:
                        self.archiver.remove_key(row.archive_key, row.id)
                    except BlobStoreError:
                        continue  # the store failed (logged): tried again next pass
                if drop_local and row.output_dir:
                    # Nothing is followed: rmtree removes links, never their targets.
                    shutil.rmtree(row.output_dir, ignore_errors=True)
                    log.info("removed the local outputs of job %s (kept in its archive)", row.id)
                row.outputs_at = after
                db.commit()
                changed += 1
        return changed

    def run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.tick()
            except Exception:  # one bad pass must not end the loop
                log.exception("the retention pass failed")

    def start_loop(self) -> None:
        if not self.needed:
            return
        self._thread = threading.Thread(target=self.run, name="tfkube-retention", daemon=True)
        self._thread.start()

    def stop_loop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
