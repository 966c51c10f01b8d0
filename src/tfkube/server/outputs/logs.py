"""Replica logs as the launcher keeps them in the job's output folder
(`.tfkube/logs/<role>-<index>/<attempt>.log`, see `tfkube.launcher._tee`): listed, read
from an offset, followed while the job runs. The server never asks a live process: the
files are there during the job, after it ended, and after the engine forgot it (TTL)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from tfkube import contract
from tfkube.wire import LogFile

REPLICA = re.compile(r"^(chief|ps|worker|evaluator)-(0|[1-9][0-9]{0,5})$")
CHUNK = 256 * 1024


class NoSuchLog(LookupError):
    pass


def logs_root(output_dir: str) -> Path:
    return Path(output_dir, *contract.KEPT_LOGS_SUBDIR)


def log_files(output_dir: str | None) -> list[LogFile]:
    """Every replica's attempts, ordered by replica then attempt."""
    if not output_dir:
        return []
    root = logs_root(output_dir)
    out: list[LogFile] = []
    if not root.is_dir():
        return out
    for folder in root.iterdir():
        if not REPLICA.fullmatch(folder.name) or not folder.is_dir():
            continue
        for file in folder.glob("*.log"):
            if not file.stem.isdigit():
                continue
            st = file.stat()
            out.append(
                LogFile(
                    replica=folder.name,
                    attempt=int(file.stem),
                    size=st.st_size,
                    modified=st.st_mtime,
                )
            )
    role_order = {"chief": 0, "ps": 1, "worker": 2, "evaluator": 3}

    def key(f: LogFile) -> tuple[int, int, int]:
        role, index = f.replica.rsplit("-", 1)
        return role_order[role], int(index), f.attempt

    return sorted(out, key=key)


def log_path(output_dir: str | None, replica: str, attempt: int | None) -> Path:
    """The file of one attempt (None: the latest). Raises NoSuchLog; the replica name and
    the attempt are checked against fixed patterns, so no user text reaches a path."""
    if not REPLICA.fullmatch(replica):
        raise NoSuchLog(f"{replica!r} is not a replica name (e.g. worker-0)")
    if not output_dir:
        raise NoSuchLog("this job keeps no logs on the server")
    folder = logs_root(output_dir) / replica
    if attempt is None:
        attempts = sorted(int(f.stem) for f in folder.glob("*.log") if f.stem.isdigit())
        if not attempts:
            raise NoSuchLog(f"{replica} has no log yet")
        attempt = attempts[-1]
    path = folder / f"{attempt}.log"
    if not path.is_file():
        raise NoSuchLog(f"{replica} has no attempt {attempt}")
    return path


def read_chunk(path: Path, offset: int, limit: int = CHUNK) -> bytes:
    with path.open("rb") as f:
        f.seek(offset)
        return f.read(limit)


async def follow(
    path: Path,
    offset: int,
    running: Callable[[], Awaitable[bool]],
    interval: float = 0.5,
) -> AsyncIterator[bytes]:
    """The file from `offset` on, then whatever is appended while `running()` says the job
    is not finished; ends once it finished and everything was read."""
    while True:
        chunk = await asyncio.to_thread(read_chunk, path, offset)
        if chunk:
            offset += len(chunk)
            yield chunk
            continue
        if not await running():
            chunk = await asyncio.to_thread(read_chunk, path, offset)
            if chunk:
                offset += len(chunk)
                yield chunk
                continue
            return
        await asyncio.sleep(interval)
