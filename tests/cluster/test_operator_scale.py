"""`tfkube scale` on the Kubernetes engine, against the real control plane with KWOK fake
pods: the operator resizes the worker Indexed Job of a running asynchronous PS job
(elastic Indexed Jobs: `completions` and `parallelism` together), new pods read the size
from the job's size ConfigMap, removed workers (the highest indexes) are deleted by the
Job controller and counted as neither failures nor restarts; refusals name the field.

What KWOK cannot show (fake pods run no program): that an added worker's TF_CONFIG has
the new size and that a removed one stops between steps. tests/cluster/test_real_node.py
(`test_between_graph_scaled_2_4_1`) runs the example in real pods for that.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tfkube.engines.kubernetes import KubernetesBackend
from tfkube.planner import JobPhase
from tfkube.spec import SpecError

from ._support import Operator, wait_for
from .test_operator import cli, events, job_dict, phase_is, submit, tfjob

WORKER_SECONDS = 45
"""How long each fake worker trains: long enough for both resizes before worker-0 ends."""


def running_workers(kube: Any, ns: str, job: str) -> list[int] | None:
    """The indexes of the job's worker pods that run and are not being deleted, sorted."""
    selector = f"tfkube.io/job-name={job},tfkube.io/replica-type=worker"
    found = kube.core.list_namespaced_pod(ns, label_selector=selector).items
    return sorted(
        int(p.metadata.labels["batch.kubernetes.io/job-completion-index"])
        for p in found
        if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
    )


def worker_pods(kube: Any, ns: str, job: str) -> list[client.V1Pod]:
    selector = f"tfkube.io/job-name={job},tfkube.io/replica-type=worker"
    items: list[client.V1Pod] = kube.core.list_namespaced_pod(ns, label_selector=selector).items
    return items


def size_of(kube: Any, ns: str, job: str) -> tuple[int, int, str]:
    """The worker Job's completions and parallelism, and the size ConfigMap's count."""
    spec = kube.batch.read_namespaced_job(f"{job}-worker", ns).spec
    size = kube.core.read_namespaced_config_map(f"{job}-size", ns).data["workers"]
    return spec.completions, spec.parallelism, size


def test_scaled_2_4_1_while_running(operator: Operator, code: Path, kube_namespace: str) -> None:
    kube, ns = operator.kube, kube_namespace
    data = job_dict("grow")
    data["spec"]["replicas"]["worker"]["annotations"] = {
        "tfkube.io/fake-duration": f"{WORKER_SECONDS}s"
    }
    backend = submit(kube, ns, code, data)
    wait_for("2 workers running", lambda: running_workers(kube, ns, "grow") == [0, 1], 40)
    assert size_of(kube, ns, "grow") == (2, 2, "2")
    # Every replica reads its count from the size ConfigMap, not from its template.
    env = kube.batch.read_namespaced_job("grow-worker", ns).spec.template.spec.containers[0].env
    num = next(e for e in env if e.name == "TFKUBE_NUM_WORKERS")
    assert num.value is None
    assert num.value_from.config_map_key_ref.name == "grow-size"

    # 2 -> 4 through the CLI, as a user does it.
    started = time.monotonic()
    done = cli(kube, ns, "scale", "grow", "--workers", "4")
    assert done.returncode == 0, done.stderr
    assert "now has 4 workers" in done.stdout
    print(f"\n2 -> 4: tfkube scale returned in {time.monotonic() - started:.1f}s")
    status = (tfjob(kube, ns, "grow") or {})["status"]
    assert status["workers"] == 4
    assert status["phase"] == "Running"
    assert size_of(kube, ns, "grow") == (4, 4, "4")
    wait_for("4 workers running", lambda: running_workers(kube, ns, "grow") == [0, 1, 2, 3], 30)
    print(f"2 -> 4: 4 workers running {time.monotonic() - started:.1f}s after tfkube scale")
    view = backend.get("grow")
    assert sorted(r.key for r in view.replicas if r.role == "worker") == [
        "worker-0",
        "worker-1",
        "worker-2",
        "worker-3",
    ]
    assert any(
        e.reason == "Scaled" and "added worker-2, worker-3" in e.message
        for e in events(kube, ns, "grow")
    )

    # 4 -> 1 through the engine's protocol (what the server calls).
    started = time.monotonic()
    view = backend.scale("grow", 1)
    assert [r.key for r in view.replicas if r.role == "worker"] == ["worker-0"]
    assert size_of(kube, ns, "grow") == (1, 1, "1")
    index = "batch.kubernetes.io/job-completion-index"
    wait_for(
        "workers 1-3 gone",
        lambda: [p.metadata.labels[index] for p in worker_pods(kube, ns, "grow")] == ["0"],
        30,
    )
    print(f"4 -> 1: workers 1-3 gone {time.monotonic() - started:.1f}s after tfkube scale")
    status = (tfjob(kube, ns, "grow") or {})["status"]
    assert status["workers"] == 1
    assert status["restarts"] == 0
    assert status["replicaStatuses"]["worker"]["failed"] == 0
    assert status["replicas"] == 2  # ps-0 and worker-0
    worker_job = kube.batch.read_namespaced_job("grow-worker", ns)
    assert not worker_job.status.failed, worker_job.status  # no index counted as failed
    assert any(
        e.reason == "Scaled" and "stopped worker-1, worker-2, worker-3" in e.message
        for e in events(kube, ns, "grow")
    )

    status = wait_for("success", lambda: phase_is(kube, ns, "grow", "Succeeded", "Failed"), 60)
    assert status["phase"] == "Succeeded", status
    assert status["message"] == "worker-0 succeeded"
    assert status["restarts"] == 0
    assert status["workers"] == 1
    assert not kube.batch.read_namespaced_job("grow-worker", ns).status.failed
    assert not any(e.reason in ("ReplicaFailed", "Restarting") for e in events(kube, ns, "grow"))
    assert backend.get("grow").restarts == 0


def refusal(backend: KubernetesBackend, name: str, workers: int) -> str:
    with pytest.raises(SpecError) as caught:
        backend.scale(name, workers)
    return "\n".join(f"{e.field}: {e.message}" for e in caught.value.errors)


def test_scale_refusals_name_the_field(operator: Operator, code: Path, kube_namespace: str) -> None:
    kube, ns = operator.kube, kube_namespace
    long_run = {"tfkube.io/fake-duration": "60s"}
    sync: dict[str, Any] = job_dict("sync")  # all-reduce: workers only, no PS
    sync["spec"]["replicas"] = {"worker": {"replicas": 2, "annotations": long_run}}
    chief = job_dict("coord")  # ParameterServerStrategy: a chief coordinates
    chief["spec"]["replicas"]["chief"] = {"replicas": 1, "annotations": long_run}
    chief["spec"]["replicas"]["worker"]["annotations"] = long_run
    ps = job_dict("async")
    ps["spec"]["replicas"]["worker"]["annotations"] = long_run
    backend = submit(kube, ns, code, sync)
    submit(kube, ns, code, chief)
    submit(kube, ns, code, ps)
    for name in ("sync", "coord", "async"):
        wait_for(f"{name} running", lambda name=name: phase_is(kube, ns, name, "Running"), 40)

    assert "spec.replicas.ps: the job has no parameter servers" in refusal(backend, "sync", 3)
    assert "spec.replicas.chief: the job has a chief" in refusal(backend, "coord", 3)
    assert "workers: 0 is out of range" in refusal(backend, "async", 0)
    assert "workers: -2 is out of range" in refusal(backend, "async", -2)
    done = cli(kube, ns, "scale", "sync", "--workers", "3")
    assert done.returncode != 0
    assert "cannot scale job sync" in done.stderr + done.stdout
    assert "spec.replicas.ps" in done.stderr + done.stdout
    # Nothing changed: the refused jobs keep their spec and their Jobs their size.
    for name, count in (("sync", 2), ("coord", 2), ("async", 2)):
        obj = tfjob(kube, ns, name) or {}
        assert obj["spec"]["replicas"]["worker"]["replicas"] == count
        assert kube.batch.read_namespaced_job(f"{name}-worker", ns).spec.completions == count
    assert kube.core.list_namespaced_config_map(ns, label_selector="tfkube.io/component=size")
    assert {
        c.metadata.name
        for c in kube.core.list_namespaced_config_map(
            ns, label_selector="tfkube.io/component=size"
        ).items
    } == {"async-size"}  # only the resizable job has one

    # An edit of the spec behind tfkube's back (kubectl) is refused by the operator too.
    client.CustomObjectsApi(kube.api_client).patch_namespaced_custom_object(
        "tfkube.io",
        "v1alpha1",
        ns,
        "tfjobs",
        "coord",
        {"spec": {"replicas": {"worker": {"replicas": 3}}}},
    )
    wait_for(
        "ScaleRefused",
        lambda: [
            e
            for e in events(kube, ns, "coord")
            if e.reason == "ScaleRefused" and "spec.replicas.chief" in e.message
        ],
        20,
    )
    assert kube.batch.read_namespaced_job("coord-worker", ns).spec.completions == 2
    status = (tfjob(kube, ns, "coord") or {})["status"]
    assert status["refusedWorkers"] == 3
    assert status["workers"] == 2

    backend.stop("async")
    wait_for("async stopped", lambda: phase_is(kube, ns, "async", "Failed"), 30)
    assert "status.phase: the job has ended (Failed)" in refusal(backend, "async", 3)
    assert backend.get("sync").phase is JobPhase.RUNNING
