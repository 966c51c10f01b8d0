"""The operator's side effects: a few REST calls with the official client, as plain JSON.

Lists and reads skip the client's model classes (`_preload_content=False`): a 1,000-pod
job is read as dicts in a fraction of the time. "Already exists" on create and "not
found" on delete are successes: every operation may be repeated after a crash.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from tfkube.backends.kubernetes._rest import rest_request
from tfkube.operator._reconcile import (
    GROUP,
    PLURAL,
    VERSION,
    Create,
    DeleteObject,
    DeletePod,
    DeleteRoleJob,
    DeleteTFJob,
    Event,
    Op,
    SuspendJob,
)

CLUSTER_SCOPED = {"Namespace"}


class Kube:
    """Thin REST helper over a `kubernetes.client.ApiClient`."""

    def __init__(self, api_client: Any, component: str = "tfkube-operator") -> None:
        from kubernetes.client.exceptions import ApiException

        self.api = api_client
        self.ApiException = ApiException
        self.component = component

    # -- raw -------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        return rest_request(self.api, method, path, body, query, content_type)

    def _ok(self, call: Any, *allowed: int) -> Any:
        try:
            return call()
        except self.ApiException as exc:
            if exc.status in allowed:
                return None
            raise

    # -- paths -----------------------------------------------------------------------------

    @staticmethod
    def collection(api_version: str, kind: str, namespace: str | None) -> str:
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        plural = kind.lower() + "s"
        if kind in CLUSTER_SCOPED or namespace is None:
            return f"{base}/{plural}"
        return f"{base}/namespaces/{namespace}/{plural}"

    @staticmethod
    def tfjob_path(namespace: str, name: str = "") -> str:
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
        return f"{path}/{name}" if name else path

    # -- reads -----------------------------------------------------------------------------

    def get_tfjob(self, namespace: str, name: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = self._ok(
            lambda: self.request("GET", self.tfjob_path(namespace, name)), 404
        )
        return result

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
            query = {"labelSelector": selector, "limit": page}
            if token:
                query["continue"] = token
            data = self.request("GET", self.collection(api_version, kind, namespace), query=query)
            batch = data.get("items") or []
            items += [slim(i) for i in batch] if slim is not None else batch
            token = (data.get("metadata") or {}).get("continue") or ""
            if not token:
                return items

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Any:
        path = f"{self.collection(api_version, kind, namespace)}/{name}"
        return self._ok(lambda: self.request("GET", path), 404)

    # -- writes ----------------------------------------------------------------------------

    def apply(self, op: Op, tfjob: Mapping[str, Any]) -> None:
        ns = tfjob["metadata"]["namespace"]
        if isinstance(op, Create):
            meta = op.obj.get("metadata") or {}
            path = self.collection(op.obj["apiVersion"], op.obj["kind"], meta.get("namespace"))
            self._ok(lambda: self.request("POST", path, body=op.obj), 409)
        elif isinstance(op, SuspendJob):
            path = f"{self.collection('batch/v1', 'Job', ns)}/{op.name}"
            patch = {"spec": {"suspend": op.suspend}}
            self._ok(
                lambda: self.request(
                    "PATCH", path, body=patch, content_type="application/merge-patch+json"
                ),
                404,
            )
        elif isinstance(op, DeleteRoleJob):
            path = f"{self.collection('batch/v1', 'Job', ns)}/{op.name}"
            self._ok(
                lambda: self.request("DELETE", path, body={"propagationPolicy": "Background"}),
                404,
            )
            self._ok(
                lambda: self.request(
                    "DELETE",
                    self.collection("v1", "Pod", ns),
                    query={"labelSelector": op.selector},
                ),
                404,
            )
        elif isinstance(op, DeletePod):
            path = f"{self.collection('v1', 'Pod', ns)}/{op.name}"
            body: dict[str, Any] = {"gracePeriodSeconds": op.grace_seconds}
            self._ok(lambda: self.request("DELETE", path, body=body), 404)
        elif isinstance(op, DeleteObject):
            path = f"{self.collection(op.api_version, op.kind, ns)}/{op.name}"
            body = {"propagationPolicy": "Background"}
            self._ok(lambda: self.request("DELETE", path, body=body), 404)
        elif isinstance(op, DeleteTFJob):
            path = self.tfjob_path(ns, tfjob["metadata"]["name"])
            body = {"propagationPolicy": "Background"}
            self._ok(lambda: self.request("DELETE", path, body=body), 404)
        elif isinstance(op, Event):
            self.event(tfjob, op)

    def event(self, tfjob: Mapping[str, Any], op: Event) -> None:
        meta = tfjob["metadata"]
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "TFJob",
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "type": op.type,
            "reason": op.reason,
            "message": op.message[:1000],
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self._ok(
            lambda: self.request(
                "POST", self.collection("v1", "Event", meta["namespace"]), body=body
            ),
            404,
            403,
        )

    def write_status(self, tfjob: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
        """Replace the TFJob's status (a merge patch that also removes dropped keys);
        False when the TFJob is gone."""
        old = tfjob.get("status") or {}
        if dict(old) == dict(status):
            return True
        patch = {k: None for k in old if k not in status}
        patch.update(status)
        meta = tfjob["metadata"]
        path = self.tfjob_path(meta["namespace"], meta["name"]) + "/status"
        result = self._ok(
            lambda: self.request(
                "PATCH",
                path,
                body={"status": patch},
                content_type="application/merge-patch+json",
            ),
            404,
        )
        return result is not None
