"""REST access to a cluster, as plain JSON over declared resources, with typed errors.

Both the Kubernetes backend and the operator speak to the API server through `Kube`: the
typed client has no methods for our custom resource and its subresources, and its model
classes cost more than the API call for a 1,000-pod list. The official `kubernetes`
package is used for what it does well (kubeconfig and service-account login, TLS, the
connection pool) and nothing else. Paths come from `tfkube.kube.resources` (`Resource.url`);
a non-2xx answer, or none at all, is always one of `tfkube.kube.errors` (mapped there, once),
never the client's own exception.

    Kube(api_client).request(method, path, body, query, allow=(NotFound,))
                                       -> decoded JSON | bytes | None (empty, or allowed)
                    .get(POD, ns, name) -> the object, or None
                    .list(JOB, ns, selector, slim)  -> every match, paged
                    .merge_patch(path, patch)
    Endpoint.of(api_client)            -> URL, TLS and credentials, for another HTTP
                                          client (a proxy)
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import urllib3

from tfkube.kube.errors import (
    ApiError,
    Gone,
    NotFound,
    Unreachable,
    error_from,
    from_client_exception,
)
from tfkube.kube.resources import Resource

__all__ = ["Endpoint", "Kube", "api_client_from", "context_namespace"]

LIST_RESTARTS = 3
"""How often a paged list starts again when its snapshot expires (410 Gone) meanwhile."""


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


def in_cluster(api_client: Any) -> bool:
    """Whether the client speaks with a pod's service account (the in-cluster config
    `api_client_from` falls back to, recognised by its CA file): the program runs in a
    pod of the cluster it talks to, so it reaches the cluster's Services."""
    from kubernetes.config.incluster_config import SERVICE_CERT_FILENAME

    return bool(getattr(api_client.configuration, "ssl_ca_cert", None) == SERVICE_CERT_FILENAME)


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


def _official_client_error() -> type[Exception]:
    """The official client's own exception class. Imported when an exception is being
    matched (the client is loaded by then: it made the request), not with this module:
    `kubernetes` takes a second to import and the server imports this module without it."""
    from kubernetes.client.exceptions import ApiException

    return ApiException


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
        allow: tuple[type[ApiError], ...] = (),
    ) -> Any:
        """Send one request to `path` (a `Resource.url`); return the decoded JSON (the
        bytes with `raw`; None when the answer is empty or is an error of a class in
        `allow`, e.g. `NotFound` on a delete, `AlreadyExists` on a create that may be
        repeated). Any other refusal raises its `ApiError`; no answer, `Unreachable`."""
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
            why = exc.reason if isinstance(exc, urllib3.exceptions.MaxRetryError) else exc
            raise Unreachable(type(why or exc).__name__) from exc
        except _official_client_error() as exc:  # its own refusal (a TLS failure: status 0)
            error = from_client_exception(exc)
            if isinstance(error, allow):
                return None
            raise error from exc
        data = response.read()
        if not 200 <= response.status <= 299:
            error = error_from(response.status, response.reason or "", data)
            if isinstance(error, allow):
                return None
            raise error
        if raw:
            return data
        return orjson.loads(data) if data else None

    def get(self, resource: Resource, namespace: str | None, name: str) -> Any:
        """One object, or None when it does not exist."""
        return self.request("GET", resource.url(namespace, name), allow=(NotFound,))

    def list(
        self,
        resource: Resource,
        namespace: str | None,
        selector: str = "",
        slim: Callable[[Any], Any] | None = None,
        page: int = 200,
        fields: str = "",
    ) -> list[Any]:
        """Every object matching the label `selector` (and field selector `fields`), read
        `page` at a time (one consistent snapshot: when it expires before the last page,
        410 Gone, the listing starts again); `slim` keeps only what the caller needs of
        each, so a 1,000-pod job is never held in full (managed fields and pod specs are
        most of a pod). `namespace` None: every namespace."""
        path = resource.url(namespace)
        items: list[Any] = []
        token = ""
        restarts = 0
        while True:
            query: dict[str, Any] = {"limit": page}
            if selector:
                query["labelSelector"] = selector
            if fields:
                query["fieldSelector"] = fields
            if token:
                query["continue"] = token
            try:
                data = self.request("GET", path, query=query)
            except Gone:
                if not token or restarts == LIST_RESTARTS:
                    raise
                restarts += 1
                items, token = [], ""
                continue
            batch = data.get("items") or []
            items += [slim(i) for i in batch] if slim is not None else batch
            token = (data.get("metadata") or {}).get("continue") or ""
            if not token:
                return items

    def merge_patch(
        self, path: str, patch: Mapping[str, Any], allow: tuple[type[ApiError], ...] = ()
    ) -> Any:
        return self.request(
            "PATCH", path, body=patch, content_type="application/merge-patch+json", allow=allow
        )
