"""Benchmark: one TFJob with many PS and workers on KWOK fake nodes, run by the operator.

Starts a private test control plane (tools/kube/cluster.py, with fake nodes big enough for
every pod), installs the CRD, runs `tfkube operator` as a subprocess, submits one job
(`--ps` PS, `--workers` workers that finish `--duration` after they start, success policy
AllWorkers) through `KubernetesBackend`, and measures from submit:
  - all replicas Running at once, the job Succeeded, and every PS pod gone;
  - PS clean-up: from the TFJob seen Succeeded (polled every 0.2 s) to no PS pod left (not
    even terminating), and from the last worker's `finishedAt` (API time, 1 s grain);
  - the API objects the operator itself created (from its log: creates and events), which
    should not depend on the replica count (one Job per role, not one object per replica);
  - the operator's peak RSS (VmHWM).
A small job (1 PS, 2 workers) is run first in the same cluster for comparison.

    .venv/bin/python benchmarks/cluster_scale/run.py [--ps 100] [--workers 1000]

Needs the control plane binaries (`make kube-bins`). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from kubernetes import client, config

from tfkube.api import parse_job
from tfkube.backends.kubernetes import KubernetesBackend, install
from tfkube.kube.names import GROUP, PLURAL, VERSION

ROOT = Path(__file__).resolve().parents[2]


def cluster_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "tfkube_kube_cluster", ROOT / "tools/kube/cluster.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def job_spec(name: str, ps: int, workers: int, duration: str) -> dict[str, Any]:
    return {
        "apiVersion": "tfkube.io/v1alpha1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {
            "replicas": {
                "ps": {"replicas": ps},
                "worker": {
                    "replicas": workers,
                    "annotations": {"tfkube.io/fake-duration": duration},
                },
            },
            "code": {"source": "./code"},
            "runPolicy": {"successPolicy": "AllWorkers"},
        },
    }


def bind_volumes(core: Any, namespace: str, job: str) -> None:
    for which in ("data", "logs"):
        core.create_persistent_volume(
            client.V1PersistentVolume(
                metadata=client.V1ObjectMeta(name=f"{namespace}-{job}-{which}"),
                spec=client.V1PersistentVolumeSpec(
                    capacity={"storage": "100Gi"},
                    access_modes=["ReadWriteMany"],
                    persistent_volume_reclaim_policy="Retain",
                    host_path=client.V1HostPathVolumeSource(path=f"/tmp/tfkube-bench/{job}"),
                    claim_ref=client.V1ObjectReference(namespace=namespace, name=f"{job}-{which}"),
                ),
            )
        )


def phases(core: Any, namespace: str, selector: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for pod in core.list_namespaced_pod(namespace, label_selector=selector).items:
        if pod.metadata.deletion_timestamp is None:
            out[pod.status.phase] = out.get(pod.status.phase, 0) + 1
    return out


def operator_ops(log: Path, job: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in log.read_text().splitlines():
        marker = f"/{job}: "
        if marker in line:
            op = line.split(marker, 1)[1].split("(", 1)[0]
            counts[op] = counts.get(op, 0) + 1
    return counts


def run_job(
    api: Any, namespace: str, code: Path, log: Path, name: str, ps: int, workers: int, duration: str
) -> dict[str, Any]:
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    bind_volumes(core, namespace, name)
    backend = KubernetesBackend(api_client=api, namespace=namespace)
    total = ps + workers
    t0 = time.monotonic()
    backend.submit(parse_job(job_spec(name, ps, workers, duration)), code)
    submitted = time.monotonic() - t0
    sel = f"tfkube.io/job-name={name},tfkube.io/replica-type"
    result: dict[str, Any] = {"name": name, "ps": ps, "workers": workers, "submit_s": submitted}
    while True:
        counts = phases(core, namespace, sel)
        if counts.get("Running", 0) == total:
            result["all_running_s"] = time.monotonic() - t0
            break
        if counts.get("Succeeded"):
            result["all_running_s"] = None  # workers finished before the last one started
            break
        time.sleep(0.25)
    while True:
        status = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        phase = (status.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            result["phase"] = phase
            result["success_s"] = time.monotonic() - t0
            break
        time.sleep(0.2)
    ps_selector = f"tfkube.io/job-name={name},tfkube.io/replica-type=ps"
    while core.list_namespaced_pod(namespace, label_selector=ps_selector).items:
        time.sleep(0.1)  # gone means gone: terminating pods count as still there
    gone_wall = time.time()
    result["ps_gone_s"] = time.monotonic() - t0
    pods = core.list_namespaced_pod(
        namespace, label_selector=f"tfkube.io/job-name={name},tfkube.io/replica-type=worker"
    ).items
    last_finish = max(
        p.status.container_statuses[0].state.terminated.finished_at.timestamp() for p in pods
    )
    result["ps_cleanup_s"] = gone_wall - last_finish
    time.sleep(1.0)  # let the last status write and events land in the log
    result["operator_ops"] = operator_ops(log, name)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ps", type=int, default=100)
    parser.add_argument("--workers", type=int, default=1000)
    parser.add_argument("--duration", default="60s", help="fake worker run time")
    parser.add_argument("--nodes", type=int, default=6)
    args = parser.parse_args()
    kube = cluster_module()
    per_node = (args.ps + args.workers + 50) // args.nodes + 20
    nodes = [
        kube.NodeSpec(f"tfkube-cpu-{i}", f"127.0.1.{i + 1}", pods=str(per_node))
        for i in range(args.nodes)
    ]
    cluster = kube.Cluster(nodes=nodes, die_with_parent=True)
    state = cluster.start()
    op: subprocess.Popen[bytes] | None = None
    try:
        api = config.new_client_from_config(config_file=state.kubeconfig)
        install(api)
        namespace = "bench"
        client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace))
        )
        with tempfile.TemporaryDirectory(prefix="tfkube-bench-") as tmp:
            work = Path(tmp)
            (work / "code").mkdir()
            (work / "code" / "run.sh").write_text("#!/bin/sh\necho training\n")
            log = work / "operator.log"
            with log.open("wb") as out:
                op = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "tfkube",
                        "operator",
                        "--kubeconfig",
                        state.kubeconfig,
                        "--namespace",
                        namespace,
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=ROOT,
                )
            while "watching" not in log.read_text():
                time.sleep(0.1)
            time.sleep(1.0)
            small = run_job(api, namespace, work, log, "small", 1, 2, "3s")
            big = run_job(api, namespace, work, log, "big", args.ps, args.workers, args.duration)
            rss = peak_rss_mib(op.pid)
            errors = [line for line in log.read_text().splitlines() if "Traceback" in line]
    finally:
        if op is not None and op.poll() is None:
            op.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                op.wait(20)
            if op.poll() is None:
                op.kill()
        cluster.stop()

    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    print(
        "| job | replicas | submit s | all running s | succeeded s | PS gone s |"
        " PS gone after success s | PS gone after last worker s | operator creates |"
        " operator events |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in (small, big):
        ops = r["operator_ops"]
        print(
            f"| {r['name']} ({r['phase']}) | {r['ps']} PS + {r['workers']} workers |"
            f" {fmt(r['submit_s'])} | {fmt(r['all_running_s'])} | {fmt(r['success_s'])} |"
            f" {fmt(r['ps_gone_s'])} | {fmt(r['ps_gone_s'] - r['success_s'])} |"
            f" {fmt(r['ps_cleanup_s'])} | {ops.get('Create', 0)} |"
            f" {ops.get('Event', 0)} |"
        )
    print(
        f"\noperator peak RSS: {rss:.0f} MiB; operator ops per job: "
        f"small {small['operator_ops']}, big {big['operator_ops']}"
    )
    if errors:
        print(f"operator logged {len(errors)} tracebacks")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
