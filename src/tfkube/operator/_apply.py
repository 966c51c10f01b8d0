"""The operator's side effects: each planned operation as one or two REST calls.

"Already exists" on create and "not found" on delete are successes: every operation may
be repeated after a crash. The REST access itself is `tfkube.kube.rest.Kube`, shared
with the Kubernetes backend.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from tfkube.kube.names import GROUP, VERSION
from tfkube.kube.rest import Kube, collection, object_path, tfjob_path
from tfkube.operator._ops import (
    Create,
    DeleteObject,
    DeletePod,
    DeleteRoleJob,
    DeleteTFJob,
    Event,
    FailPod,
    Op,
    SuspendJob,
)

COMPONENT = "tfkube-operator"
"""Who the operator's Events say they come from."""
BACKGROUND = {"propagationPolicy": "Background"}


def apply(kube: Kube, op: Op, tfjob: Mapping[str, Any], component: str = COMPONENT) -> None:
    """Carry out one operation for the TFJob."""
    ns = tfjob["metadata"]["namespace"]
    if isinstance(op, Create):
        meta = op.obj.get("metadata") or {}
        path = collection(op.obj["apiVersion"], op.obj["kind"], meta.get("namespace"))
        kube.request("POST", path, body=op.obj, allow=(409,))
    elif isinstance(op, SuspendJob):
        path = object_path("batch/v1", "Job", ns, op.name)
        kube.merge_patch(path, {"spec": {"suspend": op.suspend}}, allow=(404,))
    elif isinstance(op, DeleteRoleJob):
        path = object_path("batch/v1", "Job", ns, op.name)
        kube.request("DELETE", path, body=BACKGROUND, allow=(404,))
        pods = collection("v1", "Pod", ns)
        kube.request("DELETE", pods, query={"labelSelector": op.selector}, allow=(404,))
    elif isinstance(op, DeletePod):
        path = object_path("v1", "Pod", ns, op.name)
        body = {"gracePeriodSeconds": op.grace_seconds}
        kube.request("DELETE", path, body=body, allow=(404,))
    elif isinstance(op, FailPod):
        path = object_path("v1", "Pod", ns, op.name)
        kube.merge_patch(f"{path}/status", {"status": {"phase": "Failed"}}, allow=(404, 422))
        kube.request("DELETE", path, body={"gracePeriodSeconds": 0}, allow=(404,))
    elif isinstance(op, DeleteObject):
        path = object_path(op.api_version, op.kind, ns, op.name)
        kube.request("DELETE", path, body=BACKGROUND, allow=(404,))
    elif isinstance(op, DeleteTFJob):
        path = tfjob_path(ns, tfjob["metadata"]["name"])
        kube.request("DELETE", path, body=BACKGROUND, allow=(404,))
    elif isinstance(op, Event):
        post_event(kube, tfjob, op, component)


def post_event(kube: Kube, tfjob: Mapping[str, Any], op: Event, component: str) -> None:
    """An Event about the TFJob (`kubectl describe tfjob` shows it). Not allowed or the
    namespace gone: nothing to tell, and no reason to fail the reconcile."""
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
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    path = collection("v1", "Event", meta["namespace"])
    kube.request("POST", path, body=body, allow=(404, 403))


def write_status(kube: Kube, tfjob: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """Replace the TFJob's status (a merge patch that also removes dropped keys);
    False when the TFJob is gone."""
    old = tfjob.get("status") or {}
    if dict(old) == dict(status):
        return True
    patch = {k: None for k in old if k not in status}
    patch.update(status)
    meta = tfjob["metadata"]
    path = tfjob_path(meta["namespace"], meta["name"]) + "/status"
    return kube.merge_patch(path, {"status": patch}, allow=(404,)) is not None
