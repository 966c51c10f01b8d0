"""Changing a running job's number of workers (`tfkube scale JOB --workers N`). Pure.

Only asynchronous parameter-server training changes size while it runs: each worker
trains on its own against the PS, so a worker can join or leave without the others
noticing. A job without PS has no shared state for a new worker to join; a job with a
chief has a coordinator (TF2's ParameterServerStrategy) that schedules on the workers it
knew at start and never learns of new ones. Both are refused, naming the field.

What a resize does to the replicas: added workers take the next indexes (`worker-N`...)
and start like any pending replica; removed workers are always the highest indexes (so
`worker-0`, the chief of a between-graph job, stays) and are stopped, not failed: a
stop on request, never a restart, never counted against backoffLimit. After it the
job's spec holds the new count, so the success policy (`success_reached`: worker 0, or
all workers) is judged over the current size.
"""

from __future__ import annotations

from dataclasses import dataclass

from tfkube.planner._types import JobPhase
from tfkube.spec import FieldError, GangScheduler, ReplicaSpec, Role, TFJob

MAX_WORKERS: int = next(
    m.le for m in ReplicaSpec.model_fields["replicas"].metadata if hasattr(m, "le")
)
"""The job model's own bound on a role's replicas (no copy of the number)."""


@dataclass(frozen=True)
class Resize:
    """What a resize from `before` to `after` workers does: the indexes it adds and the
    ones it removes (highest first removed: they are listed in index order)."""

    before: int
    after: int

    @property
    def added(self) -> list[int]:
        return list(range(self.before, self.after))

    @property
    def removed(self) -> list[int]:
        return list(range(self.after, self.before))

    def text(self) -> str:
        """The event's words, e.g. `scaled from 2 to 4 workers: added worker-2, worker-3`."""
        head = f"scaled from {self.before} to {self.after} workers"
        if self.added:
            return head + ": added " + ", ".join(f"worker-{i}" for i in self.added)
        if self.removed:
            return head + ": stopped " + ", ".join(f"worker-{i}" for i in self.removed)
        return f"already {self.after} workers: nothing to change"


def scale_problems(job: TFJob, phase: JobPhase, workers: int) -> list[FieldError]:
    """Why `job` (now in `phase`) cannot run with `workers` workers; empty when it can."""
    problems = []
    if workers < 1:
        problems.append(
            FieldError(
                "workers",
                f"{workers} is out of range: a job needs at least 1 worker; give 1 or more",
            )
        )
    elif workers > MAX_WORKERS:
        problems.append(
            FieldError("workers", f"{workers} is out of range: it must be at most {MAX_WORKERS}")
        )
    if job.spec.replicas.count(Role.PS) < 1:
        problems.append(
            FieldError(
                "spec.replicas.ps",
                "the job has no parameter servers: only asynchronous PS training "
                "(between-graph, e.g. examples/mnist-between-graph) changes its number of "
                "workers while it runs; resubmit the job with the size you want",
            )
        )
    if job.spec.replicas.count(Role.CHIEF) > 0:
        problems.append(
            FieldError(
                "spec.replicas.chief",
                "the job has a chief, which coordinates the workers it knew at start "
                "(ParameterServerStrategy never learns of new ones): only between-graph "
                "jobs, where each worker trains on its own, change size while they run",
            )
        )
    if phase.terminal:
        problems.append(
            FieldError("status.phase", f"the job has ended ({phase.value}): nothing runs to scale")
        )
    return problems


def cluster_scale_problems(job: TFJob) -> list[FieldError]:
    """What else keeps a job from changing size in a cluster (the Kubernetes engine and
    the operator, on top of `scale_problems`): a gang is sized when it is submitted (its
    PodGroup's minMember, the Kueue workload's pod count), and neither follows a resize."""
    scheduling = job.spec.scheduling
    if scheduling is None or scheduling.gang is GangScheduler.NONE:
        return []
    return [
        FieldError(
            "spec.scheduling.gang",
            f"the job is gang-scheduled ({scheduling.gang.value}), sized when it was "
            "submitted: a running gang does not change size; resubmit the job with the "
            "size you want, or without spec.scheduling.gang to scale it",
        )
    ]


def scaled_job(job: TFJob, workers: int) -> TFJob:
    """The same job with `workers` workers (the caller checked `scale_problems`)."""
    spec = job.spec.replicas.get(Role.WORKER)
    assert spec is not None  # every job has workers (the model's own rule)
    replicas = job.spec.replicas.model_copy(
        update={"worker": spec.model_copy(update={"replicas": workers})}
    )
    return job.model_copy(update={"spec": job.spec.model_copy(update={"replicas": replicas})})
