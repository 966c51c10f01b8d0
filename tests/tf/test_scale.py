"""`tfkube scale` for real: the between-graph example trains on the local engine and is
resized 2 -> 4 -> 1 workers while it trains, through the CLI. The added workers join the
running job (their own logs show their steps), the removed ones stop between steps
without a failure or a restart, the PS keeps serving, and the job succeeds with its
accuracy. A job that cannot be resized (no PS) is refused with the field named."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import yaml

from local.test_cli import tfkube, write_job
from tfkube.engines.local import LocalBackend
from tfkube.planner import JobPhase, ReplicaState

from .test_examples import (
    EXAMPLES,
    MIN_ACCURACY,
    event_time,
    events,
    example,
    result_of,
    wait_for_log,
)

pytestmark = pytest.mark.tf

# 0.1 s a step: about 10 steps/s per worker, so the job is still training when the
# new workers have started (TensorFlow takes seconds to import) and when it shrinks.
ARGS = ["--train_steps=800", "--step_sleep=0.1", "--checkpoint_steps=200"]


def _log(home: Path, name: str, replica: str) -> str:
    return (home / "jobs" / name / "logs" / f"{replica}.log").read_text()


def _steps(text: str) -> int:
    """The replica's own steps, from its last `tfkube-steps: N` line (0 without one)."""
    found = re.findall(r"^tfkube-steps: (\d+)$", text, re.MULTILINE)
    return int(found[-1]) if found else 0


def test_a_job_scaled_2_4_1_while_it_trains_succeeds_without_a_restart(
    tfkube_home: Path,
) -> None:
    backend = LocalBackend(tfkube_home)
    job = example("mnist-between-graph", ARGS, backoff={"baseSeconds": 0.5})
    name = job.name
    backend.submit(job, EXAMPLES / "mnist-between-graph")
    wait_for_log(backend, name, "worker-1", r"^tfkube-steps: \d+")

    started = time.monotonic()
    up = tfkube("scale", name, "--workers", "4")
    assert up.returncode == 0, up.stderr
    assert "now has 4 workers" in up.stdout
    view = backend.get(name)
    assert [r.key for r in view.replicas] == [
        "ps-0",
        "worker-0",
        "worker-1",
        "worker-2",
        "worker-3",
    ]
    # The new workers join the running job: each trains steps of its own.
    for key in ("worker-2", "worker-3"):
        wait_for_log(backend, name, key, r"^tfkube-steps: \d+", timeout=300)
    joined = time.monotonic() - started
    assert backend.get(name).phase is JobPhase.RUNNING

    shrinking = time.monotonic()
    down = tfkube("scale", name, "--workers", "1")
    shrunk = time.monotonic() - shrinking
    assert down.returncode == 0, down.stderr
    view = backend.get(name)
    assert [r.key for r in view.replicas] == ["ps-0", "worker-0"]
    assert view.phase is JobPhase.RUNNING, view.message

    view = backend.wait(name, timeout=600)
    assert view.phase is JobPhase.SUCCEEDED, view.message
    assert view.message == "worker-0 succeeded"
    assert view.restarts == 0
    assert {r.key: (r.state, r.restarts) for r in view.replicas} == {
        "ps-0": (ReplicaState.STOPPED, 0),
        "worker-0": (ReplicaState.SUCCEEDED, 0),
    }
    result = result_of(view)
    assert result["test_accuracy"] >= MIN_ACCURACY
    assert result["global_step"] >= 800

    evs = events(backend, name)
    messages = [str(e["message"]) for e in evs]
    stopped = event_time(evs, "scaled from 4 to 1") - event_time(evs, "stopping worker-1")
    assert "scaled from 2 to 4 workers: added worker-2, worker-3" in messages
    assert "scaled from 4 to 1 workers: stopped worker-1, worker-2, worker-3" in messages
    for key in ("worker-1", "worker-2", "worker-3"):
        assert f"stopping {key}: scaled down" in messages
        # Stopped on request: no exit reported as news, nothing restarted.
        assert not any(m.startswith(f"{key} exited") for m in messages), messages
        assert not any(f"{key} failed" in m for m in messages), messages
        log = _log(tfkube_home, name, key)
        assert _steps(log) > 0, f"{key} trained no step"
        # The example leaves between steps on SIGTERM (its `on_stop`).
        assert re.search(rf"^worker {key[-1]}: stopped between steps after \d+ steps", log, re.M)
    assert not any("restart" in m and "restart 0" not in m for m in messages), messages
    ps_log = _log(tfkube_home, name, "ps-0")
    assert ps_log.count("start (restart") == 1, "the PS was started more than once"
    print(
        f"[scale] 2 -> 4: both new workers trained within {joined:.1f}s of `tfkube scale`; "
        f"4 -> 1: `tfkube scale` returned after {shrunk:.1f}s, the 3 workers stopped in "
        f"{stopped:.2f}s; "
        f"global_step {result['global_step']}, accuracy {result['test_accuracy']}"
    )


def test_a_job_without_ps_is_not_scaled_and_the_field_is_named(
    tfkube_home: Path, tmp_path: Path
) -> None:
    path = write_job(tmp_path, "no-ps", "exec sleep 60\n")
    raw = yaml.safe_load(path.read_text())
    del raw["spec"]["replicas"]["ps"]
    path.write_text(yaml.safe_dump(raw))
    started = tfkube("run", str(path), "--detach")
    assert started.returncode == 0, started.stderr
    try:
        refused = tfkube("scale", "no-ps", "--workers", "3")
        assert refused.returncode == 2, refused.stdout
        assert "spec.replicas.ps" in refused.stderr
        assert "no parameter servers" in refused.stderr
        zero = tfkube("scale", "no-ps", "--workers", "0")
        assert "workers: 0 is out of range" in zero.stderr
        view = LocalBackend(tfkube_home).get("no-ps")
        assert [r.key for r in view.replicas] == ["worker-0", "worker-1"]
    finally:
        assert tfkube("delete", "no-ps").returncode == 0
