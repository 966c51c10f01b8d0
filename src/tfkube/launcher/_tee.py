"""Keep every replica's output where it outlives the replica: the job's shared log folder.

The launcher copies the entrypoint's output (stdout and stderr, merged) to its own stdout,
as before (the local engine's log file, `kubectl logs`), and also to

    $TFKUBE_LOG_DIR/.tfkube/logs/<role>-<index>/<attempt>.log

one file per start of the replica. The attempt number is the first free one, taken with
O_EXCL: that works on Kubernetes too, where the launcher does not know how often its pod
was replaced, and two starts never share a file. A file stops growing at
TFKUBE_LOG_MAX_BYTES (default 64 MiB) with a note saying so; stdout keeps everything.
The tfkube server reads these files, during the job and long after it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from tfkube import contract
from tfkube.contract import LOG_MAX_BYTES

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
_CHUNK = 65536
MAX_ATTEMPTS = 100_000


def replica_log_dir(log_dir: str, replica: str) -> Path:
    return Path(log_dir, *contract.KEPT_LOGS_SUBDIR, replica)


def open_attempt(log_dir: str, replica: str) -> tuple[int, IO[bytes]] | None:
    """Create the next `<attempt>.log` of a replica; None when the folder is not writable
    (the replica still runs, with its output on stdout only)."""
    if not log_dir:
        return None
    folder = replica_log_dir(log_dir, replica)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for attempt in range(MAX_ATTEMPTS):
            try:
                fd = os.open(folder / f"{attempt}.log", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                continue
            return attempt, os.fdopen(fd, "wb", buffering=0)
    except OSError:
        return None
    return None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            time.sleep(0.01)
            continue
        view = view[written:]


class Tee:
    """Copies a pipe to a file descriptor (stdout) and a capped log file (if any), in a
    thread; `on_output` is called for each chunk (the heartbeat of stall detection)."""

    def __init__(
        self,
        source: IO[bytes],
        log: IO[bytes] | None,
        max_bytes: int,
        out_fd: int = 1,
        on_output: Callable[[], None] | None = None,
    ) -> None:
        self.source = source
        self.log = log
        self.on_output = on_output
        self.max_bytes = max_bytes
        self.out_fd = out_fd
        self.written = 0
        self.capped = False
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._copy, daemon=True)

    def start(self) -> Tee:
        self.thread.start()
        return self

    def note(self, line: str) -> None:
        """A line of the launcher's own into the file (not to stdout: it says it there)."""
        with self.lock:
            self._to_log(f"[tfkube-launcher] {line}\n".encode())

    def _to_log(self, data: bytes) -> None:
        if self.capped or self.log is None:
            return
        room = self.max_bytes - self.written
        if len(data) > room:
            data = data[: max(room, 0)]
            self.capped = True
        with contextlib.suppress(OSError):
            self.log.write(data)
            if self.capped:
                self.log.write(
                    f"\n[tfkube-launcher] log capped at {self.max_bytes} bytes; "
                    "the rest went to the replica's stdout only\n".encode()
                )
        self.written += len(data)

    def _copy(self) -> None:
        fd = self.source.fileno()
        while True:
            try:
                chunk = os.read(fd, _CHUNK)
            except OSError:
                break
            if not chunk:
                break
            if self.on_output is not None:
                self.on_output()
            with contextlib.suppress(OSError):
                _write_all(self.out_fd, chunk)
            with self.lock:
                self._to_log(chunk)

    def finish(self, line: str, timeout: float = 5.0) -> None:
        """Wait for the pipe to drain (everything holding it has ended), note, close."""
        self.thread.join(timeout)
        self.note(line)
        if self.log is not None:
            with contextlib.suppress(OSError):
                self.log.close()


def start_tee(
    source: IO[bytes],
    log: IO[bytes] | None,
    max_bytes: int | None = None,
    on_output: Callable[[], None] | None = None,
) -> Tee:
    if max_bytes is None:
        text = os.environ.get(LOG_MAX_BYTES, "")
        max_bytes = int(text) if text.isascii() and text.isdigit() else DEFAULT_MAX_BYTES
    return Tee(source, log, max_bytes, on_output=on_output).start()
