"""`--cpus N`: the whole benchmark (control plane, fake kubelet, runners, its own watches)
under one CPU quota of N cores, a cgroup-v1 `cpu` group made for the run and removed after
it; `--runner-unquoted`: each runner's own process (tfkube's operator, the floor's client,
Kubeflow's operator) is moved out of the quota as soon as it starts.

A saturated machine made reproducible without loading it: on the shared 2-core machine
the control plane and the operator compete for the same CPU, and the quota shows what that
competition costs (docs/benchmarks.md, "Why 1.45-1.51x the floor"). cgroup v2 is not
handled (this machine's `cpu` controller is v1's); the benchmark says so and stops.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

ROOT = Path("/sys/fs/cgroup/cpu")
PARENT_ENV = "TFKUBE_BENCH_CPU_PARENT"
"""Set for the benchmark's processes when the runners must run outside the quota: the
`cgroup.procs` file to move them into."""
PERIOD_US = 100_000


@contextlib.contextmanager
def quota(cpus: float, runner_unquoted: bool) -> Iterator[None]:
    """This process and everything it starts from now on run within `cpus` cores."""
    if not (ROOT / "cpu.cfs_quota_us").exists():
        raise SystemExit(f"--cpus needs the cgroup-v1 cpu controller at {ROOT} (and root)")
    group = ROOT / f"tfkube-bench-{os.getpid()}"
    try:
        group.mkdir()
    except OSError as exc:
        raise SystemExit(f"--cpus: cannot make the cgroup {group} (root?): {exc}") from exc
    try:
        (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (group / "cpu.cfs_quota_us").write_text(str(int(cpus * PERIOD_US)))
        (group / "cgroup.procs").write_text(str(os.getpid()))
        if runner_unquoted:
            os.environ[PARENT_ENV] = str(ROOT / "cgroup.procs")
        yield
    finally:
        os.environ.pop(PARENT_ENV, None)
        (ROOT / "cgroup.procs").write_text(str(os.getpid()))
        try:
            group.rmdir()  # empty again: every process started in it has ended
        except OSError as exc:
            print(f"cpu quota group {group} left: {exc}", flush=True)


def release(pid: int) -> None:
    """Move a runner's process out of the quota, when asked to (`--runner-unquoted`)."""
    procs = os.environ.get(PARENT_ENV)
    if procs:
        Path(procs).write_text(str(pid))
