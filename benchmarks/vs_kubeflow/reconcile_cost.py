"""Benchmark: what one reconcile of a big TFJob costs the operator's CPU, side by side in one
run: `observe` without a memo (every pod read, as every reconcile did before 2026-12-04),
`observe` with the TFJob's `ObserveMemo` (only the pods that changed read again) when
nothing changed and when 5 % of the pods changed, and the whole pure reconcile with the
memo. Pure: no cluster, the pods as the operator's informer keeps them (`slim_pod`).

    .venv/bin/python benchmarks/vs_kubeflow/reconcile_cost.py [--sizes 500x4500,1000x10000]

Prints milliseconds per call (the median of --repeat) and each against `observe` without the
memo; the machine is shared, so read the ratios.

    .venv/bin/python benchmarks/vs_kubeflow/reconcile_cost.py --gc [--sizes 1000x10000]

compares Python's garbage-collector thresholds instead: CPU per reconcile over a run of
reconciles with 2 % of the pods changed before each (as during a ramp), once with CPython's
default threshold and once with the operator's (`tune_gc`), each in a fresh process that
has imported what the operator imports (kopf, the Kubernetes client, aiohttp).
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from tfkube.kube.names import INDEX_KEY, LABEL_JOB, LABEL_ROLE
from tfkube.kube.observe import ObserveMemo, Prior, format_time, observe, slim_pod
from tfkube.operator import reconcile
from tfkube.spec import TFJob, parse_job

NOW = 1_800_000_000.0
STARTED = format_time(NOW - 100)


def the_job(ps: int, workers: int) -> TFJob:
    return parse_job(
        {
            "apiVersion": "tfkube.io/v1alpha1",
            "kind": "TFJob",
            "metadata": {"name": "j", "namespace": "ns"},
            "spec": {
                "replicas": {"ps": {"replicas": ps}, "worker": {"replicas": workers}},
                "code": {"source": "http://x/c.tar.gz"},
            },
        }
    )


def role_job(role: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"j-{role}", "uid": f"uid-{role}", "annotations": {}},
        "spec": {},
        "status": {},
    }


def running_pod(role: str, index: int) -> dict[str, Any]:
    """A running replica pod as the API returns it, slimmed as the informer keeps it."""
    return slim_pod(
        {
            "metadata": {
                "name": f"j-{role}-{index}-abcde",
                "namespace": "ns",
                "creationTimestamp": STARTED,
                "labels": {LABEL_JOB: "j", LABEL_ROLE: role, INDEX_KEY: str(index)},
                "annotations": {INDEX_KEY: str(index)},
                "ownerReferences": [{"controller": True, "uid": f"uid-{role}"}],
            },
            "spec": {"schedulerName": "default-scheduler"},
            "status": {
                "phase": "Running",
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": STARTED},
                    {"type": "Ready", "status": "True", "lastTransitionTime": STARTED},
                ],
                "containerStatuses": [
                    {
                        "name": "tensorflow",
                        "ready": True,
                        "state": {"running": {"startedAt": STARTED}},
                    }
                ],
            },
        }
    )


def tfjob_objects() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The running TFJob as the operator reads it, and its rendered role Jobs."""
    tfjob = {
        "metadata": {"name": "j", "namespace": "ns", "uid": "u", "generation": 1},
        "status": {"phase": "Running", "startTime": STARTED},
    }
    rendered = [
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"j-{r}", "namespace": "ns"}}
        for r in ("ps", "worker")
    ]
    return tfjob, rendered


def median_ms(call: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def measure(ps: int, workers: int, repeat: int) -> list[tuple[str, float]]:
    job = the_job(ps, workers)
    jobs = [role_job("ps"), role_job("worker")]
    pods = [running_pod("ps", i) for i in range(ps)]
    pods += [running_pod("worker", i) for i in range(workers)]
    prior = Prior()
    memo = ObserveMemo()
    observe(job, prior, jobs, pods, NOW, memo=memo)
    rng = random.Random(0)

    def some_changed() -> None:
        for i in rng.sample(range(len(pods)), len(pods) // 20):
            pods[i] = dict(pods[i])  # a new object, as the informer replaces a changed pod
        observe(job, prior, jobs, pods, NOW, memo=memo)

    tfjob, rendered = tfjob_objects()
    tfjob["status"] = reconcile(tfjob, job, jobs, pods, rendered, NOW, memo=memo).status
    return [
        ("observe, no memo", median_ms(lambda: observe(job, prior, jobs, pods, NOW), repeat)),
        (
            "observe, memo, nothing changed",
            median_ms(lambda: observe(job, prior, jobs, pods, NOW, memo=memo), repeat),
        ),
        ("observe, memo, 5 % of the pods changed", median_ms(some_changed, repeat)),
        (
            "reconcile, memo, nothing changed",
            median_ms(lambda: reconcile(tfjob, job, jobs, pods, rendered, NOW, memo=memo), repeat),
        ),
        (
            "reconcile, no memo",
            median_ms(lambda: reconcile(tfjob, job, jobs, pods, rendered, NOW), repeat),
        ),
    ]


GC_MODES = ("CPython's default", "the operator's (tune_gc)")


def gc_child(mode: str, ps: int, workers: int, reconciles: int) -> None:
    """One side of `--gc`, in its own process: prints CPU ms per reconcile and how many
    collections of each generation ran during the reconciles."""
    import aiohttp  # noqa: F401  what the operator's process holds besides the job
    import kopf  # noqa: F401
    import kubernetes  # noqa: F401

    from tfkube.operator._operator import tune_gc

    job = the_job(ps, workers)
    jobs = [role_job("ps"), role_job("worker")]
    pods = [running_pod("ps", i) for i in range(ps)]
    pods += [running_pod("worker", i) for i in range(workers)]
    memo = ObserveMemo()
    tfjob, rendered = tfjob_objects()
    tfjob["status"] = reconcile(tfjob, job, jobs, pods, rendered, NOW, memo=memo).status
    if mode == GC_MODES[1]:
        tune_gc()
    rng = random.Random(0)
    before = [each["collections"] for each in gc.get_stats()]
    started = time.process_time()
    for _ in range(reconciles):
        for i in rng.sample(range(len(pods)), len(pods) // 50):
            pods[i] = dict(pods[i])  # a new object, as the informer replaces a changed pod
        reconcile(tfjob, job, jobs, pods, rendered, NOW, memo=memo)
    ms = (time.process_time() - started) * 1000 / reconciles
    runs = [each["collections"] - b for each, b in zip(gc.get_stats(), before, strict=True)]
    print(f"{ms:.1f} {' '.join(map(str, runs))}")


def gc_rows(sizes: str, reconciles: int) -> None:
    print(
        "| replicas | gc threshold | CPU ms per reconcile | x default"
        " | collections (young, middle, full) |"
    )
    print("| --- | --- | --- | --- | --- |")
    for size in sizes.split(","):
        ps, workers = (int(n) for n in size.split("x"))
        base = 0.0
        for mode in GC_MODES:
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--gc-child",
                    mode,
                    "--sizes",
                    size,
                    "--repeat",
                    str(reconciles),
                ],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.split()
            ms, runs = float(out[0]), ", ".join(f"{int(n):,}" for n in out[1:])
            base = base or ms
            print(f"| {ps + workers:,} | {mode} | {ms:.1f} | {ms / base:.2f} | {runs} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100x1000,500x4500,1000x10000")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--gc", action="store_true", help="compare the gc thresholds")
    parser.add_argument("--gc-child", choices=GC_MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.gc_child:
        ps, workers = (int(n) for n in args.sizes.split("x"))
        gc_child(args.gc_child, ps, workers, args.repeat)
        return 0
    if args.gc:
        gc_rows(args.sizes, max(args.repeat, 30))
        return 0
    print("| replicas | what | ms per call | x observe without memo |")
    print("| --- | --- | --- | --- |")
    for size in args.sizes.split(","):
        ps, workers = (int(n) for n in size.split("x"))
        rows = measure(ps, workers, args.repeat)
        base = rows[0][1]
        for what, ms in rows:
            print(f"| {ps + workers:,} | {what} | {ms:.1f} | {ms / base:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
