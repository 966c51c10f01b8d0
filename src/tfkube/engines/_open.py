"""Which engine a platform server runs on: its settings, and the one place that picks the
implementation (imported lazily: the local engine must not need the `kubernetes` extra)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tfkube.engines._workloads import Engine
from tfkube.kube.names import METADATA_ADDRESSES as METADATA_ADDRESSES

KINDS = ("local", "kubernetes")
SERVICE_NETWORKS = ("auto", "cluster-ip", "dns", "none")
"""Kubernetes: how the server reaches a model server's Service for gRPC
(`--kube-service-network`): `auto` its DNS name when the server runs in the cluster, else
not at all; `cluster-ip` its ClusterIP (a host whose kube-proxy, or routes, carry the
Service network); `dns` `<name>-serving.<namespace>.svc` (a host resolving the cluster's
names); `none` never (gRPC calls answer UNAVAILABLE). REST goes through the API server's
service proxy whatever this says."""


def parse_service_network(value: str) -> str:
    """One of SERVICE_NETWORKS. Raises ValueError naming the choices. Pure."""
    if value not in SERVICE_NETWORKS:
        raise ValueError(f"{value!r} is not one of {', '.join(SERVICE_NETWORKS)}")
    return value


@dataclass(frozen=True)
class EngineSettings:
    kind: str
    """local (processes on this machine) or kubernetes (each team a namespace)."""
    data_dir: Path
    """The server's data folder: the local engine keeps the teams' jobs, outputs and
    notebooks below it; the Kubernetes engine finds the teams' mounted outputs there."""
    kubeconfig: Path | None = None
    """Kubernetes: the kubeconfig (default: in-cluster, $KUBECONFIG)."""
    outputs_claim: str | None = None
    """Kubernetes: a ReadWriteMany claim in every team namespace, mounted by the server at
    `<data dir>/teams/<team>/outputs`, where jobs keep their logs and outputs."""
    serving_runtime: str | None = None
    """Kubernetes: the model server a request that names none gets (default: the stock
    TensorFlow Serving image)."""
    service_network: str = "auto"
    """Kubernetes: how the server reaches model servers' Services for gRPC
    (SERVICE_NETWORKS, `--kube-service-network`)."""
    notebook_node_selector: Mapping[str, str] = field(default_factory=dict)
    """Kubernetes: the node labels notebooks' pods require (`--notebook-node-selector`)."""
    notebook_tolerations: tuple[Mapping[str, str], ...] = ()
    """Kubernetes: the taints notebooks' pods tolerate (`--notebook-toleration`)."""
    ingress_from: tuple[str, ...] = ()
    """Kubernetes: CIDRs outside the pod network that may reach team pods
    (`--kube-ingress-from`; `tfkube.render.TenantNetwork`)."""
    platform_namespace: str = "tfkube-system"
    """Kubernetes: tfkube's own namespace, whose pods may reach team pods."""
    egress_deny: tuple[str, ...] = METADATA_ADDRESSES
    """Kubernetes: CIDRs team pods may not connect to (`--kube-egress-deny`;
    `tfkube.render.TenantNetwork.denied`)."""
    cpus: float | None = None
    """Local: CPUs jobs may request together (default: this machine's)."""
    memory: int | None = None
    """Local: bytes of memory jobs may request together (default: this machine's)."""
    workload_env: tuple[str, ...] = ()
    """Local: variables of the server's environment its workloads get too (an allow-list:
    never the whole environment, which may hold the database's password)."""
    fetch_allowed: tuple[str, ...] = ()
    """Local: the ranges (`--allow-fetch-from`) a team's data source's hosts may lie in
    beside public addresses (a NameNode's redirects to DataNodes are judged by them)."""
    package_indexes: tuple[str, ...] = ()
    """Local: the package indexes a confined job's requirements.txt step may reach
    (`--package-index`); empty: PyPI."""


def open_engine(settings: EngineSettings) -> Engine:
    """The engine the settings name. Raises ValueError for an unknown kind."""
    if settings.kind == "local":
        from tfkube.engines.local import LocalEngine

        return LocalEngine(
            settings.data_dir,
            settings.cpus,
            settings.memory,
            workload_env=settings.workload_env,
            fetch_allowed=settings.fetch_allowed,
            package_indexes=settings.package_indexes,
        )
    if settings.kind == "kubernetes":
        from tfkube.engines.kubernetes import KubernetesEngine

        return KubernetesEngine(
            settings.data_dir,
            kubeconfig=settings.kubeconfig,
            outputs_claim=settings.outputs_claim,
            serving_runtime=settings.serving_runtime,
            service_network=parse_service_network(settings.service_network),
            notebook_node_selector=settings.notebook_node_selector,
            notebook_tolerations=settings.notebook_tolerations,
            ingress_from=settings.ingress_from,
            platform_namespace=settings.platform_namespace,
            egress_deny=settings.egress_deny,
        )
    raise ValueError(f"unknown engine {settings.kind!r}; choose {' or '.join(KINDS)}")
