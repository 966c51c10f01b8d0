"""TensorBoard per job on the local engine: a `tensorboard` process on a free loopback
port with `--path_prefix /proxy/tensorboard/<job>`, started on the first request, stopped
when idle and at server shutdown (by PID, its whole process group)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

START_TIMEOUT = 90.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class _Board:
    proc: subprocess.Popen[bytes]
    port: int
    last_used: float


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
            port = _free_port()
            proc = subprocess.Popen(
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
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            self._boards[job_id] = _Board(proc, port, time.monotonic())
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError("TensorBoard exited at start")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return f"http://127.0.0.1:{port}"
            time.sleep(0.2)
        self.stop(job_id)
        raise RuntimeError("TensorBoard did not start in time")

    def stop(self, job_id: str) -> None:
        with self._lock:
            board = self._boards.pop(job_id, None)
        if board is not None:
            _end(board.proc)

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


def _end(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
