"""The Kubernetes engine as the platform server sees it (`tfkube.engines.Engine`): each
team is a namespace with its quota; its jobs are TFJobs (run by the operator), its model
servers and notebooks are objects in that namespace, its TensorBoards the jobs' own; the
proxy reaches them through the API server's service proxy.

Jobs keep their outputs on the team's outputs claim, under the job's name (`<claim>/<job>`,
mounted by the server at `<data dir>/teams/<team>/outputs`), when the server was given one;
else the server reads logs from pods while they exist. The cluster queues jobs and
enforces quotas, so the server does not (`capacity` is None)."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tfkube.engines._base import Backend
from tfkube.engines._workloads import (
    Features,
    JobStorage,
    ModelServerWorkload,
    NotebookWorkload,
    Runner,
    RunnersByKind,
    Tenant,
    TensorBoardWorkload,
)
from tfkube.engines.kubernetes._backend import KubernetesBackend
from tfkube.engines.kubernetes._install import apply_objects
from tfkube.engines.kubernetes._services import (
    KubeModelServers,
    KubeNotebooks,
    KubeTensorBoards,
    ServiceNetwork,
    ServiceProxy,
    service_reader,
)
from tfkube.kube.names import METADATA_ADDRESSES, team_priority_class
from tfkube.kube.resources import ENDPOINT_SLICE, NAMESPACE
from tfkube.kube.rest import Kube, api_client_from, in_cluster
from tfkube.launcher import FetchError, check_archive
from tfkube.render import (
    OPERATOR_NAMESPACE,
    Placement,
    ServingRuntime,
    TenantNetwork,
    parse_runtime,
    replica_request,
    tenant_objects,
)
from tfkube.spec import FieldError, Resources, SpecError

NAMESPACE_GONE_SECONDS = 45.0
"""How long making a team waits for its namespace to finish being deleted (a team removed
and made again, tfkube uninstalled and installed again): the namespace controller first
deletes everything the namespace holds, seconds on a busy cluster, and the API server
refuses anything new in it meanwhile. Longer means something holds it (a finalizer whose
controller is gone): the request that makes the team is answered then, naming it. Below
the clients' own time-outs (`tfkube.Client` 60 s, set-up 60 s), so the answer reaches them."""

API_SERVER_SERVICE = ("default", "kubernetes")
"""The Service every cluster has for its API servers: its endpoints are their addresses."""


def api_server_sources(kube: Kube) -> tuple[str, ...]:
    """The API servers' own addresses as CIDRs (`/32`, `/128`), from the `kubernetes`
    Service's EndpointSlices: where the service proxy's connections to pods come from
    when the API server's host routes to the pod network itself. Sorted, no repeats."""
    namespace, service = API_SERVER_SERVICE
    found: set[str] = set()
    for piece in kube.list(ENDPOINT_SLICE, namespace, f"kubernetes.io/service-name={service}"):
        bits = {"IPv4": 32, "IPv6": 128}.get(piece.get("addressType", ""))
        if bits is None:
            continue
        for endpoint in piece.get("endpoints") or []:
            for address in endpoint.get("addresses") or []:
                found.add(f"{address}/{bits}")
    return tuple(sorted(found))


class NamespaceTerminating(RuntimeError):
    """A team's namespace was still being deleted when its team was to be made there."""


def wait_until_not_terminating(kube: Kube, namespace: str, timeout: float) -> None:
    """Return once `namespace` is not being deleted: it does not exist, or exists and is
    not Terminating. The API server refuses every new object in a namespace being deleted
    (`forbidden: ... because it is being terminated`), so making a team there in the
    meantime would fail half-way; after `timeout` seconds, NamespaceTerminating says what
    holds it."""
    deadline = time.monotonic() + timeout
    pause = 0.2
    while True:
        found = kube.get(NAMESPACE, None, namespace)
        if found is None or not found["metadata"].get("deletionTimestamp"):
            return
        if time.monotonic() >= deadline:
            meta = found["metadata"]
            held = ", ".join(meta.get("finalizers") or ()) or "none"
            why = "; ".join(
                c.get("message", "")
                for c in (found.get("status") or {}).get("conditions") or ()
                if c.get("status") == "True" and c.get("message")
            )
            raise NamespaceTerminating(
                f"namespace {namespace} has been being deleted since "
                f"{meta['deletionTimestamp']} and was not gone after {timeout:.0f}s "
                f"(its finalizers: {held}{'; ' + why if why else ''}): the team can be "
                f"made there once it is gone (`kubectl get namespace {namespace} -o yaml` "
                "says what it still holds)"
            )
        time.sleep(pause)
        pause = min(pause * 2, 2.0)


class KubernetesEngine(RunnersByKind):
    name = "kubernetes"
    keeps_running = True
    """Pods outlive the server; the next one finds them by name."""
    features = Features(
        data_sets=True,
        tensorboard_on_demand=False,
        namespaces=True,
        data_sources=True,
        replica_usage=True,
        polled_usage=True,
        autoscale=True,
    )
    """Data sets and data sources reach the pods through the server: it stages a source
    into the team's cache (`JobStorage.served_data`) and every replica but PS fetches its
    data (its shard) with the job's claim (`tfkube.launcher._data`)."""

    def __init__(
        self,
        data_dir: Path,
        kubeconfig: Path | None = None,
        outputs_claim: str | None = None,
        serving_runtime: str | None = None,
        api_client: Any = None,
        service_network: str = "auto",
        notebook_node_selector: Mapping[str, str] | None = None,
        notebook_tolerations: Sequence[Mapping[str, str]] = (),
        ingress_from: Sequence[str] = (),
        platform_namespace: str = OPERATOR_NAMESPACE,
        egress_deny: Sequence[str] = METADATA_ADDRESSES,
    ) -> None:
        self.data_dir = data_dir
        self.kubeconfig = kubeconfig
        self.outputs_claim = outputs_claim
        self.serving_runtime = parse_runtime(serving_runtime, ServingRuntime.TENSORFLOW_SERVING)
        self.service_network = service_network
        """How the server reaches model servers' Services for gRPC (`ServiceNetwork`)."""
        self.notebook_placement = Placement(
            node_selector=dict(notebook_node_selector or {}),
            tolerations=tuple(dict(t) for t in notebook_tolerations),
        )
        """Where notebooks run (a site admin's: the server's flags)."""
        self.ingress_from = tuple(ingress_from)
        """Addresses outside the pod network allowed into team namespaces
        (`--kube-ingress-from`); empty: the API servers' own (`api_server_sources`)."""
        self.platform_namespace = platform_namespace
        """tfkube's own namespace (the in-cluster server's): its pods may reach teams'."""
        self.egress_deny = tuple(egress_deny)
        """Addresses team pods may not connect to (`--kube-egress-deny`)."""
        self.namespace_gone_seconds = NAMESPACE_GONE_SECONDS
        """How long `prepare_tenant` waits for a team's namespace being deleted."""
        self._network: TenantNetwork | None = None
        self._api = api_client
        self._runners: dict[type, Runner] | None = None
        self._backends: dict[str, KubernetesBackend] = {}
        self._lock = threading.Lock()

    def api_client(self) -> Any:
        with self._lock:
            if self._api is None:
                self._api = api_client_from(self.kubeconfig)
            return self._api

    def runners(self) -> Mapping[type, Runner]:
        """Made on first use, as the API client is."""
        if self._runners is None:
            api = self.api_client()
            proxy = ServiceProxy(api)
            network = ServiceNetwork(service_reader(api), self.service_network, in_cluster(api))
            self._runners = {
                ModelServerWorkload: KubeModelServers(api, proxy, network),
                NotebookWorkload: KubeNotebooks(api, proxy, self.notebook_placement, network),
                TensorBoardWorkload: KubeTensorBoards(proxy, network),
            }
        return self._runners

    # -- tenants and jobs ---------------------------------------------------------------

    def tenant_network(self) -> TenantNetwork:
        """Who may reach a team's pods (`TenantNetwork`): read once, the API servers'
        addresses unless the site named its own."""
        with self._lock:
            found = self._network
        if found is None:
            sources = self.ingress_from or api_server_sources(Kube(self.api_client()))
            found = TenantNetwork(self.platform_namespace, sources, self.egress_deny)
            with self._lock:
                self._network = found
        return found

    def prepare_tenant(self, tenant: Tenant) -> None:
        """The team's namespace, its NetworkPolicy (only its own pods, tfkube's and the
        API server reach its pods), the ResourceQuota holding its quota, and its
        priority's PriorityClass (server-side apply, idempotent). A namespace still being
        deleted (the team removed, or tfkube uninstalled, just before) is waited for, up to
        `namespace_gone_seconds`, and then made anew."""
        wait_until_not_terminating(
            Kube(self.api_client()), tenant.namespace, self.namespace_gone_seconds
        )
        objects = tenant_objects(
            tenant.namespace,
            tenant.quota,
            tenant.pod_security,
            tenant.priority,
            self.tenant_network(),
        )
        apply_objects(self.api_client(), objects)

    def jobs(self, tenant: Tenant) -> Backend:
        api = self.api_client()
        with self._lock:
            found = self._backends.get(tenant.name)
            priority_class = team_priority_class(tenant.priority)
            if (
                found is None
                or found.namespace != tenant.namespace
                or found.priority_class != priority_class
            ):
                found = KubernetesBackend(
                    api_client=api, namespace=tenant.namespace, priority_class=priority_class
                )
                self._backends[tenant.name] = found
            return found

    def job_storage(self, tenant: Tenant, job_id: str, name: str) -> JobStorage:
        team = self.data_dir / "teams" / tenant.name
        # The pods fetch their data from the server: a source is staged here, by the job's
        # id, from the team's own cache (no team's job is shown another's objects).
        served, cache = team / "staged" / job_id, team / "data-cache"
        if self.outputs_claim is not None:
            # Kept outputs live under the job's name on the team's claim (its subPath).
            out = team / "outputs" / name
            return JobStorage(
                out, logs_claim=self.outputs_claim, served_data=served, data_cache=cache
            )
        # No shared folder: the replicas ship their logs, event files and result to the
        # server, which keeps them here, one folder per job (its id: names are reused).
        out = team / "shipped" / job_id
        return JobStorage(out, ship=True, served_data=served, data_cache=cache)

    def stage_data(self, tenant: Tenant, storage: JobStorage, archive: Path) -> None:
        """Nothing to unpack here: each pod fetches the data set and unpacks it into its
        own data folder (`tfkube.launcher._data`); the archive is checked now, as the
        pods will, so a bad one fails the job before any pod starts."""
        try:
            check_archive(archive)
        except FetchError as exc:
            message = str(exc).replace("the code", "the data set")
            raise SpecError([FieldError("data", message)]) from None

    def capacity(self) -> None:
        return None

    def model_server_runtimes(self) -> tuple[str, ...]:
        others = [r.value for r in ServingRuntime if r is not self.serving_runtime]
        return (self.serving_runtime.value, *others)

    def model_server_runtime(self, asked: str | None) -> str:
        return parse_runtime(asked, self.serving_runtime).value

    def model_server_request(self, resources: Resources) -> tuple[float, int] | None:
        return replica_request(resources if resources.model_fields_set else None)

    def close(self) -> None:
        with self._lock:
            if self._api is not None:
                self._api.close()
                self._api = None
