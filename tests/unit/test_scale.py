"""The pure decisions of `tfkube scale` (`tfkube.planner._scale`): which jobs may change
size, what a resize adds and removes, and that the success policy follows the new size."""

from __future__ import annotations

import pytest

from tfkube.planner import (
    MAX_WORKERS,
    JobPhase,
    JobStatus,
    ReplicaState,
    ReplicaStatus,
    Resize,
    scale_problems,
    scaled_job,
    success_reached,
)
from tfkube.server.jobs.admission import Amount, Quota, resize_refusal
from tfkube.spec import TFJob, dump_job, load_job_text

from .test_planner import job


def fields(j: TFJob, workers: int, phase: JobPhase = JobPhase.RUNNING) -> list[str]:
    return [e.field for e in scale_problems(j, phase, workers)]


@pytest.mark.parametrize(
    ("counts", "workers", "phase", "expected"),
    [
        ({"ps": 1}, 4, JobPhase.RUNNING, []),
        ({"ps": 2}, 1, JobPhase.RESTARTING, []),
        ({"ps": 1}, 1, JobPhase.PENDING, []),
        ({"ps": 1, "evaluator": 1}, 3, JobPhase.RUNNING, []),
        ({"ps": 1}, MAX_WORKERS, JobPhase.RUNNING, []),
        ({}, 3, JobPhase.RUNNING, ["spec.replicas.ps"]),
        ({"ps": 1, "chief": 1}, 3, JobPhase.RUNNING, ["spec.replicas.chief"]),
        ({"ps": 1}, 0, JobPhase.RUNNING, ["workers"]),
        ({"ps": 1}, -2, JobPhase.RUNNING, ["workers"]),
        ({"ps": 1}, MAX_WORKERS + 1, JobPhase.RUNNING, ["workers"]),
        ({"ps": 1}, 3, JobPhase.SUCCEEDED, ["status.phase"]),
        ({"ps": 1}, 3, JobPhase.FAILED, ["status.phase"]),
        (
            {"chief": 1},
            0,
            JobPhase.FAILED,
            ["workers", "spec.replicas.ps", "spec.replicas.chief", "status.phase"],
        ),
    ],
)
def test_which_jobs_may_change_size(
    counts: dict[str, int], workers: int, phase: JobPhase, expected: list[str]
) -> None:
    assert fields(job(**counts), workers, phase) == expected


def test_a_refusal_says_what_to_do() -> None:
    (no_ps,) = scale_problems(job(), JobPhase.RUNNING, 3)
    assert "asynchronous PS training" in no_ps.message
    assert "resubmit" in no_ps.message
    (zero,) = scale_problems(job(ps=1), JobPhase.RUNNING, 0)
    assert zero.message.startswith("0 is out of range")


@pytest.mark.parametrize(
    ("before", "after", "added", "removed", "text"),
    [
        (2, 4, [2, 3], [], "scaled from 2 to 4 workers: added worker-2, worker-3"),
        (4, 1, [], [1, 2, 3], "scaled from 4 to 1 workers: stopped worker-1, worker-2, worker-3"),
        (2, 2, [], [], "already 2 workers: nothing to change"),
        (1, 2, [1], [], "scaled from 1 to 2 workers: added worker-1"),
    ],
)
def test_a_resize_adds_the_next_indexes_and_removes_the_highest(
    before: int, after: int, added: list[int], removed: list[int], text: str
) -> None:
    resize = Resize(before, after)
    assert (resize.added, resize.removed, resize.text()) == (added, removed, text)


def test_the_scaled_job_changes_only_the_worker_count() -> None:
    original = job(ps=1, workers=2, successPolicy="AllWorkers")
    bigger = scaled_job(original, 4)
    assert bigger.spec.replicas.counts() == {"chief": 0, "ps": 1, "worker": 4, "evaluator": 0}
    assert original.spec.replicas.counts()["worker"] == 2
    # Written and read back (job.yaml), it is the same job with the new count.
    again = load_job_text(dump_job(bigger), "job.yaml")
    assert again == bigger
    assert dump_job(scaled_job(bigger, 2)) == dump_job(original)


def _status(*states: tuple[str, ReplicaState]) -> JobStatus:
    replicas = tuple(
        ReplicaStatus(key.split("-")[0], int(key.split("-")[1]), state) for key, state in states
    )
    return JobStatus(JobPhase.RUNNING, 0.0, replicas)


def test_all_workers_success_is_judged_over_the_current_size() -> None:
    ok, run = ReplicaState.SUCCEEDED, ReplicaState.RUNNING
    four = job(ps=1, workers=4, successPolicy="AllWorkers")
    status = _status(("ps-0", run), ("worker-0", ok), ("worker-1", ok))
    assert success_reached(four, status) is None
    assert success_reached(scaled_job(four, 2), status) == "all workers succeeded"
    grown = _status(("ps-0", run), ("worker-0", ok), ("worker-1", ok), ("worker-2", run))
    assert success_reached(scaled_job(four, 3), grown) is None


GiB = 2**30


@pytest.mark.parametrize(
    ("quota", "holds", "extra", "free", "refused"),
    [
        (Quota(), Amount(2), Amount(2), None, None),
        (Quota(cpu=4), Amount(2), Amount(2), None, None),
        (Quota(cpu=4), Amount(3), Amount(2), None, "past the team's quota"),
        (Quota(memory=4 * GiB), Amount(1, 3 * GiB), Amount(1, 2 * GiB), None, "team's quota"),
        (Quota(gpu=1), Amount(1, 0, 1), Amount(1, 0, 1), None, "team's quota"),
        # A resize is no new job: a team at its job limit may still grow one.
        (Quota(jobs=1), Amount(2), Amount(2), None, None),
        (Quota(), Amount(2), Amount(2), Amount(1.5), "the machine has 1.5 CPU free"),
        (Quota(), Amount(2), Amount(1), Amount(1), None),
        # Shrinking always may, whatever is free.
        (Quota(cpu=1), Amount(8), Amount(-2, -GiB), Amount(-3), None),
    ],
)
def test_growing_counts_against_the_quota_and_the_free_machine(
    quota: Quota, holds: Amount, extra: Amount, free: Amount | None, refused: str | None
) -> None:
    why = resize_refusal(quota, holds, extra, free)
    assert (why is None) == (refused is None), why
    assert refused is None or refused in (why or "")
