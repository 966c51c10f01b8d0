"""`tfkube.kube`'s client: every declared resource's real URL shape, every refusal mapped to
its typed error, and `Kube` over the official client's real transport, against a local HTTP
server that answers as the API server would (tests/cluster/test_kube_client.py checks the
same against the real API server)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tfkube.kube import errors
from tfkube.kube.errors import (
    AlreadyExists,
    ApiError,
    BadRequest,
    Cause,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    QuotaRefused,
    ServerError,
    TooManyRequests,
    Unauthorized,
    Unreachable,
    error_from,
    from_client_exception,
)
from tfkube.kube.resources import (
    CLUSTER_ROLE,
    CLUSTER_ROLE_BINDING,
    CONFIG_MAP,
    COSCHEDULING_POD_GROUP,
    CRD,
    DEPLOYMENT,
    EVENT,
    JOB,
    LIMIT_RANGE,
    NAMESPACE,
    NODE,
    PERSISTENT_VOLUME_CLAIM,
    POD,
    RESOURCE_QUOTA,
    RESOURCES,
    SECRET,
    SERVICE,
    SERVICE_ACCOUNT,
    STATEFUL_SET,
    TFJOB,
    VOLCANO_POD_GROUP,
    Resource,
    resource_for,
)
from tfkube.kube.rest import Kube
from tfkube.render import (
    ModelServerSpec,
    NotebookSpec,
    RenderOptions,
    ServerInstall,
    install_manifests,
    render_job,
    render_model_server,
    render_notebook,
    server_manifests,
)
from tfkube.spec import load_job_text

# -- URLs ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resource", "collection", "one"),
    [
        pytest.param(
            TFJOB,
            "/apis/tfkube.io/v1alpha1/namespaces/ns/tfjobs",
            "/apis/tfkube.io/v1alpha1/namespaces/ns/tfjobs/x",
            id="tfjob",
        ),
        pytest.param(POD, "/api/v1/namespaces/ns/pods", "/api/v1/namespaces/ns/pods/x", id="pod"),
        pytest.param(
            SERVICE, "/api/v1/namespaces/ns/services", "/api/v1/namespaces/ns/services/x", id="svc"
        ),
        pytest.param(
            CONFIG_MAP,
            "/api/v1/namespaces/ns/configmaps",
            "/api/v1/namespaces/ns/configmaps/x",
            id="configmap",
        ),
        pytest.param(
            SECRET, "/api/v1/namespaces/ns/secrets", "/api/v1/namespaces/ns/secrets/x", id="secret"
        ),
        pytest.param(
            PERSISTENT_VOLUME_CLAIM,
            "/api/v1/namespaces/ns/persistentvolumeclaims",
            "/api/v1/namespaces/ns/persistentvolumeclaims/x",
            id="pvc",
        ),
        pytest.param(
            SERVICE_ACCOUNT,
            "/api/v1/namespaces/ns/serviceaccounts",
            "/api/v1/namespaces/ns/serviceaccounts/x",
            id="serviceaccount",
        ),
        pytest.param(
            EVENT, "/api/v1/namespaces/ns/events", "/api/v1/namespaces/ns/events/x", id="event"
        ),
        pytest.param(
            RESOURCE_QUOTA,
            "/api/v1/namespaces/ns/resourcequotas",
            "/api/v1/namespaces/ns/resourcequotas/x",
            id="resourcequota",
        ),
        pytest.param(
            LIMIT_RANGE,
            "/api/v1/namespaces/ns/limitranges",
            "/api/v1/namespaces/ns/limitranges/x",
            id="limitrange",
        ),
        pytest.param(
            JOB,
            "/apis/batch/v1/namespaces/ns/jobs",
            "/apis/batch/v1/namespaces/ns/jobs/x",
            id="job",
        ),
        pytest.param(
            DEPLOYMENT,
            "/apis/apps/v1/namespaces/ns/deployments",
            "/apis/apps/v1/namespaces/ns/deployments/x",
            id="deployment",
        ),
        pytest.param(
            STATEFUL_SET,
            "/apis/apps/v1/namespaces/ns/statefulsets",
            "/apis/apps/v1/namespaces/ns/statefulsets/x",
            id="statefulset",
        ),
        pytest.param(
            VOLCANO_POD_GROUP,
            "/apis/scheduling.volcano.sh/v1beta1/namespaces/ns/podgroups",
            "/apis/scheduling.volcano.sh/v1beta1/namespaces/ns/podgroups/x",
            id="podgroup-volcano",
        ),
        pytest.param(
            COSCHEDULING_POD_GROUP,
            "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ns/podgroups",
            "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ns/podgroups/x",
            id="podgroup-coscheduling",
        ),
    ],
)
def test_namespaced_urls(resource: Resource, collection: str, one: str) -> None:
    assert resource.namespaced
    assert resource.url("ns") == collection
    assert resource.url("ns", "x") == one
    every_namespace = collection.replace("/namespaces/ns", "")
    assert resource.url() == every_namespace


@pytest.mark.parametrize(
    ("resource", "collection"),
    [
        pytest.param(NAMESPACE, "/api/v1/namespaces", id="namespace"),
        pytest.param(NODE, "/api/v1/nodes", id="node"),
        pytest.param(CRD, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", id="crd"),
        pytest.param(
            CLUSTER_ROLE, "/apis/rbac.authorization.k8s.io/v1/clusterroles", id="clusterrole"
        ),
        pytest.param(
            CLUSTER_ROLE_BINDING,
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            id="clusterrolebinding",
        ),
    ],
)
def test_cluster_scoped_urls(resource: Resource, collection: str) -> None:
    assert not resource.namespaced
    assert resource.url() == collection
    assert resource.url(name="x") == f"{collection}/x"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        pytest.param(
            TFJOB.url("ns", "mnist", "status"),
            "/apis/tfkube.io/v1alpha1/namespaces/ns/tfjobs/mnist/status",
            id="tfjob-status",
        ),
        pytest.param(
            POD.url("ns", "mnist-ps-0", "status"),
            "/api/v1/namespaces/ns/pods/mnist-ps-0/status",
            id="pod-status",
        ),
        pytest.param(
            POD.url("ns", "mnist-ps-0", "log"),
            "/api/v1/namespaces/ns/pods/mnist-ps-0/log",
            id="pod-log",
        ),
        pytest.param(
            SERVICE.url("tfkube-vision", "mnist-tensorboard:http", "proxy"),
            "/api/v1/namespaces/tfkube-vision/services/mnist-tensorboard:http/proxy",
            id="service-proxy",
        ),
        pytest.param(
            CRD.url(name="tfjobs.tfkube.io"),
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/tfjobs.tfkube.io",
            id="crd-by-name",
        ),
    ],
)
def test_subresource_and_named_urls(url: str, expected: str) -> None:
    assert url == expected


@pytest.mark.parametrize(
    ("call", "words"),
    [
        pytest.param(lambda: NODE.url("ns"), "cluster-scoped", id="namespace-of-cluster-kind"),
        pytest.param(lambda: POD.url(name="p"), "needs its namespace", id="name-without-ns"),
        pytest.param(lambda: POD.url("ns", subresource="log"), "by name", id="sub-without-name"),
        pytest.param(lambda: POD.url("ns", "p", "exec"), "no subresource", id="undeclared-sub"),
        pytest.param(lambda: JOB.url("ns", "j", "status"), "no subresource", id="job-status"),
        pytest.param(lambda: POD.url("ns", "a/b"), "not a name", id="slash-in-name"),
        pytest.param(lambda: POD.url("ns", ".."), "not a name", id="dot-dot"),
        pytest.param(lambda: POD.url("", "p"), "not a name", id="empty-namespace"),
    ],
)
def test_urls_the_api_has_no_path_for_are_refused(call: Any, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        call()


def test_each_kind_is_declared_once_and_found_by_what_objects_carry() -> None:
    assert len({(r.api_version, r.kind) for r in RESOURCES}) == len(RESOURCES)
    for resource in RESOURCES:
        assert resource_for(resource.api_version, resource.kind) is resource
        assert resource.describes({"apiVersion": resource.api_version, "kind": resource.kind})
    assert POD.api_version == "v1"
    assert JOB.api_version == "batch/v1"
    assert not JOB.describes({"apiVersion": "batch/v2", "kind": "Job"})


@pytest.mark.parametrize(
    ("api_version", "kind"),
    [
        pytest.param("policy/v1", "PodDisruptionBudget", id="poddisruptionbudget"),
        pytest.param("v1", "Endpoints", id="endpoints"),
        pytest.param("apps/v1beta1", "Deployment", id="old-version"),
    ],
)
def test_an_undeclared_kind_is_refused_not_guessed(api_version: str, kind: str) -> None:
    with pytest.raises(LookupError, match=f"{kind} .* is not a resource tfkube declares"):
        resource_for(api_version, kind)


JOB_YAML = """
apiVersion: tfkube.io/v1alpha1
kind: TFJob
metadata: {name: mnist}
spec:
  replicas: {ps: {replicas: 1}, worker: {replicas: 2}}
  code: {source: "https://example.invalid/code.tar.gz"}
"""


def _job(**spec: Any) -> Any:
    raw = yaml.safe_load(JOB_YAML)
    raw["spec"].update(spec)
    return load_job_text(yaml.safe_dump(raw), "job")


def _everything_tfkube_applies() -> list[dict[str, Any]]:
    """Every object tfkube creates or applies: a job with all its parts (both gangs), the
    install (with the server), a model server and a notebook."""
    registry = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "tfkube-registry", "namespace": "tfkube-system"},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": "e30="},
    }
    options = RenderOptions(namespace="ns", registry_secret=registry, code_archive=b"x")
    full = _job(
        tensorboard={},
        storage={"data": {"size": "1Gi"}},  # and the logs claim TensorBoard asks for
        tenant={"quota": {"pods": "1"}, "limitRange": {"max": {"cpu": "1"}}},
        scheduling={"gang": "Volcano"},
    )
    objects = render_job(full, options)
    objects += render_job(_job(scheduling={"gang": "SchedulerPlugins"}), options)
    objects += install_manifests() + server_manifests("tfkube", "image", ServerInstall())
    objects += render_model_server(
        ModelServerSpec("digits", "ns", _job(storage={"logs": {"size": "1Gi"}}))
    )
    objects += render_notebook(
        NotebookSpec(
            notebook_id="n1",
            namespace="ns",
            user="ann",
            team="ns",
            base_url="/proxy/notebook/n1/",
            server_url="http://tfkube-server.tfkube.svc:8470",
            jupyter_token="j",
            client_token="c",
        )
    )
    return objects


def test_every_kind_tfkube_applies_is_declared_with_its_scope() -> None:
    objects = _everything_tfkube_applies()
    kinds = {(o["apiVersion"], o["kind"]) for o in objects}
    assert len(kinds) >= 15  # the render above really covers the kinds
    for obj in objects:
        resource = resource_for(obj["apiVersion"], obj["kind"])
        namespace = obj["metadata"].get("namespace")
        assert (namespace is not None) is resource.namespaced, obj["kind"]
        resource.url(namespace, obj["metadata"]["name"])  # a path exists for it


# -- errors ----------------------------------------------------------------------------------


def _status(code: int, reason: str, message: str, **details: Any) -> str:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return json.dumps(body)


INVALID_CAUSES = [
    {"reason": "FieldValueInvalid", "message": "Invalid value: -1", "field": "spec.replicas"},
    {"reason": "FieldValueRequired", "message": "Required value", "field": "metadata.name"},
]


@pytest.mark.parametrize(
    ("status", "phrase", "body", "cls", "reason", "message"),
    [
        pytest.param(
            404,
            "Not Found",
            _status(404, "NotFound", 'tfjobs.tfkube.io "x" not found', name="x", kind="tfjobs"),
            NotFound,
            "NotFound",
            'tfjobs.tfkube.io "x" not found',
            id="not-found",
        ),
        pytest.param(
            409,
            "Conflict",
            _status(409, "AlreadyExists", 'configmaps "x" already exists'),
            AlreadyExists,
            "AlreadyExists",
            'configmaps "x" already exists',
            id="already-exists",
        ),
        pytest.param(
            409,
            "Conflict",
            _status(409, "Conflict", "the object has been modified; please apply your changes"),
            Conflict,
            "Conflict",
            "the object has been modified; please apply your changes",
            id="conflict-stale-version",
        ),
        pytest.param(
            403,
            "Forbidden",
            _status(403, "Forbidden", 'namespaces is forbidden: User "x" cannot create'),
            Forbidden,
            "Forbidden",
            'namespaces is forbidden: User "x" cannot create',
            id="forbidden-rbac",
        ),
        pytest.param(
            403,
            "Forbidden",
            _status(
                403,
                "Forbidden",
                'pods "p" is forbidden: exceeded quota: tenant, requested: pods=1, used: pods=1',
            ),
            QuotaRefused,
            "Forbidden",
            'pods "p" is forbidden: exceeded quota: tenant, requested: pods=1, used: pods=1',
            id="quota-exceeded",
        ),
        pytest.param(
            403,
            "Forbidden",
            _status(403, "Forbidden", "status unknown for quota: tenant, resources: pods"),
            QuotaRefused,
            "Forbidden",
            "status unknown for quota: tenant, resources: pods",
            id="quota-not-computed",
        ),
        pytest.param(
            403,
            "Forbidden",
            _status(403, "Forbidden", 'tfjobs "quota-test" is forbidden: User "x" cannot create'),
            Forbidden,
            "Forbidden",
            'tfjobs "quota-test" is forbidden: User "x" cannot create',
            id="a-name-with-quota-is-not-a-quota",
        ),
        pytest.param(
            422,
            "Unprocessable Entity",
            _status(422, "Invalid", 'TFJob "x" is invalid', causes=INVALID_CAUSES),
            Invalid,
            "Invalid",
            'TFJob "x" is invalid',
            id="invalid",
        ),
        pytest.param(
            410,
            "Gone",
            _status(410, "Expired", "The provided continue parameter is too old"),
            Gone,
            "Expired",
            "The provided continue parameter is too old",
            id="gone-expired",
        ),
        pytest.param(
            400,
            "Bad Request",
            _status(400, "BadRequest", "continue key is not valid"),
            BadRequest,
            "BadRequest",
            "continue key is not valid",
            id="bad-request",
        ),
        pytest.param(
            401, "Unauthorized", "", Unauthorized, "Unauthorized", "Unauthorized", id="no-body"
        ),
        pytest.param(
            429,
            "Too Many Requests",
            _status(429, "TooManyRequests", "too many requests", retryAfterSeconds=1),
            TooManyRequests,
            "TooManyRequests",
            "too many requests",
            id="too-many-requests",
        ),
        pytest.param(
            500,
            "Internal Server Error",
            _status(500, "InternalError", "etcdserver: request timed out"),
            ServerError,
            "InternalError",
            "etcdserver: request timed out",
            id="etcd-timeout",
        ),
        pytest.param(
            503,
            "Service Unavailable",
            "<html>upstream connect error</html>",
            ServerError,
            "Service Unavailable",
            "<html>upstream connect error</html>",
            id="a-proxy-page",
        ),
        pytest.param(
            418, "I'm a teapot", "", ApiError, "I'm a teapot", "I'm a teapot", id="other-status"
        ),
        pytest.param(
            0,
            "SSLError\ncertificate verify failed",
            "",
            Unreachable,
            "Unreachable",
            "the API server did not answer (SSLError)",
            id="no-answer",
        ),
    ],
)
def test_error_from(
    status: int, phrase: str, body: str, cls: type[ApiError], reason: str, message: str
) -> None:
    error = error_from(status, phrase, body)
    assert type(error) is cls
    assert (error.status, error.reason, error.message) == (status, reason, message)
    assert error.body == body
    assert str(error) == message if status == 0 else str(error) == f"{message} (HTTP {status})"


def test_the_status_details_and_causes_are_kept() -> None:
    body = _status(422, "Invalid", 'TFJob "x" is invalid', name="x", causes=INVALID_CAUSES)
    error = error_from(422, "Unprocessable Entity", body.encode())
    assert error.details["name"] == "x"
    assert error.causes == (
        Cause("spec.replicas", "FieldValueInvalid", "Invalid value: -1"),
        Cause("metadata.name", "FieldValueRequired", "Required value"),
    )
    assert error_from(404, "Not Found", "").causes == ()


def test_a_long_text_answer_is_cut() -> None:
    error = error_from(502, "Bad Gateway", "x" * 10_000)
    assert len(error.message) == errors.TEXT_CHARS
    assert len(error.body) == 10_000


@pytest.mark.parametrize(
    ("exc", "cls"),
    [
        pytest.param(ApiException(status=0, reason="SSLError\nEOF"), Unreachable, id="tls"),
        pytest.param(
            ApiException(status=404, reason="Not Found", body=_status(404, "NotFound", "gone")),
            NotFound,
            id="not-found",
        ),
        pytest.param(ApiException(status=409, reason="Conflict"), Conflict, id="no-body"),
    ],
)
def test_the_official_clients_exception_maps_to_the_same_types(
    exc: ApiException, cls: type[ApiError]
) -> None:
    assert type(from_client_exception(exc)) is cls


# -- Kube over the official client's transport -------------------------------------------------


@dataclass
class FakeApiServer:
    """Answers each (method, path) with scripted (status, body) answers, in turn (the last
    one repeats); records every request as (method, path, query)."""

    answers: dict[tuple[str, str], list[tuple[int, str]]] = field(default_factory=dict)
    seen: list[tuple[str, str, dict[str, list[str]]]] = field(default_factory=list)

    def answer(self, method: str, path: str, *answers: tuple[int, Any]) -> None:
        self.answers[(method, path)] = [
            (s, b if isinstance(b, str) else json.dumps(b)) for s, b in answers
        ]

    def handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                url = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                server.seen.append((self.command, url.path, parse_qs(url.query)))
                queue = server.answers.get((self.command, url.path)) or [
                    (404, _status(404, "NotFound", f"{url.path} not found"))
                ]
                status, body = queue.pop(0) if len(queue) > 1 else queue[0]
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


def _api_client(host: str, retries: int | bool = 0) -> Any:
    conf = client.Configuration()
    conf.host = host
    conf.retries = retries
    return client.ApiClient(conf)


@pytest.fixture
def api() -> Iterator[tuple[FakeApiServer, Kube]]:
    fake = FakeApiServer()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), fake.handler())
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    api_client = _api_client(f"http://127.0.0.1:{httpd.server_address[1]}")
    try:
        yield fake, Kube(api_client)
    finally:
        api_client.close()
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def test_an_answer_is_json_and_a_refusal_its_typed_error(api: tuple[FakeApiServer, Kube]) -> None:
    fake, kube = api
    fake.answer("GET", TFJOB.url("ns", "a"), (200, {"metadata": {"name": "a"}}))
    fake.answer("POST", CONFIG_MAP.url("ns"), (409, _status(409, "AlreadyExists", "exists")))
    assert kube.get(TFJOB, "ns", "a") == {"metadata": {"name": "a"}}
    assert kube.get(TFJOB, "ns", "missing") is None  # NotFound is "no such object"
    with pytest.raises(NotFound):
        kube.request("DELETE", TFJOB.url("ns", "missing"))
    assert kube.request("DELETE", TFJOB.url("ns", "missing"), allow=(NotFound,)) is None
    assert kube.request("POST", CONFIG_MAP.url("ns"), body={}, allow=(AlreadyExists,)) is None
    with pytest.raises(AlreadyExists) as info:
        kube.request("POST", CONFIG_MAP.url("ns"), body={}, allow=(NotFound,))
    assert info.value.message == "exists"


def test_a_paged_list_reads_every_page_and_restarts_when_its_snapshot_expires(
    api: tuple[FakeApiServer, Kube],
) -> None:
    fake, kube = api
    path = POD.url("ns")
    page = {"items": [{"n": 1}], "metadata": {"continue": "t1"}}
    fake.answer(
        "GET",
        path,
        (200, page),
        (410, _status(410, "Expired", "The provided continue parameter is too old")),
        (200, page),
        (200, {"items": [{"n": 2}], "metadata": {}}),
    )
    assert kube.list(POD, "ns", "a=b", slim=lambda p: p["n"], page=1) == [1, 2]
    queries = [q for _, _, q in fake.seen]
    assert [q.get("continue") for q in queries] == [None, ["t1"], None, ["t1"]]
    assert {q["labelSelector"][0] for q in queries} == {"a=b"}


def test_an_expired_first_page_is_not_retried(api: tuple[FakeApiServer, Kube]) -> None:
    fake, kube = api
    fake.answer("GET", POD.url("ns"), (410, _status(410, "Expired", "too old")))
    with pytest.raises(Gone):
        kube.list(POD, "ns")
    assert len(fake.seen) == 1


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_an_api_server_that_does_not_answer_is_unreachable() -> None:
    """Connection refused while the API server restarts: `Unreachable`, an `ApiError` (one
    warning line and a retry in the operator), not the transport's exception."""
    api_client = _api_client(f"http://127.0.0.1:{_closed_port()}")
    try:
        with pytest.raises(Unreachable, match="the API server did not answer") as info:
            Kube(api_client).request("GET", POD.url("ns"))
    finally:
        api_client.close()
    assert info.value.status == 0


@pytest.mark.parametrize(
    "retries",
    [
        pytest.param(0, id="urllib3-gives-up"),
        pytest.param(False, id="the-client-raises-its-own-exception"),
    ],
)
def test_a_tls_failure_is_unreachable_not_the_clients_exception(
    api: tuple[FakeApiServer, Kube], retries: int | bool
) -> None:
    """https to a server that speaks plain HTTP. Without retries the official client raises
    its own ApiException (status 0) for it; with them, urllib3's MaxRetryError: the same
    `Unreachable` either way, naming the TLS failure."""
    _, plain = api
    host = plain.api.configuration.host.replace("http://", "https://")
    api_client = _api_client(host, retries)
    try:
        with pytest.raises(Unreachable, match=r"did not answer \(SSLError\)"):
            Kube(api_client).request("GET", POD.url("ns"))
    finally:
        api_client.close()


def test_one_replicas_log_reads_only_that_replicas_pods(api: tuple[FakeApiServer, Kube]) -> None:
    """A job page asks for one replica's log every few seconds while it waits for one: on
    a 1,000-replica job that must not list the job's 1,000 pods (it listed them twice)."""
    from tfkube.engines.kubernetes import KubernetesBackend

    fake, kube = api
    backend = KubernetesBackend(api_client=kube.api, namespace="ns")
    labels = {
        "tfkube.io/job-name": "wide",
        "tfkube.io/replica-type": "worker",
        "batch.kubernetes.io/job-completion-index": "3",
    }
    running = {
        "phase": "Running",
        "containerStatuses": [{"name": "tensorflow", "state": {"running": {}}}],
    }
    fake.answer("GET", TFJOB.url("ns", "wide"), (200, {"metadata": {"name": "wide"}}))
    fake.answer(
        "GET",
        POD.url("ns"),
        (
            200,
            {
                "items": [
                    {
                        "metadata": {
                            "name": "wide-worker-3-old",
                            "labels": labels,
                            "creationTimestamp": "2026-01-01T00:00:00Z",
                        },
                        "status": running,
                    },
                    {
                        "metadata": {
                            "name": "wide-worker-3-new",
                            "labels": labels,
                            "creationTimestamp": "2026-01-01T00:01:00Z",
                        },
                        "status": running,
                    },
                ],
                "metadata": {},
            },
        ),
    )
    fake.answer("GET", POD.url("ns", "wide-worker-3-new", "log"), (200, "step 1\nstep 2\n"))
    assert list(backend.logs("wide", "worker-3")) == ["step 1", "step 2"]
    lists = [q["labelSelector"][0] for method, path, q in fake.seen if path == POD.url("ns")]
    assert lists == [
        "tfkube.io/job-name=wide,tfkube.io/replica-type=worker,"
        "batch.kubernetes.io/job-completion-index=3"
    ]
