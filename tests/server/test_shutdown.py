"""`tfkube server`'s lifetime rule (the README's table), one signal at a time: Ctrl-C,
SIGTERM or a closed terminal (SIGHUP), sent to the server's process alone, shut it down
cleanly (exit 0). What it ran on loopback (a TensorBoard, a notebook, a model server) is
gone, each checked by PID, and its port is free; the training job runs on, every process
of it. At the next start the job is followed again (and deleted through the server), the
model server starts again from its row, and the notebook is stopped."""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

import psutil
import pytest

import tfkube
from conftest import port_open, still_running, tagged_processes  # tests/conftest.py
from tfkube.modelserver import is_model_server

from ._server import poll
from .conftest import start_server, stop_server

pytestmark = pytest.mark.tf

RUN_SH = """#!/usr/bin/env bash
mkdir -p "$TFKUBE_EXPORT_DIR/1"
: > "$TFKUBE_EXPORT_DIR/1/saved_model.pb"
exec sleep 600
"""
"""A job that exports version 1 (an empty file: the model server fails to load it and
serves its status all the same) and then trains until it is stopped."""

LOOPBACK = {
    "tensorboard": "--port=",
    "jupyterlab": "--ServerApp.port=",
    "tfkube.serving": "--rest_api_port=",
}
"""What the server runs on loopback, by a word of its command line: the flag of its port."""

START = 300.0
"""TensorBoard, JupyterLab and the model server each import a big library before they
listen (TensorBoard took 76 s under load: docs/testing.md)."""
SHUTDOWN = 90.0
"""uvicorn's 5 s for open connections, then each workload's SIGTERM grace (10 s)."""


def _loopback(tag: str) -> dict[str, tuple[psutil.Process, int]]:
    """kind -> (its process, its port), for each workload the server runs on loopback."""
    found = {}
    for proc in tagged_processes(tag):
        line = proc.cmdline()
        for kind, flag in LOOPBACK.items():
            if any(kind in part for part in line[:3]) or (  # python -m <module>
                kind == "tfkube.serving" and is_model_server(line)
            ):
                port = next(int(a.removeprefix(flag)) for a in line if a.startswith(flag))
                found[kind] = (proc, port)
    return found


def _listening(proc: psutil.Process, port: int) -> bool:
    """Whether `port` listens in the process's own network (the host's, or, confined, a
    namespace of its own: /proc/<pid>/net shows the process's)."""
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{proc.pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    return True
    return False


def _with_descendants(procs: list[psutil.Process]) -> list[psutil.Process]:
    """TensorBoard starts its data server, for one."""
    return [q for p in procs for q in [p, *p.children(recursive=True)]]


@pytest.mark.parametrize(
    "signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"]
)
def test_a_stop_signal_shuts_the_server_down_cleanly(
    tmp_path: Path, signum: signal.Signals
) -> None:
    server, admin, tag = start_server(tmp_path, "sqlite", None)
    code = tmp_path / "code"
    code.mkdir()
    (code / "run.sh").write_text(RUN_SH)
    try:
        with tfkube.Client(server.url, admin.token, team="default") as c:
            c.upload(code, "kept")
            job = c.submit(name="kept", workers=1, ps=0, code="kept")
            poll("the job's export", lambda: c.exports(job.id) == [1], START)
            model = c.serve(job.id, name="kept")
            notebook = c.notebook()
            assert notebook.state == "running"
            board = admin.get(f"/proxy/tensorboard/{job.id}/", timeout=START)
            assert board.status_code == 200, board.text[:300]
            workloads = poll(
                "the model server to listen",
                lambda: (
                    (found := _loopback(tag))
                    and "tfkube.serving" in found
                    and _listening(*found["tfkube.serving"])
                    and found
                ),
                START,
            )
        assert set(workloads) == set(LOOPBACK), workloads
        assert server.proc is not None
        loopback = _with_descendants([proc for proc, _ in workloads.values()])
        training = _with_descendants(
            [p for p in tagged_processes(tag) if "tfkube.engines.local" in p.cmdline()[:3]]
        )
        # The job's supervisor, its launcher and the entrypoint (sleep: run.sh execs it);
        # on a machine that confines teams, the sandbox's processes too.
        assert len(training) >= 3, [p.cmdline() for p in training]

        server.proc.send_signal(signum)
        assert server.proc.wait(SHUTDOWN) == 0, server.log.read_text()[-3000:]
        assert not still_running(loopback), [p.cmdline() for p in still_running(loopback)]
        assert not [port for _, port in workloads.values() if port_open(port)]
        assert len(still_running(training)) == len(training), "the job runs on"

        server.start()
        with tfkube.Client(server.url, admin.token, team="default") as c:
            kept = c.find("kept")
            assert kept is not None
            assert kept.phase == "Running"
            again = poll("the model server to come back", lambda: _loopback(tag), START)
            assert set(again) == {"tfkube.serving"}, again  # no TensorBoard, no notebook
            assert c.model_server(model.id).status != "Stopped"
            nb = next(n for n in c.notebooks() if n.id == notebook.id)
            assert nb.state == "stopped"
            assert nb.message == "the server shut down", nb
    finally:
        if server.proc is None or server.proc.poll() is not None:
            server.start()  # stopped by the test: needed to delete the job
        stop_server(server, admin, tag)  # deletes the job through the server, then checks
