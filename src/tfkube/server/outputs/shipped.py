"""What replicas ship to the server (`tfkube.launcher._ship`), written into the job's
output folder in the layout every reader here already knows: a start's output as
`.tfkube/logs/<replica>/<attempt>.log`, event files and `result.json` where the job
wrote them. Logs, search, following, charts and the result then work as they do for a
folder the replicas wrote themselves, and outlive the pods.

Only the server writes this folder (it is on the server's own disk, never a workload's),
and nothing that arrives is trusted: names are checked by `contract.shipped_file` and the
replica/start patterns before any path is made; each step opens the next folder from its
parent's descriptor without following a link; a file is appended only at its end (an
offset past it is answered with the length, 409, so a retried chunk is never written
twice); each file is bounded (a start's log at `contract.LOG_MAX_BYTES`' default, an event
file at SHIP_EVENTS_MAX_BYTES, the result at RESULT_MAX_BYTES), and so is the number of
starts per replica and of event files per job.

A start's attempt number is given when its first chunk arrives: the first free
`<attempt>.log`, remembered in `.tfkube/ship/<replica>/<start>` (the number, as text).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from tfkube import contract
from tfkube.safefs import Refused, closing, open_dir, open_root

LOG_MAX_BYTES = 64 * 1024 * 1024
"""A start's shipped log stops here (the launcher's own default bound for its copy)."""
MAX_STARTS = 10_000
"""Starts of one replica."""
MAX_EVENT_FILES = 2_000
"""Event files of one job."""
SHIP_SUBDIR = (contract.OWN_SUBDIR, "ship")

_APPEND = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class ShipRefused(ValueError):
    """Not taken (a bad name, too large, too many): the message says which, 4xx."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Behind:
    """The chunk starts past the server's end of the file: send from `size` (409)."""

    size: int


def _open_dirs(root: int, parts: Sequence[str]) -> int:
    """The folder `parts` below `root`, made where missing (0750), no link followed."""
    return open_dir(root, parts, make=0o750)


def _append(folder: int, name: str, offset: int, data: bytes, limit: int, create: bool) -> int:
    """Append the part of `data` (which starts at `offset` of the file) that the file
    lacks; returns the file's new length. `Behind` when `offset` is past its end."""
    flags = _APPEND | (os.O_CREAT if create else 0)
    try:
        fd = os.open(name, flags, 0o640, dir_fd=folder)
    except FileNotFoundError:
        if offset:
            raise BehindError(0) from None
        raise
    with closing(fd):
        st = os.fstat(fd)
        if not _plain(st):
            raise Refused(f"{name!r} is not a plain file")
        size = st.st_size
        if offset > size:
            raise BehindError(size)
        new = data[size - offset :]
        if not new:
            return size
        if size + len(new) > limit:
            raise ShipRefused(f"it would pass the {limit:,}-byte bound", 413)
        view = memoryview(new)
        while view:
            view = view[os.write(fd, view) :]
        return size + len(new)


def _plain(st: os.stat_result) -> bool:
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 1


class BehindError(Exception):
    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


class ShippedStore:
    """Writes shipped chunks into jobs' output folders (one lock per job)."""

    def __init__(self) -> None:
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _lock(self, job_id: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(job_id, threading.Lock())

    def forget(self, job_id: str) -> None:
        with self._guard:
            self._locks.pop(job_id, None)

    def log(
        self, job_id: str, output_dir: str, replica: str, start: str, offset: int, data: bytes
    ) -> int | Behind:
        """Append to one start's log; its attempt number is given on its first chunk."""
        if not contract.SHIP_REPLICA.fullmatch(replica):
            raise ShipRefused(f"{replica[:40]!r} is not a replica (e.g. worker-0)")
        if not contract.SHIP_START.fullmatch(start):
            raise ShipRefused("a start id is 16 to 64 lower-case hex digits")
        with (
            self._lock(job_id),
            closing(_open_dirs_root(output_dir)) as root,
            closing(_open_dirs(root, (*SHIP_SUBDIR, replica))) as starts,
            closing(_open_dirs(root, (*contract.KEPT_LOGS_SUBDIR, replica))) as logs,
        ):
            attempt = _read_attempt(starts, start)
            if attempt is None:
                if offset:
                    return Behind(0)
                attempt = _new_attempt(logs)
                _write_small(starts, start, str(attempt).encode())
            try:
                return _append(logs, f"{attempt}.log", offset, data, LOG_MAX_BYTES, True)
            except BehindError as behind:
                return Behind(behind.size)

    def file(
        self, job_id: str, output_dir: str, path: str, offset: int, data: bytes, whole: bool
    ) -> int | Behind:
        """Append to an event file, or replace the result file (`whole`)."""
        parts = contract.shipped_file(path)
        if parts is None:
            raise ShipRefused(
                "only TensorBoard event files (events.out.tfevents.*) and result.json are "
                f"shipped, not {path[:80]!r}"
            )
        is_result = parts == (contract.RESULT_FILE,)
        if whole != is_result:
            raise ShipRefused("result.json is sent whole (whole=1); event files by offset")
        with self._lock(job_id), closing(_open_dirs_root(output_dir)) as root:
            if is_result:
                if len(data) > contract.RESULT_MAX_BYTES:
                    raise ShipRefused(
                        f"result.json is larger than {contract.RESULT_MAX_BYTES:,} bytes", 413
                    )
                _write_small(root, contract.RESULT_FILE, data)
                return len(data)
            with closing(_open_dirs(root, parts[:-1])) as folder:
                name = parts[-1]
                exists = _exists(folder, name)
                if not exists:
                    _count_event_file(root, path)
                try:
                    return _append(
                        folder, name, offset, data, contract.SHIP_EVENTS_MAX_BYTES, not exists
                    )
                except BehindError as behind:
                    return Behind(behind.size)


def _open_dirs_root(output_dir: str) -> int:
    """The job's output folder (made if missing; its last component no link)."""
    os.makedirs(output_dir, mode=0o750, exist_ok=True)
    return open_root(output_dir)


def _exists(folder: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _count_event_file(root: int, path: str) -> None:
    """Count a new event file of the job (a mark in `.tfkube/ship/events`); ShipRefused
    past MAX_EVENT_FILES."""
    with closing(_open_dirs(root, (*SHIP_SUBDIR, "events"))) as marks:
        if len(os.listdir(marks)) >= MAX_EVENT_FILES:
            raise ShipRefused(f"the job has {MAX_EVENT_FILES:,} event files already", 413)
        mark = hashlib.sha256(path.encode()).hexdigest()[:32]
        os.close(os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640,
                         dir_fd=marks))  # fmt: skip


def _read_attempt(starts: int, start: str) -> int | None:
    try:
        fd = os.open(start, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=starts)
    except FileNotFoundError:
        return None
    with closing(fd):
        text = os.read(fd, 32).decode(errors="replace").strip()
    if not text.isdigit():
        raise Refused(f"the record of start {start} is damaged")
    return int(text)


def _new_attempt(logs: int) -> int:
    """The first free `<attempt>.log` of a replica, taken (created empty) now."""
    for attempt in range(MAX_STARTS):
        try:
            fd = os.open(
                f"{attempt}.log",
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o640,
                dir_fd=logs,
            )
        except FileExistsError:
            continue
        os.close(fd)
        return attempt
    raise ShipRefused(f"the replica has started {MAX_STARTS:,} times already", 413)


def _write_small(folder: int, name: str, data: bytes) -> None:
    """Replace `name` in `folder` whole (a temporary file renamed over it)."""
    temp = f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
    fd = os.open(
        temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640,
        dir_fd=folder,
    )  # fmt: skip
    try:
        with closing(fd):
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        os.rename(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=folder)
        raise
