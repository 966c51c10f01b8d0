"""The floor: a plain client doing an operator's job by brute force, as fast as the API
server lets it. Run by run.py as its own process (so its CPU and memory are measured like
an operator's):

    floor.py --kubeconfig K --namespace NS --objects objects.json [--parallel 250]

It prints "ready" and waits for a line on stdin (the benchmark's clock starts there), then
creates the job's few shared objects, then every pod at once (at most `--parallel`
requests in flight), follows the pods with a WATCH until every worker succeeded, and deletes
every PS pod (all at once too). No controller, no Job, no retry logic: nothing any operator
could do is faster, so its figures are the limit both operators are measured against.

Given role Jobs instead of pods (run.py's `floor-jobs`), it creates them as they are, and
Kubernetes' Job controller makes the pods; at the end it deletes the PS Jobs (their pods in
the background). That is what any operator built on Jobs cannot do without: its figures
split what Kubernetes' Job controller costs from what an operator adds to it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from _api import Api, Identity

from tfkube.kube.names import INDEX_KEY, JOB_NAME_KEY
from tfkube.kube.resources import JOB, POD, resource_for

ROLE_LABEL = "tfkube.io/replica-type"


def _role(obj: dict[str, Any]) -> str | None:
    return (obj["metadata"].get("labels") or {}).get(ROLE_LABEL)


def _replica(pod: dict[str, Any]) -> str:
    """A pod's replica: its name, or for a Job's pod (a made-up name) its Job and index."""
    meta = pod["metadata"]
    job = (meta.get("labels") or {}).get(JOB_NAME_KEY)
    if job is None:
        return str(meta["name"])
    return f"{job}-{(meta.get('annotations') or {}).get(INDEX_KEY)}"


async def run(
    identity: Identity, namespace: str, objects: list[dict[str, Any]], parallel: int
) -> None:
    shared = [o for o in objects if o["kind"] not in ("Pod", "Job")]
    pods = [o for o in objects if o["kind"] == "Pod"]
    jobs = [o for o in objects if o["kind"] == "Job"]
    adopt = bool(pods and jobs)  # floor-adopt: the pods first, then Jobs adopting them
    workers = sum(1 for p in pods if _role(p) == "worker")
    if not adopt:
        workers += sum(j["spec"]["completions"] for j in jobs if _role(j) == "worker")
    done = asyncio.Event()
    succeeded: set[str] = set()

    def on_pod(kind: str, pod: dict[str, Any]) -> None:
        if _role(pod) == "worker" and (pod.get("status") or {}).get("phase") == "Succeeded":
            succeeded.add(_replica(pod))
            if len(succeeded) >= workers:
                done.set()

    async with Api(identity, connections=parallel) as api:

        async def post(objs: list[dict[str, Any]]) -> None:
            for obj in objs:  # PVCs, ConfigMaps, Services (and Jobs): a handful
                path = resource_for(obj["apiVersion"], obj["kind"]).url(namespace)
                await api.request("POST", path, body=obj, allow=(409,))

        await post(shared if adopt else [*shared, *jobs])
        gate = asyncio.Semaphore(parallel)

        async def create(pod: dict[str, Any]) -> None:
            async with gate:
                await api.request("POST", POD.url(namespace), body=pod, allow=(409,))

        stop = asyncio.Event()
        watch = asyncio.create_task(api.follow(POD.url(namespace), on_pod, stop))
        await asyncio.gather(*(create(p) for p in pods))
        if adopt:
            await post(jobs)
        await done.wait()
        # One DELETE per PS pod, all at once: a deletecollection is served one pod at a time.
        ps = [] if adopt else [(POD, p["metadata"]["name"]) for p in pods if _role(p) == "ps"]
        ps += [(JOB, j["metadata"]["name"]) for j in jobs if _role(j) == "ps"]
        background = {"propagationPolicy": "Background"}  # a Job's pods: deleted by the GC

        async def delete(kind: Any, name: str) -> None:
            async with gate:
                body = background if kind is JOB else None
                await api.request("DELETE", kind.url(namespace, name), body=body, allow=(404,))

        await asyncio.gather(*(delete(k, n) for k, n in ps))
        stop.set()
        await watch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--objects", type=Path, required=True, help="JSON list of objects")
    parser.add_argument("--parallel", type=int, default=250, help="requests in flight")
    args = parser.parse_args()
    objects = json.loads(args.objects.read_text())
    identity = Identity.from_kubeconfig(args.kubeconfig)
    print("ready", flush=True)
    sys.stdin.readline()
    asyncio.run(run(identity, args.namespace, objects, args.parallel))
    return 0


if __name__ == "__main__":
    sys.exit(main())
