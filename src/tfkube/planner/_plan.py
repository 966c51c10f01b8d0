"""The job-level brain, shared by both engines: from the spec and observed replica states
to the next phase and actions. Pure: time is an argument, nothing is read or changed.

Order of decisions, each tick:
1. A terminal job only cleans up (per cleanPodPolicy) and waits for its TTL.
2. activeDeadlineSeconds passed -> Failed (DeadlineExceeded).
3. The success policy is met -> Succeeded; PS and any replica still running are stopped.
   Success is checked before failures: a job whose chief finished is done, whatever a
   worker did in the same instant.
4. A launcher's own permanent failure (bad code, missing entrypoint, broken set-up: its
   exit code *and* its termination message say so) fails the job at once, whatever the
   restart policy: no retry can fix it.
5. Replicas that failed on their own: a failure the restart policy (the role's own, else
   the job's) does not retry, or
   one past backoffLimit, fails the job; otherwise the replica restarts after
   exponential backoff. A failed PS restarts with every chief/worker/evaluator that has
   not succeeded, since their sessions depend on its variables: they resume from the
   last checkpoint in the shared log dir (from scratch when there is none: a cluster job
   without a logs claim, `JobStatus.checkpoints_kept`). A stalled replica (no progress for
   runPolicy.stallSeconds) is reported, and with stallAction Restart handled like a
   failed one, or with Fail fails the job.
6. Replicas whose backoff has passed, or that never started, are started, unless the
   engine holds them (their resources, e.g. GPUs, are not free yet).
"""

from __future__ import annotations

from tfkube import contract
from tfkube.planner._types import (
    Action,
    Decision,
    DeleteJob,
    JobPhase,
    JobStatus,
    ReplicaState,
    ReplicaStatus,
    Restart,
    Start,
    Stop,
)
from tfkube.spec import (
    CleanPodPolicy,
    RestartPolicy,
    Role,
    RunPolicy,
    StallAction,
    SuccessPolicy,
    TFJob,
)
from tfkube.tfcluster import replica_key

NO_SHARED_CHECKPOINTS = (
    "the job's log folder is each pod's own (no claim), so no checkpoint outlives its replicas"
)
"""Why a whole-job restart of a cluster job without a logs claim starts from scratch."""


def is_retryable_exit(code: int | None) -> bool:
    """Under `ExitCode`: 128+N (killed by signal N: preemption, OOM kill, node loss) and the
    launcher's EX_TEMPFAIL are retried; 1-127 are the user's errors."""
    return code is not None and (code >= 128 or code in contract.RETRYABLE_EXITS)


def should_retry(policy: RestartPolicy, code: int | None) -> bool:
    if policy is RestartPolicy.NEVER:
        return False
    if policy is RestartPolicy.ON_FAILURE:
        return True
    return is_retryable_exit(code)


def success_reached(job: TFJob, status: JobStatus) -> str | None:
    """A message naming what succeeded, or None while the success policy is not met."""
    done = {r.key for r in status.replicas if r.state is ReplicaState.SUCCEEDED}
    has_chief = job.spec.replicas.count(Role.CHIEF) > 0
    chief = replica_key(Role.CHIEF, 0)
    workers = [replica_key(Role.WORKER, i) for i in range(job.spec.replicas.count(Role.WORKER))]
    if job.spec.run_policy.success_policy is SuccessPolicy.ALL_WORKERS:
        needed = [*workers, *([chief] if has_chief else [])]
        if all(k in done for k in needed):
            return "all workers" + (" and the chief" if has_chief else "") + " succeeded"
        return None
    decider = chief if has_chief else replica_key(Role.WORKER, 0)
    return f"{decider} succeeded" if decider in done else None


def _cleanup(policy: RunPolicy, status: JobStatus, reason: str) -> list[Action]:
    if policy.clean_pod_policy is CleanPodPolicy.NONE:
        # Running replicas stay; only cancel restarts that would start something new.
        return [Stop(r.key, reason) for r in status.replicas if r.state is ReplicaState.BACKOFF]
    return [Stop(r.key, reason) for r in status.replicas if r.state.stoppable]


def _finish(
    job: TFJob,
    status: JobStatus,
    phase: JobPhase,
    reason: str,
    message: str,
    events: tuple[str, ...] = (),
) -> Decision:
    return Decision(
        phase=phase,
        restarts=status.restarts,
        actions=tuple(_cleanup(job.spec.run_policy, status, f"job {phase.value.lower()}")),
        reason=reason,
        message=message,
        finished=True,
        events=(*events, f"job {phase.value}: {message}"),
    )


def _exit_text(code: int | None) -> str:
    if code is not None and code > 128:
        return f"exit code {code} (signal {code - 128})"
    return f"exit code {code}"


def _failed_text(r: ReplicaStatus) -> str:
    """How a failed replica ended: its exit code, and OOMKilled when it was killed over its
    memory limit (the kubelet's reason, or the local engine's cgroup)."""
    if "OOMKilled" in (r.message or ""):
        return f"exit code {r.exit_code} (OOMKilled: over its memory limit)"
    return _exit_text(r.exit_code)


def plan(job: TFJob, status: JobStatus, now: float) -> Decision:
    """Decide the job's next phase and the actions that get it there."""
    policy = job.spec.run_policy

    actions: list[Action]
    if status.phase.terminal:
        actions = _cleanup(policy, status, f"job {status.phase.value.lower()}")
        ttl = policy.ttl_seconds_after_finished
        if ttl is not None and status.finished_at is not None and now >= status.finished_at + ttl:
            actions.append(DeleteJob())
        return Decision(
            phase=status.phase,
            restarts=status.restarts,
            actions=tuple(actions),
            reason=status.reason,
            message=status.message,
        )

    deadline = policy.active_deadline_seconds
    if deadline is not None and now - status.started_at >= deadline:
        return _finish(
            job,
            status,
            JobPhase.FAILED,
            "DeadlineExceeded",
            f"the job ran longer than activeDeadlineSeconds={deadline}",
        )

    succeeded = success_reached(job, status)
    if succeeded is not None:
        return _finish(job, status, JobPhase.SUCCEEDED, "Succeeded", succeeded)

    failed = [r for r in status.replicas if r.state is ReplicaState.FAILED]
    for r in failed:
        reason = contract.launcher_failure(r.exit_code, r.message)
        if reason is not None:
            return _finish(
                job,
                status,
                JobPhase.FAILED,
                "SetupFailed",
                f"{r.key} could not start: {reason} ({_exit_text(r.exit_code)}; the "
                "launcher's own failure, never retried)",
            )
    stalled = stalled_replicas(policy, status, now)
    events: list[str] = _stall_events(status, stalled, now)
    if stalled and policy.stall_action is StallAction.FAIL:
        r = status.replica(sorted(stalled)[0])
        text = _stall_text(policy, r, now)
        return _finish(job, status, JobPhase.FAILED, "Stalled", text, tuple(events))
    to_fix = [(r, f"{r.key} failed with {_failed_text(r)}") for r in failed]
    if policy.stall_action is StallAction.RESTART:
        to_fix += [(r, f"{r.key} stalled") for r in status.replicas if r.key in stalled]
    actions = []
    restarts = status.restarts
    if to_fix:
        for r in failed:
            restart_policy = job.spec.restart_policy(r.role)  # the role's, else the job's
            if not should_retry(restart_policy, r.exit_code):
                return _finish(
                    job,
                    status,
                    JobPhase.FAILED,
                    "ReplicaFailed",
                    f"{r.key} failed with {_failed_text(r)}; restartPolicy "
                    f"{restart_policy.value} does not retry it",
                )
        if restarts + len(to_fix) > policy.backoff_limit:
            r, what = to_fix[0]
            return _finish(
                job,
                status,
                JobPhase.FAILED,
                "BackoffLimitExceeded",
                f"{what} after {restarts} restarts (backoffLimit={policy.backoff_limit})",
                tuple(events),
            )
        restarts += len(to_fix)
        to_restart: dict[str, tuple[float, str]] = {}
        for number, (r, what) in enumerate(to_fix, start=status.restarts + 1):
            at = now + policy.backoff.delay(r.restarts)
            to_restart[r.key] = (at, what)
            events.append(f"{what}; restart {number} of {policy.backoff_limit} in {at - now:.1f}s")
        fixed_ps = [r for r, _ in to_fix if r.role == Role.PS.value]
        if fixed_ps:
            at = min(to_restart[r.key][0] for r in fixed_ps)
            why = f"{fixed_ps[0].key} {'failed' if fixed_ps[0] in failed else 'stalled'}: "
            why += "restarting the replicas that use it"
            for r in _dependents_of_ps(status.replicas):
                if r.key not in to_restart:
                    to_restart[r.key] = (at, why)
            events.append(
                why + ", to resume from the last checkpoint"
                if status.checkpoints_kept
                else why + f", from scratch: {NO_SHARED_CHECKPOINTS}"
            )
        actions += [Restart(key, at, why) for key, (at, why) in to_restart.items()]

    restarting: set[str] = set()
    restarted = {a.key for a in actions if isinstance(a, Restart)}
    for r in status.replicas:
        if r.key in restarted:
            restarting.add(r.key)
        elif r.state is ReplicaState.PENDING:
            if r.held is None:
                actions.append(Start(r.key))
        elif r.state is ReplicaState.BACKOFF:
            if r.held is not None:
                restarting.add(r.key)
            elif r.next_start_at is not None and now >= r.next_start_at:
                actions.append(Start(r.key))
            else:
                restarting.add(r.key)

    if restarting:
        phase = JobPhase.RESTARTING
    elif any(r.state is ReplicaState.PENDING for r in status.replicas) and not any(
        r.state is not ReplicaState.PENDING for r in status.replicas
    ):
        phase = JobPhase.PENDING
    else:
        phase = JobPhase.RUNNING
    return Decision(
        phase=phase,
        restarts=restarts,
        actions=tuple(actions),
        reason=status.reason if phase is status.phase else None,
        events=tuple(events),
        stalled=frozenset(k for k in stalled if k not in restarting),
    )


def stalled_replicas(policy: RunPolicy, status: JobStatus, now: float) -> frozenset[str]:
    """Running replicas whose last progress is at least stallSeconds old."""
    limit = policy.stall_seconds
    if limit is None:
        return frozenset()
    return frozenset(
        r.key
        for r in status.replicas
        if r.state is ReplicaState.RUNNING
        and r.progress_at is not None
        and now - r.progress_at >= limit
    )


def _stall_text(policy: RunPolicy, r: ReplicaStatus, now: float) -> str:
    quiet = now - (r.progress_at or now)
    return (
        f"{r.key} made no progress for {quiet:.0f}s (no log line, nothing written in the "
        f"log/checkpoint folder; stallSeconds={policy.stall_seconds})"
    )


def _stall_events(status: JobStatus, stalled: frozenset[str], now: float) -> list[str]:
    """An event when a replica becomes stalled, and when a stalled one moves again."""
    events = []
    for r in status.replicas:
        if r.key in stalled and not r.stalled:
            quiet = now - (r.progress_at or now)
            events.append(f"{r.key} is stalled: no progress for {quiet:.0f}s")
        elif r.stalled and r.key not in stalled and r.state is ReplicaState.RUNNING:
            events.append(f"{r.key} makes progress again")
    return events


def _dependents_of_ps(replicas: tuple[ReplicaStatus, ...]) -> list[ReplicaStatus]:
    """Replicas whose training state lives on the PS and that have not finished."""
    return [
        r for r in replicas if r.role != Role.PS.value and r.state is not ReplicaState.SUCCEEDED
    ]
