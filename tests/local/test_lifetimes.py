"""The lifetime rule of the local commands, cell by cell (the README's table), besides
`tfkube run`'s own signal tests in test_interrupts.py:

- `tfkube serve JOB --engine local`: Ctrl-C, SIGTERM or SIGHUP, sent to the command alone,
  stop its model server (by PID) and free its port; the command exits 128+N; a SIGKILL of
  the command ends its model server too (the kernel's parent-death signal);
- `tfkube run --detach`: the job outlives the command; `tfkube list` shows it and
  `tfkube stop` ends every process of it;
- `nohup tfkube run`: a SIGHUP (a closed terminal) leaves the job running, as nohup asks;
  Ctrl-C still stops it.

Every command runs as a real process in a session of its own, so that a signal the test
sends reaches the command alone (`kill -INT <pid>`), never its process group.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

import psutil
import pytest

from conftest import port_open, still_running  # tests/conftest.py
from tfkube.cli._workloads import MODEL_SERVER_GRACE
from tfkube.engines.local import LocalBackend

from .conftest import MakeJob
from .test_cli import TFKUBE, tfkube, write_job
from .test_engine import wait_for
from .test_interrupts import EXIT_TIMEOUT, job_processes, wait_all_running

MODEL_SERVER_START = 240.0
"""The model server imports TensorFlow before it listens: 5 s on a quiet machine, much
more on a loaded one (the same bound as tests/server's model servers)."""

EXPORT = """
mkdir -p "$TFKUBE_EXPORT_DIR/1"
: > "$TFKUBE_EXPORT_DIR/1/saved_model.pb"
"""
"""An export the model server finds: version 1 (it fails to load it, an empty file, and
keeps serving its status: enough to hold the port)."""


@pytest.mark.tf
@pytest.mark.parametrize(
    "signum",
    [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL],
    ids=["SIGINT", "SIGTERM", "SIGHUP", "SIGKILL"],
)
def test_a_stop_signal_stops_the_foreground_model_server(
    backend: LocalBackend, make_job: MakeJob, tmp_path: Path, signum: signal.Signals
) -> None:
    job, base = make_job("exported", EXPORT)
    backend.submit(job, base)
    assert backend.wait("exported", timeout=EXIT_TIMEOUT).phase.value == "Succeeded"
    with socket.socket() as s:  # a free port for the model server
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        # Output to a file: the model server inherits it, and a pipe would stay open
        # as long as an orphan lived.
        proc = subprocess.Popen(
            [*TFKUBE, "serve", "exported", "--engine", "local", "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    servers: list[psutil.Process] = []
    try:
        wait_for(
            lambda: port_open(port) or proc.poll() is not None,
            MODEL_SERVER_START,
            "the model server to listen",
        )
        assert proc.poll() is None, log.read_text()
        servers = psutil.Process(proc.pid).children(recursive=True)
        assert servers, "the model server is the command's child"
        proc.send_signal(signum)
        killed = signum == signal.SIGKILL  # nothing of the command runs after it
        assert proc.wait(EXIT_TIMEOUT) == (-signum if killed else 128 + signum), log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        # After a SIGKILL the model server gets SIGTERM from the kernel: its grace to end.
        _, orphans = psutil.wait_procs(servers, timeout=MODEL_SERVER_GRACE)
        for orphan in orphans:  # the test leaves none running, and fails below
            orphan.kill()
    assert not orphans, f"left running: {orphans}\n{log.read_text()}"
    assert not port_open(port)
    if signum != signal.SIGKILL:
        assert "stopping the model server" in log.read_text()


def test_a_detached_job_outlives_the_command_and_tfkube_stop_ends_it(
    tfkube_home: Path, tmp_path: Path
) -> None:
    started = tfkube("run", "-d", str(write_job(tmp_path, "kept", "sleep 600\n")))
    assert started.returncode == 0, started.stderr
    assert "stop it with `tfkube stop kept`" in started.stdout
    wait_all_running(tfkube_home, "kept")
    processes = job_processes(tfkube_home, "kept")
    assert "kept" in tfkube("list").stdout
    stopped = tfkube("stop", "kept")
    assert stopped.returncode == 0, stopped.stderr
    assert "job kept stopped (Failed, Stopped)" in stopped.stdout
    assert not still_running(processes)
    assert "Stopped" in tfkube("status", "kept").stdout  # kept, with its logs, until delete


def test_nohup_keeps_the_job_through_a_closed_terminal(tfkube_home: Path, tmp_path: Path) -> None:
    """SIGHUP ignored when the command starts (`nohup`) stays ignored. A SIGHUP, then a
    Ctrl-C: had the hang-up been handled, it would have come first (the lower signal
    number is delivered first) and the command would have said so and exited 129."""
    job = write_job(tmp_path, "nohup", "sleep 600\n")
    proc = subprocess.Popen(
        ["nohup", *TFKUBE, "run", str(job)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        start_new_session=True,
    )
    wait_all_running(tfkube_home, "nohup")
    processes = job_processes(tfkube_home, "nohup")
    proc.send_signal(signal.SIGHUP)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=EXIT_TIMEOUT)
    assert proc.returncode == 130, out + err
    assert "interrupted: stopping every replica of nohup" in err
    assert "SIGHUP" not in err
    assert not still_running(processes)
