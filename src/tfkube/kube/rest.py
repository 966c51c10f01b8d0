"""REST access to a cluster, as plain paths and JSON, with one error type.

Both the Kubernetes backend and the operator speak to the API server through `Kube`: the
typed client has no methods for our custom resource and its subresources, and its model
classes cost more than the API call for a 1,000-pod list. The official `kubernetes`
package is used for what it does well (kubeconfig and service-account login, TLS, the
connection pool) and nothing else; a non-2xx answer is always an `ApiError`, never the
client's own exception, so callers handle one type.

    Kube(api_client).request(method, path, body, query)  -> decoded JSON | None | bytes
                    .get / .list (paged, slimmed)         -> reads; 404 on get is None
                    .collection(apiVersion, kind, ns)     -> the path of a kind (pure)
    Endpoint.of(api_client)                               -> URL, TLS and credentials, for
                                                             another HTTP client (a proxy)
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3

from tfkube.kube.names import CLUSTER_SCOPED, GROUP, PLURAL, VERSION


class ApiError(Exception):
    """The API server answered with a non-2xx status.

    `message` is the API server's own explanation (its `Status.message`), which names the
    field or object at fault; `str(error)` is that message with the status code."""

    def __init__(self, status: int, reason: str, body: str) -> None:
        self.status = status
        """The HTTP status: 404 not found, 409 already exists, 422 invalid, 403 forbidden."""
        self.reason = reason
        """The HTTP reason phrase."""
        self.body = body
        """The answer as text (a `Status` object as JSON, usually)."""
        self.message = status_message(body) or reason or f"HTTP {status}"
        """The API server's message, else the reason phrase."""
        super().__init__(f"{self.message} (HTTP {status})")


class ApiUnreachable(ApiError):
    """The API server did not answer at all (connection refused or reset, timed out): e.g.
    while it restarts. A state of the cluster like any other refusal, hence an `ApiError`
    (status 0), so that callers retry it the same way."""

    def __init__(self, detail: object) -> None:
        super().__init__(0, "unreachable", "")
        self.message = f"the API server did not answer ({type(detail).__name__})"
        self.args = (self.message,)


def status_message(body: str) -> str:
    """The `message` of a `Status` answer; the body itself when it is not one."""
    try:
        data = json.loads(body)
    except ValueError:
        return body.strip()
    if isinstance(data, dict) and data.get("message"):
        return str(data["message"])
    return body.strip()


def collection(api_version: str, kind: str, namespace: str | None = None) -> str:
    """The path of a kind's objects: `/api/v1/namespaces/ns/pods`, `/apis/batch/v1/jobs`.
    Plurals are the lower-case kind plus `s`, true of every kind tfkube touches."""
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    plural = kind.lower() + "s"
    if kind in CLUSTER_SCOPED or namespace is None:
        return f"{base}/{plural}"
    return f"{base}/namespaces/{namespace}/{plural}"


def object_path(api_version: str, kind: str, namespace: str | None, name: str) -> str:
    return f"{collection(api_version, kind, namespace)}/{name}"


def tfjob_path(namespace: str, name: str = "") -> str:
    """A namespace's TFJobs, or one of them."""
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
    return f"{path}/{name}" if name else path


def service_proxy_path(namespace: str, service: str, port: str) -> str:
    """The API server's proxy to a Service's port: what follows it is the path the
    Service's pods are asked for (the API server checks `services/proxy` RBAC)."""
    return f"{object_path('v1', 'Service', namespace, f'{service}:{port}')}/proxy"


@dataclass(frozen=True)
class Endpoint:
    """How to reach the API server with an HTTP client other than the official one (the
    platform server streams TensorBoard through the service proxy with httpx): the same
    URL, CA, client certificate and token the kubeconfig or service account gives."""

    host: str
    """`https://host:port`, no trailing slash."""
    ssl_context: ssl.SSLContext
    """Verifies the API server (unless the kubeconfig says not to) and carries the client
    certificate, if any."""
    configuration: Any
    """The official client's Configuration: its token is read on each `headers()`, so a
    rotated service-account token is picked up."""

    @classmethod
    def of(cls, api_client: Any) -> Endpoint:
        conf = api_client.configuration
        context = ssl.create_default_context(cafile=conf.ssl_ca_cert or None)
        if not conf.verify_ssl:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if conf.cert_file:
            context.load_cert_chain(conf.cert_file, conf.key_file or None)
        return cls(str(conf.host).rstrip("/"), context, conf)

    def headers(self) -> dict[str, str]:
        """The credentials to send (a bearer token), when the kubeconfig uses one."""
        auth = self.configuration.auth_settings().get("BearerToken")
        return {"Authorization": str(auth["value"])} if auth and auth.get("value") else {}


def api_client_from(kubeconfig: Path | None = None, context: str | None = None) -> Any:
    """An official `kubernetes` ApiClient for a kubeconfig (default: $KUBECONFIG or
    ~/.kube/config), or the in-cluster service account when there is no kubeconfig."""
    from kubernetes import config

    try:
        return config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig) if kubeconfig else None, context=context
        )
    except config.ConfigException:
        if kubeconfig is not None:
            raise
        config.load_incluster_config()  # type: ignore[no-untyped-call]
        from kubernetes import client

        return client.ApiClient()


def context_namespace(kubeconfig: Path | None) -> str | None:
    """The namespace of the kubeconfig's current context, if it names one."""
    try:
        from kubernetes import config

        _, active = config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig) if kubeconfig else None
        )
    except Exception:
        return None
    ns = (active or {}).get("context", {}).get("namespace")
    return str(ns) if ns else None


class Kube:
    """Raw REST over a `kubernetes.client.ApiClient`. Stateless beyond the connection."""

    def __init__(self, api_client: Any) -> None:
        self.api = api_client

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
        timeout: float = 60.0,
        raw: bool = False,
        allow: tuple[int, ...] = (),
    ) -> Any:
        """Send one request; return the decoded JSON (the bytes with `raw`; None when the
        answer is empty or its status is one of `allow`, e.g. 404 on a delete, 409 on a
        create that may be repeated). Any other non-2xx answer raises `ApiError`; no answer
        at all, `ApiUnreachable`."""
        method, url, headers, payload, _ = self.api.param_serialize(
            method,
            path,
            query_params=list((query or {}).items()),
            header_params={"Content-Type": content_type, "Accept": "application/json, */*"},
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            response = self.api.call_api(method, url, headers, payload, _request_timeout=timeout)
        except urllib3.exceptions.HTTPError as exc:  # the kubernetes client's transport
            raise ApiUnreachable(exc) from exc
        data = response.read()
        if not 200 <= response.status <= 299:
            if response.status in allow:
                return None
            raise ApiError(response.status, response.reason, data.decode(errors="replace"))
        if raw:
            return data
        return json.loads(data) if data else None

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Any:
        """One object, or None when it does not exist."""
        return self.request("GET", object_path(api_version, kind, namespace, name), allow=(404,))

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        selector: str,
        slim: Callable[[Any], Any] | None = None,
        page: int = 200,
    ) -> list[Any]:
        """Every object matching `selector`, read `page` at a time (one consistent
        snapshot); `slim` keeps only what the caller needs of each, so a 1,000-pod job is
        never held in full (managed fields and pod specs are most of a pod)."""
        items: list[Any] = []
        token = ""
        while True:
            query: dict[str, Any] = {"labelSelector": selector, "limit": page}
            if token:
                query["continue"] = token
            data = self.request("GET", collection(api_version, kind, namespace), query=query)
            batch = data.get("items") or []
            items += [slim(i) for i in batch] if slim is not None else batch
            token = (data.get("metadata") or {}).get("continue") or ""
            if not token:
                return items

    def merge_patch(self, path: str, patch: Mapping[str, Any], allow: tuple[int, ...] = ()) -> Any:
        return self.request(
            "PATCH", path, body=patch, content_type="application/merge-patch+json", allow=allow
        )
