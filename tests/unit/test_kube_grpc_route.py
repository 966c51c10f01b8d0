"""How the Kubernetes engine gives the server a gRPC door for a model server (issue 20
point 1): the route (`--kube-service-network` and whether the server runs in the cluster),
the address on it, the reason when there is none, and what goes with a call."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs, urlsplit

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


class _Jupyter:
    """Jupyter's sign-in by token as the API server's proxy passes it (loopback): a GET
    with `?token=` and the engine's credentials answers a login cookie."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str | None]] = []
        jupyter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                jupyter.asked.append((url.path, self.headers.get("Authorization")))
                token = parse_qs(url.query).get("token")
                if url.path.endswith("/api/status") and token == ["jupyter-secret"]:
                    self.send_response(200)
                    self.send_header(
                        "Set-Cookie",
                        'username-10-0-0-1-8888="2|1:0|10:1796270000|signed"; HttpOnly; '
                        "Path=/proxy/notebook/n1/",
                    )
                else:
                    self.send_response(403)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def proxy(self, tenant: Tenant, service: str, port: str, path: str = "") -> Upstream:
        """The API server's service proxy (here: the fake Jupyter behind it)."""
        at = f"http://127.0.0.1:{self.http.server_port}/api/v1/namespaces/{tenant.namespace}"
        return Upstream(
            f"{at}/services/{service}:{port}/proxy{path}",
            {"Authorization": "Bearer engine-sa-token"},
        )

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()
        self.thread.join()


@pytest.fixture
def jupyter() -> Iterator[_Jupyter]:
    found = _Jupyter()
    try:
        yield found
    finally:
        found.close()


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
def test_a_notebooks_upstream(
    mode: str, inside: bool, prefix: str | None, jupyter: _Jupyter
) -> None:
    services = Services()
    services.ips["tfkube-a", "notebook-n1"] = "None"
    network = ServiceNetwork(services, mode, inside)
    runner = KubeNotebooks(None, jupyter.proxy, None, network)  # type: ignore[arg-type]
    workload = NotebookWorkload(
        "n1", "ann", "/proxy/notebook/n1/", "http://srv", "jupyter-secret", "client-secret"
    )
    found = runner.upstream(Tenant("a", "tfkube-a", {}), workload, None)  # type: ignore[arg-type]
    if prefix is None:
        # Through the API server: signed in to Jupyter once (the token as a parameter, the
        # engine's credentials for the API server), its login cookie on every request,
        # WebSocket upgrades included (they lose the query, and with it the token).
        assert found.prefix.endswith("/services/notebook-n1:http/proxy/proxy/notebook/n1")
        assert found.headers == {
            "Authorization": "Bearer engine-sa-token",
            "Cookie": 'username-10-0-0-1-8888="2|1:0|10:1796270000|signed"',
        }
        assert found.params == {"token": "jupyter-secret"}
        again = runner.upstream(Tenant("a", "tfkube-a", {}), workload, None)  # type: ignore[arg-type]
        assert again.headers == found.headers
        assert jupyter.asked == [
            (
                "/api/v1/namespaces/tfkube-a/services/notebook-n1:http/proxy/proxy/notebook/n1"
                "/api/status",
                "Bearer engine-sa-token",
            )
        ]  # once for this start of the notebook
        restarted = replace(workload, jupyter_token="another-start")
        refused = runner.upstream(Tenant("a", "tfkube-a", {}), restarted, None)  # type: ignore[arg-type]
        assert "Cookie" not in refused.headers  # Jupyter refused that token: none kept
    else:  # the engine's credentials never go to the notebook's pod
        assert found.prefix == prefix
        assert found.headers == {"Authorization": "token jupyter-secret"}
        assert found.params == {}
        assert jupyter.asked == []
