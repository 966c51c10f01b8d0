"""`tfkube.kube`: the names contract, the one pod interpreter (the unit tests of its rules in
`tfkube.kube._observe`: `read_replica`, its messages, `observe` over a whole job) and the
Kubernetes backend's view built on it, which must say what the operator sees."""

from __future__ import annotations

from typing import Any

import pytest

from tfkube.contract import EX_DATAERR, launcher_failure, launcher_message
from tfkube.engines.kubernetes import job_view
from tfkube.kube._observe import (
    STRANDED_AFTER_SECONDS,
    Prior,
    RoleJob,
    creation_failures,
    exit_code,
    failure_message,
    format_time,
    gang_message,
    is_stranded,
    last_progress,
    observe,
    parse_indexes,
    parse_time,
    pending_message,
    read_replica,
    role_indexes,
    scheduling_failures,
    slim_pod,
    termination_message,
    waiting_message,
)
from tfkube.kube.names import owner_reference, replica_selector
from tfkube.planner import JobPhase, ReplicaState, plan
from tfkube.spec import parse_job

from ._kube_objects import (
    NOW,
    STALL,
    STARTED,
    T0,
    job_model,
    pod,
    role_job,
    running_pod,
    states,
)

# -- names ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("job", "role", "expected"),
    [
        pytest.param(None, None, "tfkube.io/replica-type", id="every-job"),
        pytest.param("j", None, "tfkube.io/job-name=j,tfkube.io/replica-type", id="one-job"),
        pytest.param("j", "ps", "tfkube.io/job-name=j,tfkube.io/replica-type=ps", id="one-role"),
    ],
)
def test_replica_selector(job: str | None, role: str | None, expected: str):
    assert replica_selector(job, role) == expected


def test_owner_reference_makes_the_tfjob_the_controller():
    ref = owner_reference("j", "u")
    assert ref == {
        "apiVersion": "tfkube.io/v1alpha1",
        "kind": "TFJob",
        "name": "j",
        "uid": "u",
        "controller": True,
        "blockOwnerDeletion": True,
    }


# -- small parsers -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("", set(), id="empty"),
        pytest.param(None, set(), id="none"),
        pytest.param("3", {3}, id="one"),
        pytest.param("0,2-4,7", {0, 2, 3, 4, 7}, id="ranges"),
    ],
)
def test_parse_indexes(text: str | None, expected: set[int]):
    assert parse_indexes(text) == expected


@pytest.mark.parametrize(
    ("status", "completed", "failed"),
    [
        pytest.param({}, set(), set(), id="no-status"),
        pytest.param({"completedIndexes": "0-2"}, {0, 1, 2}, set(), id="completed"),
        pytest.param({"failedIndexes": "4,6"}, set(), {4, 6}, id="failed"),
        pytest.param(
            {"completedIndexes": "0-9999", "failedIndexes": "10000"},
            set(range(10000)),
            {10000},
            id="ten-thousand-workers",
        ),
    ],
)
def test_role_indexes(status: dict[str, str], completed: set[int], failed: set[int]):
    assert role_indexes({"status": status}) == (completed, failed)


def test_time_round_trip():
    assert parse_time(format_time(NOW)) == NOW
    assert parse_time(None) is None


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        pytest.param([], None, id="none"),
        pytest.param([{"state": {"terminated": {"exitCode": 0}}}], 0, id="zero"),
        pytest.param(
            [
                {"state": {"terminated": {"exitCode": 0}}},
                {"state": {"terminated": {"exitCode": 3}}},
            ],
            3,
            id="first-non-zero",
        ),
        pytest.param([{"lastState": {"terminated": {"exitCode": 137}}}], 137, id="last-state"),
    ],
)
def test_exit_code(statuses: list[Any], expected: int | None):
    assert exit_code({"status": {"containerStatuses": statuses}}) == expected


# -- observe: one replica's state from its pods ---------------------------------------------


@pytest.mark.parametrize(
    ("jobs", "pods", "prior", "expected", "restarts"),
    [
        pytest.param([], [], Prior(), "Pending", 0, id="nothing-yet"),
        pytest.param([role_job("worker")], [], Prior(), "Pending", 0, id="job-no-pod"),
        pytest.param(
            [role_job("worker")], [pod("worker", 0, "Pending")], Prior(), "Pending", 0, id="pending"
        ),
        pytest.param([role_job("worker")], [pod("worker", 0)], Prior(), "Running", 0, id="running"),
        pytest.param(
            [role_job("worker")],
            [pod("worker", 0, "Succeeded", 0)],
            Prior(),
            "Succeeded",
            0,
            id="succeeded",
        ),
        pytest.param(
            [role_job("worker", completed="0")], [], Prior(), "Succeeded", 0, id="completed-index"
        ),
        pytest.param(
            [role_job("worker")],
            [pod("worker", 0, "Failed", 1, name="bad")],
            Prior(),
            "Failed",
            0,
            id="failed-unhandled",
        ),
        pytest.param(
            [role_job("worker")],
            [pod("worker", 0, "Failed", 1, name="bad")],
            Prior(handled=frozenset({"bad"})),
            "BackOff",
            1,
            id="failed-handled-waits-for-kubernetes",
        ),
        pytest.param(
            [role_job("worker")],
            [
                pod("worker", 0, "Failed", 1, name="a", created=T0),
                pod("worker", 0, "Failed", 1, name="b", created=T0 + 10),
                pod("worker", 0, "Running", name="c", created=T0 + 20),
            ],
            Prior(),
            "Running",
            2,
            id="replacement-running-counts-failures",
        ),
        pytest.param(
            [role_job("worker")],
            [pod("worker", 0, "Failed", 137, dying=True)],
            Prior(),
            "BackOff",
            0,
            id="deleted-pod-is-being-restarted-not-a-failure",
        ),
        pytest.param(
            [role_job("worker", condition="PodFailurePolicy")],
            [pod("worker", 0, "Failed", 143, dying=True)],
            Prior(),
            "Failed",
            0,
            id="deleted-pod-of-a-failed-job-is-a-failure",
        ),
        pytest.param(
            [role_job("worker", condition="PodFailurePolicy")],
            [],
            Prior(),
            "Failed",
            0,
            id="failed-job-whose-pod-is-gone-is-a-failure",
        ),
        pytest.param(
            [role_job("worker")],
            [pod("worker", 0, generation=7)],
            Prior(),
            "Pending",
            0,
            id="pod-of-another-job-ignored",
        ),
        pytest.param(
            [role_job("worker", generation=0)],
            [],
            Prior(generations={"worker": 1}),
            "BackOff",
            0,
            id="stale-generation-is-being-replaced",
        ),
        pytest.param(
            [],
            [],
            Prior(generations={"worker": 1}, restart_at=NOW + 5),
            "BackOff",
            0,
            id="whole-job-restart-backoff",
        ),
        pytest.param(
            [],
            [],
            Prior(generations={"worker": 1}, restart_at=NOW - 5),
            "Pending",
            0,
            id="whole-job-restart-due",
        ),
        pytest.param(
            [role_job("worker", dying=True)], [], Prior(), "BackOff", 0, id="dying-job-no-pods"
        ),
        pytest.param(
            [],
            [],
            Prior(phase=JobPhase.SUCCEEDED),
            "Stopped",
            0,
            id="terminal-nothing-left",
        ),
        pytest.param(
            [role_job("worker")],
            [pod("worker", 0, "Failed", 137)],
            Prior(phase=JobPhase.FAILED),
            "Stopped",
            0,
            id="terminal-failed-pod-is-stopped",
        ),
    ],
)
def test_worker_0_state(
    jobs: list[Any], pods: list[Any], prior: Prior, expected: str, restarts: int
):
    obs = observe(job_model(ps=0, workers=1), prior, jobs, pods, NOW)
    seen = obs.replicas["worker-0"].status
    assert seen.state.value == expected
    assert seen.restarts == restarts


def test_the_launcher_s_termination_message_reaches_the_planner():
    failed = pod("worker", 0, "Failed", EX_DATAERR)
    message = launcher_message("bad code: member '../x' is outside the destination")
    failed["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = message
    jobs = [role_job("worker", failed="0")]
    for given in (failed, slim_pod(failed)):
        obs = observe(job_model(ps=0, workers=1), Prior(), jobs, [given], NOW)
        seen = obs.replicas["worker-0"].status
        assert seen.message == message
        assert launcher_failure(seen.exit_code, seen.message) is not None
    assert termination_message(pod("worker", 0, "Failed", 1)) is None
    # The planner then fails the job at once, whatever the restart policy.
    decision = plan(job_model(ps=0, workers=1), obs.status, NOW)
    assert decision.reason == "SetupFailed"


def test_observation_counts_and_totals():
    jobs = [role_job("ps"), role_job("worker", failed="1")]
    pods = [
        pod("ps", 0),
        pod("worker", 0, "Failed", 2, name="w0a", created=T0),
        pod("worker", 0, "Running", name="w0b", created=T0 + 5),
        pod("worker", 1, "Failed", 1, name="w1"),
    ]
    obs = observe(job_model(), Prior(restarts_before=3), jobs, pods, NOW)
    assert states(obs) == {"ps-0": "Running", "worker-0": "Running", "worker-1": "Failed"}
    assert obs.status.restarts == 3 + 1  # earlier generations + worker-0's failed pod
    assert obs.counts["worker"].as_dict() == {"active": 1, "succeeded": 0, "failed": 2}
    assert obs.counts["ps"].as_dict() == {"active": 1, "succeeded": 0, "failed": 0}
    assert obs.gave_up == {"worker-1"}
    assert obs.replicas["worker-1"].status.exit_code == 1
    assert obs.replicas["worker-1"].failed_pod == "w1"
    assert obs.live_pods == {"ps": ["j-ps-0-900"], "worker": ["w0b"]}


def test_prior_reads_status():
    prior = Prior.from_status(
        {
            "phase": "Restarting",
            "startTime": format_time(T0),
            "restarts": 2,
            "handledFailures": ["p"],
            "restartGenerations": {"ps": 2},
            "restartsBefore": 1,
            "restartAt": format_time(NOW),
        }
    )
    assert prior.phase is JobPhase.RESTARTING
    assert prior.started_at == T0
    assert prior.handled == {"p"}
    assert prior.generations == {"ps": 2}
    assert prior.restarts_before == 1
    assert prior.restart_at == NOW
    assert Prior.from_status({"phase": "Bogus"}).phase is JobPhase.PENDING


# -- messages: why a pod is where it is -------------------------------------------------------


def scheduled(status: str, reason: str = "", message: str = "") -> dict[str, Any]:
    return {
        "conditions": [
            {"type": "PodScheduled", "status": status, "reason": reason, "message": message}
        ]
    }


def waiting(reason: str, message: str = "") -> dict[str, Any]:
    return {"containerStatuses": [{"state": {"waiting": {"reason": reason, "message": message}}}]}


def terminated(code: int, reason: str = "Error", message: str = "") -> dict[str, Any]:
    state = {"terminated": {"exitCode": code, "reason": reason, "message": message}}
    return {"containerStatuses": [{"state": state}]}


UNSCHEDULABLE = "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
UNBOUND = "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims."


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        pytest.param({}, "waiting to be scheduled", id="nothing-known"),
        pytest.param(
            scheduled("False", "Unschedulable", UNSCHEDULABLE),
            f"unschedulable: {UNSCHEDULABLE}",
            id="unschedulable",
        ),
        pytest.param(
            scheduled("False", "Unschedulable", UNBOUND),
            f"waiting for its PersistentVolumeClaims to be bound: {UNBOUND}",
            id="unbound-claim",
        ),
        pytest.param(
            scheduled("False", "SchedulerError", "boom"), "SchedulerError: boom", id="other"
        ),
        pytest.param(scheduled("True"), "scheduled, starting", id="scheduled"),
        pytest.param(
            {**scheduled("True"), **waiting("ImagePullBackOff", 'Back-off pulling "x:1"')},
            'cannot pull its image (ImagePullBackOff): Back-off pulling "x:1"',
            id="image-pull-backoff",
        ),
        pytest.param(
            waiting("ErrImagePull", "rpc error\nnot found: x:1"),
            "cannot pull its image (ErrImagePull): not found: x:1",
            id="image-pull-error-last-line",
        ),
        pytest.param(waiting("ContainerCreating"), "ContainerCreating", id="creating"),
        pytest.param(
            waiting("CreateContainerConfigError", 'secret "s" not found'),
            'CreateContainerConfigError: secret "s" not found',
            id="config-error",
        ),
        pytest.param(
            {"reason": "SomethingElse", "message": "m"}, "SomethingElse: m", id="pod-reason"
        ),
    ],
)
def test_pending_message(status: dict[str, Any], expected: str):
    assert pending_message({"status": {"phase": "Pending", **status}}) == expected


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        pytest.param(terminated(1), "exit code 1", id="plain"),
        pytest.param(terminated(137, "OOMKilled"), "exit code 137 (OOMKilled)", id="oom"),
        pytest.param(
            terminated(1, message="Traceback (most recent call last):\n  ...\nValueError: x"),
            "exit code 1: ValueError: x",
            id="termination-message-last-line",
        ),
        pytest.param(
            terminated(2, message="x" * 400), "exit code 2: " + "x" * 297 + "...", id="cut"
        ),
        pytest.param(
            {"reason": "Evicted", "message": "The node was low on memory."},
            "Evicted: The node was low on memory.",
            id="evicted",
        ),
        pytest.param({}, "failed", id="nothing-known"),
    ],
)
def test_failure_message(status: dict[str, Any], expected: str):
    assert failure_message({"status": {"phase": "Failed", **status}}) == expected


# -- read_replica: every branch -------------------------------------------------------------

FAILED_1 = pod("worker", 0, "Failed", name="bad", **terminated(1, message="no data"))


@pytest.mark.parametrize(
    ("pods", "kwargs", "state", "restarts", "message"),
    [
        pytest.param([], {}, "Pending", 0, "waiting for Kubernetes to create its pod", id="no-pod"),
        pytest.param(
            [],
            {"role_job": RoleJob.MISSING},
            "Pending",
            0,
            "its Job is not created yet",
            id="no-job",
        ),
        pytest.param(
            [pod("worker", 0, "Pending", **scheduled("False", "Unschedulable", UNSCHEDULABLE))],
            {},
            "Pending",
            0,
            f"unschedulable: {UNSCHEDULABLE}",
            id="pending-says-why",
        ),
        pytest.param([pod("worker", 0)], {}, "Running", 0, "", id="running"),
        pytest.param([pod("worker", 0, "Succeeded", 0)], {}, "Succeeded", 0, "", id="succeeded"),
        pytest.param([], {"completed": True}, "Succeeded", 0, "", id="completed-index"),
        pytest.param([FAILED_1], {}, "Failed", 0, "exit code 1: no data", id="failed-unhandled"),
        pytest.param(
            [FAILED_1],
            {"prior": Prior(handled=frozenset({"bad"}))},
            "BackOff",
            1,
            "being restarted by Kubernetes after exit code 1: no data",
            id="failed-handled",
        ),
        pytest.param(
            [FAILED_1],
            {"prior": Prior(phase=JobPhase.FAILED, handled=frozenset({"bad"}))},
            "Stopped",
            0,
            "exit code 1: no data",
            id="terminal-keeps-why-it-failed",
        ),
        pytest.param(
            [pod("worker", 0, dying=True)],
            {},
            "BackOff",
            0,
            "its pod is being replaced",
            id="only-dying-pods",
        ),
        pytest.param(
            [],
            {"role_job": RoleJob.STALE},
            "BackOff",
            0,
            "whole-job restart: its old Job is being deleted",
            id="stale-job",
        ),
        pytest.param(
            [],
            {"role_job": RoleJob.DYING},
            "BackOff",
            0,
            "whole-job restart: its old Job is being deleted",
            id="dying-job",
        ),
        pytest.param(
            [],
            {"role_job": RoleJob.MISSING, "prior": Prior(restart_at=NOW + 5)},
            "BackOff",
            0,
            f"whole-job restart: starts again at {format_time(NOW + 5)}",
            id="restart-backoff",
        ),
        pytest.param(
            [],
            {"role_job": RoleJob.MISSING, "prior": Prior(restart_at=NOW - 5)},
            "Pending",
            0,
            "its Job is not created yet",
            id="restart-due",
        ),
        pytest.param(
            [], {"prior": Prior(phase=JobPhase.SUCCEEDED)}, "Stopped", 0, "", id="terminal-empty"
        ),
        pytest.param(
            [pod("worker", 0, "Pending")],
            {"prior": Prior(phase=JobPhase.SUCCEEDED), "role_job": RoleJob.MISSING},
            "Stopped",
            0,
            "",
            id="terminal-pending-without-job",
        ),
    ],
)
def test_read_replica(
    pods: list[Any], kwargs: dict[str, Any], state: str, restarts: int, message: str
):
    args: dict[str, Any] = {"prior": Prior(), "now": NOW, **kwargs}
    seen = read_replica("worker", 0, pods, **args)
    assert (seen.status.state.value, seen.status.restarts, seen.message) == (
        state,
        restarts,
        message,
    )


def test_read_replica_names_the_backoff_end_and_the_failed_pod():
    waiting_restart = read_replica(
        "ps", 0, [], role_job=RoleJob.MISSING, prior=Prior(restart_at=NOW + 5), now=NOW
    )
    assert waiting_restart.status.next_start_at == NOW + 5
    failed = read_replica("worker", 0, [FAILED_1], prior=Prior(), now=NOW)
    assert (failed.failed_pod, failed.pod, failed.status.exit_code) == ("bad", "bad", 1)


def test_slim_pods_observe_the_same():
    jobs = [role_job("ps"), role_job("worker", failed="1")]
    pods = [
        pod("ps", 0),
        pod("worker", 0, "Failed", 2, name="w0a", created=T0),
        pod("worker", 0, "Running", name="w0b", created=T0 + 5),
        pod("worker", 1, "Failed", 1, name="w1", dying=True),
    ]
    for p in pods:
        p["metadata"]["managedFields"] = [{"manager": "kube-controller-manager"}]
        p["spec"] = {"containers": [{"name": "tensorflow", "env": [{"name": "A", "value": "x"}]}]}
    full = observe(job_model(), Prior(), jobs, pods, NOW)
    slim = observe(job_model(), Prior(), jobs, [slim_pod(p) for p in pods], NOW)
    assert slim == full
    assert "managedFields" not in slim_pod(pods[0])["metadata"]


def test_slim_pods_keep_what_the_messages_read():
    pending = pod(
        "worker", 0, "Pending", **scheduled("False", "Unschedulable", UNBOUND), reason="R"
    )
    pending["status"]["conditions"].append({"type": "Initialized", "status": "True"})
    slim = slim_pod(pending)
    assert pending_message(slim) == pending_message(pending)
    assert [c["type"] for c in slim["status"]["conditions"]] == ["PodScheduled"]
    failed = pod("worker", 0, "Failed", **terminated(137, "OOMKilled", "killed"))
    assert failure_message(slim_pod(failed)) == "exit code 137 (OOMKilled): killed"


def evicted(
    phase: str = "Running",
    reason: str = "DeletionByTaintManager",
    deadline: float | None = NOW - STRANDED_AFTER_SECONDS,
) -> dict[str, Any]:
    """worker-0's pod, deleted with `deadline` as its deletionTimestamp, `reason` its
    DisruptionTarget condition's."""
    body = pod("worker", 0, phase)
    if deadline is not None:
        body["metadata"]["deletionTimestamp"] = format_time(deadline)
    if reason:
        body["status"]["conditions"] = [
            {"type": "Ready", "status": "False"},
            {"type": "DisruptionTarget", "status": "True", "reason": reason},
        ]
    return body


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(evicted(), True, id="node-lost-past-grace"),
        pytest.param(evicted(deadline=NOW - 1), False, id="its-kubelet-may-still-end-it"),
        pytest.param(evicted(deadline=None), False, id="not-deleted"),
        pytest.param(evicted(reason="PreemptionByScheduler"), False, id="preempted"),
        pytest.param(evicted(reason=""), False, id="deleted-by-someone"),
        pytest.param(evicted("Failed"), False, id="already-failed"),
        pytest.param(evicted("Succeeded"), False, id="succeeded"),
    ],
)
def test_is_stranded(body: dict[str, Any], expected: bool):
    """A pod evicted for its node's loss that no kubelet ended past its grace."""
    assert is_stranded(body, NOW) is expected
    assert is_stranded(slim_pod(body), NOW) is expected  # what the operator keeps


# -- the Kubernetes backend's view: what the operator sees ----------------------------------


def tfjob(status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "tfkube.io/v1alpha1",
        "kind": "TFJob",
        "metadata": {"name": "j", "namespace": "ns", "creationTimestamp": format_time(T0)},
        "spec": {
            "replicas": {"ps": {"replicas": 1}, "worker": {"replicas": 2}},
            "code": {"source": "http://x/c.tar.gz"},
        },
        "status": status or {},
    }


@pytest.mark.parametrize(
    ("status", "jobs", "pods"),
    [
        pytest.param({}, [], [], id="nothing-yet"),
        pytest.param(
            {"phase": "Restarting", "handledFailures": ["w0"]},
            [role_job("ps"), role_job("worker")],
            [pod("ps", 0), pod("worker", 0, "Failed", 1, name="w0"), pod("worker", 1)],
            id="handled-failure-is-backoff",
        ),
        pytest.param(
            {"phase": "Restarting", "restartGenerations": {"ps": 1, "worker": 1}},
            [role_job("ps"), role_job("worker")],
            [pod("ps", 0, "Failed", 1), pod("worker", 0), pod("worker", 1)],
            id="stale-generation-pods-ignored",
        ),
        pytest.param(
            {"phase": "Running"},
            [role_job("ps"), role_job("worker", completed="0")],
            [pod("ps", 0), pod("worker", 1, "Pending", **waiting("ErrImagePull", "nope"))],
            id="completed-index-and-pull-error",
        ),
    ],
)
def test_job_view_says_what_the_operator_sees(
    status: dict[str, Any], jobs: list[Any], pods: list[Any]
):
    resource = tfjob(status)
    view = job_view(resource, jobs, pods, NOW)
    obs = observe(job_model(), Prior.from_status(status), jobs, pods, NOW)
    assert {r.key: r.state.value for r in view.replicas} == states(obs)
    assert {r.key: r.message for r in view.replicas} == {
        k: r.message for k, r in obs.replicas.items()
    }
    assert {r.key: r.restarts for r in view.replicas} == {
        k: r.status.restarts for k, r in obs.replicas.items()
    }
    assert view.replicas[0].address == "j-ps-0.j-ps:2222"


def test_job_view_of_an_invalid_spec_has_no_replicas():
    resource = tfjob({"phase": "Failed", "reason": "InvalidSpec", "message": "m"})
    resource["spec"]["replicas"] = {}
    view = job_view(resource, [], [], NOW)
    assert (view.phase, view.reason, view.replicas) == (JobPhase.FAILED, "InvalidSpec", ())
    assert view.created_at == T0


def test_job_view_reads_phase_and_times():
    done = {"phase": "Succeeded", "startTime": format_time(T0), "completionTime": format_time(NOW)}
    view = job_view(tfjob(done), [], [], NOW)
    assert (view.phase, view.started_at, view.finished_at) == (JobPhase.SUCCEEDED, T0, NOW)
    assert {r.state for r in view.replicas} == {ReplicaState.STOPPED}


# -- why a replica has no pod: the role Job's own words ---------------------------------------


def test_a_scheduler_that_gives_no_verdict_is_named():
    waiting_pod = {"spec": {"schedulerName": "volcano"}, "status": {"phase": "Pending"}}
    assert pending_message(waiting_pod) == (
        "waiting for the scheduler volcano to place it (no verdict yet)"
    )
    assert pending_message(slim_pod(waiting_pod)) == pending_message(waiting_pod)
    default = {"spec": {"schedulerName": "default-scheduler"}, "status": {"phase": "Pending"}}
    assert pending_message(default) == "waiting to be scheduled"


# -- a gang: every unplaced replica says why the gang as a whole waits -------------------------

NO_FIT = (
    "unschedulable: 0/7 nodes are available: 2 Insufficient cpu, 5 node(s) didn't match "
    "Pod's node affinity/selector."
)
PREEMPTION = (  # what follows the per-node reasons in the scheduler's own message
    " no new claims to deallocate, preemption: 0/7 nodes are available: 2 No preemption "
    "victims found for incoming pod, 5 Preemption is not helpful for scheduling."
)
REJECTED = "unschedulable: 0/1 nodes are available: 1 optimistic rejection in PostFilter."
SELECTOR = "unschedulable: 0/7 nodes are available: 7 node(s) didn't match Pod's node affinity."
SIBLINGS = (
    "unschedulable: pre-filter pod j-ps-0-x cannot find enough sibling pods, current pods "
    "number: 1, minMember of group: 3"
)
NO_VERDICT = "waiting for the scheduler scheduler-plugins-scheduler to place it (no verdict yet)"
GANG = "the gang (PodGroup j, minMember 3)"


def gang_job(gang: str | None, min_available: int | None = None) -> Any:
    data = job_model().model_dump(by_alias=True, exclude_none=True, mode="json")
    if gang:
        data["spec"]["scheduling"] = {"gang": gang}
        if min_available:
            data["spec"]["scheduling"]["minAvailable"] = min_available
    return parse_job(data)


@pytest.mark.parametrize(
    ("gang", "messages", "expected"),
    [
        pytest.param(
            "SchedulerPlugins",
            [REJECTED, NO_FIT + PREEMPTION, NO_VERDICT],
            f"{GANG} cannot be placed all together, so none of it starts: {NO_FIT[15:]}",
            id="the-capacity-verdict-for-all",
        ),
        pytest.param(
            "SchedulerPlugins",
            [REJECTED, SELECTOR],
            f"{GANG} cannot be placed all together, so none of it starts: {SELECTOR[15:]}",
            id="else-a-per-node-verdict",
        ),
        pytest.param(
            "Volcano",
            [NO_VERDICT, REJECTED],
            f"{GANG} cannot be placed all together, so none of it starts: {REJECTED[15:]}",
            id="else-any-verdict",
        ),
        pytest.param(
            "SchedulerPlugins",
            [SIBLINGS, NO_VERDICT],
            f"{GANG} is waiting for all its pods to be created: {SIBLINGS[15:]}",
            id="pods-not-all-created",
        ),
        pytest.param("SchedulerPlugins", [NO_VERDICT], None, id="no-verdict-yet"),
        pytest.param(None, [NO_FIT], None, id="no-gang"),
        pytest.param("Kueue", [NO_FIT], None, id="kueue-admits-not-places"),
    ],
)
def test_gang_message(gang: str | None, messages: list[str], expected: str | None):
    job = gang_job(gang) if gang != "Kueue" else job_model()
    assert gang_message(job, messages) == expected


def test_gang_message_names_min_available():
    said = gang_message(gang_job("SchedulerPlugins", min_available=2), [NO_FIT])
    assert said is not None
    assert said.startswith("the gang (PodGroup j, minMember 2) cannot be placed"), said


def test_observe_gives_every_unplaced_replica_of_a_gang_the_gangs_verdict():
    unplaced = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    jobs = [role_job("ps"), role_job("worker")]
    pods = [
        pod("ps", 0, "Pending", conditions=[{**unplaced, "message": REJECTED[15:]}]),
        pod("worker", 0, "Pending", conditions=[{**unplaced, "message": NO_FIT[15:]}]),
        pod("worker", 1, "Pending"),  # waiting at Permit: no verdict of its own
    ]
    obs = observe(gang_job("SchedulerPlugins"), Prior(), jobs, pods, NOW)
    messages = {k: r.message for k, r in obs.replicas.items()}
    expected = f"{GANG} cannot be placed all together, so none of it starts: {NO_FIT[15:]}"
    assert messages == {"ps-0": expected, "worker-0": expected, "worker-1": expected}
    alone = observe(job_model(), Prior(), jobs, pods, NOW)
    assert alone.replicas["worker-0"].message == NO_FIT


def scheduled_event(pod_name: str, message: str, at: float) -> dict[str, Any]:
    return {
        "involvedObject": {"kind": "Pod", "name": pod_name},
        "reason": "FailedScheduling",
        "message": message,
        "lastTimestamp": format_time(at),
    }


def test_scheduling_failures_are_the_pods_verdicts_newest_first():
    found = scheduling_failures(
        [
            scheduled_event("p1", "old", T0),
            scheduled_event("p2", "newer", T0 + 5),
            scheduled_event("other", "not ours", T0 + 9),
            event("j-worker", QUOTA, T0 + 9),
        ],
        ["p1", "p2"],
    )
    assert found == ["unschedulable: newer", "unschedulable: old"]


def test_a_gangs_capacity_verdict_comes_from_the_events_when_no_pod_holds_it():
    """The gang's pods take turns at failing: their last verdicts may all be rejections."""
    unplaced = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    jobs = [role_job("ps"), role_job("worker")]
    pods = [
        pod("ps", 0, "Pending", name="ps0", conditions=[{**unplaced, "message": REJECTED[15:]}]),
        pod("worker", 0, "Pending", name="w0"),
        pod("worker", 1, "Pending", name="w1"),
    ]
    events = [scheduled_event("w1", NO_FIT[15:] + PREEMPTION, T0)]
    obs = observe(gang_job("SchedulerPlugins"), Prior(), jobs, pods, NOW, events)
    expected = f"{GANG} cannot be placed all together, so none of it starts: {NO_FIT[15:]}"
    assert {r.message for r in obs.replicas.values()} == {expected}


QUOTA = (
    'Error creating: pods "j-worker-0-x" is forbidden: exceeded quota: tfkube-tenant, '
    "requested: requests.cpu=4, used: requests.cpu=0, limited: requests.cpu=2"
)


def event(job: str, message: str, at: float, reason: str = "FailedCreate") -> dict[str, Any]:
    return {
        "involvedObject": {"kind": "Job", "name": job},
        "reason": reason,
        "message": message,
        "lastTimestamp": format_time(at),
    }


def test_creation_failures_take_each_jobs_newest_failed_create():
    found = creation_failures(
        [
            event("j-worker", "old words", T0),
            event("j-worker", QUOTA, T0 + 10),
            event("j-ps", "no PriorityClass with name high was found", T0),
            event("j-ps", "Created pod", T0 + 20, reason="SuccessfulCreate"),
        ]
    )
    assert found == {
        "j-worker": f"cannot create its pod: {QUOTA}",
        "j-ps": "cannot create its pod: no PriorityClass with name high was found",
    }


@pytest.mark.parametrize(
    ("the_job", "expected"),
    [
        pytest.param(role_job("worker"), None, id="nothing-to-say"),
        pytest.param(role_job("worker", suspend=True), "suspended", id="suspended"),
        pytest.param(
            {
                **role_job("worker", suspend=True),
                "metadata": {
                    **role_job("worker")["metadata"],
                    "labels": {"kueue.x-k8s.io/queue-name": "team-a"},
                },
            },
            "suspended: waiting for Kueue to admit it (LocalQueue team-a)",
            id="kueue",
        ),
        pytest.param(role_job("ps"), "cannot create its pod: quota", id="failed-create"),
    ],
)
def test_waiting_message(the_job: dict[str, Any], expected: str | None):
    assert waiting_message(the_job, {"j-ps": "cannot create its pod: quota"}) == expected


def test_a_replica_refused_by_a_quota_says_so_in_status():
    jobs = [role_job("ps"), role_job("worker")]
    obs = observe(job_model(), Prior(), jobs, [pod("ps", 0)], NOW, [event("j-worker", QUOTA, T0)])
    assert obs.replicas["worker-0"].status.state is ReplicaState.PENDING
    assert obs.replicas["worker-0"].message == f"cannot create its pod: {QUOTA}"
    assert obs.replicas["ps-0"].message == ""
    view = job_view(tfjob(), jobs, [pod("ps", 0)], NOW, [event("j-worker", QUOTA, T0)])
    assert {r.key: r.message for r in view.replicas}["worker-1"].startswith("cannot create")


# -- stall detection: the readiness probe's verdict read as progress --------------------------


@pytest.mark.parametrize(
    ("the_pod", "stall_seconds", "expected"),
    [
        pytest.param(running_pod(False, NOW - 3), None, None, id="no-stall-detection"),
        pytest.param(running_pod(None), STALL, NOW, id="no-ready-condition-yet"),
        pytest.param(running_pod(False, T0), STALL, NOW, id="not-ready-since-before-start"),
        pytest.param(running_pod(False, STARTED), STALL, NOW, id="not-ready-since-start"),
        pytest.param(running_pod(True, STARTED + 2), STALL, NOW, id="ready"),
        pytest.param(running_pod(False, NOW - 3), STALL, NOW - 3 - STALL, id="probe-failed"),
        pytest.param(
            running_pod(False, NOW - 3, containerStatuses=[]), STALL, NOW, id="no-container-status"
        ),
    ],
)
def test_last_progress(the_pod: dict[str, Any], stall_seconds: int | None, expected: float | None):
    assert last_progress(the_pod, stall_seconds, NOW) == expected
    assert last_progress(slim_pod(the_pod), stall_seconds, NOW) == expected


def test_a_sidecar_that_is_not_ready_is_no_stall():
    sidecar = running_pod(False, NOW - 3)
    sidecar["status"]["containerStatuses"][0]["ready"] = True
    sidecar["status"]["containerStatuses"].append({"name": "proxy", "ready": False, "state": {}})
    assert last_progress(sidecar, STALL, NOW) == NOW


def stall_observation(action: str, pods: list[Any], **status: Any) -> Any:
    job = job_model(ps=0, workers=1, stallSeconds=STALL, stallAction=action)
    prior = Prior.from_status({"phase": "Running", **status})
    return job, observe(job, prior, [role_job("worker")], pods, NOW)


def test_a_failed_probe_is_a_stalled_replica_with_how_long_it_was_quiet():
    _, obs = stall_observation("Report", [running_pod(False, NOW - 5)])
    assert obs.stalled == {"worker-0"}
    seen = obs.replicas["worker-0"]
    assert seen.status.state is ReplicaState.RUNNING
    assert seen.message == f"no progress for {STALL + 5}s"
    _, fresh = stall_observation("Report", [running_pod(False, STARTED)])
    assert fresh.stalled == frozenset()
    assert fresh.replicas["worker-0"].message == ""


@pytest.mark.parametrize(
    ("action", "phase", "reason"),
    [
        pytest.param("Report", JobPhase.RUNNING, None, id="report"),
        pytest.param("Fail", JobPhase.FAILED, "Stalled", id="fail"),
        pytest.param("Restart", JobPhase.RESTARTING, None, id="restart"),
    ],
)
def test_the_planner_decides_on_a_kubernetes_stall_as_locally(
    action: str, phase: JobPhase, reason: str | None
):
    job, obs = stall_observation(action, [running_pod(False, NOW - 5)])
    decision = plan(job, obs.status, NOW)
    assert (decision.phase, decision.reason) == (phase, reason)
    assert any("worker-0 is stalled" in line for line in decision.events)
    if action == "Restart":
        assert [a.key for a in decision.actions] == ["worker-0"]


def test_the_stall_event_is_said_once_and_recovery_too():
    job, again = stall_observation(
        "Report", [running_pod(False, NOW - 5)], stalledReplicas=["worker-0"]
    )
    assert again.status.replicas[0].stalled
    assert not any("stalled" in line for line in plan(job, again.status, NOW).events)
    job, moving = stall_observation(
        "Report", [running_pod(True, NOW - 1)], stalledReplicas=["worker-0"]
    )
    assert "worker-0 makes progress again" in plan(job, moving.status, NOW).events


def test_job_view_shows_a_stalled_replica():
    resource = tfjob({"phase": "Running"})
    resource["spec"]["replicas"] = {"worker": {"replicas": 1}}
    resource["spec"]["runPolicy"] = {"stallSeconds": STALL}
    view = job_view(resource, [role_job("worker")], [running_pod(False, NOW - 5)], NOW)
    (replica,) = view.replicas
    assert replica.stalled
    assert replica.message == f"no progress for {STALL + 5}s"


def test_a_container_killed_over_its_memory_limit_fails_the_job_saying_oomkilled():
    killed = pod("worker", 0, "Failed", **terminated(137, "OOMKilled"))
    assert termination_message(killed) == "OOMKilled"
    obs = observe(job_model(ps=0, workers=1), Prior(), [role_job("worker", failed="1")],
                  [killed], NOW)  # fmt: skip
    seen = obs.replicas["worker-0"].status
    assert launcher_failure(seen.exit_code, seen.message) is None  # retried as any exit
    decision = plan(job_model(ps=0, workers=1, backoffLimit=0), obs.status, NOW)
    assert "exit code 137 (OOMKilled: over its memory limit)" in decision.message
