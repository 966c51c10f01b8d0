"""The planner: every branch of `plan`, plus the retry and success helpers."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tfkube.contract import (
    EX_CONFIG,
    EX_DATAERR,
    EX_NOEXEC,
    EX_NOINPUT,
    EX_NOTFOUND,
    EX_TEMPFAIL,
    launcher_message,
)
from tfkube.planner import (
    Decision,
    DeleteJob,
    JobPhase,
    JobStatus,
    ReplicaState,
    ReplicaStatus,
    Restart,
    Start,
    Stop,
    is_retryable_exit,
    plan,
    should_retry,
    success_reached,
)
from tfkube.spec import RestartPolicy, parse_job

P = ReplicaState.PENDING
RUN = ReplicaState.RUNNING
OK = ReplicaState.SUCCEEDED
FAIL = ReplicaState.FAILED
BACK = ReplicaState.BACKOFF
STOP = ReplicaState.STOPPED

NOW = 1000.0
T0 = 900.0


def job(
    chief: int = 0,
    ps: int = 0,
    workers: int = 2,
    evaluator: int = 0,
    own_policies: dict[str, str] | None = None,
    **run_policy: Any,
):
    """A job with these counts; `run_policy` keys are camelCase runPolicy fields;
    `own_policies` gives a role its own restartPolicy."""
    replicas: dict[str, Any] = {"worker": {"replicas": workers}}
    for role, n in (("chief", chief), ("ps", ps), ("evaluator", evaluator)):
        if n:
            replicas[role] = {"replicas": n}
    for role, own in (own_policies or {}).items():
        replicas[role]["restartPolicy"] = own
    return parse_job(
        {
            "apiVersion": "tfkube.io/v1alpha1",
            "kind": "TFJob",
            "metadata": {"name": "j"},
            "spec": {
                "replicas": replicas,
                "code": {"source": "."},
                "runPolicy": run_policy,
            },
        }
    )


def r(
    key: str,
    state: ReplicaState = RUN,
    code: int | None = None,
    restarts: int = 0,
    at: float | None = None,
    message: str | None = None,
    progress: float | None = None,
    stalled: bool = False,
) -> ReplicaStatus:
    role, index = key.rsplit("-", 1)
    return ReplicaStatus(role, int(index), state, code, restarts, at, message, progress, stalled)


def st(
    *replicas: ReplicaStatus,
    phase: JobPhase = JobPhase.RUNNING,
    restarts: int = 0,
    finished_at: float | None = None,
    reason: str | None = None,
    message: str | None = None,
) -> JobStatus:
    return JobStatus(phase, T0, replicas, restarts, finished_at, reason, message)


def stops(reason: str, *keys: str) -> tuple[Stop, ...]:
    return tuple(Stop(k, reason) for k in keys)


# -- helpers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        pytest.param(None, False, id="none"),
        pytest.param(0, False, id="zero"),
        pytest.param(1, False, id="1-user-error"),
        pytest.param(2, False, id="2"),
        pytest.param(74, False, id="74"),
        pytest.param(EX_TEMPFAIL, True, id="75-tempfail"),
        pytest.param(76, False, id="76"),
        pytest.param(127, False, id="127"),
        pytest.param(128, True, id="128"),
        pytest.param(137, True, id="137-sigkill"),
        pytest.param(143, True, id="143-sigterm"),
        pytest.param(255, True, id="255"),
    ],
)
def test_is_retryable_exit(code, expected):
    assert is_retryable_exit(code) is expected


@pytest.mark.parametrize(
    ("policy", "code", "expected"),
    [
        pytest.param(RestartPolicy.NEVER, 137, False, id="never-signal"),
        pytest.param(RestartPolicy.NEVER, 75, False, id="never-tempfail"),
        pytest.param(RestartPolicy.NEVER, 1, False, id="never-user"),
        pytest.param(RestartPolicy.ON_FAILURE, 1, True, id="onfailure-user"),
        pytest.param(RestartPolicy.ON_FAILURE, 137, True, id="onfailure-signal"),
        pytest.param(RestartPolicy.ON_FAILURE, None, True, id="onfailure-unknown"),
        pytest.param(RestartPolicy.EXIT_CODE, 1, False, id="exitcode-1"),
        pytest.param(RestartPolicy.EXIT_CODE, 127, False, id="exitcode-127"),
        pytest.param(RestartPolicy.EXIT_CODE, 75, True, id="exitcode-75"),
        pytest.param(RestartPolicy.EXIT_CODE, 130, True, id="exitcode-130"),
        pytest.param(RestartPolicy.EXIT_CODE, None, False, id="exitcode-unknown"),
    ],
)
def test_should_retry(policy, code, expected):
    assert should_retry(policy, code) is expected


@pytest.mark.parametrize(
    ("the_job", "replicas", "expected"),
    [
        pytest.param(job(chief=1), [r("chief-0", OK)], "chief-0 succeeded", id="default-chief"),
        pytest.param(
            job(chief=1),
            [r("chief-0"), r("worker-0", OK), r("worker-1", OK)],
            None,
            id="default-chief-decides-not-workers",
        ),
        pytest.param(job(), [r("worker-0", OK)], "worker-0 succeeded", id="default-worker-0"),
        pytest.param(job(), [r("worker-0"), r("worker-1", OK)], None, id="default-worker-1"),
        pytest.param(
            job(successPolicy="AllWorkers"),
            [r("worker-0", OK), r("worker-1", OK)],
            "all workers succeeded",
            id="all-workers",
        ),
        pytest.param(
            job(successPolicy="AllWorkers"),
            [r("worker-0", OK), r("worker-1")],
            None,
            id="all-workers-one-running",
        ),
        pytest.param(
            job(chief=1, successPolicy="AllWorkers"),
            [r("chief-0", OK), r("worker-0", OK), r("worker-1", OK)],
            "all workers and the chief succeeded",
            id="all-workers-and-chief",
        ),
        pytest.param(
            job(chief=1, successPolicy="AllWorkers"),
            [r("chief-0"), r("worker-0", OK), r("worker-1", OK)],
            None,
            id="all-workers-chief-running",
        ),
        pytest.param(
            job(chief=1, successPolicy="AllWorkers"),
            [r("chief-0", OK), r("worker-0", OK), r("worker-1", FAIL, 1)],
            None,
            id="all-workers-one-failed",
        ),
        pytest.param(
            job(ps=1, evaluator=1, successPolicy="AllWorkers"),
            [r("ps-0"), r("worker-0", OK), r("worker-1", OK), r("evaluator-0")],
            "all workers succeeded",
            id="all-workers-ignores-ps-and-evaluator",
        ),
    ],
)
def test_success_reached(the_job, replicas, expected):
    assert success_reached(the_job, st(*replicas)) == expected


# -- plan: the table --------------------------------------------------------------------

RUNNING_PS_JOB = (r("ps-0"), r("worker-0"), r("worker-1"))


@pytest.mark.parametrize(
    ("the_job", "status", "now", "phase", "restarts", "actions", "reason", "finished"),
    [
        # start-up
        pytest.param(
            job(ps=1),
            st(r("ps-0", P), r("worker-0", P), r("worker-1", P), phase=JobPhase.PENDING),
            NOW,
            JobPhase.PENDING,
            0,
            (Start("ps-0"), Start("worker-0"), Start("worker-1")),
            None,
            False,
            id="pending-starts-everything",
        ),
        pytest.param(
            job(ps=1),
            st(r("ps-0"), r("worker-0", P), r("worker-1"), phase=JobPhase.PENDING),
            NOW,
            JobPhase.RUNNING,
            0,
            (Start("worker-0"),),
            None,
            False,
            id="some-pending-is-running",
        ),
        pytest.param(
            job(ps=1),
            st(*RUNNING_PS_JOB),
            NOW,
            JobPhase.RUNNING,
            0,
            (),
            None,
            False,
            id="all-running-nothing-to-do",
        ),
        pytest.param(
            job(ps=1),
            st(*RUNNING_PS_JOB, reason="Resumed"),
            NOW,
            JobPhase.RUNNING,
            0,
            (),
            "Resumed",
            False,
            id="same-phase-keeps-reason",
        ),
        pytest.param(
            job(ps=1),
            st(*RUNNING_PS_JOB, phase=JobPhase.RESTARTING, reason="Restarting"),
            NOW,
            JobPhase.RUNNING,
            0,
            (),
            None,
            False,
            id="new-phase-drops-reason",
        ),
        pytest.param(
            job(),
            st(r("worker-0"), r("worker-1", OK)),
            NOW,
            JobPhase.RUNNING,
            0,
            (),
            None,
            False,
            id="non-deciding-worker-done-still-running",
        ),
        pytest.param(
            job(ps=1, evaluator=1),
            st(r("ps-0"), r("worker-0"), r("worker-1"), r("evaluator-0", STOP)),
            NOW,
            JobPhase.RUNNING,
            0,
            (),
            None,
            False,
            id="stopped-replica-is-left-alone",
        ),
        # success
        pytest.param(
            job(chief=1, ps=1),
            st(r("chief-0", OK), r("ps-0"), r("worker-0"), r("worker-1", OK)),
            NOW,
            JobPhase.SUCCEEDED,
            0,
            stops("job succeeded", "ps-0", "worker-0"),
            "Succeeded",
            True,
            id="default-chief-succeeded-stops-the-rest",
        ),
        pytest.param(
            job(chief=1, ps=1),
            st(r("chief-0"), r("ps-0"), r("worker-0", OK), r("worker-1", OK)),
            NOW,
            JobPhase.RUNNING,
            0,
            (),
            None,
            False,
            id="default-chief-present-workers-do-not-decide",
        ),
        pytest.param(
            job(ps=1, evaluator=1),
            st(r("ps-0"), r("worker-0", OK), r("worker-1", P), r("evaluator-0", BACK, 1, 1, 2e3)),
            NOW,
            JobPhase.SUCCEEDED,
            0,
            stops("job succeeded", "ps-0", "worker-1", "evaluator-0"),
            "Succeeded",
            True,
            id="default-no-chief-worker-0-decides",
        ),
        pytest.param(
            job(successPolicy="AllWorkers"),
            st(r("worker-0", OK), r("worker-1")),
            NOW,
            JobPhase.RUNNING,
            0,
            (),
            None,
            False,
            id="all-workers-waits-for-every-worker",
        ),
        pytest.param(
            job(ps=2, successPolicy="AllWorkers"),
            st(r("ps-0"), r("ps-1"), r("worker-0", OK), r("worker-1", OK)),
            NOW,
            JobPhase.SUCCEEDED,
            0,
            stops("job succeeded", "ps-0", "ps-1"),
            "Succeeded",
            True,
            id="all-workers-succeeded",
        ),
        pytest.param(
            job(chief=1, successPolicy="AllWorkers", restartPolicy="Never"),
            st(r("chief-0", OK), r("worker-0", OK), r("worker-1", OK), restarts=2),
            NOW,
            JobPhase.SUCCEEDED,
            2,
            (),
            "Succeeded",
            True,
            id="all-workers-and-chief-nothing-left",
        ),
        pytest.param(
            job(chief=1, ps=1, restartPolicy="Never"),
            st(r("chief-0", OK), r("ps-0"), r("worker-0", FAIL, 1), r("worker-1")),
            NOW,
            JobPhase.SUCCEEDED,
            0,
            stops("job succeeded", "ps-0", "worker-1"),
            "Succeeded",
            True,
            id="success-beats-simultaneous-failure",
        ),
        pytest.param(
            job(ps=1, cleanPodPolicy="None"),
            st(r("ps-0"), r("worker-0", OK), r("worker-1", BACK, 1, 1, 2e3)),
            NOW,
            JobPhase.SUCCEEDED,
            0,
            stops("job succeeded", "worker-1"),
            "Succeeded",
            True,
            id="success-clean-none-cancels-backoff-only",
        ),
        pytest.param(
            job(ps=1, cleanPodPolicy="All"),
            st(r("ps-0"), r("worker-0", OK), r("worker-1")),
            NOW,
            JobPhase.SUCCEEDED,
            0,
            stops("job succeeded", "ps-0", "worker-1"),
            "Succeeded",
            True,
            id="success-clean-all",
        ),
        # failures that are retried
        pytest.param(
            job(),
            st(r("worker-0"), r("worker-1", FAIL, 1)),
            NOW,
            JobPhase.RESTARTING,
            1,
            (Restart("worker-1", NOW + 1, "worker-1 failed with exit code 1"),),
            None,
            False,
            id="onfailure-retries-user-error",
        ),
        pytest.param(
            job(restartPolicy="ExitCode"),
            st(r("worker-0"), r("worker-1", FAIL, 137)),
            NOW,
            JobPhase.RESTARTING,
            1,
            (Restart("worker-1", NOW + 1, "worker-1 failed with exit code 137 (signal 9)"),),
            None,
            False,
            id="exitcode-retries-signal",
        ),
        pytest.param(
            job(restartPolicy="ExitCode"),
            st(r("worker-0", FAIL, 75), r("worker-1")),
            NOW,
            JobPhase.RESTARTING,
            1,
            (Restart("worker-0", NOW + 1, "worker-0 failed with exit code 75"),),
            None,
            False,
            id="exitcode-retries-tempfail",
        ),
        pytest.param(
            job(restartPolicy="ExitCode"),
            st(r("worker-0", FAIL, 128), r("worker-1")),
            NOW,
            JobPhase.RESTARTING,
            1,
            (Restart("worker-0", NOW + 1, "worker-0 failed with exit code 128"),),
            None,
            False,
            id="exitcode-retries-128",
        ),
        pytest.param(
            job(backoffLimit=3),
            st(r("worker-0", FAIL, 1), r("worker-1"), restarts=2),
            NOW,
            JobPhase.RESTARTING,
            3,
            (Restart("worker-0", NOW + 1, "worker-0 failed with exit code 1"),),
            None,
            False,
            id="backoff-limit-exactly-reached-restarts",
        ),
        pytest.param(
            job(backoffLimit=3),
            st(r("worker-0", FAIL, 1), r("worker-1", FAIL, 2), restarts=1),
            NOW,
            JobPhase.RESTARTING,
            3,
            (
                Restart("worker-0", NOW + 1, "worker-0 failed with exit code 1"),
                Restart("worker-1", NOW + 1, "worker-1 failed with exit code 2"),
            ),
            None,
            False,
            id="two-failures-reach-the-limit-together",
        ),
        pytest.param(
            job(),
            st(r("worker-0", FAIL, 1, restarts=3), r("worker-1", BACK, 1, 1, NOW + 5)),
            NOW,
            JobPhase.RESTARTING,
            1,
            (Restart("worker-0", NOW + 8, "worker-0 failed with exit code 1"),),
            None,
            False,
            id="backoff-grows-with-replica-restarts",
        ),
        pytest.param(
            job(backoffLimit=100, backoff={"baseSeconds": 2, "capSeconds": 10}),
            st(r("worker-0", FAIL, 1, restarts=7), r("worker-1"), restarts=50),
            NOW,
            JobPhase.RESTARTING,
            51,
            (Restart("worker-0", NOW + 10, "worker-0 failed with exit code 1"),),
            None,
            False,
            id="backoff-capped",
        ),
        # failures that fail the job
        pytest.param(
            job(restartPolicy="Never"),
            st(r("worker-0"), r("worker-1", FAIL, 137)),
            NOW,
            JobPhase.FAILED,
            0,
            stops("job failed", "worker-0"),
            "ReplicaFailed",
            True,
            id="never-fails-at-once",
        ),
        pytest.param(
            job(restartPolicy="ExitCode"),
            st(r("worker-0"), r("worker-1", FAIL, 1)),
            NOW,
            JobPhase.FAILED,
            0,
            stops("job failed", "worker-0"),
            "ReplicaFailed",
            True,
            id="exitcode-1-is-the-users-error",
        ),
        pytest.param(
            job(restartPolicy="ExitCode"),
            st(r("worker-0"), r("worker-1", FAIL, 127)),
            NOW,
            JobPhase.FAILED,
            0,
            stops("job failed", "worker-0"),
            "ReplicaFailed",
            True,
            id="exitcode-127-is-the-users-error",
        ),
        pytest.param(
            job(restartPolicy="ExitCode"),
            st(r("worker-0", FAIL, 137), r("worker-1", FAIL, 2)),
            NOW,
            JobPhase.FAILED,
            0,
            (),
            "ReplicaFailed",
            True,
            id="exitcode-one-unretryable-among-failures",
        ),
        pytest.param(
            job(backoffLimit=3),
            st(r("worker-0", FAIL, 1), r("worker-1"), restarts=3),
            NOW,
            JobPhase.FAILED,
            3,
            stops("job failed", "worker-1"),
            "BackoffLimitExceeded",
            True,
            id="backoff-limit-exceeded",
        ),
        pytest.param(
            job(backoffLimit=3),
            st(r("worker-0", FAIL, 1), r("worker-1", FAIL, 1), restarts=2),
            NOW,
            JobPhase.FAILED,
            2,
            (),
            "BackoffLimitExceeded",
            True,
            id="two-failures-exceed-the-limit",
        ),
        pytest.param(
            job(backoffLimit=0),
            st(r("worker-0", FAIL, 137), r("worker-1", BACK, at=NOW + 9)),
            NOW,
            JobPhase.FAILED,
            0,
            stops("job failed", "worker-1"),
            "BackoffLimitExceeded",
            True,
            id="backoff-limit-0",
        ),
        pytest.param(
            job(backoffLimit=0, cleanPodPolicy="None"),
            st(r("worker-0", FAIL, 137), r("worker-1", BACK, at=NOW + 9), r("worker-2", P)),
            NOW,
            JobPhase.FAILED,
            0,
            stops("job failed", "worker-1"),
            "BackoffLimitExceeded",
            True,
            id="failed-clean-none-cancels-backoff-only",
        ),
        # PS failure
        pytest.param(
            job(chief=1, ps=2, evaluator=1),
            st(
                r("chief-0"),
                r("ps-0", FAIL, 137, restarts=1),
                r("ps-1"),
                r("worker-0"),
                r("worker-1", OK),
                r("evaluator-0", P),
            ),
            NOW,
            JobPhase.RESTARTING,
            1,
            (
                Restart("ps-0", NOW + 2, "ps-0 failed with exit code 137 (signal 9)"),
                Restart("chief-0", NOW + 2, "ps-0 failed: restarting the replicas that use it"),
                Restart("worker-0", NOW + 2, "ps-0 failed: restarting the replicas that use it"),
                Restart("evaluator-0", NOW + 2, "ps-0 failed: restarting the replicas that use it"),
            ),
            None,
            False,
            id="ps-failure-restarts-unfinished-non-ps",
        ),
        pytest.param(
            job(ps=1, backoffLimit=10),
            st(r("ps-0", FAIL, 1), r("worker-0", FAIL, 1, restarts=3), r("worker-1")),
            NOW,
            JobPhase.RESTARTING,
            2,
            (
                Restart("ps-0", NOW + 1, "ps-0 failed with exit code 1"),
                Restart("worker-0", NOW + 8, "worker-0 failed with exit code 1"),
                Restart("worker-1", NOW + 1, "ps-0 failed: restarting the replicas that use it"),
            ),
            None,
            False,
            id="ps-and-worker-fail-worker-keeps-its-own-backoff",
        ),
        pytest.param(
            job(ps=2, backoffLimit=10),
            st(r("ps-0", FAIL, 1, restarts=4), r("ps-1", FAIL, 1, restarts=1), r("worker-0")),
            NOW,
            JobPhase.RESTARTING,
            2,
            (
                Restart("ps-0", NOW + 16, "ps-0 failed with exit code 1"),
                Restart("ps-1", NOW + 2, "ps-1 failed with exit code 1"),
                Restart("worker-0", NOW + 2, "ps-0 failed: restarting the replicas that use it"),
            ),
            None,
            False,
            id="two-ps-fail-dependents-at-the-earliest",
        ),
        pytest.param(
            job(ps=1, backoffLimit=1),
            st(r("ps-0", FAIL, 1), r("worker-0"), r("worker-1")),
            NOW,
            JobPhase.RESTARTING,
            1,
            (
                Restart("ps-0", NOW + 1, "ps-0 failed with exit code 1"),
                Restart("worker-0", NOW + 1, "ps-0 failed: restarting the replicas that use it"),
                Restart("worker-1", NOW + 1, "ps-0 failed: restarting the replicas that use it"),
            ),
            None,
            False,
            id="ps-dependents-do-not-count-against-backoff-limit",
        ),
        pytest.param(
            job(ps=1, restartPolicy="ExitCode"),
            st(r("ps-0", FAIL, 1), r("worker-0"), r("worker-1")),
            NOW,
            JobPhase.FAILED,
            0,
            stops("job failed", "worker-0", "worker-1"),
            "ReplicaFailed",
            True,
            id="ps-user-error-fails-the-job",
        ),
        # backoff
        pytest.param(
            job(),
            st(r("worker-0"), r("worker-1", BACK, 1, 1, NOW + 0.5), phase=JobPhase.RESTARTING),
            NOW,
            JobPhase.RESTARTING,
            0,
            (),
            None,
            False,
            id="backoff-not-yet-passed",
        ),
        pytest.param(
            job(),
            st(r("worker-0"), r("worker-1", BACK, 1, 1, NOW), phase=JobPhase.RESTARTING),
            NOW,
            JobPhase.RUNNING,
            0,
            (Start("worker-1"),),
            None,
            False,
            id="backoff-passed-exactly-now",
        ),
        pytest.param(
            job(),
            st(r("worker-0", BACK, 1, 1, NOW - 5), r("worker-1", BACK, 1, 1, NOW + 5)),
            NOW,
            JobPhase.RESTARTING,
            0,
            (Start("worker-0"),),
            None,
            False,
            id="one-backoff-passed-one-waiting",
        ),
        pytest.param(
            job(),
            st(r("worker-0"), r("worker-1", BACK), phase=JobPhase.RESTARTING, reason="R"),
            NOW,
            JobPhase.RESTARTING,
            0,
            (),
            "R",
            False,
            id="backoff-without-time-waits",
        ),
        # deadline
        pytest.param(
            job(ps=1, activeDeadlineSeconds=100),
            st(*RUNNING_PS_JOB),
            T0 + 100,
            JobPhase.FAILED,
            0,
            stops("job failed", "ps-0", "worker-0", "worker-1"),
            "DeadlineExceeded",
            True,
            id="deadline-reached",
        ),
        pytest.param(
            job(ps=1, activeDeadlineSeconds=100),
            st(*RUNNING_PS_JOB),
            T0 + 99.9,
            JobPhase.RUNNING,
            0,
            (),
            None,
            False,
            id="deadline-not-yet",
        ),
        pytest.param(
            job(activeDeadlineSeconds=100),
            st(r("worker-0", OK), r("worker-1")),
            T0 + 200,
            JobPhase.FAILED,
            0,
            stops("job failed", "worker-1"),
            "DeadlineExceeded",
            True,
            id="deadline-checked-before-success",
        ),
        pytest.param(
            job(activeDeadlineSeconds=100, cleanPodPolicy="None"),
            st(r("worker-0"), r("worker-1", BACK, 1, 1, T0 + 300)),
            T0 + 200,
            JobPhase.FAILED,
            0,
            stops("job failed", "worker-1"),
            "DeadlineExceeded",
            True,
            id="deadline-clean-none",
        ),
        # terminal phases are final
        pytest.param(
            job(ps=1),
            st(
                r("ps-0"),
                r("worker-0", OK),
                r("worker-1", P),
                phase=JobPhase.SUCCEEDED,
                finished_at=NOW,
                reason="Succeeded",
            ),
            NOW + 1,
            JobPhase.SUCCEEDED,
            0,
            stops("job succeeded", "ps-0", "worker-1"),
            "Succeeded",
            False,
            id="succeeded-stops-live-replicas",
        ),
        pytest.param(
            job(ps=1, cleanPodPolicy="All"),
            st(
                r("ps-0"),
                r("worker-0", FAIL, 1),
                r("worker-1", BACK, 1, 1, NOW),
                phase=JobPhase.FAILED,
                restarts=3,
                finished_at=NOW,
                reason="BackoffLimitExceeded",
            ),
            NOW,
            JobPhase.FAILED,
            3,
            stops("job failed", "ps-0", "worker-1"),
            "BackoffLimitExceeded",
            False,
            id="failed-all-stops-live-and-backoff",
        ),
        pytest.param(
            job(ps=1, cleanPodPolicy="None"),
            st(
                r("ps-0"),
                r("worker-0", FAIL, 1),
                r("worker-1", BACK, 1, 1, NOW),
                phase=JobPhase.FAILED,
                finished_at=NOW,
                reason="ReplicaFailed",
            ),
            NOW,
            JobPhase.FAILED,
            0,
            stops("job failed", "worker-1"),
            "ReplicaFailed",
            False,
            id="failed-none-only-cancels-backoff",
        ),
        pytest.param(
            job(activeDeadlineSeconds=1, restartPolicy="Never"),
            st(
                r("worker-0", FAIL, 1),
                r("worker-1", STOP),
                phase=JobPhase.SUCCEEDED,
                finished_at=NOW,
                reason="Succeeded",
            ),
            NOW + 10_000,
            JobPhase.SUCCEEDED,
            0,
            (),
            "Succeeded",
            False,
            id="terminal-ignores-failures-and-deadline",
        ),
        pytest.param(
            job(),
            st(
                r("worker-0", P),
                r("worker-1", P),
                phase=JobPhase.FAILED,
                finished_at=NOW,
                reason="X",
            ),
            NOW,
            JobPhase.FAILED,
            0,
            stops("job failed", "worker-0", "worker-1"),
            "X",
            False,
            id="terminal-never-starts-pending",
        ),
        # TTL
        pytest.param(
            job(ttlSecondsAfterFinished=60),
            st(r("worker-0", OK), r("worker-1", OK), phase=JobPhase.SUCCEEDED, finished_at=NOW),
            NOW + 59.9,
            JobPhase.SUCCEEDED,
            0,
            (),
            None,
            False,
            id="ttl-not-yet",
        ),
        pytest.param(
            job(ttlSecondsAfterFinished=60),
            st(r("worker-0", OK), r("worker-1", OK), phase=JobPhase.SUCCEEDED, finished_at=NOW),
            NOW + 60,
            JobPhase.SUCCEEDED,
            0,
            (DeleteJob(),),
            None,
            False,
            id="ttl-passed-exactly",
        ),
        pytest.param(
            job(ttlSecondsAfterFinished=0, cleanPodPolicy="None"),
            st(r("worker-0", OK), r("worker-1"), phase=JobPhase.SUCCEEDED, finished_at=NOW),
            NOW,
            JobPhase.SUCCEEDED,
            0,
            (DeleteJob(),),
            None,
            False,
            id="ttl-0-deletes-at-once",
        ),
        pytest.param(
            job(ttlSecondsAfterFinished=10),
            st(r("worker-0", FAIL, 1), r("worker-1"), phase=JobPhase.FAILED, finished_at=NOW),
            NOW + 11,
            JobPhase.FAILED,
            0,
            (Stop("worker-1", "job failed"), DeleteJob()),
            None,
            False,
            id="ttl-after-cleanup",
        ),
        pytest.param(
            job(ttlSecondsAfterFinished=10),
            st(r("worker-0", OK), r("worker-1", OK), phase=JobPhase.SUCCEEDED),
            NOW + 1e9,
            JobPhase.SUCCEEDED,
            0,
            (),
            None,
            False,
            id="ttl-without-finish-time",
        ),
        pytest.param(
            job(),
            st(r("worker-0", OK), r("worker-1", OK), phase=JobPhase.SUCCEEDED, finished_at=NOW),
            NOW + 1e9,
            JobPhase.SUCCEEDED,
            0,
            (),
            None,
            False,
            id="no-ttl-never-deletes",
        ),
    ],
)
def test_plan(the_job, status, now, phase, restarts, actions, reason, finished):
    decision = plan(the_job, status, now)
    assert decision.phase is phase
    assert decision.restarts == restarts
    assert decision.actions == actions
    assert decision.reason == reason
    assert decision.finished is finished
    if not finished:
        assert decision.message == (status.message if status.phase.terminal else None)


# -- plan: messages and events ----------------------------------------------------------


@pytest.mark.parametrize(
    ("the_job", "status", "now", "reason", "message"),
    [
        pytest.param(
            job(activeDeadlineSeconds=100),
            st(r("worker-0"), r("worker-1")),
            T0 + 100,
            "DeadlineExceeded",
            "the job ran longer than activeDeadlineSeconds=100",
            id="deadline",
        ),
        pytest.param(
            job(chief=1),
            st(r("chief-0", OK), r("worker-0"), r("worker-1")),
            NOW,
            "Succeeded",
            "chief-0 succeeded",
            id="success-chief",
        ),
        pytest.param(
            job(successPolicy="AllWorkers"),
            st(r("worker-0", OK), r("worker-1", OK)),
            NOW,
            "Succeeded",
            "all workers succeeded",
            id="success-all-workers",
        ),
        pytest.param(
            job(restartPolicy="ExitCode"),
            st(r("worker-0"), r("worker-1", FAIL, 3)),
            NOW,
            "ReplicaFailed",
            "worker-1 failed with exit code 3; restartPolicy ExitCode does not retry it",
            id="not-retried",
        ),
        pytest.param(
            job(restartPolicy="Never"),
            st(r("worker-0", FAIL, 143), r("worker-1")),
            NOW,
            "ReplicaFailed",
            "worker-0 failed with exit code 143 (signal 15); restartPolicy Never does not retry it",
            id="never-signal",
        ),
        pytest.param(
            job(backoffLimit=2),
            st(r("worker-0"), r("worker-1", FAIL, 137), restarts=2),
            NOW,
            "BackoffLimitExceeded",
            "worker-1 failed with exit code 137 (signal 9) after 2 restarts (backoffLimit=2)",
            id="backoff-limit",
        ),
        pytest.param(
            job(backoffLimit=0, restartPolicy="Never"),
            st(r("worker-0", FAIL, 137, message="exit code 137 (OOMKilled)"), r("worker-1")),
            NOW,
            "ReplicaFailed",
            "worker-0 failed with exit code 137 (OOMKilled: over its memory limit); "
            "restartPolicy Never does not retry it",
            id="oom-killed-kubernetes",
        ),
        pytest.param(
            job(backoffLimit=0),
            st(
                r("worker-0"),
                r(
                    "worker-1",
                    FAIL,
                    137,
                    message="OOMKilled: over its memory "
                    "limit of 256Mi (resources.memory); give it more or use less",
                ),
            ),
            NOW,
            "BackoffLimitExceeded",
            "worker-1 failed with exit code 137 (OOMKilled: over its memory limit) after 0 "
            "restarts (backoffLimit=0)",
            id="oom-killed-local",
        ),
        pytest.param(
            job(backoffLimit=0, restartPolicy="ExitCode"),
            st(r("worker-0", FAIL, 128), r("worker-1")),
            NOW,
            "BackoffLimitExceeded",
            "worker-0 failed with exit code 128 after 0 restarts (backoffLimit=0)",
            id="exit-128-is-not-a-signal",
        ),
    ],
)
def test_finish_messages(the_job, status, now, reason, message):
    decision = plan(the_job, status, now)
    assert decision.finished
    assert decision.reason == reason
    assert decision.message == message
    assert decision.events == (f"job {decision.phase.value}: {message}",)


def test_restart_events():
    decision = plan(job(ps=1, backoffLimit=5), st(r("ps-0", FAIL, 137), r("worker-0")), NOW)
    assert decision.events == (
        "ps-0 failed with exit code 137 (signal 9); restart 1 of 5 in 1.0s",
        "ps-0 failed: restarting the replicas that use it, to resume from the last checkpoint",
    )


def test_a_restart_without_kept_checkpoints_says_it_starts_from_scratch():
    """A cluster job without a logs claim: its checkpoints went with its pods."""
    status = replace(st(r("ps-0", FAIL, 137), r("worker-0")), checkpoints_kept=False)
    decision = plan(job(ps=1, backoffLimit=5), status, NOW)
    assert decision.events[-1] == (
        "ps-0 failed: restarting the replicas that use it, from scratch: the job's log "
        "folder is each pod's own (no claim), so no checkpoint outlives its replicas"
    )
    assert [a.key for a in decision.actions if isinstance(a, Restart)] == ["ps-0", "worker-0"]


def test_worker_restart_event_has_no_ps_line():
    decision = plan(job(), st(r("worker-0", FAIL, 1, restarts=2), r("worker-1")), NOW)
    assert decision.events == ("worker-0 failed with exit code 1; restart 1 of 3 in 4.0s",)


def test_simultaneous_failures_number_their_restarts():
    status = st(r("worker-0", FAIL, 1), r("worker-1", FAIL, 2, restarts=1), restarts=1)
    decision = plan(job(backoffLimit=5), status, NOW)
    assert decision.restarts == 3
    assert decision.events == (
        "worker-0 failed with exit code 1; restart 2 of 5 in 1.0s",
        "worker-1 failed with exit code 2; restart 3 of 5 in 2.0s",
    )


def test_quiet_ticks_have_no_events():
    decision = plan(job(), st(r("worker-0"), r("worker-1")), NOW)
    assert decision == Decision(phase=JobPhase.RUNNING, restarts=0)


@pytest.mark.parametrize(
    "phase",
    [pytest.param(JobPhase.SUCCEEDED, id="succeeded"), pytest.param(JobPhase.FAILED, id="failed")],
)
@pytest.mark.parametrize(
    "replicas",
    [
        pytest.param((r("worker-0", FAIL, 1), r("worker-1", FAIL, 137)), id="failures"),
        pytest.param((r("worker-0", OK), r("worker-1", OK)), id="successes"),
        pytest.param((r("worker-0", P), r("worker-1", BACK, at=0)), id="pending-and-due"),
    ],
)
def test_terminal_phase_is_final(phase, replicas):
    status = st(*replicas, phase=phase, restarts=1, finished_at=NOW, reason="Why", message="M")
    for now in (NOW, NOW + 1, NOW + 1e6):
        decision = plan(job(activeDeadlineSeconds=1, restartPolicy="OnFailure"), status, now)
        assert decision.phase is phase
        assert decision.restarts == 1
        assert decision.reason == "Why"
        assert decision.message == "M"
        assert not decision.finished
        assert decision.events == ()
        assert not any(isinstance(a, (Start, Restart)) for a in decision.actions)


def test_job_phase_terminal():
    assert {p for p in JobPhase if p.terminal} == {JobPhase.SUCCEEDED, JobPhase.FAILED}


def test_replica_state_live():
    assert {s for s in ReplicaState if s.live} == {P, RUN}


def test_job_status_replica_lookup():
    status = st(r("worker-0"), r("ps-1", OK))
    assert status.replica("ps-1").state is OK
    with pytest.raises(KeyError):
        status.replica("ps-0")


# -- plan: the launcher's permanent failures ----------------------------------------------

BAD_CODE = launcher_message("bad code: member '../x' is outside the destination")


@pytest.mark.parametrize("policy", ["OnFailure", "ExitCode", "Never"])
@pytest.mark.parametrize(
    ("code", "message", "permanent"),
    [
        pytest.param(EX_DATAERR, BAD_CODE, True, id="65-bad-archive"),
        pytest.param(EX_NOINPUT, launcher_message("no entrypoint"), True, id="66-no-entrypoint"),
        pytest.param(EX_CONFIG, launcher_message("requirements"), True, id="78-setup"),
        pytest.param(EX_NOEXEC, launcher_message("cannot run"), True, id="126-launcher"),
        pytest.param(EX_NOTFOUND, launcher_message("no python3"), True, id="127-launcher"),
        pytest.param(EX_NOTFOUND, None, False, id="127-the-code-s-own"),
        pytest.param(EX_NOEXEC, "my own message", False, id="126-user-message"),
        pytest.param(EX_DATAERR, None, False, id="65-the-code-s-own"),
        pytest.param(EX_TEMPFAIL, launcher_message("cannot fetch"), False, id="75-transient"),
        pytest.param(1, launcher_message("odd"), False, id="1-never-the-launcher-s"),
        pytest.param(137, launcher_message("odd"), False, id="signal"),
    ],
)
def test_launcher_permanent_failures_are_never_retried(policy, code, message, permanent):
    the_job = job(restartPolicy=policy, backoffLimit=5)
    decision = plan(the_job, st(r("worker-0"), r("worker-1", FAIL, code, message=message)), NOW)
    if permanent:
        assert decision.finished
        assert decision.phase is JobPhase.FAILED
        assert decision.reason == "SetupFailed"
        assert message is not None
        assert message.removeprefix("tfkube-launcher: ") in (decision.message or "")
        assert "never retried" in (decision.message or "")
        assert decision.actions == stops("job failed", "worker-0")
    else:
        retried = should_retry(RestartPolicy(policy), code)
        assert decision.reason == (None if retried else "ReplicaFailed")
        assert decision.finished is not retried


def test_a_launcher_failure_beats_a_retryable_one_in_the_same_tick():
    status = st(r("worker-0", FAIL, 137), r("worker-1", FAIL, EX_DATAERR, message=BAD_CODE))
    decision = plan(job(), status, NOW)
    assert decision.reason == "SetupFailed"
    assert decision.message is not None
    assert decision.message.startswith("worker-1 could not start: bad code")


# -- plan: stalls -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "status", "stalled", "reason", "actions", "events"),
    [
        pytest.param(
            {},
            st(r("worker-0", progress=T0), r("worker-1", progress=T0)),
            frozenset(),
            None,
            (),
            (),
            id="no-stall-seconds-no-detection",
        ),
        pytest.param(
            {"stallSeconds": 60},
            st(r("worker-0", progress=NOW - 59), r("worker-1", progress=NOW)),
            frozenset(),
            None,
            (),
            (),
            id="just-below-the-limit",
        ),
        pytest.param(
            {"stallSeconds": 60},
            st(r("worker-0", progress=NOW - 60), r("worker-1", progress=None)),
            frozenset({"worker-0"}),
            None,
            (),
            ("worker-0 is stalled: no progress for 60s",),
            id="report-at-the-limit-unobserved-never-stalls",
        ),
        pytest.param(
            {"stallSeconds": 60},
            st(r("worker-0", progress=NOW - 600, stalled=True), r("worker-1", progress=NOW)),
            frozenset({"worker-0"}),
            None,
            (),
            (),
            id="still-stalled-no-new-event",
        ),
        pytest.param(
            {"stallSeconds": 60},
            st(r("worker-0", progress=NOW - 1, stalled=True), r("worker-1", progress=NOW)),
            frozenset(),
            None,
            (),
            ("worker-0 makes progress again",),
            id="moves-again",
        ),
        pytest.param(
            {"stallSeconds": 60},
            st(r("worker-0", BACK, at=NOW + 5, progress=T0), r("worker-1", progress=NOW)),
            frozenset(),
            None,
            (),
            (),
            id="only-running-replicas-stall",
        ),
        pytest.param(
            {"stallSeconds": 60, "stallAction": "Fail"},
            st(r("worker-0", progress=NOW), r("worker-1", progress=NOW - 100)),
            frozenset(),
            "Stalled",
            stops("job failed", "worker-0", "worker-1"),
            (
                "worker-1 is stalled: no progress for 100s",
                "job Failed: worker-1 made no progress for 100s (no log line, nothing written "
                "in the log/checkpoint folder; stallSeconds=60)",
            ),
            id="fail",
        ),
        pytest.param(
            {"stallSeconds": 60, "stallAction": "Restart"},
            st(r("worker-0", progress=NOW), r("worker-1", progress=NOW - 100)),
            frozenset(),
            None,
            (Restart("worker-1", NOW + 1, "worker-1 stalled"),),
            (
                "worker-1 is stalled: no progress for 100s",
                "worker-1 stalled; restart 1 of 3 in 1.0s",
            ),
            id="restart",
        ),
        pytest.param(
            {"stallSeconds": 60, "stallAction": "Restart", "backoffLimit": 1},
            st(r("worker-0", progress=NOW), r("worker-1", progress=NOW - 100), restarts=1),
            frozenset(),
            "BackoffLimitExceeded",
            stops("job failed", "worker-0", "worker-1"),
            (
                "worker-1 is stalled: no progress for 100s",
                "job Failed: worker-1 stalled after 1 restarts (backoffLimit=1)",
            ),
            id="restart-counts-against-backoff-limit",
        ),
    ],
)
def test_stalls(policy, status, stalled, reason, actions, events):
    decision = plan(job(**policy), status, NOW)
    assert decision.stalled == stalled
    assert decision.reason == reason
    assert decision.actions == actions
    assert decision.events == events


def test_a_stalled_ps_restarts_its_users_with_stall_action_restart():
    status = st(r("ps-0", progress=NOW - 100), r("worker-0", progress=NOW), r("worker-1", OK))
    decision = plan(job(ps=1, stallSeconds=60, stallAction="Restart"), status, NOW)
    why = "ps-0 stalled: restarting the replicas that use it"
    assert decision.actions == (
        Restart("ps-0", NOW + 1, "ps-0 stalled"),
        Restart("worker-0", NOW + 1, why),
    )
    assert decision.restarts == 1


# -- plan: replicas the engine holds (their GPUs are in use) ------------------------------

HELD = "waiting for GPUs: the job asks for 2 GPUs; 1 of this machine's 3 are free"


def test_a_held_replica_is_not_started_and_the_job_stays_pending():
    status = st(r("worker-0", P), r("worker-1", P, message=None), phase=JobPhase.PENDING)
    held = st(
        ReplicaStatus("worker", 0, P, held=HELD),
        ReplicaStatus("worker", 1, P, held=HELD),
        phase=JobPhase.PENDING,
    )
    assert plan(job(), status, NOW).actions == (Start("worker-0"), Start("worker-1"))
    decision = plan(job(), held, NOW)
    assert decision.actions == ()
    assert decision.phase is JobPhase.PENDING


def test_a_held_restart_waits_past_its_backoff():
    status = st(ReplicaStatus("worker", 0, BACK, next_start_at=T0, held=HELD), r("worker-1"))
    decision = plan(job(), status, NOW)
    assert decision.actions == ()
    assert decision.phase is JobPhase.RESTARTING


def job_with_roles(policy: str, **per_role: str) -> Any:
    """1 PS + 2 workers; `per_role` gives a role its own restartPolicy."""
    return job(ps=1, own_policies=per_role, restartPolicy=policy, backoffLimit=5)


@pytest.mark.parametrize(
    ("the_job", "failed", "code", "retried", "policy_named"),
    [
        pytest.param(
            job_with_roles("OnFailure", worker="Never"),
            "worker-1",
            1,
            False,
            "Never",
            id="worker-never",
        ),
        pytest.param(
            job_with_roles("OnFailure", worker="Never"), "ps-0", 1, True, None, id="ps-job-default"
        ),
        pytest.param(
            job_with_roles("Never", ps="OnFailure"), "ps-0", 1, True, None, id="ps-own-onfailure"
        ),
        pytest.param(
            job_with_roles("Never", ps="OnFailure"),
            "worker-0",
            1,
            False,
            "Never",
            id="worker-job-never",
        ),
        pytest.param(
            job_with_roles("OnFailure", worker="ExitCode"),
            "worker-0",
            3,
            False,
            "ExitCode",
            id="worker-exitcode-user",
        ),
        pytest.param(
            job_with_roles("OnFailure", worker="ExitCode"),
            "worker-0",
            137,
            True,
            None,
            id="worker-exitcode-signal",
        ),
        pytest.param(
            job_with_roles("ExitCode", worker="OnFailure"),
            "worker-0",
            3,
            True,
            None,
            id="worker-own-onfailure",
        ),
    ],
)
def test_each_role_is_retried_by_its_own_restart_policy(
    the_job, failed, code, retried, policy_named
):
    keys = ["ps-0", "worker-0", "worker-1"]
    status = st(*(r(k, FAIL, code) if k == failed else r(k) for k in keys))
    decision = plan(the_job, status, NOW)
    if retried:
        assert not decision.finished
        assert any(isinstance(a, Restart) and a.key == failed for a in decision.actions)
    else:
        assert decision.reason == "ReplicaFailed"
        assert f"restartPolicy {policy_named} does not retry it" in (decision.message or "")
