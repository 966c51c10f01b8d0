"""Replica logs as the launcher keeps them in the job's output folder
(`.tfkube/logs/<role>-<index>/<attempt>.log`, see `tfkube.launcher._tee`): listed, read
from an offset, followed while the job runs. The server never asks a live process: the
files are there during the job, after it ended, and after the engine forgot it (TTL).
Shown to people, a log names the server's folders as the job knows them
(`$TFKUBE_LOG_DIR`, ...: `job_paths`)."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from tfkube import contract
from tfkube.engines import JobStorage
from tfkube.safefs import Entry, closing, entries, open_dir, open_file, open_root
from tfkube.tfcluster import REPLICA_KEY, parse_replica_key, replica_order
from tfkube.wire import LogFile, LogHit, LogSearchOut

REPLICA = REPLICA_KEY
CHUNK = 256 * 1024


class NoSuchLog(LookupError):
    pass


LogRef = tuple[str, tuple[str, ...]]
"""One attempt's log: the job's output folder and the file's parts below it."""


def _attempts(logs: int, replica: str) -> dict[int, Entry]:
    """A replica's attempts -> their files (plain files only; links are not logs)."""
    with closing(open_dir(logs, (replica,))) as folder:
        return {
            int(e.name[:-4]): e
            for e in entries(folder)
            if e.kind == "file" and e.name.endswith(".log") and e.name[:-4].isdigit()
        }


def log_files(output_dir: str | None) -> list[LogFile]:
    """Every replica's attempts, ordered by replica then attempt. Read from the output
    folder's descriptor down (`tfkube.safefs`): nothing the job linked is listed."""
    if not output_dir:
        return []
    out: list[LogFile] = []
    try:
        with (
            closing(open_root(output_dir)) as root,
            closing(open_dir(root, contract.KEPT_LOGS_SUBDIR)) as logs,
        ):
            for folder in entries(logs):
                if folder.kind != "dir" or not REPLICA.fullmatch(folder.name):
                    continue
                try:
                    attempts = _attempts(logs, folder.name)
                except OSError:
                    continue
                for attempt, e in attempts.items():
                    out.append(
                        LogFile(replica=folder.name, attempt=attempt, size=e.size, modified=e.mtime)
                    )
    except OSError:
        return []
    return sorted(out, key=lambda f: (*replica_order(*parse_replica_key(f.replica)), f.attempt))


def log_path(output_dir: str | None, replica: str, attempt: int | None) -> LogRef:
    """The file of one attempt (None: the latest). Raises NoSuchLog; the replica name and
    the attempt are checked against fixed patterns, so no user text reaches a path, and
    the file is found without following links."""
    if not REPLICA.fullmatch(replica):
        raise NoSuchLog(f"{replica!r} is not a replica name (e.g. worker-0)")
    if not output_dir:
        raise NoSuchLog("this job keeps no logs on the server")
    try:
        with (
            closing(open_root(output_dir)) as root,
            closing(open_dir(root, contract.KEPT_LOGS_SUBDIR)) as logs,
        ):
            attempts = _attempts(logs, replica)
    except OSError:
        attempts = {}
    return output_dir, log_parts(replica, attempt, attempts)


def log_parts(replica: str, attempt: int | None, attempts: Iterable[int]) -> tuple[str, ...]:
    """The parts of `replica`'s log `attempt` (None: the latest) among `attempts` (pure);
    NoSuchLog when there is none."""
    have = set(attempts)
    if attempt is None:
        if not have:
            raise NoSuchLog(f"{replica} has no log yet")
        attempt = max(have)
    if attempt not in have:
        raise NoSuchLog(f"{replica} has no attempt {attempt}")
    return (*contract.KEPT_LOGS_SUBDIR, replica, f"{attempt}.log")


def open_log(ref: LogRef) -> int:
    """A descriptor of the log (see `tfkube.safefs.open_file`); the caller closes it."""
    output_dir, parts = ref
    with closing(open_root(output_dir)) as root:
        return open_file(root, parts)


def read_chunk(fd: int, offset: int, limit: int = CHUNK) -> bytes:
    return os.pread(fd, limit, offset)


def read_all(ref: LogRef, offset: int, limit: int | None = None) -> bytes:
    """The log from `offset` to its end, or at most `limit` bytes of it (a window around
    a search hit)."""
    with closing(open_log(ref)) as fd:
        out = bytearray()
        while limit is None or len(out) < limit:
            want = CHUNK if limit is None else min(CHUNK, limit - len(out))
            chunk = read_chunk(fd, offset + len(out), want)
            if not chunk:
                break
            out += chunk
        return bytes(out)


async def follow(
    ref: LogRef,
    offset: int,
    running: Callable[[], Awaitable[bool]],
    interval: float = 0.5,
) -> AsyncIterator[bytes]:
    """The file from `offset` on, then whatever is appended while `running()` says the job
    is not finished; ends once it finished and everything was read. The file is opened
    once (safely) when the first chunk is wanted and read through that descriptor only."""
    try:
        fd = await asyncio.to_thread(open_log, ref)
    except OSError:  # replaced by a link (or removed) since it was found: nothing to read
        return
    try:
        while True:
            chunk = await asyncio.to_thread(read_chunk, fd, offset)
            if chunk:
                offset += len(chunk)
                yield chunk
                continue
            if not await running():
                chunk = await asyncio.to_thread(read_chunk, fd, offset)
                if chunk:
                    offset += len(chunk)
                    yield chunk
                    continue
                return
            await asyncio.sleep(interval)
    finally:
        os.close(fd)


# -- searching every replica's every start ---------------------------------------------------

SEARCH_BUDGET = 16 * 2**20
"""Bytes one search request reads, about (then its answer says where to go on)."""
SEARCH_MAX_FILES = 2000
"""Logs one search request opens at most."""
SEARCH_READ = 2**20
"""Bytes read at a time: whole lines of it are searched (a longer line, in pieces)."""
MAX_HIT_CHARS = 500
"""Of a long line, a hit shows this much around the match."""
MAX_QUERY = 200


class BadCursor(ValueError):
    pass


@dataclass(frozen=True)
class SearchCursor:
    """Where a search goes on: `replica`'s start `attempt`, from byte `offset` (the start
    of its line number `line`), with `done` logs searched to their end before it. Logs
    are searched in replica order, so one added meanwhile (a restart) is found in its
    place if it comes after the cursor."""

    replica: str
    attempt: int
    offset: int
    line: int
    done: int

    def text(self) -> str:
        return f"{self.replica}:{self.attempt}:{self.offset}:{self.line}:{self.done}"

    @classmethod
    def parse(cls, text: str) -> SearchCursor:
        parts = text.split(":")
        bad = BadCursor("not a cursor a search answered: pass its `next` as it is")
        if len(parts) != 5 or not REPLICA.fullmatch(parts[0]):
            raise bad
        if not all(p.isdigit() and len(p) <= 18 for p in parts[1:]):
            raise bad
        attempt, offset, line, done = (int(p) for p in parts[1:])
        if line < 1:
            raise bad
        return cls(parts[0], attempt, offset, line, done)


def _order(replica: str, attempt: int) -> tuple[int, int, int]:
    return (*replica_order(*parse_replica_key(replica)), attempt)


class _Needle:
    """Finds the lines holding a text, ignoring case: an ASCII text in the bytes as
    they are (lowered: same length, so offsets hold), another line by line, casefolded."""

    def __init__(self, query: str) -> None:
        self.ascii = query.isascii()
        self.raw = query.encode().lower()
        self.folded = query.casefold()

    def lines(self, block: bytes, most: int) -> Iterator[tuple[int, int, int]]:
        """(where each matching line starts in `block`, its number in the block from 0,
        where the match is in the line) for at most `most` lines."""
        found = 0
        if self.ascii:
            low = block.lower()
            at = low.find(self.raw)
            number, counted = 0, 0
            while at >= 0 and found < most:
                start = block.rfind(b"\n", 0, at) + 1
                number += block.count(b"\n", counted, start)
                counted = start
                yield start, number, at - start
                found += 1
                end = block.find(b"\n", at)
                at = -1 if end < 0 else low.find(self.raw, end + 1)
            return
        start = 0
        for number, raw in enumerate(block.split(b"\n")):
            if found >= most:
                return
            text = raw.decode("utf-8", errors="replace").casefold()
            if (where := text.find(self.folded)) >= 0:
                yield start, number, len(text[:where].encode("utf-8", errors="replace"))
                found += 1
            start += len(raw) + 1


def _excerpt(line: bytes, at: int) -> str:
    """The line as text, or MAX_HIT_CHARS of it around byte `at` (with … where cut)."""
    if len(line) <= MAX_HIT_CHARS:
        return line.decode("utf-8", errors="replace").rstrip("\r")
    begin = max(0, at - MAX_HIT_CHARS // 3)
    piece = line[begin : begin + MAX_HIT_CHARS].decode("utf-8", errors="replace")
    end = begin + MAX_HIT_CHARS < len(line)
    return (
        ("\N{HORIZONTAL ELLIPSIS}" if begin else "")
        + piece
        + ("\N{HORIZONTAL ELLIPSIS}" if end else "")
    )


Pread = Callable[[int, int], bytes]
"""Reads a log: (at most this many bytes, from this offset) -> bytes (b"" at its end)."""
LogOpener = Callable[[LogFile], AbstractContextManager[Pread]]
"""Opens one listed log for reading (OSError: it is gone, or was replaced by a link)."""


def search_logs(
    output_dir: str | None,
    query: str,
    cursor: SearchCursor | None = None,
    *,
    max_hits: int = 100,
    budget: int = SEARCH_BUDGET,
    max_files: int = SEARCH_MAX_FILES,
    read: int = SEARCH_READ,
) -> LogSearchOut:
    """The lines of a job's kept logs that hold `query` (ignoring case): every replica's
    every start, in replica order, from `cursor` on (`search_in`). Each log is opened
    through `tfkube.safefs` from the output folder's descriptor down (a log the job
    replaced by a link is skipped)."""
    files = log_files(output_dir)
    empty = LogSearchOut(
        hits=[],
        next=None,
        searched_files=cursor.done if cursor else 0,
        total_files=len(files),
        searched_bytes=0,
    )
    if not files or output_dir is None:
        return empty
    try:
        root = open_root(output_dir)
    except OSError:
        return empty
    with closing(root):
        try:
            logs = open_dir(root, contract.KEPT_LOGS_SUBDIR)
        except OSError:
            return empty
        with closing(logs):

            @contextmanager
            def opener(f: LogFile) -> Iterator[Pread]:
                with closing(open_file(logs, (f.replica, f"{f.attempt}.log"))) as fd:
                    yield lambda size, offset: os.pread(fd, size, offset)

            return search_in(
                files,
                opener,
                query,
                cursor,
                max_hits=max_hits,
                budget=budget,
                max_files=max_files,
                read=read,
            )


def search_in(
    files: list[LogFile],
    opener: LogOpener,
    query: str,
    cursor: SearchCursor | None = None,
    *,
    max_hits: int = 100,
    budget: int = SEARCH_BUDGET,
    max_files: int = SEARCH_MAX_FILES,
    read: int = SEARCH_READ,
) -> LogSearchOut:
    """The search over `files` (listed in replica order), each read through `opener`: the
    job's output folder, or its archive in the store (`archived.py`). Bounded per call:
    at most `max_hits` hits, about `budget` bytes read (whole reads of `read` bytes) and
    `max_files` logs opened; then `next` says where to go on. A log is streamed, `read`
    bytes at a time, never held whole."""
    total = len(files)
    start = _order(cursor.replica, cursor.attempt) if cursor else None
    todo = [f for f in files if start is None or _order(f.replica, f.attempt) >= start]
    done = cursor.done if cursor else 0
    hits: list[LogHit] = []
    spent = 0
    needle = _Needle(query)

    def answer(nxt: SearchCursor | None) -> LogSearchOut:
        return LogSearchOut(
            hits=hits,
            next=nxt.text() if nxt else None,
            searched_files=done,
            total_files=total,
            searched_bytes=spent,
        )

    for opened, f in enumerate(todo):
        here = cursor is not None and (f.replica, f.attempt) == (cursor.replica, cursor.attempt)
        offset, line = (cursor.offset, cursor.line) if cursor and here else (0, 1)
        if opened >= max_files or spent >= budget or len(hits) >= max_hits:
            return answer(SearchCursor(f.replica, f.attempt, offset, line, done))
        with ExitStack() as reading:
            try:
                pread = reading.enter_context(opener(f))
            except OSError:  # replaced by a link, or removed, since it was listed
                done += 1
                continue
            while True:
                if spent >= budget or len(hits) >= max_hits:
                    return answer(SearchCursor(f.replica, f.attempt, offset, line, done))
                chunk = pread(read, offset)
                if not chunk:
                    break
                # Whole lines; or the file's last line without its newline; or a piece of
                # a line longer than one read (it keeps its number).
                block = chunk[: chunk.rfind(b"\n") + 1 or len(chunk)]
                spent += len(block)
                for begin, number, at in needle.lines(block, max_hits - len(hits)):
                    end = block.find(b"\n", begin)
                    text = block[begin : len(block) if end < 0 else end]
                    hits.append(
                        LogHit(
                            replica=f.replica,
                            attempt=f.attempt,
                            line=line + number,
                            offset=offset + begin,
                            text=_excerpt(text, at),
                        )
                    )
                if len(hits) >= max_hits:
                    # Go on after the last hit's line.
                    last = hits[-1].offset - offset
                    end = block.find(b"\n", last)
                    after = len(block) if end < 0 else end + 1
                    line += block.count(b"\n", 0, after)
                    offset += after
                    if after < len(block) or pread(1, offset):
                        return answer(SearchCursor(f.replica, f.attempt, offset, line, done))
                    break
                line += block.count(b"\n")
                offset += len(block)
        done += 1
    return answer(None)


# -- the server's folders as the job's people know them ---------------------------------------

SERVER_DIR = "\N{HORIZONTAL ELLIPSIS}"
"""What stands for the rest of the server's data folder in a shown log."""
_END = r"(?![^/\s'\"`:;,)\]}>|])"
"""A folder ends there: at the end, a `/`, a space, a quote or punctuation (not inside a
longer name that starts the same)."""
_KEY = REPLICA.pattern.strip("^$").replace("?P<role>", "?:").replace("?P<index>", "?:")


@dataclass(frozen=True)
class JobPaths:
    """Names the server's folders in a job's text as the job knows them (pure)."""

    pattern: re.Pattern[str] | None
    names: tuple[str, ...]

    def shown(self, text: str) -> str:
        if self.pattern is None or not text:
            return text
        return self.pattern.sub(lambda m: self.names[int(m.lastgroup[1:])], text)  # type: ignore[index]


def job_paths(
    storage: JobStorage, server_dirs: Iterable[Path], replica: str | None = None
) -> JobPaths:
    """The job's output folder is `$TFKUBE_LOG_DIR`, its data folder `$TFKUBE_DATA_DIR`,
    a replica's working folder `$TFKUBE_WORK_DIR` (`replica`'s own in its log; any
    replica's in the job's text); the rest of the server's data folder (each of
    `server_dirs`: as configured, resolved) loses that prefix (pure)."""
    literal = [
        (str(storage.output_dir), f"${contract.LOG_DIR}"),
        (storage.log_path or "", f"${contract.LOG_DIR}"),
        (storage.data_path or "", f"${contract.DATA_DIR}"),
        *((str(folder), SERVER_DIR) for folder in server_dirs),
    ]
    found = {re.escape(f.rstrip("/")): name for f, name in literal if f.strip("/")}
    if storage.work_path and storage.work_path.strip("/"):
        key = re.escape(replica) if replica else _KEY
        found[f"{re.escape(storage.work_path.rstrip('/'))}/{key}"] = f"${contract.WORK_DIR}"
    if not found:
        return JobPaths(None, ())
    ordered = sorted(found.items(), key=lambda p: -len(p[0]))  # the longest folder first
    pattern = "|".join(f"(?P<p{i}>{folder}){_END}" for i, (folder, _) in enumerate(ordered))
    return JobPaths(re.compile(pattern), tuple(name for _, name in ordered))
