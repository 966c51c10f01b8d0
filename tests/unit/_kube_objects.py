"""API objects as the API server returns them, built small for the pure tests of
`tfkube.kube.observe` and the operator's reconcile."""

from __future__ import annotations

from typing import Any

from tfkube.kube.names import GENERATION_ANNOTATION, INDEX_KEY, LABEL_JOB, LABEL_ROLE
from tfkube.kube.observe import format_time
from tfkube.spec import TFJob, parse_job

NOW = 1_800_000_000.0
T0 = NOW - 100


def job_model(ps: int = 1, workers: int = 2, chief: int = 0, **run_policy: Any) -> TFJob:
    """A job named `j`; `run_policy` keys are camelCase runPolicy fields."""
    replicas: dict[str, Any] = {"worker": {"replicas": workers}}
    if ps:
        replicas["ps"] = {"replicas": ps}
    if chief:
        replicas["chief"] = {"replicas": chief}
    return parse_job(
        {
            "apiVersion": "tfkube.io/v1alpha1",
            "kind": "TFJob",
            "metadata": {"name": "j"},
            "spec": {
                "replicas": replicas,
                "code": {"source": "http://x/c.tar.gz"},
                "runPolicy": run_policy,
            },
        }
    )


def role_job(
    role: str,
    generation: int = 0,
    completed: str = "",
    failed: str = "",
    condition: str | None = None,
    dying: bool = False,
    suspend: bool = False,
) -> dict[str, Any]:
    """The Kubernetes Job `j-<role>` of one generation (uid `uid-<role>-<generation>`)."""
    status: dict[str, Any] = {}
    if completed:
        status["completedIndexes"] = completed
    if failed:
        status["failedIndexes"] = failed
    if condition:
        status["conditions"] = [
            {"type": "Failed", "status": "True", "reason": condition, "message": "m"}
        ]
    meta: dict[str, Any] = {
        "name": f"j-{role}",
        "uid": f"uid-{role}-{generation}",
        "annotations": {GENERATION_ANNOTATION: str(generation)},
    }
    if dying:
        meta["deletionTimestamp"] = format_time(NOW)
    return {"metadata": meta, "spec": {"suspend": suspend}, "status": status}


def pod(
    role: str,
    index: int,
    phase: str = "Running",
    code: int | None = None,
    name: str | None = None,
    created: float = T0,
    generation: int = 0,
    dying: bool = False,
    **status: Any,
) -> dict[str, Any]:
    """A replica pod of `role_job(role, generation)`; `code` is its container's exit code,
    `status` more status fields (conditions, containerStatuses, reason, message)."""
    meta: dict[str, Any] = {
        "name": name or f"j-{role}-{index}-{int(created) % 1000}",
        "creationTimestamp": format_time(created),
        "labels": {LABEL_JOB: "j", LABEL_ROLE: role, INDEX_KEY: str(index)},
        "ownerReferences": [{"controller": True, "uid": f"uid-{role}-{generation}"}],
    }
    if dying:
        meta["deletionTimestamp"] = format_time(NOW)
    body: dict[str, Any] = {"phase": phase}
    if code is not None:
        body["containerStatuses"] = [{"state": {"terminated": {"exitCode": code}}}]
    body.update(status)
    return {"metadata": meta, "status": body}


STALL = 15
STARTED = T0 + 10


def running_pod(
    ready: bool | None,
    turned: float | None = None,
    created: float = T0,
    started: float = STARTED,
    role: str = "worker",
    **extra: Any,
) -> dict[str, Any]:
    """A running pod of `role` index 0 whose container started at `started`; `ready` None: no Ready
    condition yet; `turned`: the Ready condition's lastTransitionTime."""
    status: dict[str, Any] = {
        "containerStatuses": [
            {
                "name": "tensorflow",
                "ready": bool(ready),
                "state": {"running": {"startedAt": format_time(started)}},
            }
        ]
    }
    if ready is not None:
        condition = {"type": "Ready", "status": "True" if ready else "False"}
        if turned is not None:
            condition["lastTransitionTime"] = format_time(turned)
        status["conditions"] = [condition]
    status.update(extra)
    return pod(role, 0, "Running", created=created, **status)


def states(obs: Any) -> dict[str, str]:
    return {k: r.status.state.value for k, r in obs.replicas.items()}
