"""Processes the server starts on loopback ports (TensorBoard, model servers, notebooks):
start one in its own session, wait until its port answers, know it again by PID and start
time (after a server restart too), stop its whole process group by PID.

Nothing here is found by name: a process is the one we started only if its PID still
has the start time we recorded, so a recycled PID is never signalled."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Started:
    pid: int
    started: float
    """psutil's create_time of the process: with the PID, its identity."""
    port: int


def spawn(
    argv: Sequence[str],
    *,
    port: int,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    log: Path | None = None,
) -> tuple[subprocess.Popen[bytes], Started]:
    """Start `argv` in a new session (its own process group), output to `log`."""
    out: int | object = subprocess.DEVNULL
    handle = None
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        handle = log.open("ab")
        out = handle
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,  # type: ignore[arg-type]
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )
    finally:
        if handle is not None:
            handle.close()
    try:
        started = psutil.Process(proc.pid).create_time()
    except psutil.Error:
        started = 0.0
    return proc, Started(proc.pid, started, port)


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_port(proc: subprocess.Popen[bytes] | None, pid: int, port: int, timeout: float) -> bool:
    """Until the port accepts connections (True), the process exits or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        if proc is None and not psutil.pid_exists(pid):
            return False
        if port_open(port):
            return True
        time.sleep(0.2)
    return False


def alive(pid: int | None, started: float | None) -> bool:
    """Whether `pid` still runs the process we started (same start time)."""
    if not pid or started is None:
        return False
    try:
        proc = psutil.Process(pid)
        return abs(proc.create_time() - started) < 0.01 and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def stop(pid: int | None, started: float | None, grace: float = 10.0) -> None:
    """SIGTERM its process group, SIGKILL after `grace`; only if it is still ours."""
    if not pid:
        return
    if not alive(pid, started):
        _reap(pid)  # it exited by itself: collect it if it was our child
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and alive(pid, started):
        _reap(pid)
        time.sleep(0.1)
    if alive(pid, started):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and alive(pid, started):
            _reap(pid)
            time.sleep(0.05)
    _reap(pid)


def _reap(pid: int) -> None:
    """Collect our child's exit status (a child of another server process is not ours)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
