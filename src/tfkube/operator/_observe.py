"""API objects -> what the planner sees. Pure: plain dicts (as the API returns them) in,
`Observation` out; no client, no clock.

Who retries what (the contract with `tfkube.render`, `managed=True`): Kubernetes retries a
failed chief/worker/evaluator inside its role's Indexed Job (with its own backoff; the Job
fails by `podFailurePolicy`/`backoffLimit`); a PS Job fails on its PS's first failure and
the operator restarts the whole job by deleting and re-creating the role Jobs. Each such
restart is a new *generation* of the restarted roles' Jobs: `status.restartGenerations`
{role: N}, Jobs annotated with theirs;
a Job of another generation is stale (being replaced) and failures counted in earlier
generations are kept in `status.restartsBefore` (their pods are gone). Pods are matched to
the current Job by its UID, so a stale Job's pods never count. For each replica index:

- the index's pods (label `batch.kubernetes.io/job-completion-index`), newest first.
  A pod with a `deletionTimestamp` is being stopped (by tfkube, the Job controller or a
  user): it says nothing about the replica's own health and is ignored, except that a
  replica with only such pods is "being restarted" (BACKOFF) or, once the job ended,
  STOPPED.
- Succeeded: any pod of the index succeeded, or the Job lists the index as completed.
- FAILED: the newest pod failed on its own and tfkube has not yet acted on that failure
  (its name is not in `status.handledFailures`); once acted on it reads as BACKOFF until
  Kubernetes has made the replacement pod.
- restarts: the index's pods that failed on their own (failed pods stay until their Job is
  deleted, so this count survives an operator restart), minus the current failure.

Everything comes from the API: the operator can be killed at any moment and the next
observation is the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tfkube.api import Role, TFJob
from tfkube.planner import JobPhase, JobStatus, ReplicaState, ReplicaStatus

LABEL_JOB = "tfkube.io/job-name"
LABEL_ROLE = "tfkube.io/replica-type"
INDEX_KEY = "batch.kubernetes.io/job-completion-index"
GENERATION_ANNOTATION = "tfkube.io/restart-generation"

Obj = Mapping[str, Any]


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


def pod_index(pod: Obj) -> int | None:
    meta = pod.get("metadata") or {}
    for source in (meta.get("labels") or {}, meta.get("annotations") or {}):
        value = source.get(INDEX_KEY)
        if value is not None:
            try:
                return int(value)
            except ValueError:
                return None
    return None


def pod_role(pod: Obj) -> str | None:
    role = ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_ROLE)
    return str(role) if role is not None else None


def is_dying(obj: Obj) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def pod_phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def exit_code(pod: Obj) -> int | None:
    """The main container's exit code: the first non-zero one, else the first."""
    codes = []
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get(
            "terminated"
        )
        if terminated and terminated.get("exitCode") is not None:
            codes.append(int(terminated["exitCode"]))
    nonzero = [c for c in codes if c != 0]
    if nonzero:
        return nonzero[0]
    return codes[0] if codes else None


def termination_message(pod: Obj) -> str | None:
    """The failed container's termination message: where the launcher writes why it
    failed (/dev/termination-log), which tells its permanent failures from the code's."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get(
            "terminated"
        )
        if terminated and terminated.get("exitCode") not in (None, 0):
            return str(terminated.get("message") or "").strip() or None
    return None


def _created(obj: Obj) -> tuple[float, str]:
    meta = obj.get("metadata") or {}
    return (parse_time(meta.get("creationTimestamp")) or 0.0, str(meta.get("name", "")))


def job_failed_condition(job: Obj) -> Obj | None:
    conditions: list[Obj] = (job.get("status") or {}).get("conditions") or []
    for cond in conditions:
        if cond.get("type") == "Failed" and cond.get("status") == "True":
            return cond
    return None


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


@dataclass(frozen=True)
class Observation:
    status: JobStatus
    replicas: dict[str, ReplicaObservation]
    role_jobs: dict[str, Obj]
    """Role -> its Kubernetes Job, for the roles whose Job exists (and is not dying)."""
    dying_jobs: frozenset[str] = frozenset()
    """Roles whose Job is being deleted."""
    stale_jobs: frozenset[str] = frozenset()
    """Roles whose Job is of an earlier generation: to delete, then re-create."""
    counts: dict[str, RoleCounts] = field(default_factory=dict)
    live_pods: dict[str, list[str]] = field(default_factory=dict)
    """Role -> names of its pods not yet finished and not being deleted."""
    failed_role_jobs: dict[str, Obj] = field(default_factory=dict)
    """Role -> the Failed condition of its Job, when Kubernetes gave up on it."""
    gave_up: frozenset[str] = frozenset()
    """Replica keys Kubernetes will not retry (the Job lists them in failedIndexes)."""


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
        )


def slim_pod(pod: Obj) -> dict[str, Any]:
    """The parts of a pod `observe` reads (the operator keeps nothing else in memory)."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    annotations = meta.get("annotations") or {}
    return {
        "metadata": {
            "name": meta.get("name"),
            "creationTimestamp": meta.get("creationTimestamp"),
            "deletionTimestamp": meta.get("deletionTimestamp"),
            "labels": meta.get("labels") or {},
            "annotations": {INDEX_KEY: annotations[INDEX_KEY]} if INDEX_KEY in annotations else {},
            "ownerReferences": [
                {"controller": r.get("controller"), "uid": r.get("uid")}
                for r in meta.get("ownerReferences") or []
            ],
        },
        "status": {
            "phase": status.get("phase"),
            "containerStatuses": [
                {"state": cs.get("state") or {}, "lastState": cs.get("lastState") or {}}
                for cs in status.get("containerStatuses") or []
            ],
        },
    }


def _role_job_name(job_name: str, role: str) -> str:
    return f"{job_name}-{role}"


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


def observe(
    job: TFJob, prior: Prior, jobs: Iterable[Obj], pods: Iterable[Obj], now: float
) -> Observation:
    """Build the planner's `JobStatus` (and what the operator needs to act) from the
    job's Kubernetes Jobs and pods."""
    terminal = prior.phase.terminal
    by_name = {str((j.get("metadata") or {}).get("name")): j for j in jobs}
    role_jobs: dict[str, Obj] = {}
    dying_jobs: set[str] = set()
    stale_jobs: set[str] = set()
    for each in Role:
        found = by_name.get(_role_job_name(job.name, each.value))
        if found is None:
            continue
        if is_dying(found):
            dying_jobs.add(each.value)
        elif job_generation(found) != prior.generations.get(each.value, 0):
            stale_jobs.add(each.value)
        else:
            role_jobs[each.value] = found
    current_uids = {str(j["metadata"].get("uid")): r for r, j in role_jobs.items()}

    pods_by_key: dict[str, list[Obj]] = {}
    live_pods: dict[str, list[str]] = {}
    counts: dict[str, RoleCounts] = {}
    for pod in pods:
        pod_of, index = pod_role(pod), pod_index(pod)
        if pod_of is None or index is None or current_uids.get(controller_uid(pod) or "") != pod_of:
            continue  # not a replica, or a pod of a stale or deleted Job
        pods_by_key.setdefault(f"{pod_of}-{index}", []).append(pod)

    failed_role_jobs: dict[str, Obj] = {}
    gave_up: set[str] = set()
    replicas: dict[str, ReplicaObservation] = {}
    for role_enum, index in job.replica_keys():
        role = role_enum.value
        key = f"{role}-{index}"
        role_job = role_jobs.get(role)
        job_status = (role_job or {}).get("status") or {}
        completed = parse_indexes(job_status.get("completedIndexes"))
        failed_indexes = parse_indexes(job_status.get("failedIndexes"))
        if role_job is not None and (cond := job_failed_condition(role_job)) is not None:
            failed_role_jobs[role] = cond
        if index in failed_indexes:
            gave_up.add(key)
        all_pods = sorted(pods_by_key.get(key, []), key=_created, reverse=True)
        current = [p for p in all_pods if not is_dying(p)]
        own_failures = [p for p in current if pod_phase(p) == "Failed"]
        newest = current[0] if current else None
        state: ReplicaState
        code: int | None = None
        message: str | None = None
        failed_pod: str | None = None
        next_start: float | None = None
        restarts = len(own_failures)
        if index in completed or any(pod_phase(p) == "Succeeded" for p in current):
            state = ReplicaState.SUCCEEDED
            code = 0
        elif newest is not None and pod_phase(newest) == "Failed":
            failed_pod = str(newest["metadata"]["name"])
            code = exit_code(newest)
            message = termination_message(newest)
            if failed_pod in prior.handled and not terminal:
                state = ReplicaState.BACKOFF
            else:
                state = ReplicaState.STOPPED if terminal else ReplicaState.FAILED
                restarts -= 1
        elif newest is not None and pod_phase(newest) == "Running":
            state = ReplicaState.RUNNING
        elif newest is not None:
            state = ReplicaState.PENDING
        elif terminal:
            state = ReplicaState.STOPPED
        elif all_pods or restarts:
            state = ReplicaState.BACKOFF  # only dying pods: being restarted
        elif role_job is None and (
            role in stale_jobs
            or role in dying_jobs
            or (prior.restart_at is not None and now < prior.restart_at)
        ):
            # A whole-job restart: the old Job is going away, or the backoff runs.
            state = ReplicaState.BACKOFF
            if role not in stale_jobs and role not in dying_jobs:
                next_start = prior.restart_at
        else:
            state = ReplicaState.PENDING
        if terminal and state is ReplicaState.PENDING and role_job is None:
            state = ReplicaState.STOPPED
        replicas[key] = ReplicaObservation(
            status=ReplicaStatus(
                role=role,
                index=index,
                state=state,
                exit_code=code,
                restarts=max(restarts, 0),
                next_start_at=next_start,
                message=message,
            ),
            pod=str(newest["metadata"]["name"]) if newest is not None else None,
            failed_pod=failed_pod,
        )
        if newest is not None and pod_phase(newest) in ("Pending", "Running"):
            live_pods.setdefault(role, []).append(str(newest["metadata"]["name"]))
        before = counts.get(role, RoleCounts())
        counts[role] = RoleCounts(
            active=before.active + (state.live and newest is not None),
            succeeded=before.succeeded + (state is ReplicaState.SUCCEEDED),
            failed=before.failed + len(own_failures),
        )

    statuses = tuple(r.status for r in replicas.values())
    return Observation(
        status=JobStatus(
            phase=prior.phase,
            started_at=prior.started_at if prior.started_at is not None else now,
            replicas=statuses,
            restarts=prior.restarts_before + sum(r.restarts for r in statuses),
            finished_at=prior.finished_at,
            reason=prior.reason,
            message=prior.message,
        ),
        replicas=replicas,
        role_jobs=role_jobs,
        dying_jobs=frozenset(dying_jobs),
        stale_jobs=frozenset(stale_jobs),
        counts=counts,
        live_pods=live_pods,
        failed_role_jobs=failed_role_jobs,
        gave_up=frozenset(gave_up),
    )


def replica_keys(job: TFJob) -> Sequence[str]:
    return [f"{r.value}-{i}" for r, i in job.replica_keys()]
