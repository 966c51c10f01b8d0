"""A job's outputs and logs read back from its archive in the store, once retention
removed the local copy (`tfkube server --store s3:// --keep-local DAYS`).

The archive (`archive.py`) is a plain tar, so each member's bytes sit at a fixed place
in the object: the index built here maps each path to (kind, size, mtime, where its data
starts), and every read is a ranged read of just those bytes (`Ranged`), never the whole
archive. The index is built once per archive by reading the tar's headers only (data
skipped by seeking) and is cached by the server (`s3blobs.ArchiveReader`).

The archive's contents are not trusted: the store may have been written by someone
else, or the object replaced. An archive is refused whole (`ArchiveRefused`) when any
member is a link, a device or anything but a plain file or folder, has an absolute name,
a `..`, `.` or empty part, control characters or a name too long, appears twice or under
a file, is sparse, or when its data lies past the object's end, or the members or their
sizes pass the bounds below. Nothing is ever extracted to a folder.
"""

from __future__ import annotations

import io
import tarfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO

from tfkube import contract
from tfkube.safefs import Entry
from tfkube.server.core.paths import UnsafePath, safe_parts
from tfkube.server.outputs.archive import MAX_ARCHIVE_BYTES, BoundedReader
from tfkube.server.outputs.files import MAX_LISTED, NotInOutputs
from tfkube.server.outputs.folder import OpenFile, Windowed
from tfkube.server.outputs.logs import (
    REPLICA,
    LogOpener,
    NoSuchLog,
    Pread,
    SearchCursor,
    log_parts,
    search_in,
)
from tfkube.tfcluster import parse_replica_key, replica_order
from tfkube.wire import LogFile, LogSearchOut, OutputFile

MAX_MEMBERS = 200_000
"""An archive with more members than this is refused (its index would be too big)."""

Ranged = Callable[[int, int], Iterator[bytes]]
"""(offset in the archive, length) -> those bytes of the object, in chunks."""


class ArchiveRefused(ValueError):
    """The archive breaks a rule above; the message names the member and the rule."""


@dataclass(frozen=True)
class Member:
    kind: str
    """file or dir."""
    size: int
    mtime: float
    offset: int
    """Where the file's data starts in the archive (0 for a folder)."""


@dataclass
class ArchiveIndex:
    """The checked members of one archive, by path (parts joined by `/`)."""

    members: dict[str, Member] = field(default_factory=dict)
    children: dict[str, list[str]] = field(default_factory=dict)
    """Folder path ("" for the top) -> the names in it, in name order."""


def _checked_name(info: tarfile.TarInfo) -> tuple[str, ...]:
    name = info.name[:-1] if info.isdir() and info.name.endswith("/") else info.name
    if "\0" in name:
        raise ArchiveRefused(f"member {name!r}: NUL in its name")
    try:
        parts = safe_parts(name)
    except UnsafePath as exc:
        raise ArchiveRefused(f"member {name!r}: {exc}") from None
    if not parts:
        raise ArchiveRefused("a member has an empty name")
    return parts


def build_index(tar: tarfile.TarFile, object_size: int) -> ArchiveIndex:
    """The index of a tar opened for reading (its headers only are read: data is skipped),
    every member checked (module doc); ArchiveRefused at the first one breaking a rule.
    `object_size`: the object's size in the store."""
    index = ArchiveIndex()
    index.children[""] = []
    total = 0
    try:
        for count, info in enumerate(tar, 1):
            if count > MAX_MEMBERS:
                raise ArchiveRefused(f"more than {MAX_MEMBERS:,} members")
            parts = _checked_name(info)
            path = "/".join(parts)
            if info.issym() or info.islnk():
                raise ArchiveRefused(f"member {path!r} is a link")
            if not (info.isreg() or info.isdir()) or info.sparse is not None:
                raise ArchiveRefused(f"member {path!r} is not a plain file or folder")
            if path in index.members:
                raise ArchiveRefused(f"member {path!r} appears twice")
            size = info.size if info.isreg() else 0
            if size < 0 or info.offset_data + size > object_size:
                raise ArchiveRefused(f"member {path!r}: its data lies past the archive's end")
            total += size
            if total > MAX_ARCHIVE_BYTES:
                raise ArchiveRefused(f"its files hold more than {MAX_ARCHIVE_BYTES:,} bytes")
            # Its folders: listed (made up when the tar has no entry for them), never a file.
            for depth in range(1, len(parts)):
                folder = "/".join(parts[:depth])
                seen = index.members.get(folder)
                if seen is None:
                    index.members[folder] = Member("dir", 0, info.mtime, 0)
                    index.children.setdefault("/".join(parts[: depth - 1]), []).append(
                        parts[depth - 1]
                    )
                    index.children[folder] = []
                elif seen.kind != "dir":
                    raise ArchiveRefused(f"member {path!r} is below a file")
            kind = "file" if info.isreg() else "dir"
            index.members[path] = Member(kind, size, float(info.mtime), info.offset_data)
            index.children.setdefault("/".join(parts[:-1]), []).append(parts[-1])
            if kind == "dir":
                index.children.setdefault(path, [])
    except tarfile.TarError as exc:
        raise ArchiveRefused(f"not a readable tar: {exc}") from None
    for names in index.children.values():
        names.sort()
    return index


MAX_HEADER_READ = 1 << 20
"""The most tarfile may read at once while indexing: a header block, or a PAX or GNU
long-name record. A tar claiming a longer one is refused before anything is read."""


class _HeadersOnly(io.RawIOBase):
    """The archive as tarfile sees it while indexing: seekable, each read bounded by
    MAX_HEADER_READ (member data is skipped by seeking, never read)."""

    def __init__(self, fileobj: IO[bytes]) -> None:
        self.fileobj = fileobj

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.fileobj.seek(offset, whence)

    def tell(self) -> int:
        return self.fileobj.tell()

    def read(self, n: int = -1) -> bytes:
        if n < 0 or n > MAX_HEADER_READ:
            raise ArchiveRefused(f"a header record of more than {MAX_HEADER_READ:,} bytes")
        return self.fileobj.read(n)


def index_of(fileobj: IO[bytes], object_size: int) -> ArchiveIndex:
    """`build_index` of the tar read from a seekable file (ArchiveRefused when it is not
    a tar at all, or claims a header record past MAX_HEADER_READ)."""
    try:
        with tarfile.open(fileobj=_HeadersOnly(fileobj), mode="r:") as tar:
            return build_index(tar, object_size)
    except tarfile.TarError as exc:
        raise ArchiveRefused(f"not a readable tar: {exc}") from None


# -- reading the index and the members -------------------------------------------------------


class ArchivedOutputs:
    """A job's outputs and logs in its archive: the same answers as `files.py` and
    `logs.py` give from the output folder."""

    def __init__(self, index: ArchiveIndex, ranged: Ranged, key: str = "archive") -> None:
        self.index = index
        self.ranged = ranged
        self.key = key
        """Names this archive for the readers' caches (`folder.OutputsFolder`)."""

    def _member(self, parts: Sequence[str]) -> Member:
        found = self.index.members.get("/".join(parts))
        if found is None:
            raise NotInOutputs("/".join(parts))
        return found

    def kind_of(self, parts: Sequence[str]) -> str:
        return "dir" if not parts else self._member(parts).kind

    def list_folder(self, parts: Sequence[str]) -> list[OutputFile]:
        path = "/".join(parts)
        if parts and self._member(parts).kind != "dir":
            raise NotInOutputs(path)
        out = []
        for name in self.index.children.get(path, []):
            rel = f"{path}/{name}" if path else name
            m = self.index.members[rel]
            out.append(OutputFile(path=rel, size=m.size, modified=m.mtime, is_dir=m.kind == "dir"))
        return out

    def every_file(self, limit: int = MAX_LISTED) -> tuple[list[OutputFile], bool]:
        """Every plain file (tfkube's own folder left out), depth first in name order."""
        out: list[OutputFile] = []
        seen = 0

        def walk(path: str) -> bool:
            nonlocal seen
            for name in self.index.children.get(path, []):
                rel = f"{path}/{name}" if path else name
                if rel == contract.OWN_SUBDIR:
                    continue
                seen += 1
                if seen > limit:
                    return False
                m = self.index.members[rel]
                if m.kind == "file":
                    out.append(OutputFile(path=rel, size=m.size, modified=m.mtime))
                elif not walk(rel):
                    return False
            return True

        return out, not walk("")

    def file_chunks(
        self, parts: Sequence[str], offset: int = 0, limit: int | None = None
    ) -> tuple[int, Iterator[bytes]]:
        """(size, the file's bytes from `offset`, at most `limit` of them, in chunks)."""
        m = self._member(parts)
        if m.kind != "file":
            raise NotInOutputs("/".join(parts))
        offset = min(max(offset, 0), m.size)
        length = m.size - offset if limit is None else min(limit, m.size - offset)
        chunks: Iterator[bytes] = self.ranged(m.offset + offset, length) if length else iter(())
        return m.size, chunks

    def read(self, parts: Sequence[str], offset: int, limit: int | None = None) -> bytes:
        _, chunks = self.file_chunks(parts, offset, limit)
        return b"".join(chunks)

    def tar_folder(self, parts: Sequence[str]) -> Iterator[bytes]:
        """A folder of the archived outputs as .tar.gz, streamed member by member."""
        from tfkube.server.outputs.files import _Pipe

        if self.kind_of(parts) != "dir":
            raise NotInOutputs("/".join(parts))
        top = "/".join(parts)
        pipe = _Pipe()
        with tarfile.open(fileobj=pipe, mode="w|gz") as tar:
            for rel in self._below(top):
                m = self.index.members[rel]
                info = tarfile.TarInfo(rel[len(top) + 1 :] if top else rel)
                info.mtime = int(m.mtime)
                if m.kind == "dir":
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
                else:
                    info.size, info.mode = m.size, 0o644
                    data = self.ranged(m.offset, m.size) if m.size else iter(())
                    tar.addfile(info, BoundedReader(data, m.size))
                if len(pipe.buffer) > 1 << 20:
                    yield pipe.take()
        yield pipe.take()

    def _below(self, path: str) -> Iterator[str]:
        for name in self.index.children.get(path, []):
            rel = f"{path}/{name}" if path else name
            yield rel
            if self.index.members[rel].kind == "dir":
                yield from self._below(rel)

    # -- as a folder (`folder.OutputsFolder`: what scalars, usage, checkpoints read) --

    def walk(
        self,
        parts: Sequence[str] = (),
        skip: Callable[[tuple[str, ...]], bool] = lambda _rel: False,
    ) -> Iterator[tuple[tuple[str, ...], Entry]]:
        top = "/".join(parts)
        if parts and self.index.members.get(top, Member("", 0, 0, 0)).kind != "dir":
            raise FileNotFoundError(top)
        yield from self._walk(top, (), skip)

    def _walk(
        self, path: str, rel: tuple[str, ...], skip: Callable[[tuple[str, ...]], bool]
    ) -> Iterator[tuple[tuple[str, ...], Entry]]:
        for name in self.index.children.get(path, []):
            full = f"{path}/{name}" if path else name
            m = self.index.members[full]
            here = (*rel, name)
            if m.kind == "dir" and skip(here):
                continue
            yield here, Entry(name, m.kind, m.size, m.mtime)
            if m.kind == "dir":
                yield from self._walk(full, here, skip)

    def entries(self, parts: Sequence[str]) -> list[Entry]:
        try:
            return [
                Entry(e.path.rsplit("/", 1)[-1], "dir" if e.is_dir else "file", e.size, e.modified)
                for e in self.list_folder(parts)
            ]
        except NotInOutputs:
            raise FileNotFoundError("/".join(parts)) from None

    @contextmanager
    def open(self, parts: Sequence[str]) -> Iterator[OpenFile]:
        m = self.index.members.get("/".join(parts))
        if m is None or m.kind != "file":
            raise FileNotFoundError("/".join(parts))
        yield OpenFile(
            (m.offset, m.size), m.size, Windowed(lambda at, n: self.read(parts, at, n), m.size)
        )

    def read_bytes(self, parts: Sequence[str], limit: int) -> bytes:
        try:
            return self.read(parts, 0, limit)
        except NotInOutputs:
            raise FileNotFoundError("/".join(parts)) from None

    def tar_files(
        self, files: Sequence[tuple[Sequence[str], str]], extra: dict[str, bytes]
    ) -> Iterator[bytes]:
        """`files.tar_files` from the archive: each file's bytes in ranged reads."""
        from tfkube.server.outputs.files import _Pipe

        pipe = _Pipe()
        with tarfile.open(fileobj=pipe, mode="w|gz") as tar:
            for name, data in extra.items():
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
                tar.addfile(info, io.BytesIO(data))
            for parts, arcname in files:
                m = self.index.members.get("/".join(parts))
                if m is None or m.kind != "file":
                    continue  # as a file gone from the local folder: left out
                info = tarfile.TarInfo(arcname)
                info.size, info.mode, info.mtime = m.size, 0o644, int(m.mtime)
                chunks = self.ranged(m.offset, m.size) if m.size else iter(())
                tar.addfile(info, BoundedReader(chunks, m.size))
                if len(pipe.buffer) > 1 << 20:
                    yield pipe.take()
        yield pipe.take()

    # -- logs --

    def log_files(self) -> list[LogFile]:
        out = []
        logs = "/".join(contract.KEPT_LOGS_SUBDIR)
        for replica in self.index.children.get(logs, []):
            folder = f"{logs}/{replica}"
            if not REPLICA.fullmatch(replica) or self.index.members[folder].kind != "dir":
                continue
            for name in self.index.children.get(folder, []):
                m = self.index.members[f"{folder}/{name}"]
                if m.kind == "file" and name.endswith(".log") and name[:-4].isdigit():
                    out.append(
                        LogFile(
                            replica=replica, attempt=int(name[:-4]), size=m.size, modified=m.mtime
                        )
                    )
        return sorted(out, key=lambda f: (*replica_order(*parse_replica_key(f.replica)), f.attempt))

    def log_parts(self, replica: str, attempt: int | None) -> tuple[str, ...]:
        """The parts of one attempt's log (None: the latest); NoSuchLog as `logs.log_path`."""
        if not REPLICA.fullmatch(replica):
            raise NoSuchLog(f"{replica!r} is not a replica name (e.g. worker-0)")
        return log_parts(
            replica, attempt, (f.attempt for f in self.log_files() if f.replica == replica)
        )

    def search(self, query: str, cursor: SearchCursor | None, max_hits: int) -> LogSearchOut:
        """`logs.search_in` over the archived logs: each read a ranged read, in order."""
        return search_in(self.log_files(), self._opener(), query, cursor, max_hits=max_hits)

    def _opener(self) -> LogOpener:
        from contextlib import contextmanager

        @contextmanager
        def opener(f: LogFile) -> Iterator[Pread]:
            parts = (*contract.KEPT_LOGS_SUBDIR, f.replica, f"{f.attempt}.log")
            yield lambda size, offset: self.read(parts, offset, size)

        return opener
