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

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from tfkube.launcher import FetchError, check_archive
from tfkube.server.artifacts import BlobStore
from tfkube.server.core.fetch import FetchFailed, FetchPolicy, FetchRefused, fetch
from tfkube.server.core.tables import Artifact, Job
from tfkube.spec import FieldError, SpecError, TFJob


def fetch_code(job: TFJob, field: str, blobs: BlobStore, policy: FetchPolicy) -> str:
    """Fetch the job's code URL into the blob store; -> its sha256. Raises SpecError."""
    code = job.spec.code
    assert code is not None
    assert code.is_url

    def refuse(message: str, at: str = field) -> SpecError:
        return SpecError([FieldError(at, message)], f"job {job.name!r}")

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
                "spec.code.sha256" if field != "code" else field,
            )
        try:
            names = {n.removeprefix("./") for n in check_archive(staged).names}
        except FetchError as exc:
            raise refuse(f"the archive at {code.source} is refused: {exc}") from None
        if job.spec.runs_entrypoint() and code.entrypoint not in names:
            raise refuse(
                f"{code.entrypoint!r} is not in the archive at {code.source}; add it or name "
                "the script to run",
                "entrypoint" if field == "code" else "spec.code.entrypoint",
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
