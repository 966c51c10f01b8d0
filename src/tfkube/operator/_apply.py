"""The operator's side effects: each planned operation as one or two REST calls.

"Already exists" on create and "not found" on delete are successes: every operation may
be repeated after a crash (`allow=` names the errors that are). The REST access itself is
`tfkube.kube.rest.Kube`, shared with the Kubernetes backend; every path comes from a
declared resource.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from tfkube.kube.errors import AlreadyExists, Forbidden, Invalid, NotFound
from tfkube.kube.names import SIZE_WORKERS_KEY
from tfkube.kube.resources import CONFIG_MAP, EVENT, JOB, POD, TFJOB, resource_for
from tfkube.kube.rest import Kube
from tfkube.operator._ops import (
    Create,
    DeleteObject,
    DeletePod,
    DeleteRoleJob,
    DeleteTFJob,
    Event,
    FailPod,
    Op,
    ResizeWorkers,
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
        path = resource_for(op.obj["apiVersion"], op.obj["kind"]).url(meta.get("namespace"))
        kube.request("POST", path, body=op.obj, allow=(AlreadyExists,))
    elif isinstance(op, SuspendJob):
        patch = {"spec": {"suspend": op.suspend}}
        kube.merge_patch(JOB.url(ns, op.name), patch, allow=(NotFound,))
    elif isinstance(op, ResizeWorkers):
        # A job made before the size ConfigMap existed has none: its new pods read the
        # count their template was made with.
        size = {"data": {SIZE_WORKERS_KEY: str(op.workers)}}
        kube.merge_patch(CONFIG_MAP.url(ns, op.configmap), size, allow=(NotFound,))
        mine = op.workers if op.completions is None else op.completions
        count = {"spec": {"completions": mine, "parallelism": mine}}
        kube.merge_patch(JOB.url(ns, op.job), count, allow=(NotFound,))
    elif isinstance(op, DeleteRoleJob):
        kube.request("DELETE", JOB.url(ns, op.name), body=BACKGROUND, allow=(NotFound,))
        query = {"labelSelector": op.selector}
        kube.request("DELETE", POD.url(ns), query=query, allow=(NotFound,))
    elif isinstance(op, DeletePod):
        body = {"gracePeriodSeconds": op.grace_seconds}
        kube.request("DELETE", POD.url(ns, op.name), body=body, allow=(NotFound,))
    elif isinstance(op, FailPod):
        failed = {"status": {"phase": "Failed"}}
        kube.merge_patch(POD.url(ns, op.name, "status"), failed, allow=(NotFound, Invalid))
        now = {"gracePeriodSeconds": 0}
        kube.request("DELETE", POD.url(ns, op.name), body=now, allow=(NotFound,))
    elif isinstance(op, DeleteObject):
        path = op.resource.url(ns, op.name)
        kube.request("DELETE", path, body=BACKGROUND, allow=(NotFound,))
    elif isinstance(op, DeleteTFJob):
        path = TFJOB.url(ns, tfjob["metadata"]["name"])
        kube.request("DELETE", path, body=BACKGROUND, allow=(NotFound,))
    elif isinstance(op, Event):
        post_event(kube, tfjob, op, component)


def post_event(kube: Kube, tfjob: Mapping[str, Any], op: Event, component: str) -> None:
    """An Event about the TFJob (`kubectl describe tfjob` shows it). Not allowed or the
    namespace gone: nothing to tell, and no reason to fail the reconcile."""
    meta = tfjob["metadata"]
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    body = {
        "apiVersion": EVENT.api_version,
        "kind": EVENT.kind,
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": TFJOB.api_version,
            "kind": TFJOB.kind,
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
    kube.request("POST", EVENT.url(meta["namespace"]), body=body, allow=(NotFound, Forbidden))


def write_status(kube: Kube, tfjob: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """Replace the TFJob's status (a merge patch that also removes dropped keys);
    False when the TFJob is gone."""
    old = tfjob.get("status") or {}
    if dict(old) == dict(status):
        return True
    patch = {k: None for k in old if k not in status}
    patch.update(status)
    meta = tfjob["metadata"]
    path = TFJOB.url(meta["namespace"], meta["name"], "status")
    return kube.merge_patch(path, {"status": patch}, allow=(NotFound,)) is not None
