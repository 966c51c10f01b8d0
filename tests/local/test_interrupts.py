"""A stop signal at every moment of `tfkube run`, and `stop` racing a job that is just
starting: every replica is stopped, nothing is left, the exit code is 128+N.

The moments: while staging (the code is still downloading), while the supervisor starts
(in-process, through the `spawner` seam, so the moment is exact), while running (Ctrl-C,
SIGTERM, SIGHUP: each sent to the command alone, every process it started checked by PID),
twice in a row (the second during the stop), when its terminal closes (a real
pseudo-terminal hung up), and a sweep over the first seconds of a run.
"""

from __future__ import annotations

import fcntl
import http.server
import io
import os
import pty
import select
import signal
import subprocess
import tarfile
import termios
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from conftest import still_running  # tests/conftest.py
from tfkube.engines.local import LocalBackend
from tfkube.engines.local._store import JobDir
from tfkube.engines.local._supervisor import spawn
from tfkube.planner import JobPhase, ReplicaState

from .conftest import MakeJob
from .test_cli import TFKUBE, write_job
from .test_engine import wait_for

pytestmark = pytest.mark.faults

EXIT_TIMEOUT = 60.0
"""Generous: a stop takes the grace period plus scheduling on a loaded machine."""


def start_run(job: Path, cwd: Path | None = None) -> subprocess.Popen[str]:
    """`tfkube run JOB` in a session of its own: a signal the test sends reaches the
    command alone (as `kill -INT <pid>` would), not a process group."""
    return subprocess.Popen(
        [*TFKUBE, "run", str(job)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "200"},
        start_new_session=True,
    )


def job_processes(home: Path, name: str) -> list[psutil.Process]:
    """The job's supervisor, its replicas' launchers and everything they started, once
    every launcher has started its entrypoint."""
    d = JobDir(home / "jobs" / name)

    def entrypoints_started() -> bool:
        return all(
            r.process is not None and psutil.Process(r.process.pid).children()
            for r in d.read().replicas
        )

    wait_for(entrypoints_started, EXIT_TIMEOUT, f"every replica of {name} to start its entrypoint")
    record = d.read()
    refs = [record.supervisor, *(r.process for r in record.replicas)]
    found: dict[int, psutil.Process] = {}
    for ref in refs:
        assert ref is not None
        proc = psutil.Process(ref.pid)
        for p in [proc, *proc.children(recursive=True)]:
            found[p.pid] = p
    return list(found.values())


def state(home: Path, name: str) -> tuple[JobPhase, str | None, list[ReplicaState]] | None:
    d = JobDir(home / "jobs" / name)
    if not d.exists():
        return None
    record = d.read()
    return record.phase, record.reason, [r.state for r in record.replicas]


def wait_all_running(home: Path, name: str) -> None:
    def running() -> bool:
        found = state(home, name)
        # No replicas yet: the supervisor makes them from job.yaml when it starts.
        return (
            found is not None
            and bool(found[2])
            and all(r is ReplicaState.RUNNING for r in found[2])
        )

    wait_for(running, EXIT_TIMEOUT, f"every replica of {name} to run")


@pytest.fixture
def slow_code(tmp_path: Path) -> Iterator[tuple[str, threading.Event, threading.Event]]:
    """An http server whose code download blocks until released: (url, asked, release)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        data = b"#!/usr/bin/env bash\nsleep 600\n"
        info = tarfile.TarInfo("run.sh")
        info.size = len(data)
        info.mode = 0o755
        tar.addfile(info, io.BytesIO(data))
    body = buffer.getvalue()
    asked, release = threading.Event(), threading.Event()

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.set()
            release.wait(120)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/code.tar.gz", asked, release
    release.set()
    server.shutdown()
    server.server_close()
    thread.join()


def test_ctrl_c_while_staging_starts_nothing(
    tfkube_home: Path, tmp_path: Path, slow_code: tuple[str, threading.Event, threading.Event]
) -> None:
    url, asked, _release = slow_code
    job = write_job(tmp_path, "staging", "", code={"source": url})
    proc = start_run(job)
    assert asked.wait(EXIT_TIMEOUT), "the code was never requested"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=EXIT_TIMEOUT)
    assert proc.returncode == 130, out + err
    assert "the job had not started; nothing runs" in err
    jobs = tfkube_home / "jobs"
    assert not jobs.exists() or not any(jobs.iterdir()), "the staging folder is removed"


def interrupt_after_spawn(job_dir: JobDir, fork: bool) -> None:
    """Start the supervisor, then Ctrl-C this process before it has registered."""
    spawn(job_dir, fork)
    os.kill(os.getpid(), signal.SIGINT)


def test_ctrl_c_while_the_supervisor_starts_stops_the_job(
    tfkube_home: Path, make_job: MakeJob
) -> None:
    backend = LocalBackend(tfkube_home, spawner=interrupt_after_spawn)
    job, base = make_job("starting", "sleep 600\n", workers=2, ps=1)
    with pytest.raises(KeyboardInterrupt):
        backend.submit(job, base)
    assert backend.submitted == ["starting"]
    view = backend.get("starting")
    assert view.phase is JobPhase.FAILED
    assert view.reason == "Stopped"
    assert view.done
    # The tfkube_home fixture fails the test if any process is left.


def test_a_stop_before_the_supervisor_registers_is_not_missed(
    tfkube_home: Path, make_job: MakeJob
) -> None:
    stopper: list[threading.Thread] = []

    def stop_first(job_dir: JobDir, fork: bool) -> None:
        # Another shell's `tfkube stop` finds no supervisor yet; then it starts.
        thread = threading.Thread(target=LocalBackend(tfkube_home).stop, args=("early",))
        thread.start()
        stopper.append(thread)
        wait_for(job_dir.stop_requested.exists, 20, "the stop request")
        spawn(job_dir, fork)

    backend = LocalBackend(tfkube_home, spawner=stop_first)
    job, base = make_job("early", "sleep 600\n", workers=2, ps=1)
    backend.submit(job, base)
    stopper[0].join(EXIT_TIMEOUT)
    assert not stopper[0].is_alive()
    view = backend.wait("early", timeout=EXIT_TIMEOUT)
    assert view.phase is JobPhase.FAILED
    assert view.reason == "Stopped"
    events = [str(e["message"]) for e in JobDir(tfkube_home / "jobs" / "early").read_events()]
    assert not any(e.startswith("started ") for e in events), events


@pytest.mark.parametrize(
    ("first", "second"),
    [(signal.SIGINT, signal.SIGINT), (signal.SIGTERM, signal.SIGHUP)],
    ids=["ctrl-c-twice", "term-then-hup"],
)
def test_a_second_signal_during_the_stop_still_stops_everything(
    tfkube_home: Path, tmp_path: Path, first: signal.Signals, second: signal.Signals
) -> None:
    # Replicas that ignore SIGTERM: the stop waits out the grace period, so the second
    # signal surely lands while the first one is being handled.
    job = write_job(
        tmp_path,
        "twice",
        "trap '' TERM\nsleep 600 & wait\n",
        runPolicy={"terminationGraceSeconds": 3},
    )
    proc = start_run(job)
    wait_all_running(tfkube_home, "twice")
    proc.send_signal(first)
    wait_for(lambda: (tfkube_home / "jobs" / "twice" / "stop").exists(), EXIT_TIMEOUT, "the stop")
    proc.send_signal(second)
    out, err = proc.communicate(timeout=EXIT_TIMEOUT)
    assert proc.returncode == 128 + first, out + err
    assert "stopping every replica of twice" in err
    assert state(tfkube_home, "twice") == (JobPhase.FAILED, "Stopped", [ReplicaState.STOPPED] * 3)


@pytest.mark.parametrize("delay", [0.0, 0.15, 0.3, 0.45, 0.6, 0.75, 0.9, 1.2, 1.6, 2.2])
def test_ctrl_c_at_any_moment_of_a_run(
    tfkube_home: Path, tmp_path: Path, leftovers: Callable[[], list[psutil.Process]], delay: float
) -> None:
    """Whatever the moment, the outcome is one of the two promised ones."""
    job = write_job(tmp_path, "anytime", "sleep 600\n")
    proc = start_run(job)
    time.sleep(delay)  # the moment is the variable under test, not a wait for something
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=EXIT_TIMEOUT)
    found = state(tfkube_home, "anytime")
    if found is None:
        # Interrupted before the job existed. At the very start the interpreter itself
        # may die of the signal (a shell reports 130 too), or, inside its own start-up
        # before any of tfkube runs, exit 1 with "Could not import runpy module": that
        # is CPython's, and nothing was started either.
        assert proc.returncode in (130, -signal.SIGINT) or (
            proc.returncode == 1 and "KeyboardInterrupt" in err and "tfkube" not in err
        ), out + err
    else:
        assert proc.returncode == 130, out + err
        phase, reason, replicas = found
        assert (phase, reason) == (JobPhase.FAILED, "Stopped"), out + err
        assert all(not r.live for r in replicas)
    wait_for(lambda: not leftovers(), 20, "every process of the job to end")


@pytest.mark.parametrize(
    ("signum", "said"),
    [
        (signal.SIGINT, "interrupted: "),
        (signal.SIGTERM, "interrupted by SIGTERM: "),
        (signal.SIGHUP, "interrupted by SIGHUP: "),
    ],
    ids=["SIGINT", "SIGTERM", "SIGHUP"],
)
def test_a_stop_signal_while_running_stops_every_replica(
    tfkube_home: Path, tmp_path: Path, signum: signal.Signals, said: str
) -> None:
    """Ctrl-C, SIGTERM and a closed terminal (SIGHUP), each sent to the command alone:
    the job's 6 processes (supervisor, 3 launchers, their entrypoints) are gone, by PID,
    and the command exits 128+N."""
    job = write_job(tmp_path, "interrupted", "sleep 600\n")
    proc = start_run(job)
    wait_all_running(tfkube_home, "interrupted")
    started = job_processes(tfkube_home, "interrupted")
    assert len(started) >= 7, started  # a supervisor, 3 launchers and their entrypoints
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=EXIT_TIMEOUT)
    assert proc.returncode == 128 + signum, out + err
    assert f"{said}stopping every replica of interrupted" in err
    assert "Stopped" in out
    assert state(tfkube_home, "interrupted") == (
        JobPhase.FAILED,
        "Stopped",
        [ReplicaState.STOPPED] * 3,
    )
    assert not still_running(started)


def test_a_closed_terminal_stops_the_job(tfkube_home: Path, tmp_path: Path) -> None:
    """`tfkube run` in a terminal (a pseudo-terminal, its controlling one), showing the
    live table; the terminal closes: the kernel sends SIGHUP, and every write to the
    terminal fails from then on (EIO). The job is stopped all the same."""
    job = write_job(tmp_path, "closed", "sleep 600\n")
    main, terminal = pty.openpty()

    def controlling_terminal() -> None:  # in the child, after setsid: stdin's tty
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(
        [*TFKUBE, "run", str(job)],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        env={**os.environ, "COLUMNS": "120"},
        start_new_session=True,
        preexec_fn=controlling_terminal,
    )
    os.close(terminal)
    shown: list[bytes] = []
    hang_up = threading.Event()

    def read_the_terminal() -> None:
        while not hang_up.is_set():
            if select.select([main], [], [], 0.1)[0]:
                try:
                    shown.append(os.read(main, 65536))
                except OSError:
                    break
        os.close(main)  # the terminal closes

    reader = threading.Thread(target=read_the_terminal)
    reader.start()
    try:
        wait_all_running(tfkube_home, "closed")
        started = job_processes(tfkube_home, "closed")
        wait_for(lambda: b"Running" in b"".join(shown), EXIT_TIMEOUT, "the live table")
        hang_up.set()
        reader.join(EXIT_TIMEOUT)
        assert proc.wait(EXIT_TIMEOUT) == 128 + signal.SIGHUP
    finally:
        hang_up.set()
        reader.join(EXIT_TIMEOUT)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert state(tfkube_home, "closed") == (JobPhase.FAILED, "Stopped", [ReplicaState.STOPPED] * 3)
    assert not still_running(started)
