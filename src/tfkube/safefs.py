"""Reading what a workload wrote without following anything it made.

A job (a replica, a pod with the outputs claim) writes its output folder; the server and
the local supervisor read it back (logs, listings, downloads, checkpoints, event files,
exports, a launcher's termination message). Whatever a workload can write it can make a
symbolic link, a FIFO, a device or a hard link, so every read here:

    open_root(folder)         the folder itself, O_DIRECTORY | O_NOFOLLOW
      -> open_dir(fd, parts)  one component at a time from the parent's descriptor
                              (openat), each O_DIRECTORY | O_NOFOLLOW: a link anywhere on
                              the way fails (ELOOP/ENOTDIR), and a swap between our look
                              and our open cannot lead out (no path is resolved twice)
      -> open_file(fd, parts) the same, last component O_NOFOLLOW | O_NONBLOCK (a FIFO
                              never blocks the reader); then fstat of what was opened:
                              a regular file with one name only (a hard link could be a
                              file of the server's), else `Refused`
    entries(fd) / walk(fd)    listings from a descriptor with lstat: links and special
                              files are reported as such (never their targets) and never
                              descended into

Standard library only and importing nothing of tfkube: the server and the engines both
stand on it. Descriptors are the caller's to close (`closing`).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
MAX_DEPTH = 64
"""`walk` goes no deeper than this (each level holds a descriptor while it is walked)."""


class Refused(OSError):
    """Something a workload made that is not read: a link, a special file, a file with
    more than one name, a name that is not one plain component."""


@dataclass(frozen=True)
class Entry:
    name: str
    kind: str
    """file (regular, one name), dir, link, or other (FIFO, socket, device, hard-linked)."""
    size: int
    mtime: float


def check_part(part: str) -> str:
    """One path component as given (pure); Refused for '', '.', '..', '/' or NUL."""
    if part in {"", ".", ".."} or "/" in part or "\0" in part:
        raise Refused(f"{part!r} is not a plain name")
    return part


def open_root(folder: str | os.PathLike[str]) -> int:
    """A descriptor of `folder` (its last component must not be a link)."""
    return os.open(folder, _DIR_FLAGS)


def open_dir(root: int, parts: Sequence[str], make: int | None = None) -> int:
    """A new descriptor of the folder `parts` below `root`, no link followed; `make`: the
    mode to make missing folders with (None: a missing one is an error)."""
    fd = os.dup(root)
    try:
        for part in parts:
            if make is not None:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(check_part(part), make, dir_fd=fd)
            inner = os.open(check_part(part), _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _kind(st: os.stat_result) -> str:
    if stat.S_ISREG(st.st_mode):
        return "file" if st.st_nlink == 1 else "other"
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    if stat.S_ISLNK(st.st_mode):
        return "link"
    return "other"


def open_file(root: int, parts: Sequence[str]) -> int:
    """A descriptor of the regular file `parts` below `root`: no link followed on the
    way or at the end, nothing but a regular file with a single name (else Refused)."""
    if not parts:
        raise Refused("no file named")
    folder = open_dir(root, parts[:-1])
    try:
        name = check_part(parts[-1])
        # Look first, so a FIFO or a device is never opened at all; then check that what
        # was opened is what we looked at.
        seen = os.stat(name, dir_fd=folder, follow_symlinks=False)
        if _kind(seen) != "file":
            raise Refused(f"{name!r} is not a plain file")
        fd = os.open(name, _FILE_FLAGS, dir_fd=folder)
    finally:
        os.close(folder)
    st = os.fstat(fd)
    if _kind(st) != "file" or (st.st_dev, st.st_ino) != (seen.st_dev, seen.st_ino):
        os.close(fd)
        raise Refused(f"{parts[-1]!r} changed while it was opened")
    return fd


@contextmanager
def closing(fd: int) -> Iterator[int]:
    try:
        yield fd
    finally:
        os.close(fd)


def read_bytes(root: int, parts: Sequence[str], limit: int) -> bytes:
    """At most `limit` bytes from the start of a file below `root` (see `open_file`)."""
    with closing(open_file(root, parts)) as fd:
        return pread_all(fd, 0, limit)


def pread_all(fd: int, offset: int, limit: int) -> bytes:
    """Up to `limit` bytes at `offset` (fewer only at the end of the file)."""
    out = bytearray()
    while len(out) < limit:
        chunk = os.pread(fd, min(limit - len(out), 1 << 20), offset + len(out))
        if not chunk:
            break
        out += chunk
    return bytes(out)


def open_last(path: str | os.PathLike[str]) -> int:
    """A descriptor of one plain file whose folder is ours but whose name a workload may
    have replaced (a replica's log, a launcher's termination message): the last
    component is not followed and must be a regular file with a single name."""
    head, name = os.path.split(os.fspath(path))
    with closing(os.open(head or ".", _DIR_FLAGS & ~os.O_NOFOLLOW)) as folder:
        return open_file(folder, [name])


def read_file(path: str | os.PathLike[str], limit: int) -> bytes:
    """At most `limit` bytes of such a file (see `open_last`)."""
    with closing(open_last(path)) as fd:
        return pread_all(fd, 0, limit)


def entries(folder: int) -> list[Entry]:
    """The folder's entries, sorted by name, each as it is itself (lstat)."""
    out = []
    with os.scandir(folder) as it:
        for item in it:
            try:
                st = item.stat(follow_symlinks=False)
            except OSError:
                continue  # removed while we looked
            out.append(Entry(item.name, _kind(st), st.st_size, st.st_mtime))
    return sorted(out, key=lambda e: e.name)


def walk(
    root: int,
    parts: Sequence[str] = (),
    skip: Callable[[tuple[str, ...]], bool] = lambda _rel: False,
    depth: int = MAX_DEPTH,
) -> Iterator[tuple[tuple[str, ...], Entry]]:
    """Every entry below the folder `parts` of `root`, depth first in name order, with
    its path relative to that folder. Folders are entered through `open_dir` (never a
    link); `skip(rel)` leaves a folder out with everything in it."""
    with closing(open_dir(root, parts)) as folder:
        yield from _walk(folder, (), skip, depth)


def _walk(
    folder: int,
    rel: tuple[str, ...],
    skip: Callable[[tuple[str, ...]], bool],
    depth: int,
) -> Iterator[tuple[tuple[str, ...], Entry]]:
    for entry in entries(folder):
        path = (*rel, entry.name)
        if entry.kind == "dir" and skip(path):
            continue
        yield path, entry
        if entry.kind != "dir" or depth <= 1:
            continue
        try:
            inner = open_dir(folder, (entry.name,))
        except OSError:
            continue  # replaced by something else, or removed, since we listed it
        with closing(inner):
            yield from _walk(inner, path, skip, depth - 1)
