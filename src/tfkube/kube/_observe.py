"""The pod interpreter's rules (its face is `tfkube.kube.observe`, which says what the rest of
tfkube uses). Pure: plain dicts (as the API returns them) in, `Observation` out.

    TFJob status (Prior) --+
    its role Jobs ---------+--> observe() --> Observation: JobStatus for the planner,
    its replica pods ------+                  per replica its pod, failed pod and message,
                                              what the operator needs to act

Who retries what (the contract with `tfkube.render`, `managed=True`): Kubernetes retries a
failed chief/worker/evaluator inside its role's Indexed Job (with its own backoff; the Job
fails by `podFailurePolicy`/`backoffLimit`); a PS Job fails on its PS's first failure and
the operator restarts the whole job by deleting and re-creating the role Jobs. Each such
restart is a new *generation* of the restarted roles' Jobs: `status.restartGenerations`
{role: N}, Jobs annotated with theirs;
a Job of another generation is stale (being replaced) and failures counted in earlier
generations are kept in `status.restartsBefore` (their pods are gone). Pods are matched to
the current Job by its UID, so a stale Job's pods never count. For each replica index
(`read_replica`):

- the index's pods (label `batch.kubernetes.io/job-completion-index`), newest first.
  A pod with a `deletionTimestamp` is being stopped (by tfkube, the Job controller or a
  user): it says nothing about the replica's own health and is ignored, except that a
  replica with only such pods is "being restarted" (BACKOFF) or, once the job ended,
  STOPPED — unless Kubernetes failed the role's Job meanwhile (a deleted PS pod fails the
  managed PS Job at once, then disappears): then the replica is FAILED. A pod evicted from
  a lost node that no kubelet ends is failed by the operator (`is_stranded`).
- Succeeded: any pod of the index succeeded, or the Job lists the index as completed.
- FAILED: the newest pod failed on its own and tfkube has not yet acted on that failure
  (its name is not in `status.handledFailures`); once acted on it reads as BACKOFF until
  Kubernetes has made the replacement pod.
- restarts: the index's pods that failed on their own (failed pods stay until their Job is
  deleted, so this count survives an operator restart), minus the current failure.
- progress (only with runPolicy.stallSeconds; `last_progress`): the launcher keeps a
  heartbeat file fresh while its program shows progress and the pod's readiness probe
  fails once it is stallSeconds old (`tfkube.render.stall_probe`). A running replica whose
  container is not ready, with the pod's Ready condition turned False after the container
  started, last made progress about stallSeconds before that turn; any other running
  replica (ready, or not ready yet since it started) makes progress now. Whether that is
  a stall is the planner's rule (`stalled_replicas`), applied here too, so the operator
  and `tfkube status` agree; the replicas the previous reconcile found stalled are in
  `status.stalledReplicas` (events mark only changes).
- message: why, in one line, from the pod (`pending_message`, `failure_message`: the
  scheduler's verdict, an unbound claim, an image pull error, a waiting container's reason,
  a scheduler that gives no verdict, the exit code and termination message; for every
  unplaced replica of a gang, the gang's verdict: `gang_message`); without a
  pod, from the role's Job (`waiting_message`: suspended for Kueue, or its pods refused at
  creation by a quota, per the Job controller's FailedCreate Event) or from where the
  whole-job restart stands.

Everything comes from the API: the operator can be killed at any moment and the next
observation is the same.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, NamedTuple

from tfkube import contract
from tfkube.kube.names import (
    GENERATION_ANNOTATION,
    INDEX_KEY,
    LABEL_INDEX_OFFSET,
    LABEL_ROLE,
    REPLICA_CONTAINER,
    SCRATCH_VOLUME,
    role_job_name,
    role_job_shard,
)
from tfkube.planner import JobPhase, JobStatus, ReplicaState, ReplicaStatus, stalled_replicas
from tfkube.spec import GangScheduler, Role, TFJob, parse_job
from tfkube.tfcluster import replica_key

Obj = Mapping[str, Any]

IMAGE_PULL_REASONS = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
)
"""A waiting container's reasons that mean its image cannot be had (kubelet's words)."""
DEFAULT_SCHEDULER = "default-scheduler"
GANG_SCHEDULERS = frozenset({GangScheduler.SCHEDULER_PLUGINS, GangScheduler.VOLCANO})
"""Gangs whose pods a gang scheduler places all together or none (`gang_message`)."""
MESSAGE_CHARS = 300
"""A replica's message is one line for a table: longer API messages are cut."""


def parse_time(value: str | None) -> float | None:
    """RFC 3339 (as the API writes it) -> epoch seconds."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def format_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_indexes(text: str | None) -> set[int]:
    """A Job's `completedIndexes`/`failedIndexes`: "1,3-5,7" -> {1, 3, 4, 5, 7}."""
    out: set[int] = set()
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.update(range(int(lo), int(hi) + 1))
        else:
            out.add(int(part))
    return out


def tfjob_model(obj: Obj) -> TFJob:
    """The TFJob resource -> our model (metadata reduced to what the model knows).
    Raises `SpecError` naming the field when the spec does not validate."""
    meta = obj.get("metadata") or {}
    data = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "labels": meta.get("labels") or {},
        },
        "spec": obj.get("spec"),
    }
    return parse_job(data, f"TFJob {meta.get('namespace')}/{meta.get('name')}")


# -- reading one pod -------------------------------------------------------------------------


def index_offset(obj: Obj) -> int:
    """The replica index of index 0 of a role's Job (a later shard's, `role_job_name`), from
    its label, or its pods' annotation (older operators' pods: a label); 0 without (a
    role's first or only Job)."""
    meta = obj.get("metadata") or {}
    value = (meta.get("labels") or {}).get(LABEL_INDEX_OFFSET)
    if value is None:
        value = (meta.get("annotations") or {}).get(LABEL_INDEX_OFFSET)
    try:
        return max(int(value or 0), 0)
    except ValueError:
        return 0


def pod_index(pod: Obj) -> int | None:
    """A replica pod's replica index: its completion index in its Job, plus the Job's
    offset when the role is split into several Jobs."""
    meta = pod.get("metadata") or {}
    for source in (meta.get("labels") or {}, meta.get("annotations") or {}):
        value = source.get(INDEX_KEY)
        if value is not None:
            try:
                return int(value) + index_offset(pod)
            except ValueError:
                return None
    return None


def pod_role(pod: Obj) -> str | None:
    role = ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_ROLE)
    return str(role) if role is not None else None


def is_dying(obj: Obj) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


STRANDED_AFTER_SECONDS = 10.0
"""Past a deleted pod's deadline (its `deletionTimestamp`: the deletion time plus its grace),
a live kubelet has ended it: one still there this long after has no kubelet."""
NODE_LOSS_EVICTION = "DeletionByTaintManager"
"""The DisruptionTarget reason of a pod evicted because its node is NotReady/unreachable."""


def is_stranded(pod: Obj, now: float) -> bool:
    """Evicted for its node's loss (runPolicy.nodeLostSeconds after the node-lost taint) and
    still not ended STRANDED_AFTER_SECONDS past its grace: its kubelet is gone and would
    leave it Terminating until the machine returns. Its Job, which replaces only failed
    pods (it has a podFailurePolicy), would wait as long: the operator marks it Failed, as
    Kubernetes' pod GC does for a deleted node's pods, and the Job makes it again."""
    deadline = parse_time((pod.get("metadata") or {}).get("deletionTimestamp"))
    if deadline is None or pod_phase(pod) in ("Succeeded", "Failed"):
        return False
    evicted = any(
        c.get("type") == "DisruptionTarget"
        and c.get("status") == "True"
        and c.get("reason") == NODE_LOSS_EVICTION
        for c in (pod.get("status") or {}).get("conditions") or []
    )
    return evicted and now >= deadline + STRANDED_AFTER_SECONDS


PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"
"""The DisruptionTarget reason the scheduler gives a pod it preempts for a pod of higher
priority (Kubernetes 1.26+), before it deletes it."""
PREEMPTED_EVENT = "Preempted"
"""The scheduler's Event on each pod it preempts ("Preempted by pod <uid> on node <n>"):
it outlives the pod, which the Job controller lets go within moments of its end."""
PREEMPTION_SETTLE_SECONDS = 5.0
"""After a preemption was counted, `Preempted` Events this much younger still belong to it
(the scheduler may preempt several of the job's pods, one preemptor at a time)."""
_POD_SUFFIX = re.compile(r"(\d+)-[a-z0-9]{5}")


def preempted_by_scheduler(pod: Obj) -> bool:
    """Whether the scheduler preempted the pod (DisruptionTarget, PreemptionByScheduler)."""
    return any(
        c.get("type") == "DisruptionTarget"
        and c.get("status") == "True"
        and c.get("reason") == PREEMPTION_BY_SCHEDULER
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def replica_of_pod(
    job: TFJob, pod_name: str, offsets: Mapping[str, int] | None = None
) -> str | None:
    """The replica key of one of the job's pods from its name alone (`<Job>-<index>-<5
    chars>`, as an Indexed Job names them): what an Event names of a pod that is gone.
    `offsets`: the first replica index of each of the job's role Jobs by name (a role in
    several Jobs, `role_job_name`); a role's first Job is always known (offset 0)."""
    known = dict(offsets or {})
    for role in Role:
        known.setdefault(role_job_name(job.name, role.value), 0)
    for name, offset in known.items():
        rest = pod_name.removeprefix(f"{name}-")
        found = _POD_SUFFIX.fullmatch(rest) if rest != pod_name else None
        if found is None:
            continue
        role = next(r for r in Role if role_job_shard(job.name, r.value, name) is not None)
        index = int(found.group(1)) + offset
        if index < job.spec.replicas.count(role):
            return replica_key(role.value, index)
    return None


@dataclass(frozen=True)
class Preemption:
    """One of the job's pods preempted by the scheduler for a pod of higher priority."""

    replica: str
    pod: str
    detail: str
    """The scheduler's words ("Preempted by pod <uid> on node <node>"), or the condition's."""


def preemptions(
    job: TFJob,
    prior: Prior,
    current: Iterable[Obj],
    events: Iterable[Obj],
    offsets: Mapping[str, int] | None = None,
) -> tuple[Preemption, ...]:
    """The job's pods preempted since the last counted preemption: `current` pods (of the
    current generation's Jobs, dying ones too) that carry the scheduler's DisruptionTarget,
    and `Preempted` Events naming one of the job's pods, younger than the job's start and
    than the last counted preemption (plus PREEMPTION_SETTLE_SECONDS): the pod itself may be
    gone before anyone looks. One entry per replica, sorted."""
    found: dict[str, Preemption] = {}
    for pod in current:
        if preempted_by_scheduler(pod):
            key = replica_key(str(pod_role(pod)), pod_index(pod) or 0)
            cond = next(
                c
                for c in (pod.get("status") or {}).get("conditions") or []
                if c.get("type") == "DisruptionTarget"
            )
            found.setdefault(key, Preemption(key, _name(pod), _one_line(cond.get("message"))))
    since = max(
        prior.started_at or 0.0,
        (prior.preempted_at + PREEMPTION_SETTLE_SECONDS) if prior.preempted_at else 0.0,
    )
    for event in events:
        involved = event.get("involvedObject") or {}
        if event.get("reason") != PREEMPTED_EVENT or involved.get("kind") != "Pod":
            continue
        victim = replica_of_pod(job, str(involved.get("name") or ""), offsets)
        if victim is None or _event_time(event) <= since:
            continue
        detail = _one_line(event.get("message"))
        found.setdefault(victim, Preemption(victim, str(involved.get("name")), detail))
    return tuple(found[k] for k in sorted(found))


EVICTION_BY_API = "EvictionByEvictionAPI"
"""The DisruptionTarget reason of a pod evicted through the Eviction API (`kubectl drain`,
a cluster autoscaler's scale-down, a node upgrade)."""
FAILURE_DISRUPTIONS = frozenset({NODE_LOSS_EVICTION, "TerminationByKubelet", "DeletionByPodGC"})
"""DisruptionTarget reasons that stay failures, counted against backoffLimit: the node was
lost (the taint manager evicted its pods), the kubelet ended the pod itself (node pressure,
its node shut down), the pod GC removed a pod whose node is gone."""
_DISRUPTION_RULE = re.compile(
    r"^Pod (?P<namespace>[^/\s]+)/(?P<pod>\S+) has condition DisruptionTarget matching FailJob"
)
"""The Job controller's message for a pod that failed by the managed PS Job's first
podFailurePolicy rule (`tfkube.render`: FailJob on DisruptionTarget; Kubernetes'
pkg/controller/job/pod_failure_policy.go says "Pod <ns>/<name> has condition <type>
matching <action> rule at index <i>")."""


def disruption_reason(pod: Obj) -> str | None:
    """The reason of the pod's DisruptionTarget condition (status True), or None."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "DisruptionTarget" and c.get("status") == "True":
            return str(c.get("reason") or "") or None
    return None


@dataclass(frozen=True)
class Disruption:
    """A PS whose pod was ended by a planned disruption (`disruptions`): its Job failed by
    the DisruptionTarget rule."""

    replica: str
    pod: str
    reason: str | None
    """The condition's reason (`EvictionByEvictionAPI`), or None when the pod was gone
    before anyone read it."""

    def text(self) -> str:
        if self.reason == EVICTION_BY_API:
            return f"{self.replica} was evicted (its node drained, or the Eviction API)"
        if self.reason:
            return f"{self.replica}'s pod was disrupted ({self.reason})"
        return f"{self.replica}'s pod was evicted (its node drained, or the Eviction API)"


def disruptions(
    job: TFJob,
    failed_role_jobs: Mapping[str, Obj],
    current: Iterable[Obj],
    offsets: Mapping[str, int] | None = None,
) -> tuple[Disruption, ...]:
    """The replicas whose role Job Kubernetes failed for a planned disruption of their pod:
    the Job's Failed condition names the pod and the DisruptionTarget rule (only the
    managed PS Job has one that fails it: the other roles ignore disruptions), and the
    pod, when still there (`current`: the current Jobs' pods), does not say a reason that
    stays a failure (`FAILURE_DISRUPTIONS`: a lost node's pod stays, Terminating, until the
    operator fails it, so it is always there to say so). The scheduler's preemptions carry
    the same condition: `preemptions` counts those first. Sorted by replica."""
    if not any(c.get("reason") == "PodFailurePolicy" for c in failed_role_jobs.values()):
        return ()  # the common case: no pod to look up
    pods = {_name(p): p for p in current}
    found: dict[str, Disruption] = {}
    for condition in failed_role_jobs.values():
        if condition.get("reason") != "PodFailurePolicy":
            continue
        matched = _DISRUPTION_RULE.match(str(condition.get("message") or ""))
        if matched is None:
            continue
        name = matched.group("pod")
        replica = replica_of_pod(job, name, offsets)
        if replica is None:
            continue
        reason = disruption_reason(pods[name]) if name in pods else None
        if reason in FAILURE_DISRUPTIONS or reason == PREEMPTION_BY_SCHEDULER:
            continue
        found.setdefault(replica, Disruption(replica, name, reason))
    return tuple(found[k] for k in sorted(found))


def pod_phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name"))


def _terminations(pod: Obj) -> list[Obj]:
    """Each container's last termination (its current state, else its last one)."""
    out = []
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get(
            "terminated"
        )
        if terminated and terminated.get("exitCode") is not None:
            out.append(terminated)
    return out


def _main_termination(pod: Obj) -> Obj | None:
    """The main container's termination: the first non-zero one, else the first."""
    terminations = _terminations(pod)
    failed = [t for t in terminations if int(t["exitCode"]) != 0]
    chosen = failed or terminations
    return chosen[0] if chosen else None


def exit_code(pod: Obj) -> int | None:
    """The main container's exit code: the first non-zero one, else the first."""
    terminated = _main_termination(pod)
    return int(terminated["exitCode"]) if terminated is not None else None


def termination_message(pod: Obj) -> str | None:
    """The main container's termination message as written: where the launcher says why
    it failed (/dev/termination-log), which tells its permanent failures from the
    training code's own exits (`tfkube.contract.launcher_failure`)."""
    terminated = _main_termination(pod)
    if terminated is None or int(terminated["exitCode"]) == 0:
        return None
    text = str(terminated.get("message") or "").strip()
    if terminated.get("reason") == "OOMKilled":
        # Killed over its memory limit: said first, as the local engine says it (the
        # planner names it in the job's message; never a launcher failure).
        return f"OOMKilled: {text}" if text else "OOMKilled"
    return text or None


def _one_line(text: object) -> str:
    """The last non-empty line (a traceback's last line says what happened), cut short."""
    lines = [line.strip() for line in str(text or "").splitlines() if line.strip()]
    line = lines[-1] if lines else ""
    return line if len(line) <= MESSAGE_CHARS else line[: MESSAGE_CHARS - 3] + "..."


def _with(head: str, detail: object) -> str:
    detail = _one_line(detail)
    return f"{head}: {detail}" if detail else head


def failure_message(pod: Obj) -> str:
    """Why a pod failed: its main container's exit code, the kubelet's reason when it says
    more than "Error" (OOMKilled, ...) and the termination message; else the pod's own
    reason (Evicted, DeadlineExceeded, ...)."""
    terminated = _main_termination(pod)
    if terminated is not None:
        head = f"exit code {terminated['exitCode']}"
        reason = terminated.get("reason")
        if reason and reason not in ("Error", "Completed"):
            head += f" ({reason})"
        return _with(head, terminated.get("message"))
    status = pod.get("status") or {}
    if status.get("reason"):
        return _with(str(status["reason"]), status.get("message"))
    return "failed"


def pending_message(pod: Obj) -> str:
    """Why a pod is not running yet: not schedulable (the scheduler's message; an unbound
    PersistentVolumeClaim said as such), an image that cannot be pulled, a container
    waiting for another reason, or simply not scheduled / starting yet."""
    status = pod.get("status") or {}
    scheduled = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), None
    )
    if scheduled is not None and scheduled.get("status") == "False":
        text = str(scheduled.get("message") or "")
        if "unbound" in text and "PersistentVolumeClaim" in text:
            return _with("waiting for its PersistentVolumeClaims to be bound", text)
        reason = scheduled.get("reason") or "not scheduled"
        return _with("unschedulable" if reason == "Unschedulable" else str(reason), text)
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting")
        if not waiting:
            continue
        reason = str(waiting.get("reason") or "waiting")
        if reason in IMAGE_PULL_REASONS:
            return _with(f"cannot pull its image ({reason})", waiting.get("message"))
        return _with(reason, waiting.get("message"))
    if status.get("reason"):
        return _with(str(status["reason"]), status.get("message"))
    if scheduled is not None and scheduled.get("status") == "True":
        return "scheduled, starting"
    scheduler = (pod.get("spec") or {}).get("schedulerName")
    if scheduled is None and scheduler and scheduler != DEFAULT_SCHEDULER:
        # No verdict at all: nobody of that name is looking (not installed, or down).
        return f"waiting for the scheduler {scheduler} to place it (no verdict yet)"
    return "waiting to be scheduled"


def is_placed(pod: Obj) -> bool:
    """Whether the scheduler has bound the pod to a node."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "PodScheduled" and c.get("status") == "True" for c in conditions)


def gang_message(job: TFJob, messages: Iterable[str]) -> str | None:
    """One line for every unplaced replica of a gang, from their pods' messages (`messages`,
    `pending_message`'s), or None (no gang, or no verdict yet). A gang scheduler places all
    of a PodGroup's pods or none: each pod's own verdict is only part of the story (the
    pod that does not fit says why, e.g. "Insufficient cpu"; its siblings, which would fit,
    say they were rejected with it or nothing at all), so every replica shows the verdict
    that names the capacity, with the gang's name and size."""
    scheduling = job.spec.scheduling
    if scheduling is None or scheduling.gang not in GANG_SCHEDULERS:
        return None
    verdicts = [
        t.removeprefix("unschedulable: ") for t in messages if t.startswith("unschedulable")
    ]
    if not verdicts:
        return None
    detail = min(verdicts, key=_verdict_rank)
    gang = f"the gang (PodGroup {job.name}, minMember {job.gang_size()})"
    if "enough sibling pods" in detail:  # Coscheduling, before all its pods exist
        return _with(f"{gang} is waiting for all its pods to be created", detail)
    if "nodes are available:" in detail:  # the per-node reasons, not the preemption tail
        detail = detail.split(". ", 1)[0].rstrip(".") + "."
    return _with(f"{gang} cannot be placed all together, so none of it starts", detail)


def _verdict_rank(verdict: str) -> int:
    """Which pod's verdict says best why a gang waits: one that names a resource the nodes
    lack ("2 Insufficient cpu"), then any other per-node reason, then the siblings' (which
    only say they were rejected along with it)."""
    if "Insufficient" in verdict:
        return 0
    if "nodes are available" in verdict and "rejecti" not in verdict:
        return 1
    return 2


def last_progress(pod: Obj, stall_seconds: int | None, now: float) -> float | None:
    """When a running replica's pod last showed progress (see the module docstring); None
    without stall detection (then it never stalls)."""
    if stall_seconds is None:
        return None
    status = pod.get("status") or {}
    main = next(
        (cs for cs in status.get("containerStatuses") or [] if cs.get("name") == REPLICA_CONTAINER),
        None,
    )
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    if main is None or main.get("ready") or ready is None or ready.get("status") != "False":
        return now
    started = parse_time(((main.get("state") or {}).get("running") or {}).get("startedAt"))
    turned = parse_time(ready.get("lastTransitionTime"))
    if started is None or turned is None or turned <= started:
        return now  # not ready since it started: the probe has not passed yet
    return min(turned - stall_seconds, now)


def _created(obj: Obj) -> tuple[float, str]:
    meta = obj.get("metadata") or {}
    return (parse_time(meta.get("creationTimestamp")) or 0.0, str(meta.get("name", "")))


class RoleIndexes(NamedTuple):
    """What a role's Indexed Job says about its indexes."""

    completed: frozenset[int] = frozenset()
    """Indexes with a succeeded pod (`status.completedIndexes`)."""
    failed: frozenset[int] = frozenset()
    """Indexes Kubernetes gave up on (`status.failedIndexes`: per-index backoff spent)."""


def role_indexes(job: Obj) -> RoleIndexes:
    """A role Job's completed and failed indexes as replica indexes (its offset added),
    parsed once for the whole Job (a 10,000-worker Job's ranges parsed per replica made
    observing quadratic)."""
    status = job.get("status") or {}
    offset = index_offset(job)
    return RoleIndexes(
        frozenset(i + offset for i in parse_indexes(status.get("completedIndexes"))),
        frozenset(i + offset for i in parse_indexes(status.get("failedIndexes"))),
    )


def job_failed_condition(job: Obj) -> Obj | None:
    conditions: list[Obj] = (job.get("status") or {}).get("conditions") or []
    for cond in conditions:
        if cond.get("type") == "Failed" and cond.get("status") == "True":
            return cond
    return None


SLIM_ANNOTATIONS = (INDEX_KEY, LABEL_INDEX_OFFSET)
"""The annotations of a pod `observe` reads: its completion index and its Job's offset."""


def slim_pod(pod: Obj) -> dict[str, Any]:
    """The parts of a pod `observe` reads (the operator keeps nothing else in memory)."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    annotations = meta.get("annotations") or {}
    slim_status: dict[str, Any] = {
        "phase": status.get("phase"),
        "conditions": [
            {k: c.get(k) for k in ("type", "status", "reason", "message", "lastTransitionTime")}
            for c in status.get("conditions") or []
            if c.get("type") in ("PodScheduled", "Ready", "DisruptionTarget")
        ],
        "containerStatuses": [
            {
                "name": cs.get("name"),
                "ready": cs.get("ready"),
                "state": cs.get("state") or {},
                "lastState": cs.get("lastState") or {},
            }
            for cs in status.get("containerStatuses") or []
        ],
    }
    for key in ("reason", "message"):
        if status.get(key):
            slim_status[key] = status[key]
    scheduler = (pod.get("spec") or {}).get("schedulerName")
    return {
        "spec": {"schedulerName": scheduler} if scheduler else {},
        "metadata": {
            "name": meta.get("name"),
            "creationTimestamp": meta.get("creationTimestamp"),
            "deletionTimestamp": meta.get("deletionTimestamp"),
            "labels": meta.get("labels") or {},
            "annotations": {k: annotations[k] for k in SLIM_ANNOTATIONS if k in annotations},
            "ownerReferences": [
                {"controller": r.get("controller"), "uid": r.get("uid")}
                for r in meta.get("ownerReferences") or []
            ],
        },
        "status": slim_status,
    }


def creation_failures(events: Iterable[Obj]) -> dict[str, str]:
    """Job name -> why the Job controller could not create its pods, from its newest
    `FailedCreate` Event (a ResourceQuota exceeded, a PriorityClass missing, ...): such a
    pod never exists, so no pod can say it."""
    newest: dict[str, tuple[float, str]] = {}
    for event in events:
        involved = event.get("involvedObject") or {}
        if event.get("reason") != "FailedCreate" or involved.get("kind") != "Job":
            continue
        when = _event_time(event)
        name = str(involved.get("name"))
        if name not in newest or when >= newest[name][0]:
            newest[name] = (when, str(event.get("message") or ""))
    return {name: _with("cannot create its pod", text) for name, (_, text) in newest.items()}


def scheduling_failures(events: Iterable[Obj], pods: Iterable[str]) -> list[str]:
    """The scheduler's verdicts on `pods` (names) from their `FailedScheduling` Events,
    newest first, each as `pending_message` says one ("unschedulable: ..."). A pod's
    condition holds only its last verdict; the Events keep the earlier ones, such as the
    one naming what a gang's pods lack (`gang_message`)."""
    names = set(pods)
    found: list[tuple[float, str]] = []
    for event in events:
        involved = event.get("involvedObject") or {}
        if event.get("reason") != "FailedScheduling" or involved.get("kind") != "Pod":
            continue
        if involved.get("name") in names:
            found.append((_event_time(event), _with("unschedulable", event.get("message"))))
    return [text for _, text in sorted(found, key=lambda f: f[0], reverse=True)]


def _event_time(event: Obj) -> float:
    return (
        parse_time(event.get("lastTimestamp"))
        or parse_time(event.get("eventTime"))
        or parse_time((event.get("metadata") or {}).get("creationTimestamp"))
        or 0.0
    )


def waiting_message(role_job: Obj, failures: Mapping[str, str]) -> str | None:
    """Why a role's current Job has no pod for a replica, when the Job says: suspended for
    Kueue (or by tfkube), or its pods refused at creation. None: nothing to say yet."""
    spec = role_job.get("spec") or {}
    labels = (role_job.get("metadata") or {}).get("labels") or {}
    if spec.get("suspend"):
        queue = labels.get(contract.KUEUE_QUEUE_LABEL)
        if queue:
            return f"suspended: waiting for Kueue to admit it (LocalQueue {queue})"
        return "suspended"
    return failures.get(_name(role_job))


def job_generation(obj: Obj) -> int:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    try:
        return int(annotations.get(GENERATION_ANNOTATION) or 0)
    except ValueError:
        return -1


def controller_uid(obj: Obj) -> str | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


# -- what the observation is made of ----------------------------------------------------------


@dataclass(frozen=True)
class RoleCounts:
    active: int = 0
    succeeded: int = 0
    failed: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"active": self.active, "succeeded": self.succeeded, "failed": self.failed}


@dataclass(frozen=True)
class ReplicaObservation:
    status: ReplicaStatus
    pod: str | None = None
    """The replica's current (newest, not dying) pod."""
    failed_pod: str | None = None
    """When FAILED or BACKOFF after a failure: the pod whose failure it is."""
    message: str = ""
    """Why the replica is in its state, in one line for people (empty when running or done
    with nothing to say)."""


@dataclass(frozen=True)
class Observation:
    status: JobStatus
    replicas: dict[str, ReplicaObservation]
    role_jobs: dict[str, tuple[Obj, ...]]
    """Role -> its current Kubernetes Jobs (one, or its shards', first index first), for
    the roles with such a Job."""
    dying_jobs: frozenset[str] = frozenset()
    """Roles with a Job being deleted."""
    stale_jobs: frozenset[str] = frozenset()
    """Roles with a Job of an earlier generation: to delete, then re-create."""
    stale_shards: tuple[tuple[str, Obj], ...] = ()
    """(role, Job) of every stale Job (a role split into shards has several)."""
    counts: dict[str, RoleCounts] = field(default_factory=dict)
    live_pods: dict[str, list[str]] = field(default_factory=dict)
    """Role -> names of its pods not yet finished and not being deleted."""
    failed_role_jobs: dict[str, Obj] = field(default_factory=dict)
    """Role -> the Failed condition of its Job, when Kubernetes gave up on it."""
    gave_up: frozenset[str] = frozenset()
    """Replica keys Kubernetes will not retry (the Job lists them in failedIndexes)."""
    stalled: frozenset[str] = frozenset()
    """Running replicas with no progress for runPolicy.stallSeconds (the planner's rule)."""
    preempted: tuple[Preemption, ...] = ()
    """Replicas whose pod the scheduler preempted since the last counted preemption
    (`preemptions`): the operator restarts the whole job, counted as one preemption."""
    disrupted: tuple[Disruption, ...] = ()
    """PS replicas whose Job failed for a planned disruption of their pod (an eviction: a
    drain; `disruptions`): the operator restarts the whole job, counted as a disruption."""


@dataclass(frozen=True)
class Prior:
    """What the TFJob's status recorded: the only memory the operator has."""

    phase: JobPhase = JobPhase.PENDING
    started_at: float | None = None
    finished_at: float | None = None
    reason: str | None = None
    message: str | None = None
    restarts: int = 0
    handled: frozenset[str] = frozenset()
    generations: Mapping[str, int] = field(default_factory=dict)
    """Role -> the generation its Job should have (whole-job restarts it took part in)."""
    restarts_before: int = 0
    """Replica failures counted in earlier generations (their pods are gone)."""
    restart_at: float | None = None
    """When the current generation's Jobs may be created (whole-job restart backoff)."""
    stalled: frozenset[str] = frozenset()
    """Replicas the previous reconcile found stalled (`status.stalledReplicas`)."""
    storage: Mapping[str, str] = field(default_factory=dict)
    """`status.storage`: what the replicas mount as `data` and `logs` (`claim <name>` or
    `emptyDir`), as the operator rendered them."""
    preemptions: int = 0
    """Times the job was preempted (`status.preemptions`), counted apart from restarts."""
    preempted_at: float | None = None
    """When the operator counted the last preemption (`status.preemptedAt`)."""
    disruptions: int = 0
    """Whole-job restarts after a PS's planned disruption (`status.disruptions`: a drain's
    eviction), counted apart from restarts."""

    @property
    def checkpoints_kept(self) -> bool:
        """Whether the logs (checkpoints) are on a claim, so a whole-job restart resumes
        (unknown, as in a status written before the operator said: yes)."""
        return self.storage.get("logs") != SCRATCH_VOLUME

    @classmethod
    def from_status(cls, status: Obj | None) -> Prior:
        status = status or {}
        try:
            phase = JobPhase(status.get("phase") or "Pending")
        except ValueError:
            phase = JobPhase.PENDING
        return cls(
            phase=phase,
            started_at=parse_time(status.get("startTime")),
            finished_at=parse_time(status.get("completionTime")),
            reason=status.get("reason"),
            message=status.get("message"),
            restarts=int(status.get("restarts") or 0),
            handled=frozenset(status.get("handledFailures") or ()),
            generations={
                str(k): int(v) for k, v in (status.get("restartGenerations") or {}).items()
            },
            restarts_before=int(status.get("restartsBefore") or 0),
            restart_at=parse_time(status.get("restartAt")),
            stalled=frozenset(status.get("stalledReplicas") or ()),
            storage={str(k): str(v) for k, v in (status.get("storage") or {}).items()},
            preemptions=int(status.get("preemptions") or 0),
            preempted_at=parse_time(status.get("preemptedAt")),
            disruptions=int(status.get("disruptions") or 0),
        )


PODS_PER_JOB = "podsPerJob"
"""`status.podsPerJob`: the most replicas per Indexed Job the job was made with."""
ADDRESSING = "addressing"
"""`status.addressing`: how the job's replicas are addressed (`SERVICE_PER_JOB`)."""
SERVICE_PER_JOB = "servicePerJob"
"""One headless Service per Indexed Job (`tfkube.tfcluster.service_address`)."""
UNSHARDED = 100_000
"""More than any role may have (`tfkube.spec`): every role is one Job."""


@dataclass(frozen=True)
class Layout:
    """How a job's Jobs and Services were laid out when it was made, which it keeps for
    life: a new operator (or a changed setting) never re-splits or re-addresses a running
    job, whose pods know their peers by the names they were given."""

    pods_per_job: int
    """The most replicas per Indexed Job (`tfkube.render.RenderOptions.max_pods_per_job`)."""
    one_service: bool
    """The replicas share one headless Service named after the job, as every job made
    before 2026-12-04 (`tfkube.render.RenderOptions.one_service`)."""

    def status(self) -> dict[str, Any]:
        """What the status records of it (`layout` reads it back)."""
        recorded: dict[str, Any] = {PODS_PER_JOB: self.pods_per_job}
        if not self.one_service:
            recorded[ADDRESSING] = SERVICE_PER_JOB
        return recorded


def layout(status: Mapping[str, Any] | None, setting: int) -> Layout:
    """The layout a TFJob's status recorded (`Layout.status`). A job made before a part of
    it was recorded (started, nothing said) keeps what operators made then: one Job per
    role, one Service for the job; a new job takes the operator's `setting` and a Service
    per Job."""
    status = status or {}
    started = bool(status.get("startTime"))
    recorded = status.get(PODS_PER_JOB)
    if isinstance(recorded, int) and not isinstance(recorded, bool) and recorded >= 1:
        per_job = recorded
    else:
        per_job = UNSHARDED if started else setting
    one_service = started and status.get(ADDRESSING) != SERVICE_PER_JOB
    return Layout(pods_per_job=per_job, one_service=one_service)


class RoleJob(StrEnum):
    """Where a role's Kubernetes Job stands."""

    CURRENT = "current"
    """It exists, of the generation the status names."""
    MISSING = "missing"
    """Not created yet (or lost)."""
    DYING = "dying"
    """Being deleted."""
    STALE = "stale"
    """Of an earlier generation: being replaced by a whole-job restart."""


# -- one replica -----------------------------------------------------------------------------


def _restart(prior: Prior) -> str:
    """A whole-job restart, as a replica's message says it."""
    if prior.checkpoints_kept:
        return "whole-job restart"
    return "whole-job restart from scratch (no logs claim keeps its checkpoints)"


def read_replica(
    role: str,
    index: int,
    pods: Sequence[Obj],
    *,
    completed: bool = False,
    role_job: RoleJob = RoleJob.CURRENT,
    job_failed: bool = False,
    prior: Prior,
    now: float,
    waiting: str | None = None,
    stall_seconds: int | None = None,
) -> ReplicaObservation:
    """One replica's state, exit code, restarts and message from its index's pods (of the
    current Job only; any order) and where its role's Job stands (`waiting`: what the Job
    says about pods it has not made, `waiting_message`). The rules are in the module
    docstring; every branch is a row in tests/unit/test_kube_observe.py."""
    terminal = prior.phase.terminal
    all_pods = sorted(pods, key=_created, reverse=True) if len(pods) > 1 else list(pods)
    current = [p for p in all_pods if not is_dying(p)]
    own_failures = [p for p in current if pod_phase(p) == "Failed"]
    newest = current[0] if current else None
    code: int | None = None
    failed_pod: str | None = None
    next_start: float | None = None
    message = ""
    termination: str | None = None
    progress: float | None = None
    restarts = len(own_failures)
    state: ReplicaState
    if completed or any(pod_phase(p) == "Succeeded" for p in current):
        state, code = ReplicaState.SUCCEEDED, 0
    elif newest is not None and pod_phase(newest) == "Failed":
        failed_pod, code = _name(newest), exit_code(newest)
        message, termination = failure_message(newest), termination_message(newest)
        if failed_pod in prior.handled and not terminal:
            state = ReplicaState.BACKOFF
            message = f"being restarted by Kubernetes after {message}"
        else:
            state = ReplicaState.STOPPED if terminal else ReplicaState.FAILED
            restarts -= 1
    elif newest is not None and pod_phase(newest) == "Running":
        state = ReplicaState.RUNNING
        progress = last_progress(newest, stall_seconds, now)
    elif newest is not None:
        state, message = ReplicaState.PENDING, pending_message(newest)
    elif job_failed and not terminal:
        # Kubernetes failed the role's Job and no pod of its own shows it: the pod was
        # deleted (a user, an eviction) and failed while being stopped. Still a failure: for
        # the PS the whole-job restart, for the others the failed Job fails the job.
        state = ReplicaState.FAILED
        code = next((c for p in all_pods if (c := exit_code(p)) is not None), None)
        failed_pod = _name(all_pods[0]) if all_pods else None
        message = f"{failure_message(all_pods[0])}, its pod deleted" if all_pods else ""
        message = message or "its Job failed and its pod is gone"
    elif terminal:
        state = ReplicaState.STOPPED
    elif all_pods or restarts:
        state, message = ReplicaState.BACKOFF, "its pod is being replaced"
    elif role_job in (RoleJob.STALE, RoleJob.DYING):
        state, message = ReplicaState.BACKOFF, f"{_restart(prior)}: its old Job is being deleted"
    elif role_job is RoleJob.MISSING and prior.restart_at is not None and now < prior.restart_at:
        state, next_start = ReplicaState.BACKOFF, prior.restart_at
        message = f"{_restart(prior)}: starts again at {format_time(prior.restart_at)}"
    elif role_job is RoleJob.CURRENT:
        state = ReplicaState.PENDING
        message = waiting or "waiting for Kubernetes to create its pod"
    else:
        state, message = ReplicaState.PENDING, "its Job is not created yet"
    if terminal and state is ReplicaState.PENDING and role_job is not RoleJob.CURRENT:
        state, message = ReplicaState.STOPPED, ""
    return ReplicaObservation(
        status=ReplicaStatus(
            role=role,
            index=index,
            state=state,
            exit_code=code,
            restarts=max(restarts, 0),
            next_start_at=next_start,
            message=termination,
            progress_at=progress,
            stalled=replica_key(role, index) in prior.stalled,
        ),
        pod=_name(newest) if newest is not None else None,
        failed_pod=failed_pod,
        message=message,
    )


# -- the whole job ---------------------------------------------------------------------------


def _role_jobs(
    job: TFJob, jobs: Iterable[Obj], prior: Prior
) -> dict[str, list[tuple[RoleJob, Obj]]]:
    """Role -> where each of its Jobs stands, and the Job (every role with a Job), first
    index first. A role is one Job `<job>-<role>`, or several (`role_job_name`'s shards):
    known by its name."""
    out: dict[str, list[tuple[RoleJob, Obj]]] = {}
    for found in jobs:
        name = _name(found)
        role = next(
            (r.value for r in Role if role_job_shard(job.name, r.value, name) is not None), None
        )
        if role is None:
            continue
        if is_dying(found):
            where = RoleJob.DYING
        elif job_generation(found) != prior.generations.get(role, 0):
            where = RoleJob.STALE
        else:
            where = RoleJob.CURRENT
        out.setdefault(role, []).append((where, found))
    for each in out.values():
        each.sort(key=lambda found: index_offset(found[1]))
    return out


class _Holders:
    """Which of a role's Jobs holds each replica index: the one with the greatest first
    index not past it (a role's only Job holds every index, also those past its
    completions). The offsets are read once per reconcile, not once per replica."""

    def __init__(self, found: list[tuple[RoleJob, Obj]]) -> None:
        self.found = found  # first index first (`_role_jobs`)
        self.offsets = [index_offset(each) for _, each in found]

    def of(self, index: int) -> tuple[RoleJob, Obj] | None:
        at = bisect.bisect_right(self.offsets, index)
        return self.found[at - 1] if at else None


class PodFacts(NamedTuple):
    """What `observe` reads of every pod before it knows the pod's replica."""

    role: str | None
    replica_index: int | None
    owner: str | None
    """Its controller's UID (a Job's)."""
    preempted: bool
    """The scheduler preempted it (`preempted_by_scheduler`)."""


def pod_facts(pod: Obj) -> PodFacts:
    return PodFacts(pod_role(pod), pod_index(pod), controller_uid(pod), preempted_by_scheduler(pod))


class _Read(NamedTuple):
    """One replica as `observe` reads it from its pods (`_read`)."""

    seen: ReplicaObservation
    unplaced: bool
    """Pending, and its pod is not on a node yet."""
    live: bool
    """Its current pod is Pending or Running."""
    active: bool
    """It has a pod and is live (PENDING or RUNNING)."""
    succeeded: bool
    failed: int
    """Its pods that failed on their own (not being deleted)."""


def _read(
    role: str,
    index: int,
    mine: Sequence[Obj],
    completed: bool,
    holder: tuple[RoleJob, Obj] | None,
    job_failed: bool,
    prior: Prior,
    now: float,
    waiting: str | None,
    stall_seconds: int | None,
) -> _Read:
    seen = read_replica(
        role,
        index,
        mine,
        completed=completed,
        role_job=holder[0] if holder is not None else RoleJob.MISSING,
        job_failed=job_failed,
        prior=prior,
        now=now,
        waiting=waiting,
        stall_seconds=stall_seconds,
    )
    current = next((p for p in mine if _name(p) == seen.pod), None) if seen.pod else None
    return _Read(
        seen,
        unplaced=seen.status.state is ReplicaState.PENDING
        and current is not None
        and not is_placed(current),
        live=current is not None and pod_phase(current) in ("Pending", "Running"),
        active=seen.pod is not None and seen.status.state.live,
        succeeded=seen.status.state is ReplicaState.SUCCEEDED,
        failed=sum(pod_phase(p) == "Failed" and not is_dying(p) for p in mine),
    )


class _Kept(NamedTuple):
    """A replica's read as the memo keeps it, with what it depends on besides the job's
    prior and the clock: its pods (by identity: a pod the informer saw change is a new
    object), whether its Job lists it completed, where its Job stands, whether its role's
    Job failed, what the Job says. `observe` compares these field by field and keeps the
    same `_Kept` while they hold: a reconcile of an unchanged replica makes no object."""

    pods: Sequence[Obj]
    done: bool
    standing: RoleJob
    job_failed: bool
    waiting: str | None
    read: _Read


class ObserveMemo:
    """What `observe` read of one job the last time, so the next observation of the same
    job reads again only the pods that changed (the operator keeps one per TFJob, used by
    one reconcile at a time). At 5,000 replicas a reconcile's observation read every pod
    each time (a third of the operator's CPU during a ramp, docs/benchmarks.md); with the
    memo it reads each pod once per change. Never changes a result: `observe` with a memo
    equals `observe` without (tests/unit/test_kube_observe_memo.py).

    Pods are known by identity (`id`), which is safe because the memo holds every pod it
    knows, so no other object can take its id, and because a pod is never changed in place
    (the operator's informer replaces a changed pod; the API's answers are new objects).
    A replica's read is kept when it depends on nothing else that may change unseen: not
    with stall detection (a running replica's progress is the clock's) nor for a replica
    whose Job is missing (its restart backoff is the clock's). Any change of what the
    reads use of the job's status (`Prior`) forgets them all."""

    def __init__(self) -> None:
        self._pods: dict[int, tuple[Obj, PodFacts]] = {}
        self._reads: dict[str, _Kept] = {}
        self._prior: tuple[Any, ...] | None = None

    def facts(self, pods: Iterable[Obj]) -> list[tuple[Obj, PodFacts]]:
        """Each pod with its facts, read only for a pod not seen last time; forgets the
        pods not given."""
        known: dict[int, tuple[Obj, PodFacts]] = {}
        last = self._pods
        for pod in pods:
            got = last.get(id(pod))
            if got is None or got[0] is not pod:
                got = (pod, pod_facts(pod))
            known[id(pod)] = got
        self._pods = known
        return list(known.values())

    def reads(
        self, prior: Prior, stall_seconds: int | None
    ) -> tuple[dict[str, _Kept], dict[str, _Kept]] | None:
        """The reads kept last time (to look up) and the dict this observation fills with
        what it keeps, or None when this observation may keep none; forgets them all when
        what they read of the status changed."""
        if stall_seconds is not None:
            self._reads = {}
            return None
        used = (prior.phase, prior.handled, prior.stalled, prior.restart_at, prior.storage)
        if used != self._prior:
            self._prior, self._reads = used, {}
        last, self._reads = self._reads, {}
        return last, self._reads


def observe(
    job: TFJob,
    prior: Prior,
    jobs: Iterable[Obj],
    pods: Iterable[Obj],
    now: float,
    events: Iterable[Obj] = (),
    memo: ObserveMemo | None = None,
) -> Observation:
    """Build the planner's `JobStatus` (and what the operator needs to act) from the
    job's Kubernetes Jobs and pods; `events` (the namespace's `FailedCreate` Events of
    Jobs, and `FailedScheduling` Events of pods for a gang) only add words to the messages
    of replicas without a pod, or of a gang's unplaced replicas. `memo`: what the last
    observation of this job read (`ObserveMemo`), to read again only what changed."""
    events = list(events)
    failures = creation_failures(events)
    found = _role_jobs(job, jobs, prior)
    role_jobs = {
        r: current
        for r, each in found.items()
        if (current := tuple(j for where, j in each if where is RoleJob.CURRENT))
    }
    current_uids = {str(j["metadata"].get("uid")): r for r, js in role_jobs.items() for j in js}

    read_pods = memo.facts(pods) if memo is not None else [(p, pod_facts(p)) for p in pods]
    pods_by_key: dict[str, list[Obj]] = {}
    preempted: list[Obj] = []
    for pod, (pod_of, index, owner, was_preempted) in read_pods:
        if pod_of is None or index is None or current_uids.get(owner or "") != pod_of:
            continue  # not a replica, or a pod of a stale or deleted Job
        pods_by_key.setdefault(replica_key(pod_of, index), []).append(pod)
        if was_preempted:
            preempted.append(pod)

    failed_role_jobs: dict[str, Obj] = {}
    for r, js in role_jobs.items():
        conds = [cond for j in js if (cond := job_failed_condition(j)) is not None]
        if conds:
            failed_role_jobs[r] = conds[0]
    indexes: dict[str, RoleIndexes] = {}  # once per role, not replica
    for r, js in role_jobs.items():
        each = [role_indexes(j) for j in js]
        indexes[r] = RoleIndexes(
            frozenset().union(*(i.completed for i in each)),
            frozenset().union(*(i.failed for i in each)),
        )
    waits = {_name(j): waiting_message(j, failures) for js in role_jobs.values() for j in js}
    gave_up: set[str] = set()
    unplaced: set[str] = set()  # pending replicas whose pod is not on a node yet
    replicas: dict[str, ReplicaObservation] = {}
    live_pods: dict[str, list[str]] = {}
    tally: dict[str, list[int]] = {}  # role -> active, succeeded, failed
    holders: dict[str, _Holders] = {}
    stall_seconds = job.spec.run_policy.stall_seconds
    memo_reads = memo.reads(prior, stall_seconds) if memo is not None else None
    kept, keeping = memo_reads if memo_reads is not None else ({}, None)
    none: list[Obj] = []
    # (role, index) in start order, as `TFJob.replica_keys` (whose enum roles cost a
    # descriptor call per replica for their `.value`).
    keys = [(role, i) for role, n in job.spec.replicas.counts().items() for i in range(n)]
    for role, index in keys:
        key = replica_key(role, index)
        completed, failed = indexes.get(role, RoleIndexes())
        if index in failed:
            gave_up.add(key)
        mine = pods_by_key.get(key, none)
        if role not in holders:
            holders[role] = _Holders(found.get(role, []))
        holder = holders[role].of(index)
        waiting = waits.get(_name(holder[1])) if holder is not None else None
        done, job_failed = index in completed, role in failed_role_jobs
        # The memo's lookup, field by field and without making an object: this loop runs
        # for every replica at every reconcile (11,000 at the original platform's scale).
        last = kept.get(key)
        if (
            last is not None
            and keeping is not None
            and holder is not None
            and last.done == done
            and last.standing is holder[0]
            and last.job_failed == job_failed
            and last.waiting == waiting
            and len(last.pods) == len(mine)
            and (
                last.pods[0] is mine[0]  # a replica's usual one pod
                if len(mine) == 1
                else all(a is b for a, b in zip(last.pods, mine, strict=True))
            )
        ):
            read = last.read
            keeping[key] = last
        else:
            read = _read(
                role, index, mine, done, holder, job_failed, prior, now, waiting, stall_seconds
            )
            if keeping is not None and holder is not None:
                keeping[key] = _Kept(mine, done, holder[0], job_failed, waiting, read)
        seen = read.seen
        replicas[key] = seen
        if read.unplaced:
            unplaced.add(key)
        if read.live:
            live = live_pods.get(role)
            if live is None:
                live = live_pods[role] = []
            live.append(str(seen.pod))
        counted = tally.get(role)
        if counted is None:
            counted = tally[role] = [0, 0, 0]
        counted[0] += read.active
        counted[1] += read.succeeded
        counted[2] += read.failed
    counts = {role: RoleCounts(*each) for role, each in tally.items()}

    unplaced_pods = [replicas[key].pod or "" for key in sorted(unplaced)]
    gang = gang_message(
        job,
        [replicas[key].message for key in sorted(unplaced)]
        + scheduling_failures(events, unplaced_pods),
    )
    if gang is not None:
        for key in unplaced:
            replicas[key] = replace(replicas[key], message=gang)
    statuses = tuple(r.status for r in replicas.values())
    offsets = {_name(j): index_offset(j) for each in found.values() for _, j in each}
    status = JobStatus(
        phase=prior.phase,
        started_at=prior.started_at if prior.started_at is not None else now,
        replicas=statuses,
        restarts=prior.restarts_before + sum(r.restarts for r in statuses),
        finished_at=prior.finished_at,
        reason=prior.reason,
        message=prior.message,
        checkpoints_kept=prior.checkpoints_kept,
    )
    stalled = stalled_replicas(job.spec.run_policy, status, now)
    for key in stalled:
        quiet = now - (replicas[key].status.progress_at or now)
        replicas[key] = replace(replicas[key], message=f"no progress for {quiet:.0f}s")
    return Observation(
        status=status,
        replicas=replicas,
        role_jobs=role_jobs,
        dying_jobs=frozenset(
            r for r, each in found.items() if any(w is RoleJob.DYING for w, _ in each)
        ),
        stale_jobs=frozenset(
            r for r, each in found.items() if any(w is RoleJob.STALE for w, _ in each)
        ),
        stale_shards=tuple(
            (r, j) for r, each in sorted(found.items()) for w, j in each if w is RoleJob.STALE
        ),
        counts=counts,
        live_pods=live_pods,
        failed_role_jobs=failed_role_jobs,
        gave_up=frozenset(gave_up),
        stalled=stalled,
        preempted=preemptions(job, prior, preempted, events, offsets),
        disrupted=disruptions(
            job, failed_role_jobs, (p for mine in pods_by_key.values() for p in mine), offsets
        ),
    )
