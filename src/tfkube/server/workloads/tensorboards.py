"""TensorBoard per job on the local engine: a `tensorboard` process on a free loopback
port with `--path_prefix /proxy/tensorboard/<job>`, started on the first request, stopped
when idle and at server shutdown (by PID, its whole process group)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from tfkube.server._loopback import Started, free_port, spawn, stop, wait_port

START_TIMEOUT = 90.0


@dataclass
class _Board:
    proc: subprocess.Popen[bytes]
    started: Started
    last_used: float

    @property
    def port(self) -> int:
        return self.started.port


class TensorBoards:
    def __init__(self, idle_seconds: float) -> None:
        self.idle_seconds = idle_seconds
        self._boards: dict[str, _Board] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._reaper = threading.Thread(target=self._reap, name="tfkube-tensorboards", daemon=True)
        self._reaper.start()

    def ensure(self, job_id: str, logdir: str, prefix: str) -> str:
        """The base URL of the job's TensorBoard, started (and ready) if need be."""
        with self._lock:
            board = self._boards.get(job_id)
            if board is not None and board.proc.poll() is None:
                board.last_used = time.monotonic()
                return f"http://127.0.0.1:{board.port}"
            port = free_port()
            proc, started = spawn(
                [
                    sys.executable,
                    "-m",
                    "tensorboard.main",
                    f"--logdir={logdir}",
                    "--host=127.0.0.1",
                    f"--port={port}",
                    f"--path_prefix={prefix}",
                    "--reload_interval=5",
                ],
                port=port,
            )
            self._boards[job_id] = _Board(proc, started, time.monotonic())
        if wait_port(proc, started.pid, port, START_TIMEOUT):
            return f"http://127.0.0.1:{port}"
        self.stop(job_id)
        raise RuntimeError("TensorBoard did not start in time (or exited at start)")

    def stop(self, job_id: str) -> None:
        with self._lock:
            board = self._boards.pop(job_id, None)
        if board is not None:
            stop(board.started.pid, board.started.started)
            board.proc.poll()

    def _reap(self) -> None:
        while not self._stop.wait(5.0):
            now = time.monotonic()
            idle = [
                j for j, b in list(self._boards.items()) if now - b.last_used > self.idle_seconds
            ]
            for job_id in idle:
                self.stop(job_id)

    def close(self) -> None:
        self._stop.set()
        for job_id in list(self._boards):
            self.stop(job_id)
