"""The API operations a reconcile decides (`_reconcile`, pure) and `_apply` carries out:
plain data, in the order they must run. Each is idempotent against the API (deterministic
names; "already exists" and "not found" are successes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tfkube.kube.resources import Resource


@dataclass(frozen=True)
class Create:
    obj: dict[str, Any]


@dataclass(frozen=True)
class SuspendJob:
    name: str
    suspend: bool


@dataclass(frozen=True)
class ResizeWorkers:
    """`tfkube scale`: the job's size ConfigMap says `workers` (pods made from now on read
    it), then the worker Indexed Job runs that many (`completions` and `parallelism`
    together, as elastic Indexed Jobs allow): Kubernetes makes the added indexes and
    deletes the pods of the removed ones (the highest)."""

    job: str
    configmap: str
    workers: int
    completions: int | None = None
    """This Job's share of `workers` when the workers are split into several Jobs
    (shards); None: it runs them all."""


@dataclass(frozen=True)
class DeleteRoleJob:
    """Delete a role's Job and, at once, its pods (no waiting for the garbage collector)."""

    name: str
    selector: str


@dataclass(frozen=True)
class DeletePod:
    name: str
    grace_seconds: int


@dataclass(frozen=True)
class FailPod:
    """Mark a pod Failed (its status) and remove it at once: a pod whose node is lost
    (`tfkube.kube.observe.is_stranded`), as Kubernetes' pod GC does for a deleted node's."""

    name: str


@dataclass(frozen=True)
class DeleteObject:
    resource: Resource
    name: str


@dataclass(frozen=True)
class DeleteTFJob:
    pass


@dataclass(frozen=True)
class Event:
    type: str
    """Normal or Warning."""
    reason: str
    message: str


Op = (
    Create
    | SuspendJob
    | ResizeWorkers
    | DeleteRoleJob
    | DeletePod
    | FailPod
    | DeleteObject
    | DeleteTFJob
    | Event
)
