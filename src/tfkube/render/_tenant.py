"""A team's objects in a cluster: its namespace, and its quota as a ResourceQuota with
default requests (a LimitRange) where the quota counts CPU or memory; for a team with a
priority, the PriorityClass its jobs' pods get (`team_priority_class`). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tfkube import contract
from tfkube.kube.names import (
    GROUP,
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    PLURAL,
    TENANT_OBJECTS,
    pod_security_labels,
    team_priority_class,
)

DEFAULT_REQUEST = {"cpu": contract.DEFAULT_CPU_REQUEST, "memory": "512Mi"}
"""What a container that asks for nothing is counted as in a team namespace with a quota
(a LimitRange default): Kubernetes refuses a pod without requests where a quota counts
them. The CPU is the local queue's too (`contract.DEFAULT_CPU_REQUEST`)."""


def quota_hard(quota: Mapping[str, Any]) -> dict[str, str]:
    """A team's quota as a ResourceQuota's `hard`. Requests only: a quota on limits would
    force a limit on every container, and a default memory limit kills training that needs
    more; requests are what the scheduler reserves, so they are what is shared."""
    hard: dict[str, str] = {}
    if quota.get("cpu") is not None:
        hard["requests.cpu"] = f"{quota['cpu']:g}"
    if quota.get("memory") is not None:
        hard["requests.memory"] = str(int(quota["memory"]))
    if quota.get("gpu") is not None:
        hard["requests.nvidia.com/gpu"] = str(int(quota["gpu"]))
    if quota.get("jobs") is not None:
        hard[f"count/{PLURAL}.{GROUP}"] = str(int(quota["jobs"]))
    return hard


def priority_class(priority: int) -> dict[str, Any] | None:
    """The PriorityClass of a team's priority (cluster-wide, shared by the teams with that
    priority), or None for 0. A job of a team with a higher priority that does not fit
    makes the scheduler preempt pods of lower ones: the operator counts that as a
    preemption, never a restart (docs/kubernetes.md, "Preemption")."""
    name = team_priority_class(priority)
    if name is None:
        return None
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {
            "name": name,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_COMPONENT: "tenant"},
        },
        "value": priority,
        "globalDefault": False,
        "preemptionPolicy": "PreemptLowerPriority",
        "description": f"tfkube: the jobs of teams of priority {priority}",
    }


def tenant_objects(
    namespace: str, quota: Mapping[str, Any], pod_security: str = "restricted", priority: int = 0
) -> list[dict[str, Any]]:
    """A team's namespace and its quota, with default requests where the quota counts
    CPU or memory, and its priority's PriorityClass (`priority_class`). The namespace
    enforces the team's Pod Security level (`restricted` unless a site admin allowed
    `baseline`: `tfkube.engines.admission_refusals`)."""
    labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_COMPONENT: "tenant"}
    ns_labels = {**labels, **pod_security_labels(pod_security)}
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": namespace, "labels": ns_labels},
        }
    ]
    hard = quota_hard(quota)
    meta = {"name": TENANT_OBJECTS, "namespace": namespace, "labels": labels}
    if hard:
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": dict(meta),
                "spec": {"hard": hard},
            }
        )
    if "requests.cpu" in hard or "requests.memory" in hard:
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "LimitRange",
                "metadata": dict(meta),
                "spec": {
                    "limits": [{"type": "Container", "defaultRequest": dict(DEFAULT_REQUEST)}]
                },
            }
        )
    cls = priority_class(priority)
    if cls is not None:
        objects.append(cls)
    return objects
