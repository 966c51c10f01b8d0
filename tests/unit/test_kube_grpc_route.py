"""How the Kubernetes engine gives the server a gRPC door for a model server (issue 20
point 1): the route (`--kube-service-network` and whether the server runs in the cluster),
the address on it, the reason when there is none, and what goes with a call."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tfkube.engines import (
    SERVICE_NETWORKS,
    ModelServerWorkload,
    NotebookWorkload,
    Tenant,
    TensorBoardWorkload,
    Upstream,
    parse_service_network,
)
from tfkube.engines.kubernetes._services import (
    CACHE_SECONDS,
    KubeModelServers,
    KubeNotebooks,
    KubeTensorBoards,
    ServiceNetwork,
    grpc_address,
    no_route,
    service_route,
)
from tfkube.kube.errors import Forbidden
from tfkube.kube.rest import in_cluster
from tfkube.server.api.grpc_proxy import unreachable

from ._cli import usage_error


@pytest.mark.parametrize(
    ("mode", "inside", "route"),
    [
        ("auto", True, "dns"),  # a server in a pod: the Service's DNS name
        ("auto", False, "none"),  # outside: only when an operator says so
        ("cluster-ip", False, "cluster-ip"),
        ("cluster-ip", True, "cluster-ip"),
        ("dns", False, "dns"),
        ("none", True, "none"),
    ],
)
def test_the_route_follows_the_mode_and_where_the_server_runs(
    mode: str, inside: bool, route: str
) -> None:
    assert service_route(mode, inside) == route


@pytest.mark.parametrize(
    ("route", "cluster_ip", "expected"),
    [
        ("dns", None, "digits-serving.tfkube-a.svc:8500"),
        ("cluster-ip", "198.19.227.7", "198.19.227.7:8500"),
        ("cluster-ip", "fd00:10:96::3", "[fd00:10:96::3]:8500"),
        ("cluster-ip", "None", None),  # a headless Service
        ("cluster-ip", "", None),
        ("cluster-ip", None, None),  # no Service (yet)
        ("cluster-ip", "evil.example:80", None),  # never anything but an address
        ("none", "198.19.227.7", None),
    ],
)
def test_the_address_on_a_route(route: str, cluster_ip: str | None, expected: str | None) -> None:
    assert grpc_address(route, "digits-serving", "tfkube-a", cluster_ip) == expected


def test_the_reasons_name_what_gives_a_door() -> None:
    outside = no_route("auto", "none", "digits-serving", "tfkube-a")
    assert "--kube-service-network cluster-ip" in outside
    assert "inside the cluster" in outside
    assert "--kube-service-network none" in no_route("none", "none", "s", "ns")
    assert "tfkube-a/digits-serving has no ClusterIP" in no_route(
        "cluster-ip", "cluster-ip", "digits-serving", "tfkube-a"
    )
    said = unreachable(outside)
    assert said.startswith("this model server has no gRPC door the server can reach: ")
    assert unreachable("") == "this model server has no gRPC door the server can reach"


@pytest.mark.parametrize("value", SERVICE_NETWORKS)
def test_the_modes_parse(value: str) -> None:
    assert parse_service_network(value) == value


@pytest.mark.parametrize("value", ["", "routed", "ClusterIP", "cluster_ip"])
def test_a_bad_mode_names_the_choices(value: str) -> None:
    with pytest.raises(ValueError, match="auto, cluster-ip, dns, none"):
        parse_service_network(value)


def test_the_server_refuses_a_bad_mode_naming_the_flag(tmp_path: Path) -> None:
    argv = ["server", "--data-dir", str(tmp_path), "--kube-service-network", "routed"]
    said = usage_error(argv, tmp_path)
    assert "--kube-service-network: 'routed' is not one of auto, cluster-ip, dns, none" in said


def test_in_cluster_is_the_service_accounts_ca() -> None:
    def client(ca: str | None) -> Any:
        return SimpleNamespace(configuration=SimpleNamespace(ssl_ca_cert=ca))

    assert in_cluster(client("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"))
    assert not in_cluster(client("/home/me/.kube/ca.crt"))
    assert not in_cluster(client(None))


class Services:
    """Services as the API server would answer them, counting reads."""

    def __init__(self) -> None:
        self.ips: dict[tuple[str, str], str] = {}
        self.reads = 0

    def __call__(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads += 1
        ip = self.ips.get((namespace, name))
        return None if ip is None else {"spec": {"clusterIP": ip, "type": "ClusterIP"}}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_cluster_ip_is_read_once_kept_a_while_and_forgotten() -> None:
    services, clock = Services(), Clock()
    network = ServiceNetwork(services, "cluster-ip", in_cluster=False, clock=clock)
    door, why = network.door("tfkube-a", "digits-serving")
    assert (door, services.reads) == (None, 1)  # not made yet: asked again next time
    assert "no ClusterIP" in why
    services.ips["tfkube-a", "digits-serving"] = "198.19.224.20"
    assert network.door("tfkube-a", "digits-serving") == ("198.19.224.20:8500", "")
    assert network.door("tfkube-a", "digits-serving") == ("198.19.224.20:8500", "")
    assert services.reads == 2  # kept
    services.ips["tfkube-a", "digits-serving"] = "198.19.224.21"  # made again elsewhere
    clock.now += CACHE_SECONDS
    assert network.door("tfkube-a", "digits-serving") == ("198.19.224.21:8500", "")
    services.ips["tfkube-a", "digits-serving"] = "198.19.224.22"
    network.forget("tfkube-a", "digits-serving")  # started or stopped here
    assert network.door("tfkube-a", "digits-serving") == ("198.19.224.22:8500", "")
    assert services.reads == 4


@pytest.mark.parametrize(("mode", "inside"), [("dns", False), ("auto", True), ("none", True)])
def test_other_routes_never_read_the_service(mode: str, inside: bool) -> None:
    services = Services()
    ServiceNetwork(services, mode, in_cluster=inside).door("ns", "digits-serving")
    assert services.reads == 0


def _engine_proxy(tenant: Tenant, service: str, port: str, path: str = "") -> Upstream:
    """The API server's service proxy with the engine's own credentials."""
    prefix = f"https://api:6443/api/v1/namespaces/{tenant.namespace}/services/{service}:{port}"
    return Upstream(f"{prefix}/proxy{path}", {"Authorization": "Bearer engine-sa-token"})


@pytest.mark.parametrize(
    ("mode", "inside", "door"),
    [
        ("cluster-ip", False, "198.19.224.20:8500"),
        ("auto", True, "digits-serving.tfkube-a.svc:8500"),
        ("auto", False, None),
    ],
)
def test_a_model_servers_upstream(mode: str, inside: bool, door: str | None) -> None:
    services = Services()
    services.ips["tfkube-a", "digits-serving"] = "198.19.224.20"
    network = ServiceNetwork(services, mode, in_cluster=inside)
    runner = KubeModelServers(None, _engine_proxy, network)  # type: ignore[arg-type]
    tenant = Tenant("a", "tfkube-a", {})
    workload = ModelServerWorkload("m1", "digits", None, Path("/x"), secret="s")  # type: ignore[arg-type]
    found = runner.upstream(tenant, workload, None)  # type: ignore[arg-type]
    # REST through the API server's proxy, with the engine's credentials ...
    assert found.prefix.endswith("/services/digits-serving:http/proxy")
    assert found.headers == {"Authorization": "Bearer engine-sa-token"}
    # ... gRPC straight to the Service, and those credentials never go with it.
    assert found.grpc == door
    assert found.grpc_metadata == {}
    assert bool(found.no_grpc) is (door is None)


def test_a_refused_read_leaves_rest_alone() -> None:
    """An install whose RBAC predates `get services`: no gRPC door, said why; REST's
    upstream (which asks the same) is still given."""

    def forbidden(namespace: str, name: str) -> dict[str, Any] | None:
        raise Forbidden(403, "Forbidden", 'services "digits-serving" is forbidden')

    network = ServiceNetwork(forbidden, "cluster-ip", in_cluster=False)
    runner = KubeModelServers(None, _engine_proxy, network)  # type: ignore[arg-type]
    workload = ModelServerWorkload("m1", "digits", None, Path("/x"))  # type: ignore[arg-type]
    found = runner.upstream(Tenant("a", "tfkube-a", {}), workload, None)  # type: ignore[arg-type]
    assert found.prefix.endswith("/services/digits-serving:http/proxy")
    assert found.grpc is None
    assert "cannot read its Service tfkube-a/digits-serving" in found.no_grpc
    assert "forbidden" in found.no_grpc


@pytest.mark.parametrize(
    ("mode", "inside", "prefix"),
    [
        # In a pod of the cluster: straight to the Service (the API server's service proxy
        # rewrites text/html answers and dropped TensorBoard's page).
        ("auto", True, "http://board-tensorboard.tfkube-a.svc:6006"),
        ("cluster-ip", False, "http://198.19.224.30:6006"),
        # Outside, not told it reaches the Service network: the API server's proxy.
        ("auto", False, None),
        ("none", True, None),
    ],
)
def test_a_tensorboards_upstream(mode: str, inside: bool, prefix: str | None) -> None:
    services = Services()
    services.ips["tfkube-a", "board-tensorboard"] = "198.19.224.30"
    network = ServiceNetwork(services, mode, in_cluster=inside)
    runner = KubeTensorBoards(_engine_proxy, network)  # type: ignore[arg-type]
    job = SimpleNamespace(name="board")
    workload = TensorBoardWorkload("j1", job, Path("/x"), "/proxy/tensorboard/j1")  # type: ignore[arg-type]
    found = runner.upstream(Tenant("a", "tfkube-a", {}), workload, None)  # type: ignore[arg-type]
    if prefix is None:
        assert found.prefix.endswith("/services/board-tensorboard:http/proxy")
        assert found.headers == {"Authorization": "Bearer engine-sa-token"}
    else:  # plain HTTP to its pod, and the engine's credentials never go with it
        assert found.prefix == prefix
        assert found.headers == {}


@pytest.mark.parametrize(
    ("mode", "inside", "prefix"),
    [
        # In a pod of the cluster: straight to the Service, Jupyter's token in the header
        # Jupyter reads (the API server's proxy loses the query of a WebSocket upgrade, and
        # with it the token: a kernel's channel was refused, 403, on the real node).
        ("auto", True, "http://notebook-n1.tfkube-a.svc:8888/proxy/notebook/n1"),
        # A headless Service has no ClusterIP: the API server's proxy, as outside.
        ("cluster-ip", False, None),
        ("auto", False, None),
        ("none", True, None),
    ],
)
def test_a_notebooks_upstream(mode: str, inside: bool, prefix: str | None) -> None:
    services = Services()
    services.ips["tfkube-a", "notebook-n1"] = "None"
    runner = KubeNotebooks(None, _engine_proxy, None, ServiceNetwork(services, mode, inside))  # type: ignore[arg-type]
    workload = NotebookWorkload(
        "n1", "ann", "/proxy/notebook/n1/", "http://srv", "jupyter-secret", "client-secret"
    )
    found = runner.upstream(Tenant("a", "tfkube-a", {}), workload, None)  # type: ignore[arg-type]
    if prefix is None:
        assert found.prefix.endswith("/services/notebook-n1:http/proxy/proxy/notebook/n1")
        assert found.headers == {"Authorization": "Bearer engine-sa-token"}
        assert found.params == {"token": "jupyter-secret"}
    else:  # the engine's credentials never go to the notebook's pod
        assert found.prefix == prefix
        assert found.headers == {"Authorization": "token jupyter-secret"}
        assert found.params == {}
