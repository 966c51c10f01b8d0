"""A job's kept outputs and logs, archived when it ends (`tfkube server --store s3://`).

The archive is the job's whole output folder (its `.tfkube/logs/` included) as one
.tar.gz, made by `files.tar_folder`: the same no-follow reads as every other read of what
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
    """Where a job's archive lives in the store: `<prefix>outputs/<team>/<job id>.tar.gz`."""
    for what, value in (("team", team), ("job id", job_id)):
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", value) or ".." in value:
            raise ValueError(f"not a {what} fit for a key: {value!r}")
    return f"{prefix}outputs/{team}/{job_id}.tar.gz"


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
    """The job's output folder as a .tar.gz to read from (nothing followed)."""
    return BoundedReader(tar_folder(output_dir, []), limit)
