"""One raw REST call through a `kubernetes.client.ApiClient`, shared by the backend and the
operator: the typed client has no methods for our custom resource's subresources and for
the paged, slimmed lists the operator reads, so both speak plain paths and JSON."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def rest_request(
    api: Any,
    method: str,
    path: str,
    body: Any = None,
    query: Mapping[str, Any] | None = None,
    content_type: str = "application/json",
    timeout: float = 60.0,
    raw: bool = False,
) -> Any:
    """Send one request; return the decoded JSON (or the bytes with `raw`, or None when
    the answer is empty). A non-2xx answer raises the client's `ApiException`."""
    from kubernetes.client.exceptions import ApiException

    method, url, headers, payload, _ = api.param_serialize(
        method,
        path,
        query_params=list((query or {}).items()),
        header_params={"Content-Type": content_type, "Accept": "application/json, */*"},
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api.call_api(method, url, headers, payload, _request_timeout=timeout)
    data = response.read()
    if not 200 <= response.status <= 299:
        raise ApiException(
            status=response.status, reason=response.reason, body=data.decode(errors="replace")
        )
    if raw:
        return data
    return json.loads(data) if data else None
