"""Smoke tests of the test control plane: real controllers, scheduler, KWOK stages."""

from __future__ import annotations

import ipaddress
import subprocess
import time
from datetime import timedelta
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from ._support import KubeCluster, wait_for

LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
FAKE_POD_NET = ipaddress.ip_network("198.18.0.0/16")  # tools/kube/cluster.py POD_CIDR
IMAGE = "tfkube.invalid/fake:never-pulled"  # KWOK never pulls anything


def _container(**resources: Any) -> client.V1Container:
    return client.V1Container(
        name="main",
        image=IMAGE,
        command=["python", "-c", "pass"],
        resources=client.V1ResourceRequirements(**resources) if resources else None,
    )


def _pod(
    name: str,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    restart_policy: str = "Never",
    **resources: Any,
) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels, annotations=annotations),
        spec=client.V1PodSpec(restart_policy=restart_policy, containers=[_container(**resources)]),
    )


def _job_condition(kube: KubeCluster, ns: str, name: str) -> client.V1JobCondition | None:
    job = kube.batch.read_namespaced_job_status(name, ns)
    for cond in job.status.conditions or []:
        if cond.type in ("Complete", "Failed") and cond.status == "True":
            return cond
    return None


def _pods(kube: KubeCluster, ns: str, selector: str = "") -> list[client.V1Pod]:
    return kube.core.list_namespaced_pod(ns, label_selector=selector).items


def _assert_fake_addresses(pod: client.V1Pod) -> None:
    """Nodes have loopback IPs; pod IPs are fake numbers from the reserved benchmark range."""
    assert pod.status.host_ip is not None, pod.metadata.name
    assert ipaddress.ip_address(pod.status.host_ip) in LOOPBACK, pod.status.host_ip
    assert pod.status.pod_ip is not None, pod.metadata.name
    assert ipaddress.ip_address(pod.status.pod_ip) in FAKE_POD_NET, pod.status.pod_ip


def test_fake_nodes_registered(kube_cluster: KubeCluster) -> None:
    # The real node (tests/cluster/test_real_node.py) may be there too, labelled as such.
    everything = kube_cluster.core.list_node().items
    nodes = [n for n in everything if "tfkube.io/real-node" not in n.metadata.labels]
    names = {n.metadata.name for n in nodes}
    assert set(kube_cluster.cpu_nodes) | set(kube_cluster.gpu_nodes) == names
    assert kube_cluster.gpu_nodes, "some fake nodes must advertise GPUs"
    for node in nodes:
        ready = {c.type: c.status for c in node.status.conditions}["Ready"]
        assert ready == "True", node.metadata.name
        for addr in node.status.addresses:
            if addr.type == "InternalIP":
                assert ipaddress.ip_address(addr.address) in LOOPBACK
        has_gpu = "nvidia.com/gpu" in (node.status.allocatable or {})
        assert has_gpu == (node.metadata.name in kube_cluster.gpu_nodes)
    version = client.VersionApi(kube_cluster.api_client).get_code()
    assert version.git_version.startswith("v1.34."), version


def test_kubectl_matches_server(kube_cluster: KubeCluster) -> None:
    out = subprocess.run(
        [str(kube_cluster.kubectl), "--kubeconfig", str(kube_cluster.kubeconfig), "get", "nodes"],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    for name in kube_cluster.gpu_nodes:
        assert name in out


def test_indexed_job_with_headless_service_completes(
    kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    kube, ns, job_name = kube_cluster, kube_namespace, "mnist-worker"
    labels = {"tfkube.io/job": "mnist", "tfkube.io/replica-type": "worker"}
    kube.core.create_namespaced_service(
        ns,
        client.V1Service(
            metadata=client.V1ObjectMeta(name="mnist"),
            spec=client.V1ServiceSpec(
                cluster_ip="None",
                selector={"tfkube.io/job": "mnist"},
                ports=[client.V1ServicePort(name="tf", port=2222)],
            ),
        ),
    )
    template = client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels=labels, annotations={"tfkube.io/fake-duration": "3s"}),
        spec=client.V1PodSpec(restart_policy="Never", subdomain="mnist", containers=[_container()]),
    )
    kube.batch.create_namespaced_job(
        ns,
        client.V1Job(
            metadata=client.V1ObjectMeta(name=job_name),
            spec=client.V1JobSpec(
                completion_mode="Indexed",
                completions=3,
                parallelism=3,
                backoff_limit=0,
                template=template,
            ),
        ),
    )

    def running_and_published() -> list[client.V1Pod] | None:
        pods = [p for p in _pods(kube, ns, "tfkube.io/job=mnist") if p.status.phase == "Running"]
        slices = kube.discovery.list_namespaced_endpoint_slice(
            ns, label_selector="kubernetes.io/service-name=mnist"
        ).items
        hostnames = {e.hostname for s in slices for e in s.endpoints or []}
        return pods if len(pods) == 3 and len(hostnames) == 3 else None

    # While running, the headless Service publishes every replica under its stable hostname.
    pods = wait_for("3 running workers in the Service's EndpointSlice", running_and_published)
    expected = {f"{job_name}-{i}" for i in range(3)}
    assert {p.spec.hostname for p in pods} == expected
    assert {p.spec.subdomain for p in pods} == {"mnist"}
    for pod in pods:
        assert pod.spec.node_name in kube.cpu_nodes + kube.gpu_nodes
        index = pod.metadata.annotations["batch.kubernetes.io/job-completion-index"]
        assert pod.spec.hostname == f"{job_name}-{index}"
        _assert_fake_addresses(pod)

    cond = wait_for("the Job to finish", lambda: _job_condition(kube, ns, job_name))
    assert cond.type == "Complete"
    job = kube.batch.read_namespaced_job_status(job_name, ns)
    assert job.status.succeeded == 3
    assert job.status.completed_indexes == "0-2"
    for pod in _pods(kube, ns, "tfkube.io/job=mnist"):
        assert pod.status.phase == "Succeeded"
        term = pod.status.container_statuses[0].state.terminated
        assert term.exit_code == 0
        # tfkube.io/fake-duration: 3s (timestamps have 1 s resolution)
        assert term.finished_at - term.started_at >= timedelta(seconds=2)


def test_exit_code_annotation_and_pod_failure_policy(
    kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    kube, ns = kube_cluster, kube_namespace
    template = client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(
            labels={"tfkube.io/replica-type": "worker"},
            annotations={"tfkube.io/fake-exit-code": "3", "tfkube.io/fake-fail-after": "1s"},
        ),
        spec=client.V1PodSpec(restart_policy="Never", containers=[_container()]),
    )
    policy = client.V1PodFailurePolicy(
        rules=[
            client.V1PodFailurePolicyRule(
                action="FailJob",
                on_exit_codes=client.V1PodFailurePolicyOnExitCodesRequirement(
                    container_name="main", operator="In", values=[3]
                ),
            )
        ]
    )
    kube.batch.create_namespaced_job(
        ns,
        client.V1Job(
            metadata=client.V1ObjectMeta(name="fails"),
            spec=client.V1JobSpec(backoff_limit=5, pod_failure_policy=policy, template=template),
        ),
    )
    cond = wait_for("the Job to fail", lambda: _job_condition(kube, ns, "fails"))
    assert cond.type == "Failed"
    assert cond.reason == "PodFailurePolicy", cond
    job = kube.batch.read_namespaced_job_status("fails", ns)
    assert job.status.failed == 1, "FailJob must stop the Job at the first failure"
    (pod,) = _pods(kube, ns, "job-name=fails")
    assert pod.status.phase == "Failed"
    term = pod.status.container_statuses[0].state.terminated
    assert term.exit_code == 3
    assert term.reason == "Error"


def test_ps_runs_until_deleted_worker_completes(
    kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    kube, ns = kube_cluster, kube_namespace
    ps = _pod("ps-0", labels={"tfkube.io/replica-type": "ps"})
    worker = _pod("worker-0", labels={"tfkube.io/replica-type": "worker"})  # default duration 0
    server = _pod("server", restart_policy="Always")  # restartPolicy Always never completes
    for pod in (ps, worker, server):
        kube.core.create_namespaced_pod(ns, pod)

    def phase(name: str) -> str:
        return kube.core.read_namespaced_pod_status(name, ns).status.phase

    wait_for("worker-0 to succeed", lambda: phase("worker-0") == "Succeeded")
    wait_for("ps-0 to run", lambda: phase("ps-0") == "Running")
    # KWOK takes the pods in its own order: on a busy machine the last one created may
    # still be Pending here (CI once saw it).
    wait_for("the restartPolicy=Always pod to run", lambda: phase("server") == "Running")
    ps_pod = kube.core.read_namespaced_pod_status("ps-0", ns)
    _assert_fake_addresses(ps_pod)
    # the PS and the restartPolicy=Always pod keep running
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        assert phase("ps-0") == "Running"
        assert phase("server") == "Running"
        time.sleep(0.5)

    kube.core.delete_namespaced_pod("ps-0", ns)

    def ps_gone() -> bool:
        try:
            kube.core.read_namespaced_pod("ps-0", ns)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for("ps-0 to be deleted", ps_gone, timeout=30)


def test_stage_times_and_ip_come_from_the_pod(
    kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    """KWOK plays a stage again for an event that still shows a pod's old state: what a stage
    writes must come from the pod alone (bind time, start + delay, deletion, its UID),
    so that the second play writes the status the pod already has, a no-op, not a change
    every pod watcher processes (tools/kube/stages, docs/benchmarks.md runs Q10)."""
    kube, ns = kube_cluster, kube_namespace
    worker = _pod("timed", annotations={"tfkube.io/fake-duration": "2s"})
    killed = _pod("killed", labels={"tfkube.io/replica-type": "ps"})
    killed.metadata.finalizers = ["tfkube.io/test-hold"]
    for pod in (worker, killed):
        kube.core.create_namespaced_pod(ns, pod)

    def status(name: str) -> client.V1Pod:
        return kube.core.read_namespaced_pod_status(name, ns)

    done = wait_for(
        "timed to succeed", lambda: (p := status("timed")).status.phase == "Succeeded" and p
    )
    running = wait_for(
        "killed to run", lambda: (p := status("killed")).status.phase == "Running" and p
    )
    for pod in (done, running):
        uid = pod.metadata.uid
        assert pod.status.pod_ip == f"198.18.{int(uid[-4:-2], 16)}.{int(uid[-2:], 16)}", pod.status
        bound = next(c for c in pod.status.conditions if c.type == "PodScheduled")
        assert pod.status.start_time == bound.last_transition_time, pod.status
        state = pod.status.container_statuses[0].state
        assert (state.running or state.terminated).started_at == bound.last_transition_time
    finished = done.status.container_statuses[0].state.terminated.finished_at
    assert finished - done.status.start_time == timedelta(seconds=2), done.status
    ready = next(c for c in running.status.conditions if c.type == "Ready")
    assert ready.last_transition_time == running.status.start_time, running.status

    kube.core.delete_namespaced_pod("killed", ns)
    dead = wait_for(
        "killed to end Failed", lambda: (p := status("killed")).status.phase == "Failed" and p
    )
    term = dead.status.container_statuses[0].state.terminated
    assert term.exit_code == 137
    grace = timedelta(seconds=dead.metadata.deletion_grace_period_seconds)
    assert term.finished_at == dead.metadata.deletion_timestamp - grace, dead
    kube.core.patch_namespaced_pod("killed", ns, {"metadata": {"finalizers": None}})


def test_namespace_deletion_removes_objects(kube_cluster: KubeCluster) -> None:
    kube, ns = kube_cluster, "doomed-namespace"
    kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    kube.core.create_namespaced_config_map(
        ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cfg"), data={"a": "b"})
    )
    kube.core.create_namespaced_service(
        ns,
        client.V1Service(
            metadata=client.V1ObjectMeta(name="svc"),
            spec=client.V1ServiceSpec(cluster_ip="None", selector={"app": "x"}),
        ),
    )
    template = client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels={"tfkube.io/replica-type": "ps"}),
        spec=client.V1PodSpec(restart_policy="Never", containers=[_container()]),
    )
    kube.batch.create_namespaced_job(
        ns,
        client.V1Job(
            metadata=client.V1ObjectMeta(name="ps"), spec=client.V1JobSpec(template=template)
        ),
    )
    wait_for(
        "the PS pod to run",
        lambda: [p for p in _pods(kube, ns) if p.status.phase == "Running"],
    )

    kube.core.delete_namespace(ns)

    def gone() -> bool:
        try:
            kube.core.read_namespace(ns)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for("the namespace to be finalized", gone, timeout=90)
    assert kube.core.list_namespaced_pod(ns).items == []
    assert kube.core.list_namespaced_config_map(ns).items == []
    assert kube.batch.list_namespaced_job(ns).items == []


def test_gpu_pods_land_only_on_gpu_nodes(kube_cluster: KubeCluster, kube_namespace: str) -> None:
    kube, ns = kube_cluster, kube_namespace
    gpu = {"nvidia.com/gpu": "1"}
    for i in range(4):
        kube.core.create_namespaced_pod(
            ns,
            _pod(f"gpu-{i}", labels={"tfkube.io/replica-type": "ps"}, limits=gpu, requests=gpu),
        )
    too_big = {"nvidia.com/gpu": "64"}
    kube.core.create_namespaced_pod(ns, _pod("too-big", limits=too_big, requests=too_big))

    def all_running() -> list[client.V1Pod] | None:
        pods = [p for p in _pods(kube, ns) if p.metadata.name.startswith("gpu-")]
        return pods if all(p.status.phase == "Running" for p in pods) else None

    for pod in wait_for("GPU pods to run", all_running):
        assert pod.spec.node_name in kube.gpu_nodes, pod.spec.node_name

    def unschedulable() -> bool:
        pod = kube.core.read_namespaced_pod_status("too-big", ns)
        conds = {c.type: c for c in pod.status.conditions or []}
        sched = conds.get("PodScheduled")
        return sched is not None and sched.reason == "Unschedulable"

    wait_for("the 64-GPU pod to be unschedulable", unschedulable)
    pod = kube.core.read_namespaced_pod_status("too-big", ns)
    assert pod.spec.node_name is None
    assert "nvidia.com/gpu" in pod.status.conditions[0].message
