"""A job's outputs as "a folder", wherever they live: the output folder on this machine
(`LocalFolder`, read through `tfkube.safefs`: no link followed, plain files and folders
only) or the job's archive in the store once retention dropped the local copy
(`archived.ArchivedOutputs`: every member checked when its index was built, every read a
ranged read). The readers of what a job wrote that the job page and the API show beside
its logs (scalars, usage, the final checkpoint, the result, the progress hint) take an
`OutputsFolder` and so give the same answers from either.

Every method raises OSError for what is not there (or is not served: a link, a special
file), as the local reads always did.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Protocol

from tfkube.safefs import Entry, closing, entries, open_dir, open_file, open_root, pread_all, walk
from tfkube.server.outputs.files import tar_files

Pread = Callable[[int, int], bytes]
"""(offset, length) -> at most that many bytes of an open file from there."""


@dataclass(frozen=True)
class OpenFile:
    identity: tuple[int, int]
    """Tells one file under a name from another put there later (device and inode here;
    the member's place in the archive there)."""
    size: int
    pread: Pread


class OutputsFolder(Protocol):
    key: str
    """Names this copy of the outputs for the readers' caches (the path, or the
    archive's key and ETag: a replaced archive is read anew)."""

    def walk(
        self, parts: Sequence[str] = (), skip: Callable[[tuple[str, ...]], bool] = ...
    ) -> Iterator[tuple[tuple[str, ...], Entry]]:
        """Every file and folder below `parts`, depth first in name order."""
        ...

    def entries(self, parts: Sequence[str]) -> list[Entry]:
        """One folder's entries in name order."""
        ...

    def open(self, parts: Sequence[str]) -> AbstractContextManager[OpenFile]:
        """One plain file, to read from with `pread`."""
        ...

    def read_bytes(self, parts: Sequence[str], limit: int) -> bytes:
        """At most `limit` bytes from the start of one plain file."""
        ...

    def tar_files(
        self, files: Sequence[tuple[Sequence[str], str]], extra: dict[str, bytes]
    ) -> Iterator[bytes]:
        """Chosen files (parts, name in the archive) plus `extra` small files made here,
        as .tar.gz, streamed."""
        ...


class LocalFolder:
    """The job's output folder on this machine (`tfkube.safefs`)."""

    def __init__(self, path: str) -> None:
        self.key = path

    def walk(
        self,
        parts: Sequence[str] = (),
        skip: Callable[[tuple[str, ...]], bool] = lambda _rel: False,
    ) -> Iterator[tuple[tuple[str, ...], Entry]]:
        with closing(open_root(self.key)) as root:
            yield from walk(root, parts, skip)

    def entries(self, parts: Sequence[str]) -> list[Entry]:
        with closing(open_root(self.key)) as root, closing(open_dir(root, parts)) as folder:
            return entries(folder)

    @contextmanager
    def open(self, parts: Sequence[str]) -> Iterator[OpenFile]:
        with closing(open_root(self.key)) as root:
            fd = open_file(root, parts)
        with closing(fd):
            st = os.fstat(fd)
            yield OpenFile(
                (st.st_dev, st.st_ino),
                st.st_size,
                lambda offset, length: pread_all(fd, offset, length),
            )

    def read_bytes(self, parts: Sequence[str], limit: int) -> bytes:
        with self.open(parts) as f:
            return f.pread(0, limit)

    def tar_files(
        self, files: Sequence[tuple[Sequence[str], str]], extra: dict[str, bytes]
    ) -> Iterator[bytes]:
        return tar_files(self.key, files, extra)


WINDOW = 1 << 20
"""What one ranged read of an archived file asks for at the least (`Windowed`)."""


class Windowed:
    """A pread over another that reads ahead: a read past the bytes held asks for what is
    missing, at least `window` bytes (at most to the file's end), keeping what it held of
    the read's range, so reading a file front to back record by record (TensorBoard's
    event files: a 12-byte header, then the record) costs one ranged read per `window`
    bytes (or per longer record), not two per record, and each byte is fetched once.
    Holds at most one window plus one record. Pure."""

    def __init__(self, pread: Pread, size: int, window: int = WINDOW) -> None:
        self.inner, self.size, self.window = pread, size, window
        self.start, self.data = 0, b""
        self.reads = 0
        """Reads asked of the inner pread (for the tests)."""

    def __call__(self, offset: int, length: int) -> bytes:
        end = min(offset + length, self.size)
        if offset < 0 or end <= offset:
            return b""
        held_end = self.start + len(self.data)
        if not (self.start <= offset and end <= held_end):
            at = held_end if self.start <= offset < held_end else offset
            kept = self.data[offset - self.start :] if at == held_end else b""
            want = min(max(end - at, self.window), self.size - at)
            self.start, self.data = offset, b""  # the old window goes before the new one comes
            self.data = kept + self.inner(at, want)
            self.reads += 1
        return self.data[offset - self.start : end - self.start]
