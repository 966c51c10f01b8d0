"""A job's http(s) code, fetched by the server once, in the member's own submit request,
before the job is queued: the sync loop (which starts every team's jobs) never waits for
a member's URL.

    submit (local engine, code: https://...)
      -> fetch(url) under the server's FetchPolicy (`core/fetch.py`: no loopback, link-local
         or private targets unless an admin allowed them; a deadline and a minimum rate)
      -> the archive checked as an upload is (the launcher's rules, the entrypoint, the
         sha256 the job pinned)
      -> kept in the blob store under its sha256; the job then runs that blob, fetched by
         its replicas from the server with a job-scoped claim, as an uploaded artifact is

Errors are the job's (`SpecError` on the code field), so the member sees them at once.
"""

from __future__ import annotations

import tarfile
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from tfkube.launcher import FetchError, check_archive
from tfkube.server.artifacts import BlobStore
from tfkube.server.core.fetch import FetchFailed, FetchPolicy, FetchRefused, fetch
from tfkube.server.core.tables import Artifact, Job
from tfkube.spec import CodeSpec, FieldError, SpecError, TFJob

PER_TEAM = 2
"""Fetches one team may have under way at once (each holds a request thread)."""
TOTAL = 8
"""Fetches under way at once for all teams: the request threads stay free for the rest."""


class Slots:
    """How many fetches each team has under way (a submit over a limit is refused at
    once: it would otherwise hold one of the server's request threads)."""

    def __init__(self, per_team: int = PER_TEAM, total: int = TOTAL) -> None:
        self.per_team, self.total = per_team, total
        self._lock = threading.Lock()
        self._busy: Counter[str] = Counter()

    @contextmanager
    def taken(self, team: str) -> Iterator[bool]:
        with self._lock:
            free = self._busy[team] < self.per_team and self._busy.total() < self.total
            if free:
                self._busy[team] += 1
        try:
            yield free
        finally:
            if free:
                with self._lock:
                    self._busy[team] -= 1


SLOTS = Slots()


def fetch_code(
    job: TFJob, field: str, blobs: BlobStore, policy: FetchPolicy, team: str, slots: Slots = SLOTS
) -> str:
    """Fetch the job's code URL into the blob store; -> its sha256. Raises SpecError."""
    code = job.spec.code
    assert code is not None
    assert code.is_url

    def refuse(message: str, at: str = field) -> SpecError:
        return SpecError([FieldError(at, message)], f"job {job.name!r}")

    with slots.taken(team) as free:
        if not free:
            raise refuse(
                "the server is fetching other code URLs of your team (or too many) right now; "
                "submit again in a minute, or upload the code"
            )
        return _fetch(job, code, refuse, blobs, policy)


def _fetch(
    job: TFJob,
    code: CodeSpec,
    refuse: Callable[..., SpecError],
    blobs: BlobStore,
    policy: FetchPolicy,
) -> str:
    staged = blobs.temp()
    try:
        try:
            sha = fetch(code.source, staged, policy)
        except FetchRefused as exc:
            raise refuse(f"cannot fetch the code: {exc}") from None
        except FetchFailed as exc:
            raise refuse(f"cannot fetch the code from {code.source}: {exc}") from None
        if code.sha256 is not None and sha != code.sha256:
            raise refuse(
                f"the file at {code.source} has SHA-256 {sha}; update sha256 or the file",
                "spec.code.sha256",
            )
        try:
            names = {n.removeprefix("./") for n in check_archive(staged).names}
        except FetchError as exc:
            raise refuse(f"the archive at {code.source} is refused: {exc}") from None
        if job.spec.runs_entrypoint() and code.entrypoint not in names:
            raise refuse(
                f"{code.entrypoint!r} is not in the archive at {code.source}; add it or name "
                "the script to run",
                "spec.code.entrypoint",
            )
        kept, _ = blobs.keep(staged)
        return kept
    except (tarfile.TarError, OSError) as exc:
        raise refuse(f"cannot keep the code: {exc}") from None
    finally:
        staged.unlink(missing_ok=True)


def release_fetched(db: Session, blobs: BlobStore, row: Job) -> None:
    """Before a job's row is deleted: the blob its fetched code was kept in, unless an
    artifact or another job still names it."""
    sha = row.code_sha256
    if row.artifact_id is not None or not sha:
        return
    if db.scalars(select(Artifact.id).where(Artifact.sha256 == sha).limit(1)).first():
        return
    others = select(Job.id).where(
        or_(Job.code_sha256 == sha, Job.data_sha256 == sha), Job.id != row.id
    )
    if db.scalars(others.limit(1)).first():
        return
    blobs.remove(sha)
