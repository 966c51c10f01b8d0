"""The Kubernetes engine's other workloads: model servers and notebooks as objects in the
tenant's namespace (rendered by `tfkube.render`, server-side applied), TensorBoard as the
job's own (rendered with the job when it asks for one); all reached through the API
server's service proxy with the engine's own credentials (RBAC: services/proxy). A model
server's gRPC door is its Service's `grpc` port, dialed directly when the server reaches
the cluster's Service network (`ServiceNetwork`): that proxy carries HTTP/1.1 only.

One runner per kind (`tfkube.engines.Runner`). Names are derived from the workload
(`<name>-serving`, `notebook-<id>`, `<job>-tensorboard`), so a handle is empty: a restarted
server finds everything again. Kubernetes keeps them running (Deployments, StatefulSets),
so nothing here is ever `exited`.
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import Callable, Mapping
from http.cookies import SimpleCookie
from typing import Any

import httpx

from tfkube.engines._workloads import (
    Handle,
    Health,
    ModelServerWorkload,
    NotAvailable,
    NotebookWorkload,
    Tenant,
    TensorBoardWorkload,
    Upstream,
    WorkloadStatus,
)
from tfkube.engines.kubernetes._install import apply_objects, delete_objects
from tfkube.kube.errors import ApiError, NotFound
from tfkube.kube.names import (
    TENSORBOARD_PORT_NAME,
    model_server_name,
    notebook_name,
    tensorboard_name,
)
from tfkube.kube.resources import DEPLOYMENT, HORIZONTAL_POD_AUTOSCALER, SERVICE, STATEFUL_SET
from tfkube.kube.rest import Endpoint, Kube
from tfkube.render import (
    GRPC_PORT,
    NOTEBOOK_PORT,
    TENSORBOARD_PORT,
    ModelServerSpec,
    NotebookSpec,
    Placement,
    ServingRuntime,
    render_autoscaler,
    render_model_server,
    render_notebook,
)
from tfkube.spec import SpecError

_NO_PROCESS = Handle()


def observe_deployment(
    deployment: Mapping[str, Any] | None, autoscaler: Mapping[str, Any] | None = None
) -> WorkloadStatus:
    """A model server in a cluster from its Deployment and, when autoscaled, its
    HorizontalPodAutoscaler (pure): ready replicas, and the replicas it should have (the
    autoscaler's `desiredReplicas` once it decided, else the Deployment's own count)."""
    if deployment is None:
        return WorkloadStatus(Health.FAILED, "its Deployment is gone")
    status = deployment.get("status") or {}
    ready = status.get("readyReplicas") or 0
    desired = (deployment.get("spec") or {}).get("replicas")
    decided = ((autoscaler or {}).get("status") or {}).get("desiredReplicas")
    if decided is not None:
        desired = decided

    def seen(health: Health, message: str = "") -> WorkloadStatus:
        return WorkloadStatus(health, message, replicas=ready, desired_replicas=desired)

    if ready >= 1:
        return seen(Health.READY)
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Progressing" and condition.get("status") == "False":
            return seen(Health.FAILED, condition.get("message") or "not progressing")
    return seen(Health.STARTING, "waiting for its pod to be ready")


def _model_server_spec(tenant: Tenant, workload: ModelServerWorkload) -> ModelServerSpec:
    chosen: dict[str, Any] = {}
    if workload.resources is not None:
        chosen["resources"] = workload.resources
    if workload.runtime is not None:
        chosen["runtime"] = ServingRuntime(workload.runtime)
    return ModelServerSpec(
        workload.name,
        tenant.namespace,
        workload.job,
        workload.version,
        autoscale=workload.autoscale,
        **chosen,
    )


def _notebook_spec(
    tenant: Tenant, workload: NotebookWorkload, placement: Placement | None = None
) -> NotebookSpec:
    return NotebookSpec(
        notebook_id=workload.id,
        namespace=tenant.namespace,
        user=workload.user,
        team=tenant.name,
        base_url=workload.base_url,
        server_url=workload.server_url,
        jupyter_token=workload.jupyter_token,
        client_token=workload.client_token,
        placement=placement or Placement(),
    )


class ServiceProxy:
    """A Service of a tenant's namespace through the API server's service proxy, reached
    with the engine's own credentials (its TLS context made once)."""

    def __init__(self, api_client: Any) -> None:
        self.api_client = api_client
        self._endpoint: Endpoint | None = None

    def __call__(self, tenant: Tenant, service: str, port: str, path: str = "") -> Upstream:
        if self._endpoint is None:
            self._endpoint = Endpoint.of(self.api_client)
        endpoint = self._endpoint
        at = SERVICE.url(tenant.namespace, f"{service}:{port}", "proxy")
        return Upstream(f"{endpoint.host}{at}{path}", endpoint.headers(), endpoint.ssl_context)


OPTION = "--kube-service-network"
"""The server's option choosing the route (`tfkube.engines.SERVICE_NETWORKS`), named in
the reasons a caller is given."""
CACHE_SECONDS = 30.0
"""How long a Service's ClusterIP is reused before it is read again (a Service made again,
by another server, gets another)."""


def service_route(mode: str, in_cluster: bool) -> str:
    """The route to Services a mode means (pure): `auto` is `dns` in a pod of the cluster,
    else `none`; any other mode is itself."""
    if mode == "auto":
        return "dns" if in_cluster else "none"
    return mode


def service_address(
    route: str, service: str, namespace: str, cluster_ip: str | None, port: int
) -> str | None:
    """`host:port` of a Service's `port` on a route, or None (pure): `dns` its name below
    the cluster's search domains, `cluster-ip` its ClusterIP when it has one (not a
    headless Service's `None`)."""
    if route == "dns":
        return f"{service}.{namespace}.svc:{port}"
    if route == "cluster-ip" and cluster_ip:
        try:
            ip = ipaddress.ip_address(cluster_ip)
        except ValueError:
            return None
        return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"
    return None


def grpc_address(route: str, service: str, namespace: str, cluster_ip: str | None) -> str | None:
    """`host:port` of a model server's Service's `grpc` port on a route, or None (pure)."""
    return service_address(route, service, namespace, cluster_ip, GRPC_PORT)


def no_route(mode: str, route: str, service: str, namespace: str) -> str:
    """Why a Service has no gRPC door on a route, for the caller (pure)."""
    if route == "none" and mode == "auto":
        return (
            "the server runs outside the cluster and was not told it reaches the cluster's "
            f"Service network (start it with {OPTION} cluster-ip, or dns, on a host that "
            "does), or call the Service's grpc port from inside the cluster"
        )
    if route == "none":
        return f"the server was started with {OPTION} none"
    return f"its Service {namespace}/{service} has no ClusterIP (yet)"


class ServiceNetwork:
    """How the server reaches a model server's Service for gRPC: the mode asked for
    (`tfkube.engines.SERVICE_NETWORKS`) and whether the server runs in the cluster decide
    the route once; a ClusterIP is read from the Service (RBAC: get services) and kept
    for CACHE_SECONDS, or until the model server is started or stopped here."""

    def __init__(
        self,
        read_service: Callable[[str, str], Mapping[str, Any] | None],
        mode: str,
        in_cluster: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.read_service = read_service
        """(namespace, name) -> the Service, or None."""
        self.mode = mode
        self.route = service_route(mode, in_cluster)
        self.clock = clock
        self._ips: dict[tuple[str, str], tuple[float, str | None]] = {}
        self._lock = threading.Lock()

    def _cluster_ip(self, namespace: str, service: str) -> str | None:
        key = (namespace, service)
        now = self.clock()
        with self._lock:
            kept = self._ips.get(key)
        if kept is not None and now - kept[0] < CACHE_SECONDS:
            return kept[1]
        found = self.read_service(namespace, service)
        ip = ((found or {}).get("spec") or {}).get("clusterIP")
        ip = str(ip) if ip else None
        if ip is not None:  # a Service not made yet is read again next time
            with self._lock:
                self._ips[key] = (now, ip)
        return ip

    def forget(self, namespace: str, service: str) -> None:
        with self._lock:
            self._ips.pop((namespace, service), None)

    def door(self, namespace: str, service: str) -> tuple[str | None, str]:
        """(`host:port` of the Service's grpc port, or None; why not, for the caller).
        Never raises for the API server's refusal: REST asks this too, and goes on."""
        return self.address(namespace, service, GRPC_PORT)

    def address(self, namespace: str, service: str, port: int) -> tuple[str | None, str]:
        """(`host:port` of the Service's `port` on this server's route, or None; why not)."""
        ip = None
        if self.route == "cluster-ip":
            try:
                ip = self._cluster_ip(namespace, service)
            except ApiError as exc:  # e.g. an install from before `get services`
                return None, f"cannot read its Service {namespace}/{service}: {exc}"
        found = service_address(self.route, service, namespace, ip, port)
        if found is not None:
            return found, ""
        return None, no_route(self.mode, self.route, service, namespace)


def service_reader(api_client: Any) -> Callable[[str, str], Mapping[str, Any] | None]:
    """(namespace, name) -> the Service through the API server, or None."""

    def read(namespace: str, name: str) -> Mapping[str, Any] | None:
        found: Mapping[str, Any] | None = Kube(api_client).get(SERVICE, namespace, name)
        return found

    return read


class KubeModelServers:
    """A Deployment, Service and ConfigMap `<name>-serving` (TensorFlow Serving's image or
    tfkube's) reading the job's output volume; autoscaled, a HorizontalPodAutoscaler of
    the same name, owned by the Deployment."""

    def __init__(
        self, api_client: Any, proxy: ServiceProxy, network: ServiceNetwork | None = None
    ) -> None:
        self.api_client = api_client
        self.proxy = proxy
        self.network = network or ServiceNetwork(lambda ns, name: None, "none", in_cluster=False)

    def start(self, tenant: Tenant, workload: ModelServerWorkload) -> Handle:
        spec = _model_server_spec(tenant, workload)
        self.network.forget(tenant.namespace, model_server_name(workload.name))
        apply_objects(self.api_client, render_model_server(spec))
        if spec.autoscale is not None:
            # Owned by the Deployment (its uid, read back): deleted with it.
            name = model_server_name(workload.name)
            found = Kube(self.api_client).get(DEPLOYMENT, tenant.namespace, name)
            uid = ((found or {}).get("metadata") or {}).get("uid")
            apply_objects(self.api_client, [render_autoscaler(spec, uid)])
        return _NO_PROCESS

    def _drop_autoscaler(self, tenant: Tenant, workload: ModelServerWorkload) -> None:
        path = HORIZONTAL_POD_AUTOSCALER.url(tenant.namespace, model_server_name(workload.name))
        Kube(self.api_client).request("DELETE", path, allow=(NotFound,))

    def roll(
        self,
        tenant: Tenant,
        old: ModelServerWorkload,
        new: ModelServerWorkload,
        handle: Handle,
    ) -> Handle:
        """Apply the new Deployment: its rolling update (`render.ROLL_STRATEGY`) starts a
        pod with the new version beside the old one, which answers until the new one is
        ready. The stock runtime's ConfigMap changes with it; the old pod keeps its loaded
        model (TensorFlow Serving reads its config at start only). An autoscaled
        Deployment names no replica count, so the roll keeps the autoscaler's: each of
        its pods is replaced the same way."""
        if old.autoscale is not None and new.autoscale is None:
            self._drop_autoscaler(tenant, old)
        return self.start(tenant, new)

    def status(
        self, tenant: Tenant, workload: ModelServerWorkload, handle: Handle
    ) -> WorkloadStatus:
        kube, name = Kube(self.api_client), model_server_name(workload.name)
        deployment = kube.get(DEPLOYMENT, tenant.namespace, name)
        autoscaler = None
        if workload.autoscale is not None and deployment is not None:
            autoscaler = kube.get(HORIZONTAL_POD_AUTOSCALER, tenant.namespace, name)
        return observe_deployment(deployment, autoscaler)

    def stop(self, tenant: Tenant, workload: ModelServerWorkload, handle: Handle) -> None:
        # By name: the stock runtime's objects are a superset of tfkube's (gone is fine).
        spec = ModelServerSpec(workload.name, tenant.namespace, workload.job)
        try:
            objects = render_model_server(spec)
        except SpecError:  # a job that kept no exports: its model server never started
            return
        if workload.autoscale is not None:
            # First, so nothing scales what is being deleted (its owner's deletion would
            # remove it too, a moment later).
            self._drop_autoscaler(tenant, workload)
        delete_objects(self.api_client, objects)
        self.network.forget(tenant.namespace, model_server_name(workload.name))

    def upstream(self, tenant: Tenant, workload: ModelServerWorkload, handle: Handle) -> Upstream:
        """REST through the API server's service proxy (the engine's credentials); gRPC
        straight to the Service's `grpc` port when the server reaches the Service network,
        with no metadata (the model server does not authenticate inside the cluster, and
        the engine's credentials never go to it)."""
        name = model_server_name(workload.name)
        found = self.proxy(tenant, name, "http")
        door, why = self.network.door(tenant.namespace, name)
        return Upstream(found.prefix, found.headers, found.verify, grpc=door, no_grpc=why)


JUPYTER_LOGINS_KEPT = 256
"""Jupyter login cookies kept (one per notebook start reached through the API server)."""


class KubeNotebooks:
    """A Secret, Service and StatefulSet `notebook-<id>` with its own home claim (kept when
    the notebook stops). Reached straight at its Service where the server reaches the
    Service network by DNS (in the cluster, by default), else through the API server's
    service proxy. That proxy keeps the Authorization header (the engine's credentials) and
    its WebSocket upgrades lose the query, so Jupyter's token cannot ride on a kernel's
    channel (refused, 403, on the real node): the server signs in to Jupyter once per
    notebook start with the token as a parameter (a plain GET, whose query passes) and
    sends the login cookie Jupyter answers with on every request, the upgrade included.
    The cookie stays in the server (the proxy never forwards a caller's cookies upstream nor
    an upstream's Set-Cookie back)."""

    def __init__(
        self,
        api_client: Any,
        proxy: ServiceProxy,
        placement: Placement | None = None,
        network: ServiceNetwork | None = None,
    ) -> None:
        self.api_client = api_client
        self.proxy = proxy
        self.placement = placement or Placement()
        self.network = network or ServiceNetwork(lambda ns, name: None, "none", in_cluster=False)
        self._logins: dict[tuple[str, str], str] = {}
        self._logins_lock = threading.Lock()

    def start(self, tenant: Tenant, workload: NotebookWorkload) -> Handle:
        spec = _notebook_spec(tenant, workload, self.placement)
        apply_objects(self.api_client, render_notebook(spec))
        return _NO_PROCESS

    def status(self, tenant: Tenant, workload: NotebookWorkload, handle: Handle) -> WorkloadStatus:
        found = Kube(self.api_client).get(
            STATEFUL_SET, tenant.namespace, notebook_name(workload.id)
        )
        if found is None:
            return WorkloadStatus(Health.FAILED, "its StatefulSet is gone")
        if ((found.get("status") or {}).get("readyReplicas") or 0) >= 1:
            return WorkloadStatus(Health.READY)
        return WorkloadStatus(Health.STARTING, "waiting for its pod to be ready")

    def stop(self, tenant: Tenant, workload: NotebookWorkload, handle: Handle) -> None:
        delete_objects(self.api_client, render_notebook(_notebook_spec(tenant, workload)))

    def upstream(self, tenant: Tenant, workload: NotebookWorkload, handle: Handle) -> Upstream:
        # Jupyter serves below the same base URL in its pod as through the proxy.
        base = workload.base_url.rstrip("/")
        name = notebook_name(workload.id)
        at, _ = self.network.address(tenant.namespace, name, NOTEBOOK_PORT)
        if at is not None:  # plain HTTP in the cluster; Jupyter's token as Jupyter reads it
            return Upstream(
                f"http://{at}{base}", {"Authorization": f"token {workload.jupyter_token}"}
            )
        # The API server keeps the Authorization header, so Jupyter's token goes as a
        # parameter (lost on a WebSocket upgrade: the class's docstring).
        found = self.proxy(tenant, name, "http", base)
        token = {"token": workload.jupyter_token}
        cookie = self._login(found, workload.jupyter_token)
        headers = {**found.headers, "Cookie": cookie} if cookie else found.headers
        return Upstream(found.prefix, headers, found.verify, token)

    def _login(self, found: Upstream, jupyter_token: str) -> str | None:
        """Jupyter's login cookie for this start of the notebook (`name=value; ...`),
        asked for through the API server with the token as a parameter, or None while
        Jupyter does not answer yet (asked again next time)."""
        key = (found.prefix, jupyter_token)
        with self._logins_lock:
            known = self._logins.get(key)
        if known is not None:
            return known
        try:
            with httpx.Client(verify=found.verify, timeout=10.0) as client:
                answer = client.get(
                    f"{found.prefix}/api/status",
                    params={"token": jupyter_token},
                    headers=found.headers,
                )
        except httpx.HTTPError:
            return None
        if answer.status_code != 200:
            return None
        jar: SimpleCookie = SimpleCookie()
        for line in answer.headers.get_list("set-cookie"):
            jar.load(line)
        cookie = "; ".join(f"{name}={morsel.coded_value}" for name, morsel in jar.items())
        if not cookie:
            return None
        with self._logins_lock:
            if len(self._logins) >= JUPYTER_LOGINS_KEPT:
                self._logins.pop(next(iter(self._logins)))
            self._logins[key] = cookie
        return cookie


class KubeTensorBoards:
    """The job's own TensorBoard (rendered with the job when it asks for one): nothing to
    start or stop here. Reached straight at its Service where the server reaches the
    Service network (in the cluster: its DNS name), else through the API server's service
    proxy, which rewrites the links of text/html answers and dropped the connection on
    TensorBoard's page (its scalars' JSON passed) on the real node."""

    def __init__(self, proxy: ServiceProxy, network: ServiceNetwork | None = None) -> None:
        self.proxy = proxy
        self.network = network or ServiceNetwork(lambda ns, name: None, "none", in_cluster=False)

    @staticmethod
    def start(tenant: Tenant, workload: TensorBoardWorkload) -> Handle:
        board = workload.job.spec.tensorboard
        if board is None or not board.enabled:
            raise NotAvailable(
                f"job {workload.job.name!r} runs no TensorBoard; submit it with tensorboard: true"
            )
        return _NO_PROCESS

    @staticmethod
    def status(tenant: Tenant, workload: TensorBoardWorkload, handle: Handle) -> WorkloadStatus:
        return WorkloadStatus(Health.READY)

    @staticmethod
    def stop(tenant: Tenant, workload: TensorBoardWorkload, handle: Handle) -> None:
        pass  # the job's own: it goes with the job

    def upstream(self, tenant: Tenant, workload: TensorBoardWorkload, handle: Handle) -> Upstream:
        # TensorBoard's pages use relative links, so it serves below any prefix.
        service = tensorboard_name(workload.job.name)
        at, _ = self.network.address(tenant.namespace, service, TENSORBOARD_PORT)
        if at is not None:  # plain HTTP inside the cluster, as its pods speak
            return Upstream(f"http://{at}")
        return self.proxy(tenant, service, TENSORBOARD_PORT_NAME)
