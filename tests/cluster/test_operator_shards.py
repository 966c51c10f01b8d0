"""Roles split into several Indexed Jobs (shards) against the real control plane with KWOK
fake pods, the operator run with a small `TFKUBE_MAX_PODS_PER_JOB`: the Jobs Kubernetes
makes, the hostnames its Job controller gives their pods and the addresses every pod's
launcher computes from its env (read from the pods, expanded with the launcher's own
function), per-replica status across shards, a failed pod in a later shard, success
ending the PS, and `tfkube scale` across shard boundaries.

What KWOK cannot show (fake pods run no program and resolve no name): that the hostnames
resolve and TensorFlow trains across shards; tests/cluster/test_real_node.py
(`test_between_graph_scaled_2_4_1`, its operator at 3 pods per Job) does.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from kubernetes import client

from tfkube.kube.names import INDEX_KEY, LABEL_INDEX_OFFSET
from tfkube.launcher._settings import contract_from_env
from tfkube.tfcluster import replica_key

from ._support import KubeCluster, Operator, wait_for
from .test_operator import events, job_dict, phase_is, submit, tfjob


def role_pods(kube: KubeCluster, ns: str, job: str, role: str) -> list[client.V1Pod]:
    selector = f"tfkube.io/job-name={job},tfkube.io/replica-type={role}"
    items: list[client.V1Pod] = kube.core.list_namespaced_pod(ns, label_selector=selector).items
    return items


def replica_index(pod: client.V1Pod) -> int:
    """Its completion index plus its Job's offset (an annotation on the pod)."""
    offset = (pod.metadata.annotations or {}).get(LABEL_INDEX_OFFSET, "0")
    return int(pod.metadata.labels[INDEX_KEY]) + int(offset)


def running(kube: KubeCluster, ns: str, job: str, role: str) -> list[int]:
    """The replica indexes of the role's pods that run and are not being deleted."""
    return sorted(
        replica_index(p)
        for p in role_pods(kube, ns, job, role)
        if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
    )


def job_sizes(kube: KubeCluster, ns: str, job: str) -> dict[str, int]:
    """Every role Job of the job (not being deleted) -> its completions."""
    found = kube.batch.list_namespaced_job(ns, label_selector=f"tfkube.io/job-name={job}").items
    return {
        j.metadata.name: j.spec.completions for j in found if j.metadata.deletion_timestamp is None
    }


def launcher_view(kube: KubeCluster, ns: str, pod: client.V1Pod) -> tuple[str, str, str]:
    """(replica key, its own address, the whole cluster as JSON) as the pod's launcher
    computes them from the env
    Kubernetes gives it: the pod's values, its ConfigMap keys and the fields the Job
    controller adds (JOB_COMPLETION_INDEX from the pod's index label). Asserts that the
    cluster lists the pod's own hostname as its address."""
    env: dict[str, str] = {}
    for e in pod.spec.containers[0].env:
        if e.value is not None:
            env[e.name] = e.value
        elif e.value_from and e.value_from.config_map_key_ref:
            ref = e.value_from.config_map_key_ref
            env[e.name] = kube.core.read_namespaced_config_map(ref.name, ns).data[ref.key]
        elif e.value_from and e.value_from.field_ref:
            path = e.value_from.field_ref.field_path
            assert path.endswith(f"['{INDEX_KEY}']"), path  # its label, or annotation
            env[e.name] = pod.metadata.annotations[INDEX_KEY]
    contract = contract_from_env(env)
    address = contract.cluster[contract.role][contract.index]
    assert address == f"{pod.spec.hostname}.{pod.spec.subdomain}:2222", (address, pod.spec)
    whole = json.dumps(contract.cluster, sort_keys=True)
    return replica_key(contract.role, contract.index), address, whole


def service_hostnames(kube: KubeCluster, ns: str, job: str) -> dict[str, list[str]]:
    """The job's Services -> the hostnames their EndpointSlices list (what cluster DNS
    serves as `<hostname>.<service>`)."""
    services = kube.core.list_namespaced_service(ns, label_selector=f"tfkube.io/job-name={job}")
    out: dict[str, list[str]] = {}
    for service in services.items:
        name = service.metadata.name
        slices = kube.discovery.list_namespaced_endpoint_slice(
            ns, label_selector=f"kubernetes.io/service-name={name}"
        ).items
        out[name] = sorted(
            e.hostname for s in slices for e in (s.endpoints or []) if e.hostname is not None
        )
    return out


def test_one_ps_five_workers_in_jobs_of_two(
    operator_at: Callable[[int], Operator], code: Path, kube_namespace: str
) -> None:
    """1 PS + 5 workers at 2 pods per Job: 1 + 3 Jobs, every pod its replica's hostname and
    every pod the same cluster; a failed worker in the last-but-one Job is retried as
    ever; success ends the PS."""
    operator = operator_at(2)
    kube, ns = operator.kube, kube_namespace
    data = job_dict("shards")
    data["spec"]["replicas"]["worker"]["replicas"] = 5
    data["spec"]["replicas"]["worker"]["annotations"] = {"tfkube.io/fake-duration": "25s"}
    backend = submit(kube, ns, code, data)
    wait_for(
        "every replica running",
        lambda: running(kube, ns, "shards", "worker") == [0, 1, 2, 3, 4],
        60,
    )
    wait_for("the PS running", lambda: running(kube, ns, "shards", "ps") == [0], 30)
    assert job_sizes(kube, ns, "shards") == {
        "shards-ps": 1,
        "shards-worker": 2,
        "shards-worker-s1": 2,
        "shards-worker-s2": 1,
    }
    assert (tfjob(kube, ns, "shards") or {})["status"]["podsPerJob"] == 2

    pods = [*role_pods(kube, ns, "shards", "ps"), *role_pods(kube, ns, "shards", "worker")]
    seen = [launcher_view(kube, ns, p) for p in pods]
    views = {key: address for key, address, _ in seen}
    assert views == {
        "ps-0": "shards-ps-0.shards-ps:2222",
        "worker-0": "shards-worker-0.shards-worker:2222",
        "worker-1": "shards-worker-1.shards-worker:2222",
        "worker-2": "shards-worker-s1-0.shards-worker-s1:2222",
        "worker-3": "shards-worker-s1-1.shards-worker-s1:2222",
        "worker-4": "shards-worker-s2-0.shards-worker-s2:2222",
    }
    assert len({whole for _, _, whole in seen}) == 1  # every pod sees the same cluster
    # Each Job's headless Service lists its own pods, by hostname (the DNS records), and
    # no other Job's: the endpoint controllers' work per pod is one Job's, not the job's.
    expected = {
        "shards-ps": ["shards-ps-0"],
        "shards-worker": ["shards-worker-0", "shards-worker-1"],
        "shards-worker-s1": ["shards-worker-s1-0", "shards-worker-s1-1"],
        "shards-worker-s2": ["shards-worker-s2-0"],
    }
    wait_for(
        "each Service its Job's pods", lambda: service_hostnames(kube, ns, "shards") == expected, 30
    )

    view = wait_for(
        "every replica Running in the status",
        lambda: (
            (v := backend.get("shards"))
            and all(r.state.value == "Running" for r in v.replicas)
            and v
        ),
        30,
    )
    assert sorted(r.key for r in view.replicas) == sorted(views)

    # worker-3 (index 1 of shards-worker-s1) fails once: Kubernetes retries it in its Job.
    failing = next(p for p in role_pods(kube, ns, "shards", "worker") if replica_index(p) == 3)
    kube.core.patch_namespaced_pod(
        failing.metadata.name, ns, {"metadata": {"annotations": {"tfkube.io/fake-exit-code": "1"}}}
    )
    again = wait_for(
        "worker-3 retried",
        lambda: (
            (v := backend.get("shards"))
            and any(
                r.key == "worker-3" and r.restarts == 1 and r.state.value == "Running"
                for r in v.replicas
            )
            and v
        ),
        40,
    )
    assert again.restarts == 1
    assert sum(r.restarts for r in again.replicas) == 1

    status = wait_for("success", lambda: phase_is(kube, ns, "shards", "Succeeded", "Failed"), 60)
    assert status["phase"] == "Succeeded", status
    assert status["replicas"] == 6
    wait_for("PS gone", lambda: not role_pods(kube, ns, "shards", "ps"), 20)
    assert kube.batch.read_namespaced_job("shards-ps", ns).spec.suspend is True
    created = [e.message for e in events(kube, ns, "shards") if e.reason == "Created"]
    assert created == ["created 11 objects"]  # 3 ConfigMaps (launcher, code, size), 4 Jobs
    # and a Service for each


def test_scaled_2_5_1_across_jobs_of_three(
    operator_at: Callable[[int], Operator], code: Path, kube_namespace: str
) -> None:
    """`tfkube scale` 2 -> 5 -> 1 at 3 pods per Job: growing grows the first Job to 3 and
    adds `<job>-worker-s1` (workers 3 and 4, their own hostnames); shrinking deletes it and
    shrinks the first Job to worker-0, with no failure or restart counted."""
    operator = operator_at(3)
    kube, ns = operator.kube, kube_namespace
    data = job_dict("elastic")
    data["spec"]["replicas"]["worker"]["annotations"] = {"tfkube.io/fake-duration": "35s"}
    backend = submit(kube, ns, code, data)
    wait_for("2 workers running", lambda: running(kube, ns, "elastic", "worker") == [0, 1], 40)
    assert job_sizes(kube, ns, "elastic") == {"elastic-ps": 1, "elastic-worker": 2}

    backend.scale("elastic", 5)
    assert job_sizes(kube, ns, "elastic") == {
        "elastic-ps": 1,
        "elastic-worker": 3,
        "elastic-worker-s1": 2,
    }
    wait_for(
        "5 workers running", lambda: running(kube, ns, "elastic", "worker") == [0, 1, 2, 3, 4], 40
    )
    added = [p for p in role_pods(kube, ns, "elastic", "worker") if replica_index(p) >= 3]
    assert sorted(launcher_view(kube, ns, p)[:2] for p in added) == [
        ("worker-3", "elastic-worker-s1-0.elastic-worker-s1:2222"),
        ("worker-4", "elastic-worker-s1-1.elastic-worker-s1:2222"),
    ]
    wait_for(
        "the added Job's Service lists its pods",
        lambda: (
            service_hostnames(kube, ns, "elastic").get("elastic-worker-s1")
            == ["elastic-worker-s1-0", "elastic-worker-s1-1"]
        ),
        30,
    )
    assert any(
        e.reason == "Scaled" and "added worker-2, worker-3, worker-4" in e.message
        for e in events(kube, ns, "elastic")
    )

    backend.scale("elastic", 1)
    wait_for(
        "the later Job gone",
        lambda: job_sizes(kube, ns, "elastic") == {"elastic-ps": 1, "elastic-worker": 1},
        20,
    )
    wait_for(
        "workers 1-4 gone",
        lambda: [replica_index(p) for p in role_pods(kube, ns, "elastic", "worker")] == [0],
        40,
    )
    wait_for(
        "the later Job's Service gone",
        lambda: set(service_hostnames(kube, ns, "elastic")) == {"elastic-ps", "elastic-worker"},
        20,
    )
    status = (tfjob(kube, ns, "elastic") or {})["status"]
    assert status["workers"] == 1
    assert status["restarts"] == 0
    assert status["replicaStatuses"]["worker"]["failed"] == 0

    status = wait_for("success", lambda: phase_is(kube, ns, "elastic", "Succeeded", "Failed"), 60)
    assert status["phase"] == "Succeeded", status
    assert status["restarts"] == 0
    assert not any(e.reason in ("ReplicaFailed", "Restarting") for e in events(kube, ns, "elastic"))
