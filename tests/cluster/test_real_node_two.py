"""Two real kubelet nodes: a between-graph job with its PS on one node and its workers on the
other, and the PS's node drained, or powered off, while the job trains.

The second node (`second_real_node`, tools/kube/realnode.py) runs its containerd, kubelet and
kube-proxy in a network namespace of its own, its pods on their own /24 (198.19.(16+N).0/24),
routed through the machine to the first node's pods, the API server and the one CoreDNS
(198.19.N.0/24). Placement is what a platform team would do with nodes it dedicates: the
second node carries a taint of its own (`tfkube.io/second-node`) that only the PS tolerates,
so the workers can only run on the first node; while the test runs, the first node carries
a PreferNoSchedule taint the PS does not tolerate, so the PS prefers the second node but may
still fall back to the first. The job's logs claim (checkpoints) is a folder both nodes
mount.

The drain is `kubectl drain` itself (cordon, then evict through the Eviction API): the PS's
pod is evicted, tfkube restarts the whole job (a PS holds the variables), the new PS can only
go to the first node, and the chief resumes from the checkpoint on the claim. The power-off
(`Cluster.power_off_second_node`: the node's kubelet, runtime, kube-proxy and pods
SIGKILLed) is found by the node lifecycle controller; the PS's pod is evicted after
runPolicy.nodeLostSeconds and the job recovers the same way. Together ~5 min of CI time with
the second node's start: each job trains 1,000 steps only.
"""

from __future__ import annotations

import ipaddress
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tfkube.engines.kubernetes import KubernetesBackend

from ._support import KubeCluster, Operator, RealNode, load_cluster_module, wait_for
from .test_real_node import (
    JOB_TIMEOUT,
    KEPT_LOGS,
    MIN_ACCURACY,
    describe,
    first_logged_at,
    kube_namespace,  # noqa: F401 - the fixture: Pod Security restricted, as a team's namespace
    latest_checkpoint_step,
    pod_log,
    real_node_job,
    replica_pods,
    result,
    submit,
    wait_done,
)

ARGS = ["--train_steps=1000", "--step_sleep=0.05", "--checkpoint_steps=100"]
"""Worker args: the 700 global steps left after the checkpoint at 300 the faults wait for
take >= 17 s (two workers, >= 0.05 s a step each), so the fault lands while it trains;
1,000 steps reach the example's accuracy (the one-node test trains as many)."""
AVOID_KEY = "tfkube.io/two-node-test"
"""The PreferNoSchedule taint the first node carries during the test (the PS avoids it)."""


def test_the_second_nodes_addresses_and_configuration() -> None:
    """Pure: for every slot, the second node's pod /24 and link /30 meet none of the first
    nodes' /24s, the service range or KWOK's fake pod IPs; each node's pods route the other's
    /24 through their own node address; the second node's kubelet uses the first's DNS
    address and registers with its own taint too."""
    kube = load_cluster_module()
    realnode = kube._sibling("realnode")
    taken = [
        ipaddress.ip_network(kube.SERVICE_CIDR),
        ipaddress.ip_network(kube.POD_CIDR, strict=False),
    ]
    taken += list(realnode.SUBNET_BASE.subnets(new_prefix=24))[: realnode.MAX_SLOTS]
    for slot in range(realnode.MAX_SLOTS):
        net = realnode.second_network(slot)
        pods = ipaddress.ip_network(net["subnet"])
        link = ipaddress.ip_network(f"{net['link_host']}/30", strict=False)
        assert ipaddress.ip_address(net["node_ip"]) in pods
        assert ipaddress.ip_address(net["link_node"]) in link
        assert pods.subnet_of(realnode.SUBNET_BASE)
        assert link.subnet_of(realnode.SUBNET_BASE)
        assert not any(pods.overlaps(t) or link.overlaps(t) for t in taken), (slot, net)
        taken += [pods, link]
        assert len(net["uplink"]) <= 15  # a Linux interface name

    first = realnode.NodeState(
        name="tfkube-real-0", slot=0, bridge="tfkube0", node_ip="198.19.0.1",
        subnet="198.19.0.0/24", dir="/x", cgroup="/tfkube-0", containerd_socket="/x/s",
        service_cidr=kube.SERVICE_CIDR, routes=["198.19.16.0/24"],
    )  # fmt: skip
    second = realnode.NodeState(
        name="tfkube-real-0b", slot=0, bridge="cbr0", node_ip="198.19.16.1",
        subnet="198.19.16.0/24", dir="/y", cgroup="/tfkube-0b", containerd_socket="/y/s",
        service_cidr=kube.SERVICE_CIDR, netns="tfkube0b", uplink="tfkube0b",
        dns_ip="198.19.0.1", routes=["198.19.0.0/24"],
    )  # fmt: skip
    for st, other in ((first, second), (second, first)):
        routes = realnode.cni_config(st, Path(st.dir))["plugins"][0]["ipam"]["routes"]
        assert {"dst": other.subnet, "gw": st.node_ip} in routes
        assert {"dst": kube.SERVICE_CIDR, "gw": st.node_ip} in routes
    cfg = realnode.kubelet_config(second, Path("/y/kubelet"), Path("/ca"))
    assert cfg["clusterDNS"] == ["198.19.0.1"]
    assert realnode.SECOND_NODE_TAINT in cfg["registerWithTaints"]
    first_cfg = realnode.kubelet_config(first, Path("/x/kubelet"), Path("/ca"))
    assert realnode.SECOND_NODE_TAINT not in first_cfg["registerWithTaints"]
    assert RealNode.SECOND_TOLERATION["key"] == realnode.SECOND_NODE_TAINT["key"]
    pv = realnode.hostpath_volume("pv", Path("/v"), [first.name, second.name], "ns", "c", "1Gi")
    terms = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == [first.name, second.name]


def kubectl(kube: KubeCluster, *args: str, timeout: float = 180) -> str:
    proc = subprocess.run(
        [str(kube.kubectl), "--kubeconfig", str(kube.kubeconfig), *args],
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture
def placed(
    kube_cluster: KubeCluster, real_node: RealNode, second_real_node: RealNode
) -> Iterator[None]:
    """The first node discouraged for pods that do not tolerate AVOID_KEY (the PS) while a
    test runs; afterwards that taint is gone and the second node schedulable again."""
    kubectl(kube_cluster, "taint", "node", real_node.name, f"{AVOID_KEY}=ps:PreferNoSchedule")
    try:
        yield
    finally:
        kubectl(kube_cluster, "taint", "node", real_node.name, f"{AVOID_KEY}-")
        kubectl(kube_cluster, "uncordon", second_real_node.name)


def start_across_nodes(
    operator: Operator, first: RealNode, second: RealNode, ns: str, tmp_path: Path, **policy: Any
) -> tuple[Any, Any, Path, int]:
    """Submit the between-graph example (ARGS, a logs claim both nodes mount) with the PS
    allowed on the second node; wait for a checkpoint at step >= 300 and check the
    placement: the PS on the second node (an address of its /24), both workers on the
    first, the chief training. Returns (the PS pod, the chief pod, the log folder, the
    checkpoint step)."""
    kube, name = operator.kube, "mnist-between-graph"
    path, raw = real_node_job(first, tmp_path, name, ARGS, storage=KEPT_LOGS, **policy)
    raw["spec"]["replicas"]["ps"]["tolerations"].append(dict(RealNode.SECOND_TOLERATION))
    path.write_text(yaml.safe_dump(raw))
    submit(second, kube, ns, path, bind=(f"{name}-logs",))  # a folder both nodes mount
    log_dir = second.volume(ns, f"{name}-logs")
    wait_for("a checkpoint at step >= 300", lambda: latest_checkpoint_step(log_dir) >= 300,
             JOB_TIMEOUT, 0.5)  # fmt: skip
    checkpointed = latest_checkpoint_step(log_dir)
    ps = replica_pods(kube, ns, name, "ps", 0)[-1]
    workers = [replica_pods(kube, ns, name, "worker", i)[-1] for i in (0, 1)]
    assert ps.spec.node_name == second.name, describe(kube, ns, name)
    assert [w.spec.node_name for w in workers] == [first.name] * 2, describe(kube, ns, name)
    second_net = ipaddress.ip_network(f"{second.node_ip}/24", strict=False)
    assert ipaddress.ip_address(ps.status.pod_ip) in second_net, ps.status.pod_ip
    assert all(ipaddress.ip_address(w.status.pod_ip) not in second_net for w in workers)
    chief_log = pod_log(kube, ns, workers[0])
    assert re.search(r"global_step=\d+ loss", chief_log), chief_log[-2000:]
    return ps, workers[0], log_dir, checkpointed


def resumed_on_first(
    operator: Operator,
    first: RealNode,
    ns: str,
    old: tuple[Any, Any],
    log_dir: Path,
    checkpointed: int,
) -> tuple[float, dict[str, Any], dict[str, Any], list[int]]:
    """Wait for the restarted chief's session (after its restore) and the job's success;
    check it resumed from the checkpoint on the first node and reached the example's
    accuracy. `old`: the PS and chief pods before the fault (the operator may have made
    their successors before this is called). Returns (when it trained again, by the
    node's clock; the final status; the result; the restored steps)."""
    kube, name = operator.kube, "mnist-between-graph"
    old_ps, old_chief = old

    def new_chief_ready() -> float | None:
        found = replica_pods(kube, ns, name, "worker", 0)
        if not found or found[-1].metadata.uid == old_chief.metadata.uid:
            return None
        return first_logged_at(kube, ns, found[-1], r"session ready at global_step=")

    ready_at = wait_for("the restarted chief training", new_chief_ready, JOB_TIMEOUT, 0.5)
    final = wait_done(kube, ns, name)
    chief = replica_pods(kube, ns, name, "worker", 0)[-1]
    text = pod_log(kube, ns, chief)
    restored = [int(m) for m in re.findall(r"restoring model\.ckpt-(\d+)", text)]
    ready = [int(m) for m in re.findall(r"session ready at global_step=(\d+)", text)]
    res = result(kube, ns, name)
    assert restored, "the chief of the restarted job restores the checkpoint"
    assert restored[0] >= checkpointed > 0
    assert ready[0] >= restored[0]
    # A whole-job restart (the PS's generation moved on); whether it was counted against
    # backoffLimit is the test's own (a drain's is not: a disruption).
    assert final["restartGenerations"].get("ps", 0) >= 1, final
    assert chief.spec.node_name == first.name
    # The PS's pod is ended once the job succeeds; if still listed, it ran on the first node.
    moved = [p for p in replica_pods(kube, ns, name, "ps", 0)
             if p.metadata.uid != old_ps.metadata.uid]  # fmt: skip
    assert all(p.spec.node_name == first.name for p in moved), describe(kube, ns, name)
    assert res["test_accuracy"] >= MIN_ACCURACY, res
    assert res["global_step"] >= 1000
    assert (log_dir / "result.json").is_file()  # on the claim both nodes mount
    return ready_at, final, res, restored


def test_ps_on_one_node_workers_on_the_other_and_a_drained_node(
    operator: Operator,
    real_node: RealNode,
    second_real_node: RealNode,
    placed: None,
    kube_namespace: str,  # noqa: F811 - the restricted namespace imported above
    tmp_path: Path,
) -> None:
    """1 PS on the second node, 2 workers on the first: they train through the routed pod
    networks and the one CoreDNS; the PS's node is drained mid-job (`kubectl drain`); the
    job is restarted on the first node, resumes from its checkpoint and reaches the
    example's accuracy; the restart is a disruption (`status.disruptions` 1, a `Disrupted`
    event), not one of its restarts."""
    kube, ns, second = operator.kube, kube_namespace, second_real_node
    print(f"\nsecond real node {second.name} started in {second.timings.get('total', 0):.1f}s "
          f"({second.timings})")  # fmt: skip
    t0 = time.monotonic()
    ps, chief, log_dir, checkpointed = start_across_nodes(
        operator, real_node, second, ns, tmp_path, backoffLimit=6
    )
    drained = time.time()
    drain_started = time.monotonic()
    kubectl(kube, "drain", second.name, "--ignore-daemonsets", "--delete-emptydir-data",
            "--force", "--timeout=150s")  # fmt: skip
    drain_took = time.monotonic() - drain_started
    ready_at, final, res, restored = resumed_on_first(
        operator, real_node, ns, (ps, chief), log_dir, checkpointed
    )
    # A planned disruption, not a failure: counted apart, not against backoffLimit, and
    # said as such in the job's events.
    assert (final.get("disruptions"), final.get("restarts", 0)) == (1, 0), describe(
        kube, ns, "mnist-between-graph"
    )
    # ... and what `tfkube status` and a server's job page show (the engine's view).
    view = KubernetesBackend(api_client=kube.api_client, namespace=ns).get("mnist-between-graph")
    assert (view.disruptions, view.restarts) == (1, 0), view
    said = [e.message for e in kube.core.list_namespaced_event(ns).items
            if e.reason == "Disrupted" and e.involved_object.kind == "TFJob"]  # fmt: skip
    assert len(said) == 1, said
    assert said[0].startswith("restarted after its PS was evicted: ps-0"), said
    assert "not counted against backoffLimit (disruption 1)" in said[0], said
    print(
        f"two nodes, drain: checkpoint at {checkpointed} when {second.name} was drained "
        f"(kubectl drain took {drain_took:.1f}s); the restarted chief restored {restored} and "
        f"was training again {ready_at - drained:.1f}s after the drain began; Succeeded "
        f"{time.monotonic() - t0:.0f}s after submit, accuracy {res['test_accuracy']}, "
        f"global_step {res['global_step']}, restarts {final.get('restarts', 0)}, "
        f"disruptions {final.get('disruptions')}"
    )


NODE_LOST_SECONDS = 10
"""runPolicy.nodeLostSeconds of the stopped-node test (the product's default is 30 s)."""


def test_a_stopped_node_restarts_the_job_from_its_checkpoint(
    operator: Operator,
    kube_cluster: KubeCluster,
    real_node: RealNode,
    second_real_node: RealNode,
    placed: None,
    kube_namespace: str,  # noqa: F811 - the restricted namespace imported above
    tmp_path: Path,
) -> None:
    """The same placement; the PS's node loses its power mid-job (kubelet, runtime,
    kube-proxy and pods SIGKILLed, the API server not told). The node lifecycle controller
    finds it NotReady and taints it; the PS's pod is evicted after runPolicy.nodeLostSeconds
    (not Kubernetes' 300 s); the operator restarts the whole job, which resumes from its
    checkpoint on the first node. Runs last: the second node stays dead until the module's
    teardown removes it."""
    kube, ns, second = operator.kube, kube_namespace, second_real_node
    t0 = time.monotonic()
    ps, chief, log_dir, checkpointed = start_across_nodes(
        operator, real_node, second, ns, tmp_path, backoffLimit=6,
        nodeLostSeconds=NODE_LOST_SECONDS,
    )  # fmt: skip
    stopped = time.time()
    killed = kube_cluster.harness.power_off_second_node()
    assert any(line.startswith("kubelet") for line in killed), killed

    def not_ready() -> float | None:
        node = kube.core.read_node(second.name)
        for cond in node.status.conditions or []:
            if cond.type == "Ready" and cond.status != "True":
                return float(cond.last_transition_time.timestamp())
        return None

    not_ready_at = wait_for(f"{second.name} NotReady", not_ready, 180, 1.0)
    ready_at, final, res, restored = resumed_on_first(
        operator, real_node, ns, (ps, chief), log_dir, checkpointed
    )
    print(
        f"two nodes, power off: checkpoint at {checkpointed} when {second.name} stopped; "
        f"NotReady {not_ready_at - stopped:.1f}s after (API time, 1 s grain); the restarted "
        f"chief restored {restored} and was training again {ready_at - stopped:.1f}s after "
        f"the stop (nodeLostSeconds {NODE_LOST_SECONDS}); Succeeded "
        f"{time.monotonic() - t0:.0f}s after submit, accuracy {res['test_accuracy']}, "
        f"restarts {final['restarts']}"
    )
