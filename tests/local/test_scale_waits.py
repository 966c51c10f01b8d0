"""`scale` on the local engine waits for the job's supervisor as long as it lives, and no
longer once it is gone. A supervisor held back (here: SIGSTOP for 25 s, the starved
supervisor of a loaded 2-core CI machine) resized the job seconds after the old 20 s
wait had failed the command (tests/tf/test_scale.py failed so in a CI run); a dead one
said nothing until that wait ran out."""

from __future__ import annotations

import threading
import time

import psutil
import pytest

from tfkube.engines.local import LocalBackend
from tfkube.planner import ReplicaState

from .conftest import MakeJob

SLEEPER = """
echo "up"
exec sleep 600
"""


def _running(backend: LocalBackend, name: str, workers: int) -> psutil.Process:
    """Wait until the job's PS and `workers` workers run; -> its supervisor."""
    deadline = time.monotonic() + 60
    while True:
        view = backend.get(name)
        states = [r.state for r in view.replicas]
        if len(states) == 1 + workers and all(s is ReplicaState.RUNNING for s in states):
            break
        assert time.monotonic() < deadline, view
        time.sleep(0.2)
    supervisor = backend._dir(name).read().supervisor
    assert supervisor is not None
    return psutil.Process(supervisor.pid)


def test_scale_waits_for_a_supervisor_held_back(backend: LocalBackend, make_job: MakeJob):
    job, base = make_job("held", SLEEPER, workers=2, ps=1)
    backend.submit(job, base)
    supervisor = _running(backend, job.name, 2)
    supervisor.suspend()
    resume = threading.Timer(25, supervisor.resume)
    resume.start()
    try:
        started = time.monotonic()
        view = backend.scale(job.name, 1)
        took = time.monotonic() - started
    finally:
        resume.cancel()
        supervisor.resume()
        backend.stop(job.name)
    assert took >= 24, took
    assert [r.key for r in view.replicas] == ["ps-0", "worker-0"]


def test_scale_stops_waiting_when_the_supervisor_is_gone(
    backend: LocalBackend, make_job: MakeJob
) -> None:
    job, base = make_job("orphan", SLEEPER, workers=2, ps=1)
    backend.submit(job, base)
    supervisor = _running(backend, job.name, 2)
    supervisor.suspend()
    threading.Timer(1, supervisor.kill).start()
    started = time.monotonic()
    try:
        with pytest.raises(TimeoutError, match="supervisor ended before it resized"):
            backend.scale(job.name, 1)
    finally:
        backend.stop(job.name)  # its replicas, by the trees the record names
    assert time.monotonic() - started < 15
    assert not backend._dir(job.name).scale_requested.exists()
