"""Benchmark: what one LIST of a namespace's `Preempted` Events costs the control plane when
the namespace holds many other Events (the scheduler's and the Job controller's, one or two
per pod: 10,000 at 5,000 replicas). The operator made this LIST at every reconcile of a live
job until 2026-12-04; it now makes it only after a pod of the job went
(`tfkube.operator._operator.JobMemory.read_events`).

    .venv/bin/python benchmarks/vs_kubeflow/event_list_cost.py [--events 10000] [--lists 50]

Starts the test control plane (`make kube-bins`; loopback only), posts --events Events of
pods in one namespace, then LISTs the namespace's Events with the operator's field selector
--lists times, and prints each LIST's wall time and the API server's and etcd's CPU per
LIST (from /proc), with and without `resourceVersion=0`. Stops the control plane by its PIDs.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

from run import cluster_module, cpu_seconds

from tfkube.kube.observe import PREEMPTED_EVENT

NAMESPACE = "events"
SELECTOR = f"involvedObject.kind%3DPod%2Creason%3D{PREEMPTED_EVENT}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--lists", type=int, default=50)
    args = parser.parse_args()
    kube = cluster_module()
    cluster = kube.Cluster(nodes=[kube.NodeSpec("n0", "127.0.1.1")], die_with_parent=True)
    state = cluster.start()
    try:
        pids = {p.name: p.pid for p in state.procs}
        cluster.api("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})

        def post(i: int) -> None:
            cluster.api(
                "POST",
                f"/api/v1/namespaces/{NAMESPACE}/events",
                {
                    "metadata": {"name": f"scheduled-{i}"},
                    "involvedObject": {"kind": "Pod", "name": f"p{i}", "namespace": NAMESPACE},
                    "reason": "Scheduled",
                    "message": f"Successfully assigned {NAMESPACE}/p{i} to n0",
                    "type": "Normal",
                },
            )

        started = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(post, range(args.events)))
        print(f"{args.events:,} Events posted in {time.monotonic() - started:.1f} s")
        print("| LIST | wall ms | API server CPU ms | etcd CPU ms | items |")
        print("| --- | --- | --- | --- | --- |")
        for extra in ("", "&resourceVersion=0"):
            path = f"/api/v1/namespaces/{NAMESPACE}/events?fieldSelector={SELECTOR}{extra}"
            api0, etcd0 = cpu_seconds(pids["kube-apiserver"]), cpu_seconds(pids["etcd"])
            started = time.monotonic()
            for _ in range(args.lists):
                found = cluster.api("GET", path)
            wall = (time.monotonic() - started) / args.lists * 1000
            api = (cpu_seconds(pids["kube-apiserver"]) - api0) / args.lists * 1000
            etcd = (cpu_seconds(pids["etcd"]) - etcd0) / args.lists * 1000
            label = "Preempted Events" + (", resourceVersion=0" if extra else "")
            print(f"| {label} | {wall:.1f} | {api:.1f} | {etcd:.1f} | {len(found['items'])} |")
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
