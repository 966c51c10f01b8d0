"""A team's objects in a cluster: its namespace, the NetworkPolicy that keeps other
teams' pods out of it and its pods off the cloud's metadata service (`TenantNetwork`), and
its quota as a ResourceQuota with default
requests (a LimitRange) where the quota counts CPU or memory; for a team with a priority,
the PriorityClass its jobs' pods get (`team_priority_class`). Pure."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tfkube import contract
from tfkube.kube.names import (
    GROUP,
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    METADATA_ADDRESSES,
    PLURAL,
    TENANT_OBJECTS,
    pod_security_labels,
    team_priority_class,
)
from tfkube.render._deploy import OPERATOR_NAMESPACE

DEFAULT_REQUEST = {"cpu": contract.DEFAULT_CPU_REQUEST, "memory": "512Mi"}
"""What a container that asks for nothing is counted as in a team namespace with a quota
(a LimitRange default): Kubernetes refuses a pod without requests where a quota counts
them. The CPU is the local queue's too (`contract.DEFAULT_CPU_REQUEST`)."""


_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def _network(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        return ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        raise ValueError(f"{cidr!r} is not an address or a CIDR (e.g. 198.19.0.1/32)") from None


def parse_egress_deny(values: list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """`--kube-egress-deny` given as `values`: none given, the clouds' metadata services
    (`METADATA_ADDRESSES`); `none`, nothing refused; else those CIDRs (checked by
    `TenantNetwork`)."""
    if not values:
        return METADATA_ADDRESSES
    if list(values) == ["none"]:
        return ()
    if "none" in values:
        raise ValueError("'none' cannot be given with addresses: give one or the other")
    return tuple(values)


@dataclass(frozen=True)
class TenantNetwork:
    """Who may open a connection to a team's pods (the team namespace's NetworkPolicy
    `tfkube-tenant`, ingress only): the namespace's own pods (a job's replicas, its
    TensorBoard, the team's notebooks and model servers), the pods of tfkube's own
    namespace (the server in a cluster dials a model server's gRPC door), and `sources`,
    the addresses outside the pod network that must (the API server: its service proxy
    carries the server's requests to a TensorBoard, a notebook or a model server). Every
    other pod of the cluster, another team's above all, is refused: a TensorFlow server
    (a PS, a worker) runs any graph a peer sends it, so reaching a job's port is reading
    and writing its variables. Traffic from a pod's own node is always allowed (the
    kubelet's probes). Out of the team's pods, every destination but `denied` (by default
    the clouds' metadata services, `METADATA_ADDRESSES`). A NetworkPolicy needs a network
    plugin that enforces it; without one it is kept and does nothing (docs/security.md)."""

    platform_namespace: str = OPERATOR_NAMESPACE
    sources: tuple[str, ...] = ()
    """CIDRs (`198.19.0.1/32`); a site admin's (`tfkube server --kube-ingress-from`),
    by default the API server's own addresses (the `kubernetes` Service's endpoints)."""
    denied: tuple[str, ...] = METADATA_ADDRESSES
    """CIDRs a team's pods may not open connections to (`tfkube server
    --kube-egress-deny`); empty: egress is not limited."""

    def __post_init__(self) -> None:
        if not _NAMESPACE.fullmatch(self.platform_namespace):
            raise ValueError(
                f"{self.platform_namespace!r} is not a namespace name (lower-case letters, "
                "digits and '-', at most 63, e.g. tfkube-system)"
            )
        for cidr in (*self.sources, *self.denied):
            _network(cidr)
        for cidr in self.denied:
            if _network(cidr).prefixlen == 0:
                raise ValueError(
                    f"{cidr!r} denies every address: a team's pods could not reach their own "
                    "peers, DNS or the server; name the addresses to refuse (e.g. "
                    "169.254.169.254/32)"
                )


def _egress(denied: tuple[str, ...]) -> list[dict[str, Any]]:
    """Every destination but `denied`: every pod of the cluster by selector (where a
    plugin does not match pods' addresses against an ipBlock), and each address family's
    whole range less its denied blocks."""
    peers: list[dict[str, Any]] = [{"namespaceSelector": {}}]
    for everything in ("0.0.0.0/0", "::/0"):
        whole = ipaddress.ip_network(everything)
        excepted = sorted({str(n) for n in map(_network, denied) if n.version == whole.version})
        block: dict[str, Any] = {"cidr": everything}
        if excepted:
            block["except"] = excepted
        peers.append({"ipBlock": block})
    return [{"to": peers}]


def network_policy(namespace: str, network: TenantNetwork) -> dict[str, Any]:
    """The team namespace's NetworkPolicy (`TenantNetwork`). Every pod of the namespace
    is selected, so none is open by default; out of it, everything but `denied`."""
    peers: list[dict[str, Any]] = [
        {"podSelector": {}},
        {
            "namespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": network.platform_namespace}
            }
        },
    ]
    for cidr in network.sources:
        peers.append({"ipBlock": {"cidr": str(_network(cidr))}})
    spec: dict[str, Any] = {
        "podSelector": {},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": peers}],
    }
    if network.denied:
        spec["policyTypes"] = ["Ingress", "Egress"]
        spec["egress"] = _egress(network.denied)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": TENANT_OBJECTS,
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_COMPONENT: "tenant"},
        },
        "spec": spec,
    }


def quota_hard(quota: Mapping[str, Any]) -> dict[str, str]:
    """A team's quota as a ResourceQuota's `hard`. Requests only: a quota on limits would
    force a limit on every container, and a default memory limit kills training that needs
    more; requests are what the scheduler reserves, so they are what is shared."""
    hard: dict[str, str] = {}
    if quota.get("cpu") is not None:
        hard["requests.cpu"] = f"{quota['cpu']:g}"
    if quota.get("memory") is not None:
        hard["requests.memory"] = str(int(quota["memory"]))
    if quota.get("gpu") is not None:
        hard["requests.nvidia.com/gpu"] = str(int(quota["gpu"]))
    if quota.get("jobs") is not None:
        hard[f"count/{PLURAL}.{GROUP}"] = str(int(quota["jobs"]))
    return hard


def priority_class(priority: int) -> dict[str, Any] | None:
    """The PriorityClass of a team's priority (cluster-wide, shared by the teams with that
    priority), or None for 0. A job of a team with a higher priority that does not fit
    makes the scheduler preempt pods of lower ones: the operator counts that as a
    preemption, never a restart (docs/kubernetes.md, "Preemption")."""
    name = team_priority_class(priority)
    if name is None:
        return None
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {
            "name": name,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_COMPONENT: "tenant"},
        },
        "value": priority,
        "globalDefault": False,
        "preemptionPolicy": "PreemptLowerPriority",
        "description": f"tfkube: the jobs of teams of priority {priority}",
    }


def tenant_objects(
    namespace: str,
    quota: Mapping[str, Any],
    pod_security: str = "restricted",
    priority: int = 0,
    network: TenantNetwork = TenantNetwork(),
) -> list[dict[str, Any]]:
    """A team's namespace, its NetworkPolicy (`network_policy`), its quota, with default
    requests where the quota counts CPU or memory, and its priority's PriorityClass
    (`priority_class`). The namespace enforces the team's Pod Security level
    (`restricted` unless a site admin allowed `baseline`:
    `tfkube.engines.admission_refusals`)."""
    labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_COMPONENT: "tenant"}
    ns_labels = {**labels, **pod_security_labels(pod_security)}
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": namespace, "labels": ns_labels},
        },
        network_policy(namespace, network),
    ]
    hard = quota_hard(quota)
    meta = {"name": TENANT_OBJECTS, "namespace": namespace, "labels": labels}
    if hard:
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": dict(meta),
                "spec": {"hard": hard},
            }
        )
    if "requests.cpu" in hard or "requests.memory" in hard:
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "LimitRange",
                "metadata": dict(meta),
                "spec": {
                    "limits": [{"type": "Container", "defaultRequest": dict(DEFAULT_REQUEST)}]
                },
            }
        )
    cls = priority_class(priority)
    if cls is not None:
        objects.append(cls)
    return objects
