"""The examples, trained for real with TensorFlow processes on this machine: they reach a
stated accuracy, the PS is ended within seconds of success, and training survives a
killed worker and a killed PS (resuming from the last checkpoint)."""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from tfkube.engines import JobView
from tfkube.engines.local import LocalBackend
from tfkube.planner import JobPhase, ReplicaState
from tfkube.spec import TFJob, parse_job

pytestmark = pytest.mark.tf

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MIN_ACCURACY = 0.90


def example(name: str, worker_args: list[str] | None = None, **policy: Any) -> TFJob:
    raw = yaml.safe_load((EXAMPLES / name / "job.yaml").read_text())
    if worker_args is not None:
        raw["spec"]["replicas"]["worker"]["args"] = worker_args
    raw["spec"]["runPolicy"].update(policy)
    return parse_job(raw)


def events(backend: LocalBackend, name: str) -> list[dict[str, Any]]:
    path = backend.home / "jobs" / name / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def event_time(evs: list[dict[str, Any]], text: str) -> float:
    return next(float(e["time"]) for e in evs if text in e["message"])


def result_of(view: JobView) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(Path(view.log_dir or "", "result.json").read_text())
    return result


def wait_for_log(
    backend: LocalBackend, name: str, replica: str, pattern: str, timeout: float = 600
) -> re.Match[str]:
    deadline = time.monotonic() + timeout
    regex = re.compile(pattern)
    while time.monotonic() < deadline:
        for line in backend.logs(name, replica):
            if m := regex.search(line):
                return m
        view = backend.get(name)
        assert not view.phase.terminal, f"job ended before {pattern!r}: {view.message}"
        time.sleep(0.3)
    raise AssertionError(f"{replica} never logged {pattern!r}")


def training_process(backend: LocalBackend, name: str, replica: str) -> psutil.Process:
    """The TensorFlow process of a replica (below its launcher)."""
    pid = backend.get(name).pids.get(replica)  # the launcher of that replica
    assert pid is not None
    for child in psutil.Process(pid).children(recursive=True):
        if any(part.endswith("train.py") for part in child.cmdline()):
            return child
    raise AssertionError(f"no train.py below {replica}")


def latest_checkpoint_step(log_dir: str) -> int:
    index = Path(log_dir, "checkpoint")
    if not index.exists():
        return -1
    m = re.search(r'model_checkpoint_path: ".*?(\d+)"', index.read_text())
    return int(m.group(1)) if m else -1


def test_between_graph_example_trains_and_ends_the_ps(tfkube_home: Path) -> None:
    backend = LocalBackend(tfkube_home)
    job = example("mnist-between-graph")
    backend.submit(job, EXAMPLES / "mnist-between-graph")
    view = backend.wait(job.name, timeout=600)

    assert view.phase is JobPhase.SUCCEEDED, view.message
    result = result_of(view)
    assert result["test_accuracy"] >= MIN_ACCURACY
    assert result["global_step"] >= 1000
    for worker in ("worker-0", "worker-1"):
        steps = wait_for_log_after_end(backend, job.name, worker, r"worker \d: (\d+) steps in")
        assert int(steps) > 0, f"{worker} did not train"
    assert latest_checkpoint_step(view.log_dir or "") >= 1000
    assert any(Path(view.log_dir or "").glob("events.out.tfevents.*")), "no TensorBoard events"

    ps = next(r for r in view.replicas if r.key == "ps-0")
    assert ps.state is ReplicaState.STOPPED
    evs = events(backend, job.name)
    lag = event_time(evs, "supervisor exits") - event_time(evs, "worker-0 exited with code 0")
    # "Within seconds": milliseconds when idle, a few seconds on a loaded machine.
    assert lag < 10, f"the PS was ended {lag:.1f}s after success"


def wait_for_log_after_end(backend: LocalBackend, name: str, replica: str, pattern: str) -> str:
    for line in backend.logs(name, replica):
        if m := re.search(pattern, line):
            return m.group(1)
    raise AssertionError(f"{replica} never logged {pattern!r}")


def test_ps_strategy_example_trains(tfkube_home: Path) -> None:
    backend = LocalBackend(tfkube_home)
    job = example("ps-strategy")
    backend.submit(job, EXAMPLES / "ps-strategy")
    view = backend.wait(job.name, timeout=600)

    assert view.phase is JobPhase.SUCCEEDED, view.message
    assert view.message == "chief-0 succeeded"
    result = result_of(view)
    assert result["test_accuracy"] >= MIN_ACCURACY
    assert result["global_step"] >= 600
    states = {r.key: r.state for r in view.replicas}
    assert states == {
        "chief-0": ReplicaState.SUCCEEDED,
        "ps-0": ReplicaState.STOPPED,
        "worker-0": ReplicaState.STOPPED,
        "worker-1": ReplicaState.STOPPED,
    }


SLOW = ["--train_steps=3000", "--step_sleep=0.01", "--checkpoint_steps=100"]


def test_a_killed_worker_is_restarted_and_the_job_succeeds(tfkube_home: Path) -> None:
    backend = LocalBackend(tfkube_home)
    job = example("mnist-between-graph", SLOW, backoff={"baseSeconds": 0.5})
    backend.submit(job, EXAMPLES / "mnist-between-graph")
    wait_for_log(backend, job.name, "worker-1", r"global_step=\d+ loss")
    training_process(backend, job.name, "worker-1").send_signal(signal.SIGKILL)

    view = backend.wait(job.name, timeout=600)
    assert view.phase is JobPhase.SUCCEEDED, view.message
    restarts = {r.key: r.restarts for r in view.replicas}
    assert restarts == {"ps-0": 0, "worker-0": 0, "worker-1": 1}
    assert result_of(view)["test_accuracy"] >= MIN_ACCURACY


def test_a_killed_ps_restarts_its_users_which_resume_from_the_checkpoint(
    tfkube_home: Path,
) -> None:
    backend = LocalBackend(tfkube_home)
    job = example("mnist-between-graph", SLOW, backoff={"baseSeconds": 0.5})
    backend.submit(job, EXAMPLES / "mnist-between-graph")
    log_dir = backend.get(job.name).log_dir or ""
    deadline = time.monotonic() + 600
    while latest_checkpoint_step(log_dir) < 300:
        assert time.monotonic() < deadline, "no checkpoint was written"
        time.sleep(0.2)
    checkpointed = latest_checkpoint_step(log_dir)
    training_process(backend, job.name, "ps-0").send_signal(signal.SIGKILL)

    view = backend.wait(job.name, timeout=600)
    assert view.phase is JobPhase.SUCCEEDED, view.message
    restarts = {r.key: r.restarts for r in view.replicas}
    assert restarts["ps-0"] == 1
    assert restarts["worker-0"] == 1, "the chief must restart with the PS"
    ready = [
        int(m.group(1))
        for line in backend.logs(job.name, "worker-0")
        if (m := re.search(r"session ready at global_step=(\d+)", line))
    ]
    assert len(ready) == 2, ready  # before the PS was killed, and after the restart
    restored = [
        int(m.group(1))
        for line in backend.logs(job.name, "worker-0")
        if (m := re.search(r"restoring model.ckpt-(\d+)", line))
    ]
    assert len(restored) == 1, "the chief restores once, after the PS restart"
    assert restored[0] >= checkpointed > 0, "training resumes from the checkpoint, not 0"
    assert ready[1] >= restored[0], "the global step after recovery is the checkpointed one"
    assert result_of(view)["global_step"] >= 3000
