"""One reconcile of one TFJob, decided purely: observed API objects in, operations out.

    TFJob (spec + status) --+
    its Kubernetes Jobs  ---+--> kube.observe() --> JobStatus --> planner.plan() --> Decision
    its pods  --------------+                                                           |
    rendered objects ------------------------------------------------------------------+--> Plan

`reconcile` runs named phases (observe, ensure, suspend/resume, decide, act, record); each
is a small pure function here, tested on its own in tests/unit/test_operator_reconcile.py.

`Plan.ops` are API operations in the order they must run (create, suspend, delete, event);
`Plan.status` is the TFJob's whole new status, written last, so that an operator killed
half-way simply does the same again next time (every operation is idempotent: objects have
deterministic names, "already exists" and "not found" are successes).

Mapping of the planner's actions to Kubernetes (who retries what: see `tfkube.kube.observe`):
  Start(key)       the role's Indexed Job exists (created with the job, re-created if lost)
  Restart(key)     FAILED replica: Kubernetes already re-creates the pod; the failure is
                   recorded in `status.handledFailures` so it is acted on once.
                   PS (failed, or stalled with stallAction Restart): a whole-job restart,
                   a new generation of the restarted roles' Jobs (`WholeJobRestart`).
                   Other live replica (stalled, stallAction Restart): its pod is deleted;
                   the Job controller re-creates it and it resumes from the checkpoint.
                   The deleted pod leaves no failed pod to count, so the restart is added
                   to `status.restartsBefore`.
  Stop(key)        the job ended: the role's Job is suspended, so Kubernetes deletes its
                   running pods (all at once, finalizers handled) and keeps finished ones;
                   the Job stays, owned by the TFJob. cleanPodPolicy All deletes every Job
                   with its pods.
  DeleteJob        the TFJob is deleted; owner references make the garbage collector
                   delete everything it owns.
A resize (`tfkube scale`: spec.replicas.worker.replicas changed on a running job) is not
the planner's: `resize` compares the spec with the worker Job's `completions` and, when
`tfkube.planner.scale_problems` allows it, updates the size ConfigMap and then the Job
(`ResizeWorkers`). Kubernetes makes the added indexes and deletes the removed ones' pods
(SIGTERM, their grace); the observation only reads the spec's indexes, and the Job
controller counts no failure for an index past `completions`, so a removed worker is
neither a failure nor a restart. `status.workers` says the size the worker Job runs with.
A role Job that Kubernetes failed (per-index backoff exhausted, podFailurePolicy FailJob)
or an index it gave up on fails the TFJob even when the job-wide backoffLimit would allow
another restart: Kubernetes will not re-run it.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tfkube.kube.names import (
    GENERATION_ANNOTATION,
    JOB_UID_KEY,
    LABEL_INDEX_OFFSET,
    LABEL_ROLE,
    SCRATCH_VOLUME,
    STOP_ANNOTATION,
    TENANT_OBJECTS,
    owner_reference,
    replica_selector,
    role_job_name,
    role_job_shard,
    size_configmap_name,
    tensorboard_name,
)
from tfkube.kube.observe import (
    Obj,
    Observation,
    ObserveMemo,
    Prior,
    format_time,
    index_offset,
    is_stranded,
    observe,
)
from tfkube.kube.resources import DEPLOYMENT, JOB, SERVICE, resource_for
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
from tfkube.planner import (
    Decision,
    DeleteJob,
    JobPhase,
    ReplicaState,
    Resize,
    Restart,
    Stop,
    cluster_scale_problems,
    plan,
    scale_problems,
)
from tfkube.render import rendered_storage
from tfkube.spec import CleanPodPolicy, GangScheduler, Role, TFJob

LIVE_REQUEUE_SECONDS = 2.0
"""A live job is looked at again at least this often (deadlines, Kubernetes' backoff);
pod and Job events wake it up sooner."""


@dataclass(frozen=True)
class Plan:
    ops: tuple[Op, ...]
    status: dict[str, Any]
    requeue_after: float | None
    decision: Decision | None = None
    observation: Observation | None = None
    notes: tuple[str, ...] = field(default=())


# -- helpers -----------------------------------------------------------------------------------


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
    owner = owner_reference(tfjob["metadata"]["name"], tfjob["metadata"]["uid"])
    out = []
    for obj in objects:
        item = copy.deepcopy(dict(obj))
        meta = item.setdefault("metadata", {})
        if not resource_for(item["apiVersion"], item["kind"]).namespaced:
            out.append(item)
            continue
        meta.setdefault("namespace", namespace)
        if meta["namespace"] == namespace and meta.get("name") != TENANT_OBJECTS:
            meta["ownerReferences"] = [dict(owner)]
        if JOB.describes(item):
            spec = item.setdefault("spec", {})
            spec["suspend"] = suspend or bool(spec.get("suspend"))  # Kueue's stay suspended
            annotations = meta.setdefault("annotations", {})
            role = (meta.get("labels") or {}).get(LABEL_ROLE, "")
            annotations[GENERATION_ANNOTATION] = str(generations.get(role, 0))
        out.append(item)
    return out


def _role_job_objects(
    objects: Iterable[dict[str, Any]], job_name: str
) -> dict[str, list[dict[str, Any]]]:
    """Role -> its rendered Indexed Jobs (one, or its shards', first index first)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        role = ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_ROLE)
        name = str((obj.get("metadata") or {}).get("name"))
        if (
            obj.get("kind") == "Job"
            and role is not None
            and role_job_shard(job_name, str(role), name) is not None
        ):
            out.setdefault(str(role), []).append(obj)
    return out


def _own_services(objects: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The rendered headless Services by name: one per role Job, named as it (none of
    the kind for a job with one Service for all, `RenderOptions.one_service`)."""
    jobs = {str(o["metadata"]["name"]) for o in objects if o.get("kind") == "Job"}
    return {
        str(o["metadata"]["name"]): o
        for o in objects
        if SERVICE.describes(o) and o["metadata"]["name"] in jobs
    }


def _creating(jobs: Iterable[dict[str, Any]], objects: list[dict[str, Any]]) -> list[Op]:
    """Create role Jobs, each after its own headless Service (its pods' subdomain; creating
    one that exists is harmless), so their names resolve from the pods' first moment."""
    services = _own_services(objects)
    ops: list[Op] = []
    for job in jobs:
        service = services.get(str(job["metadata"]["name"]))
        if service is not None:
            ops.append(Create(service))
        ops.append(Create(job))
    return ops


def _deleting(job_name: str, role: str, role_job: Obj, objects: list[dict[str, Any]]) -> list[Op]:
    """Delete a role Job (`_delete_role_job`) and, when the job has a Service per Job
    (its first role Job's is rendered), the Job's Service."""
    ops: list[Op] = [_delete_role_job(job_name, role, role_job)]
    if role_job_name(job_name, role) in _own_services(objects):
        ops.append(DeleteObject(SERVICE, str(role_job["metadata"]["name"])))
    return ops


def _delete_role_job(job_name: str, role: str, role_job: Obj) -> DeleteRoleJob:
    """Delete one of a role's Jobs with its pods: all the role's pods for its first Job
    (as when a role was one Job), only its own for a later shard's (the Job controller's
    label with the Job's uid; for a Job without a uid, the role's selector and the offset
    label older operators put on pods)."""
    meta = role_job["metadata"]
    selector = replica_selector(job_name, role)
    offset = index_offset(role_job)
    if offset and meta.get("uid"):
        selector = f"{JOB_UID_KEY}={meta['uid']}"
    elif offset:
        selector += f",{LABEL_INDEX_OFFSET}={offset}"
    return DeleteRoleJob(str(meta["name"]), selector)


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
    events: Iterable[Obj] = (),
    memo: ObserveMemo | None = None,
) -> Plan:
    """Decide everything for one TFJob, phase by phase (each a small function below);
    `memo`: what the last reconcile of this TFJob observed (`ObserveMemo`), so observing
    reads again only the pods that changed.

    observe   what the API objects say (`tfkube.kube.observe`; `events`: the namespace's
              `Preempted` Events of pods, which outlive the preempted pods)
    ensure    create what is missing: everything once, a lost role Job, a new
              generation's Jobs once due; delete stale generations' Jobs; fail the
              pods stranded on a lost node (`release_stranded`)
    suspend   a suspended job stops here; a resumed one starts its clock again
    preempt   a pod preempted by the scheduler, or a PS evicted (a drain): the whole job
              starts again, counted as a preemption or a disruption, not a restart
              (`preempted`, `disrupted`), in place of the planner
    decide    the planner, overruled where Kubernetes gave up or a stop was asked
    act       the decision as operations: events, restarts, stops, clean-up, TTL
    record    the whole new status, and when to look again
    """
    jobs, pods, rendered = list(jobs), list(pods), list(rendered)
    status: dict[str, Any] = dict(tfjob.get("status") or {})
    status["observedGeneration"] = tfjob["metadata"].get("generation")
    # What the replicas mount as data and logs, said once and kept in the status, so that
    # `tfkube status` too can tell a whole-job restart that starts from scratch.
    status["storage"] = rendered_storage(rendered)
    prior = Prior.from_status(status)
    policy = job.spec.run_policy
    objects = owned(rendered, tfjob, suspend=policy.suspend, generations=prior.generations)
    events = list(events)
    obs = observe(job, prior, jobs, pods, now, events, memo)
    first = prior.started_at is None and not prior.phase.terminal

    ops = ensure(job, prior, obs, objects, first, now)
    ops += release_stranded(pods, now)
    if not prior.phase.terminal:
        resizing = resize(job, prior.phase, status, obs, objects)
        ops += resizing.ops
        status = resizing.status
    if first:
        status["startTime"] = format_time(now)
    if not prior.phase.terminal and policy.suspend:
        return suspended(obs, status, ops, first, now)
    if not prior.phase.terminal and _is_suspended(status):
        ops += resume(job, obs)
        status = resumed_status(status, now)
        obs = observe(job, Prior.from_status(status), jobs, pods, now, events, memo)

    interruption = None
    if not prior.phase.terminal:
        interruption = preempted(job, obs, prior, now) or disrupted(job, obs, prior, now)
    restart: WholeJobRestart | None
    if interruption is not None:
        decision, restart = interruption.decision, interruption.restart
        ops.append(interruption.event)
        status = {**status, **interruption.status()}
    else:
        decision = decide(tfjob, job, obs, now)
        restart = whole_job_restart(decision, obs, prior)
    ops += announce(decision, prior)
    acted = act(job, obs, decision, prior.handled, whole_job=restart is not None)
    ops += acted.ops
    ops += finish(job, obs, decision, acted.stop_roles, objects)

    deleting = any(isinstance(op, DeleteTFJob) for op in ops)
    return Plan(
        ops=tuple(ops),
        status=record(status, prior, obs, decision, acted, restart, now),
        requeue_after=requeue_after(job, obs, decision, restart, deleting, now),
        decision=decision,
        observation=obs,
    )


# -- the phases -----------------------------------------------------------------------------------


def ensure(
    job: TFJob,
    prior: Prior,
    obs: Observation,
    objects: list[dict[str, Any]],
    first: bool,
    now: float,
) -> list[Op]:
    """What must exist: every object on the first look (creating again is harmless);
    later, a role Job that went missing, or a new generation's once the whole-job restart
    backoff passed and the old one is gone. Stale generations' Jobs are deleted."""
    ops: list[Op] = []
    if first:
        ops += [Create(o) for o in objects]
        ops.append(Event("Normal", "Created", f"created {len(objects)} objects"))
        ops.append(Event("Normal", "Storage", storage_message(prior.storage)))
    elif not prior.phase.terminal and (prior.restart_at is None or now >= prior.restart_at):
        busy = obs.role_jobs.keys() | obs.dying_jobs | obs.stale_jobs
        for role, rendered in _role_job_objects(objects, job.name).items():
            if role not in busy:
                ops += _creating(rendered, objects)
    for role, j in obs.stale_shards:
        ops += _deleting(job.name, role, j, objects)
    return ops


@dataclass(frozen=True)
class Resizing:
    ops: tuple[Op, ...]
    status: dict[str, Any]


def resize(
    job: TFJob,
    phase: JobPhase,
    status: dict[str, Any],
    obs: Observation,
    objects: list[dict[str, Any]] | None = None,
) -> Resizing:
    """`tfkube scale` (or an edit of spec.replicas.worker.replicas): the worker Jobs run
    the spec's count, when the planner's rules allow (`scale_problems`: a PS, no chief,
    1..MAX_WORKERS; no gang: `cluster_scale_problems`); the Event saying so, once.
    Refused: a Warning Event, once per count (`status.refusedWorkers`), and the Jobs keep
    their sizes. `status.workers` is the size the worker Jobs run with. A role split into
    shards (`objects`, the rendered ones, say which) grows its last Job and adds Jobs, and
    shrinks from the end: its later Jobs deleted, the last kept one shrunk; the first Job
    (worker 0's) always stays."""
    worker_jobs = obs.role_jobs.get(Role.WORKER.value)
    if not worker_jobs:
        return Resizing((), status)
    want = job.spec.replicas.count(Role.WORKER)
    have = sum(int((j.get("spec") or {}).get("completions") or 0) for j in worker_jobs) or want
    new = {k: v for k, v in status.items() if k not in ("workers", "refusedWorkers")}
    if have == want:
        return Resizing((), {**new, "workers": have})
    problems = scale_problems(job, phase, want) + cluster_scale_problems(job)
    if problems:
        new.update(workers=have, refusedWorkers=want)
        if status.get("refusedWorkers") == want:
            return Resizing((), new)
        why = "; ".join(f"{p.field}: {p.message}" for p in problems)
        text = f"not scaled from {have} to {want} workers: {why}"
        return Resizing((Event("Warning", "ScaleRefused", text),), new)
    configmap = size_configmap_name(job.name)
    rendered = _role_job_objects(objects or [], job.name).get(Role.WORKER.value, [])
    if not rendered:  # as rendered before shards: the one worker Job runs them all
        rendered = [{"metadata": {"name": worker_jobs[0]["metadata"]["name"]}}]
    running = {str(j["metadata"]["name"]): j for j in worker_jobs}
    resized: list[Op] = []
    created: list[Op] = []
    for k, shard in enumerate(rendered):  # the size ConfigMap first: with the first Job
        name = str(shard["metadata"]["name"])
        count = want if len(rendered) == 1 else int(shard["spec"]["completions"])
        if name not in running:
            created += _creating([shard], objects or [])
        elif k == 0 or int((running[name].get("spec") or {}).get("completions") or 0) != count:
            resized.append(ResizeWorkers(name, configmap, want, None if count == want else count))
    kept = {str(shard["metadata"]["name"]) for shard in rendered}
    deleted: list[Op] = [
        op
        for j in reversed(worker_jobs)
        if str(j["metadata"]["name"]) not in kept
        for op in _deleting(job.name, Role.WORKER.value, j, objects or [])
    ]
    ops = (*resized, *created, *deleted, Event("Normal", "Scaled", Resize(have, want).text()))
    return Resizing(ops, {**new, "workers": want})


def storage_message(storage: Mapping[str, str]) -> str:
    """Where the job keeps its logs and checkpoints, and what that means (the `Storage`
    event said when the job is created)."""
    logs = storage.get("logs", SCRATCH_VOLUME)
    if logs == SCRATCH_VOLUME:
        text = (
            "logs and checkpoints: each pod's own folder (emptyDir; no claim asked for): "
            "a replica's log is read from its pod while the pod exists, and a whole-job "
            "restart (a PS lost) starts training from scratch; give spec.storage.logs a "
            "claim to keep them"
        )
    else:
        text = f"logs and checkpoints: {logs}, shared by every replica"
    data = storage.get("data")
    if data == SCRATCH_VOLUME:
        text += "; data: each pod's own folder"
    elif data is not None:
        text += f"; data: {data}"
    return text


def release_stranded(pods: Iterable[Obj], now: float) -> list[Op]:
    """Pods evicted from a lost node that no kubelet will end (`is_stranded`): marked Failed
    so that their Jobs replace them (a disruption: not counted against backoffLimit)."""
    return [FailPod(p["metadata"]["name"]) for p in pods if is_stranded(p, now)]


def _is_suspended(status: Obj) -> bool:
    conditions: list[Obj] = status.get("conditions") or []
    return any(c.get("type") == "Suspended" and c.get("status") == "True" for c in conditions)


def suspended(
    obs: Observation, status: dict[str, Any], ops: list[Op], first: bool, now: float
) -> Plan:
    """`runPolicy.suspend`: every role Job suspended (Kubernetes deletes their running
    pods), said once; nothing else is decided until it is resumed."""
    ops = ops + [
        SuspendJob(j["metadata"]["name"], True)
        for js in obs.role_jobs.values()
        for j in js
        if not (j.get("spec") or {}).get("suspend")
    ]
    if not _is_suspended(status):
        ops.append(Event("Normal", "Suspended", "suspended: every replica is stopped"))
    conditions = list(status.get("conditions") or [])
    status = {
        **status,
        "phase": JobPhase.PENDING.value if first else status.get("phase", "Pending"),
        "reason": "Suspended",
        "message": "spec.runPolicy.suspend is true",
        "replicaStatuses": {r: c.as_dict() for r, c in obs.counts.items()},
        "conditions": _merge(
            conditions, _condition(conditions, "Suspended", True, "Suspended", "suspended", now)
        ),
    }
    return Plan(ops=tuple(ops), status=status, requeue_after=None, observation=obs)


def resume(job: TFJob, obs: Observation) -> list[Op]:
    """Un-suspend the role Jobs (not under Kueue, which admits them itself)."""
    scheduling = job.spec.scheduling
    kueue = scheduling is not None and scheduling.gang is GangScheduler.KUEUE
    ops: list[Op] = [
        SuspendJob(j["metadata"]["name"], False)
        for js in obs.role_jobs.values()
        for j in js
        if (j.get("spec") or {}).get("suspend") and not kueue
    ]
    ops.append(Event("Normal", "Resumed", "resumed: replicas start again"))
    return ops


def resumed_status(status: dict[str, Any], now: float) -> dict[str, Any]:
    """The deadline counts from the resume; the Suspended condition turns False."""
    conditions = list(status.get("conditions") or [])
    return {
        **status,
        "startTime": format_time(now),
        "reason": None,
        "message": None,
        "conditions": _merge(
            conditions, _condition(conditions, "Suspended", False, "Resumed", "resumed", now)
        ),
    }


def decide(tfjob: Obj, job: TFJob, obs: Observation, now: float) -> Decision:
    """The shared planner's decision, made terminal where Kubernetes will not retry what
    the planner would, or when `tfkube stop` asked for it."""
    decision = _kubernetes_gave_up(job, obs, plan(job, obs.status, now))
    annotations = tfjob["metadata"].get("annotations") or {}
    if annotations.get(STOP_ANNOTATION) == "true" and not decision.phase.terminal:
        decision = fail_now(job, obs, decision, "Stopped", "stopped on request (tfkube stop)")
    return decision


@dataclass(frozen=True)
class WholeJobRestart:
    """A PS failed: a new generation of the restarted roles' Jobs, created after the
    backoff once the old ones are gone. Written to the status before the Jobs are deleted,
    so their failures are counted exactly once."""

    generations: dict[str, int]
    restarts_before: int
    at: float

    def status(self) -> dict[str, Any]:
        return {
            "restartGenerations": self.generations,
            "restartsBefore": self.restarts_before,
            "restartAt": format_time(self.at),
        }


def whole_job_restart(decision: Decision, obs: Observation, prior: Prior) -> WholeJobRestart | None:
    """The decision restarts a PS (failed, or stalled with stallAction Restart: the same
    for the replicas that use it): which roles start a new generation, and the failures
    to keep counting once their pods are gone."""
    restarts = [a for a in decision.actions if isinstance(a, Restart)]
    if not any(
        obs.replicas[a.key].status.role == Role.PS.value
        and obs.replicas[a.key].status.state in (ReplicaState.FAILED, ReplicaState.RUNNING)
        for a in restarts
    ):
        return None
    roles = {obs.replicas[a.key].status.role for a in restarts}
    kept = sum(r.restarts for r in obs.status.replicas if r.role not in roles)
    generations = dict(prior.generations)
    for role in roles:
        generations[role] = generations.get(role, 0) + 1
    return WholeJobRestart(generations, decision.restarts - kept, min(a.at for a in restarts))


@dataclass(frozen=True)
class Interrupted:
    """The job's pods were taken away for a reason not of the job's making (the scheduler
    preempted some for pods of higher priority, `preempted`; a PS was evicted by a drain,
    `disrupted`): the whole job starts again (a new generation of every role's Job, with no
    backoff), its new pods wait for room and it resumes from its checkpoint; the
    interruption is counted apart (`counted`, into the status), no restart, so it never
    uses up backoffLimit."""

    decision: Decision
    restart: WholeJobRestart
    event: Event
    counted: Mapping[str, Any]

    def status(self) -> dict[str, Any]:
        return dict(self.counted)


def _resumes(prior: Prior) -> str:
    return (
        "resumes from its checkpoint"
        if prior.checkpoints_kept
        else "starts from scratch (no logs claim keeps its checkpoints)"
    )


def _interrupted(
    job: TFJob, obs: Observation, prior: Prior, now: float, reason: str, message: str,
    counted: Mapping[str, Any],
) -> Interrupted:  # fmt: skip
    generations = dict(prior.generations)
    for role in Role:
        if job.spec.replicas.count(role):
            generations[role.value] = generations.get(role.value, 0) + 1
    restarts = obs.status.restarts
    decision = Decision(
        phase=JobPhase.RESTARTING, restarts=restarts, reason=reason, message=message
    )
    return Interrupted(
        decision=decision,
        restart=WholeJobRestart(generations, restarts, now),
        event=Event("Normal", reason, message),
        counted=counted,
    )


def preempted(job: TFJob, obs: Observation, prior: Prior, now: float) -> Interrupted | None:
    """What a preemption does (`Observation.preempted`), or None when there is none. Why the
    whole job and not only the preempted pod: a PS's loss restarts the whole job anyway,
    a job short of a replica holds the rest of its room without making progress
    (synchronous training waits for every worker; between-graph training for its chief),
    and giving all of it back at once lets the higher-priority job in with one preemption
    rather than several."""
    if not obs.preempted:
        return None
    count = prior.preemptions + 1
    names = ", ".join(p.replica for p in obs.preempted)
    first = obs.preempted[0]
    detail = f" ({first.detail})" if first.detail else ""
    message = (
        f"{names} preempted by the scheduler for a pod of higher priority{detail}: the whole "
        f"job waits for room and {_resumes(prior)}; not a restart (preemption {count})"
    )
    # Rounded up: the Events of this preemption's other victims must not count again.
    counted = {"preemptions": count, "preemptedAt": format_time(math.ceil(now))}
    return _interrupted(job, obs, prior, now, "Preempted", message, counted)


def disrupted(job: TFJob, obs: Observation, prior: Prior, now: float) -> Interrupted | None:
    """What a PS's planned disruption does (`Observation.disrupted`: its pod evicted, e.g.
    its node drained), or None when there is none: the whole job restarts, as for any PS
    loss, but at once and counted as a disruption (`status.disruptions`), not a restart: a
    routine drain must not use up backoffLimit (nor fail a job whose limit is 0). A lost
    node's PS stays a failure (`kube.observe`: FAILURE_DISRUPTIONS)."""
    if not obs.disrupted:
        return None
    count = prior.disruptions + 1
    said = "; ".join(d.text() for d in obs.disrupted)
    message = (
        f"restarted after its PS was evicted: {said}; the whole job {_resumes(prior)}; "
        f"a disruption, not counted against backoffLimit (disruption {count})"
    )
    return _interrupted(job, obs, prior, now, "Disrupted", message, {"disruptions": count})


def announce(decision: Decision, prior: Prior) -> list[Op]:
    """The planner's event lines and a phase change as Events (a finished job's own line
    is said once, with its reason, by `finish`)."""
    ops: list[Op] = [
        Event("Warning" if "failed" in line else "Normal", _event_reason(line), line)
        for line in decision.events
        if not (decision.finished and line.startswith("job "))
    ]
    if decision.phase is not prior.phase and not decision.finished:
        ops.append(Event("Normal", decision.phase.value, f"job is {decision.phase.value}"))
    return ops


@dataclass(frozen=True)
class Acted:
    ops: tuple[Op, ...]
    handled: frozenset[str]
    """Failed pods whose failure has been acted on (`status.handledFailures`)."""
    stop_roles: frozenset[str]
    """Roles with a replica to stop (the job ended)."""
    live_restarts: int = 0
    """Live replicas restarted by deleting their pod (no failed pod will count them)."""


def act(
    job: TFJob,
    obs: Observation,
    decision: Decision,
    handled: frozenset[str],
    whole_job: bool,
) -> Acted:
    """The planner's actions in Kubernetes terms (see the module docstring's mapping)."""
    ops: list[Op] = []
    now_handled = set(handled)
    stop_roles: set[str] = set()
    live_restarts = 0
    grace = int(job.spec.run_policy.termination_grace_seconds)
    for action in decision.actions:
        if isinstance(action, Restart):
            seen = obs.replicas[action.key]
            if whole_job:
                continue  # its role's Job is replaced (`ensure`, next look)
            if seen.status.state is ReplicaState.FAILED and seen.failed_pod:
                now_handled.add(seen.failed_pod)  # Kubernetes re-creates its pod
            elif seen.status.state.live and seen.pod:
                ops.append(DeletePod(seen.pod, grace))
                live_restarts += 1
        elif isinstance(action, Stop):
            seen = obs.replicas[action.key]
            if seen.status.state.live or seen.status.state is ReplicaState.BACKOFF:
                stop_roles.add(seen.status.role)
        elif isinstance(action, DeleteJob):
            ops.append(Event("Normal", "Deleted", "ttlSecondsAfterFinished passed: deleting"))
            ops.append(DeleteTFJob())
    return Acted(tuple(ops), frozenset(now_handled), frozenset(stop_roles), live_restarts)


def finish(
    job: TFJob,
    obs: Observation,
    decision: Decision,
    stop_roles: frozenset[str],
    objects: list[dict[str, Any]],
) -> list[Op]:
    """A job that ended: its replicas ended per cleanPodPolicy, and (once) the Event
    saying how it ended."""
    ops: list[Op] = []
    if decision.phase.terminal:
        tensorboard = any(o["metadata"].get("name") == tensorboard_name(job.name) for o in objects)
        ops += _cleanup(job, obs, stop_roles, finishing=decision.finished and tensorboard)
    if decision.finished:
        kind = "Normal" if decision.phase is JobPhase.SUCCEEDED else "Warning"
        ops.append(Event(kind, decision.reason or decision.phase.value, decision.message or ""))
    return ops


def record(
    status: dict[str, Any],
    prior: Prior,
    obs: Observation,
    decision: Decision,
    acted: Acted,
    restart: WholeJobRestart | None,
    now: float,
) -> dict[str, Any]:
    """The TFJob's whole new status, written after the operations."""
    handled = acted.handled
    before = prior.restarts_before + acted.live_restarts
    live_failed = {o.failed_pod for o in obs.replicas.values() if o.failed_pod}
    replicas = obs.status.replicas
    status = {
        **status,
        **(restart.status() if restart is not None else {}),
        "phase": decision.phase.value,
        "reason": decision.reason,
        "message": decision.message,
        # A finished job's count is final (its pods may be gone by now).
        "restarts": prior.restarts
        if prior.phase.terminal
        else max(decision.restarts, obs.status.restarts),
        "replicaStatuses": {r: c.as_dict() for r, c in obs.counts.items()},
        "handledFailures": sorted(handled & live_failed),
        "restartsBefore": restart.restarts_before if restart is not None else before or None,
        "stalledReplicas": sorted(decision.stalled) or None,
        "replicas": len(replicas),
        "readyReplicas": sum(r.state is ReplicaState.RUNNING for r in replicas),
        "succeededReplicas": sum(r.state is ReplicaState.SUCCEEDED for r in replicas),
    }
    if decision.finished:
        status["completionTime"] = format_time(now)
    conditions = list(status.get("conditions") or [])
    conditions = _merge(
        conditions, _condition(conditions, "Created", True, "Created", "objects created", now)
    )
    for kind in (JobPhase.RUNNING, JobPhase.RESTARTING, JobPhase.SUCCEEDED, JobPhase.FAILED):
        on = decision.phase is kind
        if on or any(c.get("type") == kind.value for c in conditions):
            reason, message = decision.reason or kind.value, decision.message or ""
            conditions = _merge(
                conditions, _condition(conditions, kind.value, on, reason, message, now)
            )
    status["conditions"] = conditions
    return {k: v for k, v in status.items() if v is not None}


def requeue_after(
    job: TFJob,
    obs: Observation,
    decision: Decision,
    restart: WholeJobRestart | None,
    deleting: bool,
    now: float,
) -> float | None:
    """When to look again without an event: at once after a whole-job restart was
    recorded, every few seconds while the job lives or its replicas are still being
    stopped, when the TTL is due; never for a finished job with nothing left to do."""
    policy = job.spec.run_policy
    if restart is not None:
        return 0.0  # the status names the new generation: now replace the Jobs
    if not decision.phase.terminal:
        return LIVE_REQUEUE_SECONDS
    if policy.ttl_seconds_after_finished is not None and not deleting:
        finished = obs.status.finished_at if obs.status.finished_at is not None else now
        return max(0.5, finished + policy.ttl_seconds_after_finished - now + 0.2)
    if any(r.status.state.live for r in obs.replicas.values()) and (
        policy.clean_pod_policy is not CleanPodPolicy.NONE
    ):
        return LIVE_REQUEUE_SECONDS  # still stopping
    return None


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


def _cleanup(job: TFJob, obs: Observation, stop_roles: frozenset[str], finishing: bool) -> list[Op]:
    """End the replicas of a finished job per cleanPodPolicy (see the module docstring)."""
    policy = job.spec.run_policy.clean_pod_policy
    ops: list[Op] = []
    if policy is CleanPodPolicy.ALL:
        roles = set(obs.role_jobs)
    else:
        roles = {r for r in stop_roles if r in obs.role_jobs or obs.live_pods.get(r)}
    for role in sorted(roles):
        role_jobs = obs.role_jobs.get(role, ())
        if policy is not CleanPodPolicy.ALL and role_jobs:
            ops += [
                SuspendJob(j["metadata"]["name"], True)
                for j in role_jobs
                if not (j.get("spec") or {}).get("suspend")
            ]
        elif role_jobs:
            ops += [_delete_role_job(job.name, role, j) for j in role_jobs]
        elif obs.live_pods.get(role):
            ops.append(
                DeleteRoleJob(role_job_name(job.name, role), replica_selector(job.name, role))
            )
    if finishing and policy is not CleanPodPolicy.NONE:
        tb = tensorboard_name(job.name)
        ops.append(DeleteObject(DEPLOYMENT, tb))
        ops.append(DeleteObject(SERVICE, tb))
    return ops
