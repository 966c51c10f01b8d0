"""Processes of the local engine, in one place: start-time-checked references, free
loopback ports, starting a service process (its own session, output to a file) and
waiting for its port, and stopping a whole tree for sure (replicas, model servers,
notebooks, TensorBoards alike).

Nothing is found by name: a process is the one we started only if its PID still has the
start time we recorded, so a recycled PID is never signalled."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil

from tfkube.engines.local._store import ProcessRef

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def since_boot(pid: int) -> float:
    """When the process started, in seconds after boot: field 22 of /proc/<pid>/stat, in
    clock ticks (the kernel's count; no clock change moves it). Raises
    psutil.NoSuchProcess when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        raise psutil.NoSuchProcess(pid) from None
    # The name (field 2) is in parentheses and may hold any byte, ')' included.
    fields = stat[stat.rindex(b")") + 2 :].split()
    return int(fields[19]) / CLOCK_TICKS


def ref_of(pid: int) -> ProcessRef:
    proc = psutil.Process(pid)
    started = since_boot(pid)
    return ProcessRef(pid=pid, create_time=proc.create_time(), since_boot=started)


def ref_data(ref: ProcessRef) -> dict[str, float | int]:
    """A reference as a handle keeps it (JSON)."""
    data: dict[str, float | int] = {"pid": ref.pid, "started": ref.create_time}
    if ref.since_boot is not None:
        data["since_boot"] = ref.since_boot
    return data


def ref_from(data: Mapping[str, object]) -> ProcessRef | None:
    """The reference a handle keeps (`ref_data`); None if it keeps none."""
    pid, since_boot = data.get("pid"), data.get("since_boot")
    if not isinstance(pid, int) or not pid:
        return None
    started = data.get("started")
    return ProcessRef(
        pid=pid,
        create_time=float(started) if isinstance(started, (int, float)) else 0.0,
        since_boot=float(since_boot) if isinstance(since_boot, (int, float)) else None,
    )


WALL_CLOCK_SLACK = 1.01
"""How far a wall-clock start time may move between two readings of the same process: the
kernel gives its boot time in whole seconds, and that second moves as the clock does."""


def same_start(proc: psutil.Process, ref: ProcessRef) -> bool:
    """Whether `proc` started when `ref` says (to the kernel's clock tick): it is ours, not
    a process that was given the PID after ours ended."""
    if ref.since_boot is not None:
        return abs(since_boot(proc.pid) - ref.since_boot) < 0.5 / CLOCK_TICKS
    return abs(proc.create_time() - ref.create_time) <= WALL_CLOCK_SLACK


def free_ports(count: int) -> list[int]:
    """`count` distinct free TCP ports on 127.0.0.1 (held open together while chosen)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            s = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind(("127.0.0.1", 0))
            ports.append(int(s.getsockname()[1]))
        return ports


def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path | None = None,
    log: Path | None = None,
    pass_fds: Sequence[int] = (),
) -> tuple[subprocess.Popen[bytes], ProcessRef]:
    """Start a service process in a new session (its own process group, so it is stopped
    as a whole), its output appended to `log`, with exactly `env` (never ours)."""
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
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
            pass_fds=tuple(pass_fds),
        )
    finally:
        if handle is not None:
            handle.close()
    try:
        return proc, ref_of(proc.pid)
    except psutil.Error:  # gone already: a reference that is never alive
        return proc, ProcessRef(pid=proc.pid, create_time=0.0)


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_port(ref: ProcessRef, port: int, timeout: float) -> bool:
    """Until the port accepts connections (True), the process ends or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if alive(ref) is None:
            _reap(ref.pid)
            return False
        if port_open(port):
            return True
        time.sleep(0.2)
    return False


def _reap(pid: int) -> None:
    """Collect our child's exit status (a child of another process is not ours)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def stop_tree(ref: ProcessRef | None, grace: float = 10.0) -> None:
    """Stop one process with its descendants and its group (see `stop_trees`), and
    collect it if it was our child."""
    if ref is None:
        return
    stop_trees([ref], grace)
    _reap(ref.pid)


def alive(ref: ProcessRef | None) -> psutil.Process | None:
    """The process if it still runs and is the one we started (not a recycled PID)."""
    if ref is None:
        return None
    try:
        proc = psutil.Process(ref.pid)
        if not same_start(proc, ref):
            return None
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc
    except psutil.Error:
        return None


def _tree(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return [proc]


def _group(pgid: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid:
                found.append(proc)
        except (ProcessLookupError, psutil.Error):
            continue
    return found


def stop_trees(refs: list[ProcessRef], grace: float) -> None:
    """Stop each process, its descendants and its process group: SIGTERM, then SIGKILL
    whatever is left after `grace` seconds. Returns when all of them are gone."""
    procs: dict[int, psutil.Process] = {}
    groups: set[int] = set()
    for ref in refs:
        proc = alive(ref)
        if proc is None:
            continue
        for p in _tree(proc):
            procs[p.pid] = p
        with contextlib.suppress(ProcessLookupError):
            groups.add(os.getpgid(proc.pid))
    for pgid in groups:
        for p in _group(pgid):
            procs.setdefault(p.pid, p)
    if not procs:
        return
    for p in procs.values():
        with contextlib.suppress(psutil.Error):
            p.send_signal(signal.SIGTERM)
    remaining = _wait_dead(list(procs.values()), grace)
    # A launcher stopped while it was still starting its entrypoint may have started it
    # after the first look: look at the groups again, so SIGKILL reaches it too.
    known = {p.pid for p in remaining}
    for pgid in groups:
        remaining += [p for p in _group(pgid) if p.pid not in known and not _dead(p)]
    for p in remaining:
        with contextlib.suppress(psutil.Error):
            p.kill()
    _wait_dead(remaining, 5)


def _dead(proc: psutil.Process) -> bool:
    """Gone, or a zombie: it runs no more, whoever reaps it (init may take its time)."""
    try:
        if proc.status() != psutil.STATUS_ZOMBIE:
            return False
    except psutil.Error:
        return True
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(proc.pid, os.WNOHANG)  # ours (a launcher): collect it now
    return True


def _wait_dead(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait up to `timeout` for every process to die; return those still running."""
    deadline = time.monotonic() + timeout
    remaining = [p for p in procs if not _dead(p)]
    while remaining and time.monotonic() < deadline:
        time.sleep(0.02)
        remaining = [p for p in remaining if not _dead(p)]
    return remaining


def wait_gone(ref: ProcessRef, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while alive(ref) is not None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
