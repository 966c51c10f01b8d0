"""The node cache's disk: tars kept under the key the server named for them, bounded, the
least recently used evicted first. `plan_eviction`, `parse_key_answer` and `parse_size`
are pure; `DiskCache` is the shell over one folder.

    <root>/objects/<key>        complete, checked copies (mode 0444); their mtime is the
                                last time one was served (the LRU clock)
    <root>/incoming/<key>.<n>   a copy being written: renamed into objects/ only when its
                                length and sha256 are the server's; removed otherwise, and
                                all of incoming/ at start
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import re
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tfkube.contract import DATA_KEY_PATTERN

_UNITS = {"": 1, "b": 1, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}


def parse_size(text: str) -> int:
    """Bytes from "50GiB", "500MiB", "1048576" (pure). ValueError otherwise."""
    found = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", text)
    if not found or found.group(2).lower() not in _UNITS:
        raise ValueError(f"{text!r}: expected bytes with a unit (50GiB, 500MiB)")
    return int(found.group(1)) * _UNITS[found.group(2).lower()]


@dataclass(frozen=True)
class KeyAnswer:
    """What the server said the replica's tar is: its key, length and sha256."""

    key: str
    size: int
    sha256: str


def parse_key_answer(body: Any) -> KeyAnswer | None:
    """The server's answer to the key request, checked (pure); None when malformed: a key
    that could name a path, a negative size, a digest that is not one."""
    if not isinstance(body, dict):
        return None
    key, size, sha256 = body.get("key"), body.get("size"), body.get("sha256")
    if not isinstance(key, str) or not DATA_KEY_PATTERN.fullmatch(key):
        return None
    if not isinstance(sha256, str) or not DATA_KEY_PATTERN.fullmatch(sha256):
        return None
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        return None
    return KeyAnswer(key, size, sha256)


@dataclass(frozen=True)
class Entry:
    key: str
    size: int
    used: float


def plan_eviction(entries: Sequence[Entry], limit: int, keep: Iterable[str] = ()) -> list[str]:
    """The keys to remove so that the entries hold at most `limit` bytes, least recently
    used first, never one of `keep` (pure)."""
    kept = set(keep)
    total = sum(e.size for e in entries)
    out: list[str] = []
    for entry in sorted(entries, key=lambda e: (e.used, e.key)):
        if total <= limit:
            break
        if entry.key in kept:
            continue
        out.append(entry.key)
        total -= entry.size
    return out


class Incomplete(Exception):
    """A copy that is not the server's tar (cut short, too long, another digest)."""


class Writer:
    """One copy being written to incoming/; `commit` checks and renames it into place."""

    def __init__(self, cache: DiskCache, answer: KeyAnswer, path: Path) -> None:
        self.cache, self.answer, self.path = cache, answer, path
        self._file: IO[bytes] = path.open("xb")
        self._digest = hashlib.sha256()
        self.written = 0

    def write(self, chunk: bytes) -> None:
        self.written += len(chunk)
        if self.written > self.answer.size:
            raise Incomplete(f"longer than the {self.answer.size} bytes the server named")
        self._digest.update(chunk)
        self._file.write(chunk)

    def commit(self) -> Path:
        self._file.close()
        if self.written != self.answer.size:
            raise Incomplete(f"{self.written} of {self.answer.size} bytes")
        if self._digest.hexdigest() != self.answer.sha256:
            raise Incomplete("its sha256 is not the one the server named")
        self.path.chmod(0o444)
        final = self.cache.object_path(self.answer.key)
        os.replace(self.path, final)
        return final

    def abort(self) -> None:
        with contextlib.suppress(OSError):
            self._file.close()
        self.path.unlink(missing_ok=True)


class DiskCache:
    """The folder of checked copies, bounded by `limit` bytes (LRU)."""

    def __init__(self, root: Path, limit: int) -> None:
        self.root, self.limit = root, limit
        self.objects = root / "objects"
        self.incoming = root / "incoming"
        self.objects.mkdir(parents=True, exist_ok=True)
        self.incoming.mkdir(parents=True, exist_ok=True)
        for stale in self.incoming.iterdir():  # a copy a stopped cache left half-written
            stale.unlink(missing_ok=True)
        self._counter = itertools.count()
        self._evicting = threading.Lock()

    def object_path(self, key: str) -> Path:
        if not DATA_KEY_PATTERN.fullmatch(key):
            raise ValueError("not a key")
        return self.objects / key

    def open(self, key: str) -> tuple[IO[bytes], int] | None:
        """A complete copy, opened (its LRU time now), with its length; None if absent."""
        path = self.object_path(key)
        try:
            f = path.open("rb")
        except FileNotFoundError:
            return None
        with contextlib.suppress(OSError):
            now = time.time()
            os.utime(path, (now, now))
        return f, os.fstat(f.fileno()).st_size

    def writer(self, answer: KeyAnswer) -> Writer:
        name = f"{answer.key}.{os.getpid()}.{next(self._counter)}"
        return Writer(self, answer, self.incoming / name)

    def entries(self) -> list[Entry]:
        out = []
        for path in self.objects.iterdir():
            with contextlib.suppress(FileNotFoundError):
                st = path.stat()
                out.append(Entry(path.name, st.st_size, st.st_mtime))
        return out

    def evict(self, keep: Iterable[str] = ()) -> list[str]:
        """Bring the copies under the limit; the keys removed. A copy being read stays
        readable to its reader (unlinked, not truncated)."""
        with self._evicting:
            gone = plan_eviction(self.entries(), self.limit, keep)
            for key in gone:
                self.object_path(key).unlink(missing_ok=True)
            return gone
