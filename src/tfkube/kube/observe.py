"""API objects -> what each replica is doing, and why: the one interpreter of pods, shared by
the operator (which feeds its `JobStatus` to the planner) and the Kubernetes backend (whose
`tfkube status` shows its replicas), so the two can never disagree. Pure: plain dicts as the
API returns them in, `Observation` out; no client, no clock.

    TFJob status (Prior) --+
    its role Jobs ---------+--> observe() --> Observation: JobStatus for the planner, per
    its replica pods ------+                  replica its pod, failed pod and message

The rules (who retries what, generations, messages) are in `tfkube.kube._observe`, with a
unit test row for every branch; this module is what the rest of tfkube may use of it.
"""

from tfkube.kube._observe import (
    ADDRESSING,
    GANG_SCHEDULERS,
    PODS_PER_JOB,
    PREEMPTED_EVENT,
    SERVICE_PER_JOB,
    UNSHARDED,
    Disruption,
    Layout,
    Obj,
    Observation,
    ObserveMemo,
    Preemption,
    Prior,
    ReplicaObservation,
    format_time,
    index_offset,
    is_stranded,
    layout,
    observe,
    parse_time,
    pod_index,
    pod_role,
    slim_pod,
    tfjob_model,
)

__all__ = [
    "ADDRESSING",
    "GANG_SCHEDULERS",
    "PODS_PER_JOB",
    "PREEMPTED_EVENT",
    "SERVICE_PER_JOB",
    "UNSHARDED",
    "Disruption",
    "Layout",
    "Obj",
    "Observation",
    "ObserveMemo",
    "Preemption",
    "Prior",
    "ReplicaObservation",
    "format_time",
    "index_offset",
    "is_stranded",
    "layout",
    "observe",
    "parse_time",
    "pod_index",
    "pod_role",
    "slim_pod",
    "tfjob_model",
]
