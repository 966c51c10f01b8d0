"""Faults with real TensorFlow replicas: the job's supervisor SIGKILLed mid-training leaves
no replica behind (each launcher sees its parent gone and ends its replica)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from tfkube.engines.local import LocalBackend
from tfkube.planner import JobPhase

from .test_examples import EXAMPLES, SLOW, example, training_process, wait_for_log

pytestmark = [pytest.mark.tf, pytest.mark.faults]

GONE_WITHIN = 120.0
"""Generous: measured ~2-3 s idle (docs/reliability.md); this only catches a leak."""


def test_a_killed_supervisor_leaves_no_tensorflow_replica(tfkube_home: Path) -> None:
    backend = LocalBackend(tfkube_home)
    job = example("mnist-between-graph", SLOW)
    backend.submit(job, EXAMPLES / "mnist-between-graph")
    wait_for_log(backend, job.name, "worker-1", r"global_step=\d+ loss")
    trees = []
    view = backend.get(job.name)
    assert set(view.pids) == {r.key for r in view.replicas}
    for pid in view.pids.values():
        launcher = psutil.Process(pid)
        trees += [launcher, *launcher.children(recursive=True)]
    assert training_process(backend, job.name, "ps-0") in trees
    supervisor = backend._dir(job.name).read().supervisor
    assert supervisor is not None

    killed = time.monotonic()
    os.kill(supervisor.pid, signal.SIGKILL)
    _, alive = psutil.wait_procs(trees, timeout=GONE_WITHIN)
    took = time.monotonic() - killed
    assert not alive, f"left behind: {[p.pid for p in alive]}"
    print(f"\nall {len(trees)} replica processes gone {took:.1f}s after the SIGKILL")

    view = backend.get(job.name)
    assert view.phase is JobPhase.FAILED
    assert view.reason == "SupervisorLost"
    assert view.done
