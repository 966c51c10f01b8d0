"""One reconcile of one TFJob, decided purely: observed API objects in, operations out.

    TFJob (spec + status) --+
    its Kubernetes Jobs  ---+--> observe() --> JobStatus --> planner.plan() --> Decision
    its pods  --------------+                                                      |
    rendered objects -------------------------------------------------------------+--> Plan

`Plan.ops` are API operations in the order they must run (create, suspend, delete, event);
`Plan.status` is the TFJob's whole new status, written last, so that an operator killed
half-way simply does the same again next time (every operation is idempotent: objects have
deterministic names, "already exists" and "not found" are successes).

Mapping of the planner's actions to Kubernetes (who retries what: see `_observe`):
  Start(key)       the role's Indexed Job exists (created with the job, re-created if lost)
  Restart(key)     FAILED replica: Kubernetes already re-creates the pod; the failure is
                   recorded in `status.handledFailures` so it is acted on once.
                   Live replica (a PS it depends on failed): its pod is deleted; the Job
                   controller re-creates it and it resumes from the checkpoint.
  Stop(key)        the job ended: a role with nothing finished to keep (the PS) has its
                   Job deleted with its pods; a role with finished pods is suspended, which
                   deletes only its running pods. cleanPodPolicy All deletes every Job.
  DeleteJob        the TFJob is deleted; owner references make the garbage collector
                   delete everything it owns.
A role Job that Kubernetes failed (per-index backoff exhausted, podFailurePolicy FailJob)
or an index it gave up on fails the TFJob even when the job-wide backoffLimit would allow
another restart: Kubernetes will not re-run it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tfkube.api import CleanPodPolicy, GangScheduler, Role, TFJob
from tfkube.operator._observe import (
    GENERATION_ANNOTATION,
    LABEL_JOB,
    LABEL_ROLE,
    Obj,
    Observation,
    Prior,
    format_time,
    observe,
)
from tfkube.planner import (
    Decision,
    DeleteJob,
    JobPhase,
    ReplicaState,
    Restart,
    Stop,
    plan,
)

GROUP = "tfkube.io"
VERSION = "v1alpha1"
PLURAL = "tfjobs"
TFJOB_API_VERSION = f"{GROUP}/{VERSION}"
LIVE_REQUEUE_SECONDS = 2.0
"""A live job is looked at again at least this often (deadlines, Kubernetes' backoff);
pod and Job events wake it up sooner."""
SHARED_NAMES = frozenset({"tfkube-tenant"})
"""Objects shared by every job of a namespace: never owned by one TFJob."""
STOP_ANNOTATION = "tfkube.io/stop"
"""`true`: end the job now, Failed (Stopped); what `KubernetesBackend.stop` sets."""
CLUSTER_SCOPED = frozenset({"Namespace", "PriorityClass", "ClusterRole", "ClusterRoleBinding"})


# -- operations ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Create:
    obj: dict[str, Any]


@dataclass(frozen=True)
class SuspendJob:
    name: str
    suspend: bool


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
class DeleteObject:
    api_version: str
    kind: str
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


Op = Create | SuspendJob | DeleteRoleJob | DeletePod | DeleteObject | DeleteTFJob | Event


@dataclass(frozen=True)
class Plan:
    ops: tuple[Op, ...]
    status: dict[str, Any]
    requeue_after: float | None
    decision: Decision | None = None
    observation: Observation | None = None
    notes: tuple[str, ...] = field(default=())


# -- helpers -----------------------------------------------------------------------------------


def owner_reference(tfjob: Obj) -> dict[str, Any]:
    meta = tfjob["metadata"]
    return {
        "apiVersion": TFJOB_API_VERSION,
        "kind": "TFJob",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owned(
    objects: Iterable[Mapping[str, Any]],
    tfjob: Obj,
    suspend: bool,
    generations: Mapping[str, int],
) -> list[dict[str, Any]]:
    """Rendered objects with the TFJob as their controlling owner (render sets none), in the
    TFJob's namespace; Jobs created suspended when the job is, annotated with the
    whole-job restart generation they belong to."""
    namespace = tfjob["metadata"]["namespace"]
    out = []
    for obj in objects:
        item = copy.deepcopy(dict(obj))
        meta = item.setdefault("metadata", {})
        kind = item.get("kind", "")
        if kind in CLUSTER_SCOPED:
            out.append(item)
            continue
        meta.setdefault("namespace", namespace)
        if meta["namespace"] == namespace and meta.get("name") not in SHARED_NAMES:
            meta["ownerReferences"] = [owner_reference(tfjob)]
        if kind == "Job" and item.get("apiVersion") == "batch/v1":
            spec = item.setdefault("spec", {})
            spec["suspend"] = suspend or bool(spec.get("suspend"))  # Kueue's stay suspended
            annotations = meta.setdefault("annotations", {})
            role = (meta.get("labels") or {}).get(LABEL_ROLE, "")
            annotations[GENERATION_ANNOTATION] = str(generations.get(role, 0))
        out.append(item)
    return out


def _is_role_job(obj: Mapping[str, Any], job_name: str) -> str | None:
    if obj.get("kind") != "Job":
        return None
    labels = (obj.get("metadata") or {}).get("labels") or {}
    role = labels.get(LABEL_ROLE)
    if role is None or obj["metadata"].get("name") != f"{job_name}-{role}":
        return None
    return str(role)


def _condition(
    old: list[dict[str, Any]], kind: str, on: bool, reason: str, message: str, now: float
) -> dict[str, Any]:
    status = "True" if on else "False"
    previous = next((c for c in old if c.get("type") == kind), None)
    since = (
        previous["lastTransitionTime"]
        if previous and previous.get("status") == status and previous.get("lastTransitionTime")
        else format_time(now)
    )
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
    }


def _event_reason(line: str) -> str:
    if "failed" in line:
        return "ReplicaFailed"
    return "Restarting" if "restart" in line else "Info"


# -- the decision --------------------------------------------------------------------------------


def invalid_spec_plan(tfjob: Obj, message: str, now: float) -> Plan:
    """The TFJob's spec does not validate: Failed (InvalidSpec), said once, nothing created."""
    status = dict(tfjob.get("status") or {})
    if status.get("phase") == JobPhase.FAILED.value and status.get("reason") == "InvalidSpec":
        return Plan(ops=(), status=status, requeue_after=None)
    old = list(status.get("conditions") or [])
    new_status = {
        **status,
        "phase": JobPhase.FAILED.value,
        "reason": "InvalidSpec",
        "message": message,
        "completionTime": format_time(now),
        "conditions": [_condition(old, "Failed", True, "InvalidSpec", message, now)],
    }
    return Plan(
        ops=(Event("Warning", "InvalidSpec", message),),
        status=new_status,
        requeue_after=None,
    )


def reconcile(
    tfjob: Obj,
    job: TFJob,
    jobs: Iterable[Obj],
    pods: Iterable[Obj],
    rendered: Iterable[Mapping[str, Any]],
    now: float,
) -> Plan:
    """Decide everything for one TFJob; see the module docstring."""
    old_status: dict[str, Any] = dict(tfjob.get("status") or {})
    prior = Prior.from_status(old_status)
    policy = job.spec.run_policy
    jobs = list(jobs)
    objects = owned(rendered, tfjob, suspend=policy.suspend, generations=prior.generations)
    role_job_objects = {r: o for o in objects if (r := _is_role_job(o, job.name))}
    obs = observe(job, prior, jobs, pods, now)
    ops: list[Op] = []
    conditions = list(old_status.get("conditions") or [])
    status: dict[str, Any] = dict(old_status)
    status["observedGeneration"] = tfjob["metadata"].get("generation")
    first = prior.started_at is None and not prior.phase.terminal

    was_suspended = any(
        c.get("type") == "Suspended" and c.get("status") == "True" for c in conditions
    )
    if first:
        ops += [Create(o) for o in objects]  # every object, once; "exists" is fine
        ops.append(Event("Normal", "Created", f"created {len(objects)} objects"))
        status["startTime"] = format_time(now)
    elif not prior.phase.terminal:
        due = prior.restart_at is None or now >= prior.restart_at
        ops += [
            Create(o)
            for role, o in role_job_objects.items()
            if due
            and role not in obs.role_jobs
            and role not in obs.dying_jobs
            and role not in obs.stale_jobs
        ]
    ops += [
        DeleteRoleJob(f"{job.name}-{role}", f"{LABEL_JOB}={job.name},{LABEL_ROLE}={role}")
        for role in sorted(obs.stale_jobs)
    ]

    if policy.suspend and not prior.phase.terminal:
        ops += [
            SuspendJob(j["metadata"]["name"], True)
            for j in obs.role_jobs.values()
            if not (j.get("spec") or {}).get("suspend")
        ]
        if not was_suspended:
            ops.append(Event("Normal", "Suspended", "suspended: every replica is stopped"))
        status.update(
            phase=JobPhase.PENDING.value if first else status.get("phase", "Pending"),
            reason="Suspended",
            message="spec.runPolicy.suspend is true",
            replicaStatuses={r: c.as_dict() for r, c in obs.counts.items()},
            conditions=_merge(
                conditions,
                _condition(conditions, "Suspended", True, "Suspended", "suspended", now),
            ),
        )
        return Plan(ops=tuple(ops), status=status, requeue_after=None, observation=obs)

    if was_suspended and not prior.phase.terminal:
        scheduling = job.spec.scheduling
        kueue = scheduling is not None and scheduling.gang is GangScheduler.KUEUE
        ops += [
            SuspendJob(j["metadata"]["name"], False)
            for j in obs.role_jobs.values()
            if (j.get("spec") or {}).get("suspend") and not kueue  # Kueue admits them
        ]
        ops.append(Event("Normal", "Resumed", "resumed: replicas start again"))
        status["startTime"] = format_time(now)  # the deadline counts from the resume
        conditions = _merge(
            conditions, _condition(conditions, "Suspended", False, "Resumed", "resumed", now)
        )
        status["reason"] = None
        status["message"] = None
        obs = observe(job, Prior.from_status(status), jobs, pods, now)

    decision = plan(job, obs.status, now)
    decision = _kubernetes_gave_up(job, obs, decision)
    annotations = tfjob["metadata"].get("annotations") or {}
    if annotations.get(STOP_ANNOTATION) == "true" and not decision.phase.terminal:
        decision = fail_now(job, obs, decision, "Stopped", "stopped on request (tfkube stop)")
    handled = set(prior.handled)

    for line in decision.events:
        if decision.finished and line.startswith("job "):
            continue  # said once below, with the reason
        ops.append(Event("Warning" if "failed" in line else "Normal", _event_reason(line), line))
    if decision.phase is not prior.phase and not decision.finished:
        ops.append(Event("Normal", decision.phase.value, f"job is {decision.phase.value}"))

    restarts = [a for a in decision.actions if isinstance(a, Restart)]
    ps_failed = any(
        obs.replicas[a.key].status.role == Role.PS.value
        and obs.replicas[a.key].status.state is ReplicaState.FAILED
        for a in restarts
    )
    if ps_failed:
        # A whole-job restart: a new generation of the restarted roles' Jobs, created
        # after the backoff once the old ones are gone. Written to the status before the
        # Jobs are deleted, so their failures are counted exactly once.
        roles = {obs.replicas[a.key].status.role for a in restarts}
        kept = sum(r.restarts for r in obs.status.replicas if r.role not in roles)
        generations = dict(prior.generations)
        for role in roles:
            generations[role] = generations.get(role, 0) + 1
        status["restartGenerations"] = generations
        status["restartsBefore"] = decision.restarts - kept
        status["restartAt"] = format_time(min(a.at for a in restarts))
    stop_roles: set[str] = set()
    for action in decision.actions:
        if isinstance(action, Restart):
            seen = obs.replicas[action.key]
            if ps_failed:
                continue  # its role's Job is replaced (below)
            if seen.status.state is ReplicaState.FAILED and seen.failed_pod:
                handled.add(seen.failed_pod)  # Kubernetes re-creates its pod
            elif seen.status.state.live and seen.pod:
                ops.append(DeletePod(seen.pod, int(policy.termination_grace_seconds)))
        elif isinstance(action, Stop):
            seen = obs.replicas[action.key]
            if seen.status.state.live or seen.status.state is ReplicaState.BACKOFF:
                stop_roles.add(seen.status.role)
        elif isinstance(action, DeleteJob):
            ops.append(Event("Normal", "Deleted", "ttlSecondsAfterFinished passed: deleting"))
            ops.append(DeleteTFJob())

    terminal = decision.phase.terminal
    if terminal:
        tensorboard = any(o["metadata"].get("name") == f"{job.name}-tensorboard" for o in objects)
        ops += _cleanup(job, obs, stop_roles, finishing=decision.finished and tensorboard)
    if decision.finished:
        kind = "Normal" if decision.phase is JobPhase.SUCCEEDED else "Warning"
        ops.append(Event(kind, decision.reason or decision.phase.value, decision.message or ""))
        status["completionTime"] = format_time(now)

    # Status: the whole of it, written after the operations.
    live_failed = {o.failed_pod for o in obs.replicas.values() if o.failed_pod}
    status.update(
        phase=decision.phase.value,
        reason=decision.reason,
        message=decision.message,
        # A finished job's count is final (its pods may be gone by now).
        restarts=prior.restarts
        if prior.phase.terminal
        else max(decision.restarts, obs.status.restarts),
        replicaStatuses={r: c.as_dict() for r, c in obs.counts.items()},
        handledFailures=sorted(handled & live_failed),
        replicas=len(obs.status.replicas),
        readyReplicas=sum(r.state is ReplicaState.RUNNING for r in obs.status.replicas),
        succeededReplicas=sum(r.state is ReplicaState.SUCCEEDED for r in obs.status.replicas),
    )
    conditions = _merge(
        conditions,
        _condition(conditions, "Created", True, "Created", "objects created", now),
    )
    for kind in (JobPhase.RUNNING, JobPhase.RESTARTING, JobPhase.SUCCEEDED, JobPhase.FAILED):
        on = decision.phase is kind
        if on or any(c.get("type") == kind.value for c in conditions):
            conditions = _merge(
                conditions,
                _condition(
                    conditions,
                    kind.value,
                    on,
                    decision.reason or kind.value,
                    decision.message or "",
                    now,
                ),
            )
    status["conditions"] = conditions
    status = {k: v for k, v in status.items() if v is not None}

    requeue: float | None
    if ps_failed:
        requeue = 0.0  # the status names the new generation: now replace the Jobs
    elif not terminal:
        requeue = LIVE_REQUEUE_SECONDS
    elif policy.ttl_seconds_after_finished is not None and not any(
        isinstance(o, DeleteTFJob) for o in ops
    ):
        finished = obs.status.finished_at if obs.status.finished_at is not None else now
        requeue = max(0.5, finished + policy.ttl_seconds_after_finished - now + 0.2)
    elif any(r.status.state.live for r in obs.replicas.values()) and (
        policy.clean_pod_policy is not CleanPodPolicy.NONE
    ):
        requeue = LIVE_REQUEUE_SECONDS  # still stopping
    else:
        requeue = None
    return Plan(
        ops=tuple(ops), status=status, requeue_after=requeue, decision=decision, observation=obs
    )


def _merge(conditions: list[dict[str, Any]], new: dict[str, Any]) -> list[dict[str, Any]]:
    out = [c for c in conditions if c.get("type") != new["type"]]
    out.append(new)
    return out


def _kubernetes_gave_up(job: TFJob, obs: Observation, decision: Decision) -> Decision:
    """The planner would restart a replica that Kubernetes will not re-run: fail instead."""
    if decision.phase.terminal:
        return decision
    given_up = [
        a.key
        for a in decision.actions
        if isinstance(a, Restart)
        and obs.replicas[a.key].status.state is ReplicaState.FAILED
        and a.key in obs.gave_up
    ]
    reason = message = None
    if given_up:
        seen = obs.replicas[given_up[0]].status
        reason = "BackoffLimitExceeded"
        message = (
            f"{seen.key} failed with exit code {seen.exit_code}; Kubernetes will not "
            "retry it (its per-index backoff limit is exhausted)"
        )
    elif failed_jobs := {
        r: c for r, c in obs.failed_role_jobs.items() if r != Role.PS.value
    }:  # a failed PS Job is the operator's whole-job restart (or the planner's failure)
        role, cond = next(iter(failed_jobs.items()))
        reason = str(cond.get("reason") or "JobFailed")
        message = f"Kubernetes failed Job {job.name}-{role}: {cond.get('message') or reason}"
    if reason is None or message is None:
        return decision
    return fail_now(job, obs, decision, reason, message)


def fail_now(
    job: TFJob, obs: Observation, decision: Decision, reason: str, message: str
) -> Decision:
    """A terminal Failed decision in place of `decision`, stopping what still runs."""
    stops = tuple(
        Stop(r.key, "job failed")
        for r in obs.status.replicas
        if r.state.live or r.state is ReplicaState.BACKOFF
    )
    if job.spec.run_policy.clean_pod_policy is CleanPodPolicy.NONE:
        stops = tuple(s for s in stops if obs.replicas[s.key].status.state is ReplicaState.BACKOFF)
    return Decision(
        phase=JobPhase.FAILED,
        restarts=decision.restarts,
        actions=stops,
        reason=reason,
        message=message,
        finished=True,
        events=(f"job Failed: {message}",),
    )


def _cleanup(job: TFJob, obs: Observation, stop_roles: set[str], finishing: bool) -> list[Op]:
    """End the replicas of a finished job per cleanPodPolicy (see the module docstring)."""
    policy = job.spec.run_policy.clean_pod_policy
    ops: list[Op] = []
    if policy is CleanPodPolicy.ALL:
        roles = set(obs.role_jobs)
    else:
        roles = {r for r in stop_roles if r in obs.role_jobs or obs.live_pods.get(r)}
    for role in sorted(roles):
        keep = policy is not CleanPodPolicy.ALL and any(
            o.status.role == role and o.status.state in (ReplicaState.SUCCEEDED,)
            for o in obs.replicas.values()
        )
        name = f"{job.name}-{role}"
        role_job = obs.role_jobs.get(role)
        if keep and role_job is not None:
            if not (role_job.get("spec") or {}).get("suspend"):
                ops.append(SuspendJob(name, True))
        elif role_job is not None or obs.live_pods.get(role):
            ops.append(DeleteRoleJob(name, f"{LABEL_JOB}={job.name},{LABEL_ROLE}={role}"))
    if finishing and policy is not CleanPodPolicy.NONE:
        tb = f"{job.name}-tensorboard"
        ops.append(DeleteObject("apps/v1", "Deployment", tb))
        ops.append(DeleteObject("v1", "Service", tb))
    return ops
