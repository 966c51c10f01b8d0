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
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from tfkube import contract
from tfkube.engines import JobStorage
from tfkube.safefs import Entry, closing, entries, open_dir, open_file, open_root
from tfkube.tfcluster import REPLICA_KEY, parse_replica_key, replica_order
from tfkube.wire import LogFile

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
    if attempt is None:
        if not attempts:
            raise NoSuchLog(f"{replica} has no log yet")
        attempt = max(attempts)
    if attempt not in attempts:
        raise NoSuchLog(f"{replica} has no attempt {attempt}")
    return output_dir, (*contract.KEPT_LOGS_SUBDIR, replica, f"{attempt}.log")


def open_log(ref: LogRef) -> int:
    """A descriptor of the log (see `tfkube.safefs.open_file`); the caller closes it."""
    output_dir, parts = ref
    with closing(open_root(output_dir)) as root:
        return open_file(root, parts)


def read_chunk(fd: int, offset: int, limit: int = CHUNK) -> bytes:
    return os.pread(fd, limit, offset)


def read_all(ref: LogRef, offset: int) -> bytes:
    with closing(open_log(ref)) as fd:
        out = bytearray()
        while chunk := read_chunk(fd, offset + len(out)):
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
