"""Preemption by priority on the test control plane (the real kube-scheduler, KWOK pods):
two teams prepared as the server prepares them (their priorities 1 and 5 as the
PriorityClasses their jobs' pods get); the low team's job fills a small node, the high
team's job arrives, the scheduler
preempts the low job's pods, and the operator counts it as one preemption (not a
restart: backoffLimit 0 would fail the job on any restart), says it (a `Preempted` event,
`tfkube status`), restarts the whole job with no backoff; its new pods wait for room and
the job succeeds once the high one has ended.

What KWOK cannot show (fake pods run no program): that training resumes from the
checkpoint. The restart is the same whole-job restart a lost PS causes, which
tests/cluster/test_real_node.py runs with real TensorFlow (`test_ps_loss_resumes...`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tfkube.engines import Tenant
from tfkube.engines.kubernetes import KubernetesEngine
from tfkube.spec import parse_job

from ._support import KubeCluster, Operator, load_cluster_module, wait_for
from .test_operator import cli, events, job_dict, phase_is, pods, tfjob

POOL = "tfkube.io/preempt-pool"
"""The label and taint of this test's node: nothing else lands there."""
LOW_SECONDS = 20
"""How long the low job's workers train (each time they start)."""
HIGH_SECONDS = 10


@pytest.fixture
def small_node(kube_cluster: KubeCluster, kube_namespace: str) -> Iterator[str]:
    """A two-CPU KWOK node labelled and tainted for this test; deleted afterwards."""
    name = f"tfkube-preempt-{kube_namespace[-6:]}"
    manifest: dict[str, Any] = load_cluster_module().NodeSpec(name, "127.0.5.1", cpu="2").manifest()
    manifest["metadata"]["labels"][POOL] = kube_namespace
    manifest["spec"]["taints"] = [{"key": POOL, "value": kube_namespace, "effect": "NoSchedule"}]
    kube_cluster.core.create_node(manifest)

    def ready() -> bool:
        conditions = kube_cluster.core.read_node(name).status.conditions or []
        return any(c.type == "Ready" and c.status == "True" for c in conditions)

    try:
        wait_for(f"node {name} Ready", ready, 60)
        yield name
    finally:
        try:
            kube_cluster.core.delete_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise


@pytest.fixture
def teams(
    kube_cluster: KubeCluster, kube_namespace: str, tmp_path: Path
) -> Iterator[tuple[KubernetesEngine, Tenant, Tenant]]:
    """Two teams of priority 1 and 5 sharing the test's namespace, prepared as the server
    prepares a team (`KubernetesEngine.prepare_tenant`: their PriorityClasses
    `tfkube-priority-1` and `-5`); the classes are deleted afterwards. The engine is not
    closed: its API client is the session's."""
    engine = KubernetesEngine(tmp_path, api_client=kube_cluster.api_client)
    low = Tenant("low", kube_namespace, priority=1)
    high = Tenant("high", kube_namespace, priority=5)
    try:
        engine.prepare_tenant(low)
        engine.prepare_tenant(high)
        yield engine, low, high
    finally:
        api = client.SchedulingV1Api(kube_cluster.api_client)
        for priority in (1, 5):
            try:
                api.delete_priority_class(f"tfkube-priority-{priority}")
            except ApiException as exc:
                if exc.status != 404:
                    raise


def placed(data: dict[str, Any], ns: str, cpu: str) -> dict[str, Any]:
    for spec in data["spec"]["replicas"].values():
        spec["nodeSelector"] = {POOL: ns}
        spec["tolerations"] = [{"key": POOL, "operator": "Exists", "effect": "NoSchedule"}]
        spec["resources"] = {"cpu": cpu}
    return data


def running_pods(kube: Any, ns: str, job: str) -> int:
    return sum(
        p.status.phase == "Running" and p.metadata.deletion_timestamp is None
        for p in pods(kube, ns, f"tfkube.io/job-name={job}")
    )


def test_a_preempted_job_resumes_with_one_preemption_and_no_restart(
    operator: Operator,
    code: Path,
    kube_namespace: str,
    small_node: str,
    teams: tuple[KubernetesEngine, Tenant, Tenant],
) -> None:
    kube, ns = operator.kube, kube_namespace
    engine, low_team, high_team = teams
    # Low: a PS and two workers, 500m each: 1.5 of the node's 2 CPUs. backoffLimit 0: a
    # single restart would fail it. Neither job names a PriorityClass: its team's is given.
    low = placed(job_dict("low"), ns, "500m")
    low["spec"]["replicas"]["worker"]["annotations"] = {
        "tfkube.io/fake-duration": f"{LOW_SECONDS}s"
    }
    low["spec"]["runPolicy"]["backoffLimit"] = 0
    backend = engine.jobs(low_team)
    backend.submit(parse_job(low), code)
    spec = (tfjob(kube, ns, "low") or {})["spec"]
    assert spec["scheduling"]["priorityClassName"] == "tfkube-priority-1"
    wait_for("low running", lambda: running_pods(kube, ns, "low") == 3, 40)
    assert {p.spec.priority for p in pods(kube, ns, "tfkube.io/job-name=low")} == {1}
    wait_for("low Running", lambda: phase_is(kube, ns, "low", "Running"), 20)

    # High: one worker that needs the whole node, so every pod of low must go.
    high = placed(job_dict("high"), ns, "2")
    high["spec"]["replicas"] = {
        "worker": {
            **high["spec"]["replicas"]["worker"],
            "replicas": 1,
            "annotations": {"tfkube.io/fake-duration": f"{HIGH_SECONDS}s"},
        }
    }
    started = time.monotonic()
    engine.jobs(high_team).submit(parse_job(high), code)

    def preempted() -> dict[str, Any] | None:
        status = (tfjob(kube, ns, "low") or {}).get("status") or {}
        return status if status.get("preemptions") else None

    status = wait_for("low preempted", preempted, 40)
    print(f"\npreemption counted {time.monotonic() - started:.1f}s after the high job came")
    assert status["preemptions"] == 1
    assert status["restarts"] == 0
    assert status["reason"] == "Preempted"
    said = [e for e in events(kube, ns, "low") if e.reason == "Preempted"]
    assert len(said) == 1, [e.message for e in said]
    assert "preempted by the scheduler for a pod of higher priority" in said[0].message
    assert "not a restart (preemption 1)" in said[0].message

    wait_for("high running", lambda: running_pods(kube, ns, "high") == 1, 40)
    # While the high job runs, the low job's new pods wait for room.
    assert running_pods(kube, ns, "low") == 0
    view = backend.get("low")
    assert view.preemptions == 1
    assert view.restarts == 0
    shown = cli(kube, ns, "status", "low")
    assert shown.returncode == 0, shown.stderr
    assert "preempted 1x" in shown.stdout, shown.stdout

    high_done = wait_for("high done", lambda: phase_is(kube, ns, "high", "Succeeded", "Failed"), 60)
    assert high_done["phase"] == "Succeeded", high_done
    done = wait_for(
        "low done",
        lambda: phase_is(kube, ns, "low", "Succeeded", "Failed"),
        LOW_SECONDS + 60,
    )
    print(f"low succeeded {time.monotonic() - started:.1f}s after the high job came")
    assert done["phase"] == "Succeeded", done
    assert done["restarts"] == 0
    assert done["preemptions"] == 1
    assert not any(e.reason in ("ReplicaFailed",) for e in events(kube, ns, "low"))
    assert len([e for e in events(kube, ns, "low") if e.reason == "Preempted"]) == 1
    assert backend.get("low").preemptions == 1
