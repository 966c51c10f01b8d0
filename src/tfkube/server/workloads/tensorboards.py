"""A job's TensorBoard behind the proxy (`/proxy/tensorboard/<job id>/`): started through
its engine on the first request (locally a process; in a cluster the job's own, if it
asked for one), stopped when idle and at server shutdown. Nothing about it is kept in the
database: a restarted server starts one again on demand."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tfkube.engines import Engine, Handle, Tenant, TensorBoardWorkload, Upstream
from tfkube.spec import TFJob


@dataclass
class _Board:
    tenant: Tenant
    workload: TensorBoardWorkload
    handle: Handle
    last_used: float


class TensorBoards:
    def __init__(self, engine: Engine, idle_seconds: float) -> None:
        self.engine = engine
        self.idle_seconds = idle_seconds
        self._boards: dict[str, _Board] = {}
        self._lock = threading.Lock()
        self._gates: dict[str, threading.Lock] = {}
        self._stop = threading.Event()
        self._reaper = threading.Thread(target=self._reap, name="tfkube-tensorboards", daemon=True)
        self._reaper.start()

    def upstream(self, tenant: Tenant, job_id: str, job: TFJob, logdir: Path) -> Upstream:
        """Where the proxy reaches the job's TensorBoard, started (and ready) if need be.
        Raises NotAvailable (the engine cannot open one) or RuntimeError (it did not start)."""
        with self._lock:
            gate = self._gates.setdefault(job_id, threading.Lock())
        with gate:  # one start per job, however many requests arrive at once
            with self._lock:
                board = self._boards.get(job_id)
            if (
                board is not None
                and self.engine.status(board.tenant, board.workload, board.handle).exited
            ):
                self.stop(job_id)
                board = None
            if board is None:
                workload = TensorBoardWorkload(job_id, job, logdir, f"/proxy/tensorboard/{job_id}")
                board = _Board(tenant, workload, self.engine.start(tenant, workload), 0.0)
                with self._lock:
                    self._boards[job_id] = board
            board.last_used = time.monotonic()
            return self.engine.upstream(board.tenant, board.workload, board.handle)

    def stop(self, job_id: str) -> None:
        with self._lock:
            board = self._boards.pop(job_id, None)
        if board is not None:
            self.engine.stop(board.tenant, board.workload, board.handle)

    def _reap(self) -> None:
        while not self._stop.wait(5.0):
            now = time.monotonic()
            with self._lock:
                idle = [j for j, b in self._boards.items() if now - b.last_used > self.idle_seconds]
            for job_id in idle:
                self.stop(job_id)

    def close(self) -> None:
        self._stop.set()
        for job_id in list(self._boards):
            self.stop(job_id)
