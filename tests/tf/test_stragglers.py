"""A straggler found for real: the between-graph example trains with two workers on the
local engine, the test throttles one worker's CPU with a cgroup's CFS quota (v1
`cpu.cfs_quota_us`, v2 `cpu.max`: whichever this machine has), and that worker is flagged
in `tfkube status`, the job's events and its replica's view, with its rate, within 90 s.
The supervisor's CPU and memory samples of each replica are checked on the way: the
throttled worker's CPU falls to its quota.

Needs root (to make a cgroup and move the worker into it): skipped without it, except
under CI=true, where that is a failure."""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from local.test_cli import tfkube
from tfkube import contract
from tfkube.engines.local import LocalBackend
from tfkube.engines.local._cgroups import CgroupLayout, this_machine

from .test_examples import EXAMPLES, example, wait_for_log

pytestmark = pytest.mark.tf

QUOTA_US = 3_000
"""3% of one core: the throttled worker's TensorFlow crawls."""
WINDOW = 15
"""runPolicy.stragglerSeconds for the test (the default is 60)."""
FLAGGED_WITHIN = 90.0


def _layout() -> CgroupLayout:
    layout = this_machine()
    problem = None
    if os.geteuid() != 0:
        problem = "not root: cannot make a cgroup to throttle a worker"
    elif layout is None:
        problem = "no cgroup hierarchy is mounted"
    if problem is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and {problem}", pytrace=False)
        pytest.skip(problem)
    assert layout is not None
    return layout


@contextlib.contextmanager
def throttled_cgroup(layout: CgroupLayout) -> Iterator[Path]:
    """A cgroup holding at most QUOTA_US of CPU per 100 ms: its `cgroup.procs`."""
    name = f"straggler-test-{uuid.uuid4().hex[:8]}"
    folder = layout.folder("cpu", name)
    if layout.version == 2:
        parent = folder.parent
        parent.mkdir(exist_ok=True)
        for level in (parent.parent, parent):
            control = level / "cgroup.subtree_control"
            if "cpu" not in control.read_text().split():
                control.write_text("+cpu")
        folder.mkdir()
        (folder / "cpu.max").write_text(f"{QUOTA_US} 100000")
    else:
        folder.mkdir(parents=True)
        (folder / "cpu.cfs_period_us").write_text("100000")
        (folder / "cpu.cfs_quota_us").write_text(str(QUOTA_US))
    try:
        yield folder / "cgroup.procs"
    finally:
        deadline = time.monotonic() + 30
        while True:
            try:
                folder.rmdir()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        with contextlib.suppress(OSError):
            folder.parent.rmdir()


def usage_of(log_dir: str, replica: str) -> list[list[float]]:
    path = Path(log_dir, *contract.USAGE_SUBDIR, f"{replica}.jsonl")
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_throttled_worker_is_flagged_a_straggler(tfkube_home: Path) -> None:
    layout = _layout()
    backend = LocalBackend(tfkube_home)
    job = example(
        "mnist-between-graph",
        ["--train_steps=1000000", "--checkpoint_steps=1000"],
        stragglerSeconds=WINDOW,
    )
    backend.submit(job, EXAMPLES / "mnist-between-graph")
    try:
        for worker in ("worker-0", "worker-1"):
            wait_for_log(backend, job.name, worker, r"tfkube-steps: \d+")
        with throttled_cgroup(layout) as procs:
            try:
                check_flagged(backend, job.name, procs)
            finally:
                backend.delete(job.name)  # before its cgroup goes: it must be empty
    finally:
        with contextlib.suppress(Exception):
            backend.delete(job.name)


def check_flagged(backend: LocalBackend, name: str, procs: Path) -> None:
    launcher = psutil.Process(backend.get(name).pids["worker-1"])
    for proc in [launcher, *launcher.children(recursive=True)]:
        procs.write_text(str(proc.pid))
    throttled_at = time.monotonic()
    while True:
        view = backend.get(name)
        flagged = {r.key: r for r in view.replicas if r.straggler}
        if flagged:
            break
        assert time.monotonic() - throttled_at < FLAGGED_WITHIN, (
            f"no straggler within {FLAGGED_WITHIN:.0f}s: "
            + ", ".join(f"{r.key} {r.step_rate}" for r in view.replicas)
        )
        assert not view.phase.terminal, view.message
        time.sleep(1)
    took = time.monotonic() - throttled_at
    assert set(flagged) == {"worker-1"}, flagged
    rates = {r.key: r.step_rate for r in view.replicas}
    assert rates["worker-1"] is not None
    assert rates["worker-0"] is not None
    assert rates["worker-1"] < rates["worker-0"] / 3, rates
    print(f"worker-1 flagged {took:.0f}s after its throttle; rates {rates}")

    messages = [e.message for e in backend.events(name)]
    assert any(m.startswith("worker-1 is a straggler: ") for m in messages), messages
    shown = tfkube("status", name).stdout
    row = next(line for line in shown.splitlines() if line.startswith("worker-1 "))
    assert "Straggler" in row, shown
    assert re.search(r"│ \d+\.\d +│", row), shown  # its rate, in steps/s

    # What each replica uses, sampled by the supervisor: the throttled worker's CPU is
    # near its quota now, the other worker's is not.
    log_dir = view.log_dir or ""
    for replica in ("ps-0", "worker-0", "worker-1"):
        assert len(usage_of(log_dir, replica)) >= 3, replica
    assert all(sample[2] > 50_000_000 for sample in usage_of(log_dir, "worker-0")[2:])
    recent = usage_of(log_dir, "worker-1")[-3:]
    assert all(sample[1] < 0.15 for sample in recent), recent  # its quota: 0.03 cores
    assert max(s[1] for s in usage_of(log_dir, "worker-0")) > max(s[1] for s in recent)
