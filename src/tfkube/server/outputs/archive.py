"""A job's kept outputs and logs, archived when it ends (`tfkube server --store s3://`).

The archive is the job's whole output folder (its `.tfkube/logs/` included) as one plain
tar (not compressed: each file's bytes sit at a fixed offset, so they are read back by
ranged reads, `archived.py`; logs are small beside checkpoints, which do not compress),
made by `files.tar_folder`: the same no-follow reads as every other read of what
a workload wrote (plain files and folders only; a link, FIFO or device is left out; each
file read through its own descriptor, opened with O_NOFOLLOW below a folder opened the
same way), produced piece by piece, so memory stays bounded, and cut off past
`MAX_ARCHIVE_BYTES` (the upload is then aborted: no partial archive is kept).
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator

from tfkube.server.outputs.files import tar_folder

MAX_ARCHIVE_BYTES = 64 * 2**30
"""A job's archive larger than this is not kept (the local copy stays)."""


class ArchiveTooLarge(OSError):
    pass


def outputs_key(prefix: str, team: str, job_id: str) -> str:
    """Where a job's archive lives in the store: `<prefix>outputs/<team>/<job id>.tar`."""
    for what, value in (("team", team), ("job id", job_id)):
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", value) or ".." in value:
            raise ValueError(f"not a {what} fit for a key: {value!r}")
    return f"{prefix}outputs/{team}/{job_id}.tar"


def first_format_key(key: str) -> str:
    """Where the first archives (`.tar.gz`, before they were read back) of the job whose
    archive is at `key` lived. A .tar.gz cannot be read by ranged reads, so such a job
    (its row has no `archived_at`: the column came later, with retention) is archived
    again as a plain tar while its local copy exists, and the old object is deleted then
    (and with the job). Pure."""
    if not key.endswith(".tar"):
        raise ValueError(f"not an outputs archive key: {key!r}")
    return key + ".gz"


class BoundedReader(io.RawIOBase):
    """A readable file over an iterator of byte chunks, refusing more than `limit`."""

    def __init__(self, chunks: Iterator[bytes], limit: int) -> None:
        self.chunks = chunks
        self.limit = limit
        self.total = 0
        self.pending = b""

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        while n < 0 or len(self.pending) < n:
            chunk = next(self.chunks, None)
            if chunk is None:
                break
            self.total += len(chunk)
            if self.total > self.limit:
                raise ArchiveTooLarge(f"the outputs are larger than {self.limit:,} bytes")
            self.pending += chunk
        if n < 0:
            data, self.pending = self.pending, b""
        else:
            data, self.pending = self.pending[:n], self.pending[n:]
        return data


def archive_reader(output_dir: str, limit: int = MAX_ARCHIVE_BYTES) -> BoundedReader:
    """The job's output folder as a tar to read from (nothing followed)."""
    return BoundedReader(tar_folder(output_dir, [], gzip=False), limit)


# -- where a job's outputs live, and retention ------------------------------------------------

LOCAL = "local"
"""Only the job's output folder (the default; also every job before the store)."""
BOTH = "local+archive"
"""Archived in the store, the local copy kept."""
ARCHIVE = "archive"
"""Only the archive: logs and outputs are read back from it."""
GONE = "none"
"""Neither: the local copy and then the archive were removed by retention."""
PLACES = (LOCAL, BOTH, ARCHIVE, GONE)
DAY = 86400.0


def retention_step(
    outputs_at: str,
    archived_at: float | None,
    now: float,
    keep_local_days: float | None,
    archive_days: float | None,
    served: bool = False,
) -> tuple[bool, bool, str]:
    """What retention does to one ended job now (pure): (remove the local copy, remove
    the archive, where its outputs live after). Both ages count from when it was
    archived; None keeps forever. A job never archived keeps its local copy: it is the
    only one; so does a job a model server serves (`served`: it reads the exports from
    the local folder)."""
    if archived_at is None or outputs_at not in {BOTH, ARCHIVE}:
        return False, False, outputs_at
    age = now - archived_at
    drop_local = (
        outputs_at == BOTH
        and not served
        and keep_local_days is not None
        and age >= keep_local_days * DAY
    )
    drop_archive = archive_days is not None and age >= archive_days * DAY
    local = outputs_at == BOTH and not drop_local
    if drop_archive:
        return drop_local, True, LOCAL if local else GONE
    return drop_local, False, BOTH if local else ARCHIVE


def needs_local_copy(outputs_at: str, what: str) -> tuple[int, str] | None:
    """Why `what` (TensorBoard, serving: they run on the job's output folder) cannot be
    had for a job whose local copy is gone, as (HTTP status, message), or None when the
    local copy is there (pure). 409 while the archive keeps the outputs (the job page,
    the API and downloads still read it), 410 once retention removed them too."""
    if outputs_at == ARCHIVE:
        return 409, (
            f"{what} needs the job's output folder, and the server dropped it after archiving "
            "it to the store (--keep-local): its charts, logs, checkpoint and files are still "
            "on the job's page and in the API, read from the archive; download the outputs "
            "to use them elsewhere, or run the server with a longer --keep-local to keep "
            "later jobs' folders"
        )
    if outputs_at == GONE:
        return 410, (
            f"{what} needs the job's output folder, and the server's retention removed it "
            "and its archive (--keep-local, --archive-retention)"
        )
    return None


def parse_days(option: str, text: str | None) -> float | None:
    """`--keep-local` / `--archive-retention`: a number of days (fractions allowed, 0:
    right after archiving), or None to keep forever."""
    if text is None or text.strip().lower() in {"", "forever", "keep"}:
        return None
    try:
        days = float(text)
    except ValueError:
        raise ValueError(
            f"{option}: {text!r} is not a number of days; give e.g. 30, 0.5, or 'forever'"
        ) from None
    if not 0 <= days <= 100 * 365 or days != days:
        raise ValueError(f"{option}: give 0 to 36500 days (or 'forever'), not {text}")
    return days
