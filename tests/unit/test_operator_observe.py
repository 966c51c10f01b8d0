"""The operator's pure parts: API objects -> the planner's JobStatus (`observe`), and one
reconcile's decisions -> API operations and status (`reconcile`)."""

from __future__ import annotations

from typing import Any

import pytest

from tfkube.api import parse_job
from tfkube.contract import EX_DATAERR, launcher_failure, launcher_message
from tfkube.operator import Prior, observe, reconcile
from tfkube.operator._observe import (
    GENERATION_ANNOTATION,
    exit_code,
    format_time,
    parse_indexes,
    parse_time,
    slim_pod,
    termination_message,
)
from tfkube.operator._reconcile import (
    STOP_ANNOTATION,
    Create,
    DeletePod,
    DeleteRoleJob,
    DeleteTFJob,
    Event,
    SuspendJob,
    invalid_spec_plan,
    owned,
)
from tfkube.planner import JobPhase, ReplicaState

NOW = 1_800_000_000.0
T0 = NOW - 100


def tfjob_model(ps: int = 1, workers: int = 2, chief: int = 0, **run_policy: Any):
    replicas: dict[str, Any] = {"worker": {"replicas": workers}}
    if ps:
        replicas["ps"] = {"replicas": ps}
    if chief:
        replicas["chief"] = {"replicas": chief}
    return parse_job(
        {
            "apiVersion": "tfkube.io/v1alpha1",
            "kind": "TFJob",
            "metadata": {"name": "j"},
            "spec": {
                "replicas": replicas,
                "code": {"source": "http://x/c.tar.gz"},
                "runPolicy": run_policy,
            },
        }
    )


def role_job(
    role: str,
    generation: int = 0,
    completed: str = "",
    failed: str = "",
    condition: str | None = None,
    dying: bool = False,
    suspend: bool = False,
) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if completed:
        status["completedIndexes"] = completed
    if failed:
        status["failedIndexes"] = failed
    if condition:
        status["conditions"] = [
            {"type": "Failed", "status": "True", "reason": condition, "message": "m"}
        ]
    meta: dict[str, Any] = {
        "name": f"j-{role}",
        "uid": f"uid-{role}-{generation}",
        "annotations": {GENERATION_ANNOTATION: str(generation)},
    }
    if dying:
        meta["deletionTimestamp"] = format_time(NOW)
    return {"metadata": meta, "spec": {"suspend": suspend}, "status": status}


def pod(
    role: str,
    index: int,
    phase: str = "Running",
    code: int | None = None,
    name: str | None = None,
    created: float = T0,
    generation: int = 0,
    dying: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name or f"j-{role}-{index}-{int(created) % 1000}",
        "creationTimestamp": format_time(created),
        "labels": {
            "tfkube.io/job-name": "j",
            "tfkube.io/replica-type": role,
            "batch.kubernetes.io/job-completion-index": str(index),
        },
        "ownerReferences": [{"controller": True, "uid": f"uid-{role}-{generation}"}],
    }
    if dying:
        meta["deletionTimestamp"] = format_time(NOW)
    status: dict[str, Any] = {"phase": phase}
    if code is not None:
        status["containerStatuses"] = [{"state": {"terminated": {"exitCode": code}}}]
    return {"metadata": meta, "status": status}


def states(obs: Any) -> dict[str, str]:
    return {k: r.status.state.value for k, r in obs.replicas.items()}


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
    obs = observe(tfjob_model(ps=0, workers=1), prior, jobs, pods, NOW)
    seen = obs.replicas["worker-0"].status
    assert seen.state.value == expected
    assert seen.restarts == restarts


def test_the_launcher_s_termination_message_reaches_the_planner():
    failed = pod("worker", 0, "Failed", EX_DATAERR)
    message = launcher_message("bad code: member '../x' is outside the destination")
    failed["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = message
    jobs = [role_job("worker", failed="0")]
    for given in (failed, slim_pod(failed)):
        obs = observe(tfjob_model(ps=0, workers=1), Prior(), jobs, [given], NOW)
        seen = obs.replicas["worker-0"].status
        assert seen.message == message
        assert launcher_failure(seen.exit_code, seen.message) is not None
    assert termination_message(pod("worker", 0, "Failed", 1)) is None


def test_observation_counts_and_totals():
    jobs = [role_job("ps"), role_job("worker", failed="1")]
    pods = [
        pod("ps", 0),
        pod("worker", 0, "Failed", 2, name="w0a", created=T0),
        pod("worker", 0, "Running", name="w0b", created=T0 + 5),
        pod("worker", 1, "Failed", 1, name="w1"),
    ]
    obs = observe(tfjob_model(), Prior(restarts_before=3), jobs, pods, NOW)
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


# -- reconcile: decisions -> operations ----------------------------------------------------


def resource(status: dict[str, Any] | None = None, **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "j",
            "namespace": "ns",
            "uid": "tfjob-uid",
            "generation": 1,
            "annotations": annotations,
        },
        "status": status or {},
    }


def rendered(job: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "j", "namespace": "ns"}},
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "tfkube-tenant", "namespace": "ns"},
        },
    ]
    for role, n in job.spec.replicas.counts().items():
        if n:
            out.append(
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {
                        "name": f"j-{role}",
                        "namespace": "ns",
                        "labels": {"tfkube.io/replica-type": role},
                    },
                    "spec": {},
                }
            )
    return out


def running(start: float = T0, **extra: Any) -> dict[str, Any]:
    return {"phase": "Running", "startTime": format_time(start), **extra}


def ops_of(plan: Any, kind: type) -> list[Any]:
    return [op for op in plan.ops if isinstance(op, kind)]


def test_owned_adds_owner_references_but_not_to_shared_objects():
    job = tfjob_model()
    objects = owned(rendered(job), resource(), suspend=True, generations={"ps": 3})
    by_name = {o["metadata"]["name"]: o for o in objects}
    assert by_name["j"]["metadata"]["ownerReferences"][0]["uid"] == "tfjob-uid"
    assert by_name["j"]["metadata"]["ownerReferences"][0]["controller"] is True
    assert "ownerReferences" not in by_name["tfkube-tenant"]["metadata"]
    assert by_name["j-ps"]["spec"]["suspend"] is True
    assert by_name["j-ps"]["metadata"]["annotations"][GENERATION_ANNOTATION] == "3"
    assert by_name["j-worker"]["metadata"]["annotations"][GENERATION_ANNOTATION] == "0"


def test_first_reconcile_creates_everything_once():
    job = tfjob_model()
    plan = reconcile(resource(), job, [], [], rendered(job), NOW)
    created = [op.obj["metadata"]["name"] for op in ops_of(plan, Create)]
    assert created == ["j", "tfkube-tenant", "j-ps", "j-worker"]
    assert plan.status["phase"] == "Pending"
    assert plan.status["startTime"] == format_time(NOW)
    assert plan.requeue_after is not None


def test_later_reconcile_recreates_only_a_missing_role_job():
    job = tfjob_model()
    plan = reconcile(resource(running()), job, [role_job("ps")], [pod("ps", 0)], rendered(job), NOW)
    assert [op.obj["metadata"]["name"] for op in ops_of(plan, Create)] == ["j-worker"]


def test_success_ends_the_ps_within_the_same_reconcile():
    job = tfjob_model()
    jobs = [role_job("ps"), role_job("worker")]
    pods = [pod("ps", 0), pod("worker", 0, "Succeeded", 0), pod("worker", 1)]
    plan = reconcile(resource(running()), job, jobs, pods, rendered(job), NOW)
    assert plan.status["phase"] == "Succeeded"
    assert plan.status["completionTime"] == format_time(NOW)
    deleted = ops_of(plan, DeleteRoleJob)
    assert [d.name for d in deleted] == ["j-ps"]
    assert deleted[0].selector == "tfkube.io/job-name=j,tfkube.io/replica-type=ps"
    # worker-1 still runs, worker-0's success is kept: that role's Job is suspended.
    assert ops_of(plan, SuspendJob) == [SuspendJob("j-worker", True)]
    assert any(e.reason == "Succeeded" for e in ops_of(plan, Event))


def test_clean_pod_policy_all_deletes_every_job():
    job = tfjob_model(cleanPodPolicy="All")
    jobs = [role_job("ps"), role_job("worker")]
    pods = [pod("ps", 0), pod("worker", 0, "Succeeded", 0), pod("worker", 1)]
    plan = reconcile(resource(running()), job, jobs, pods, rendered(job), NOW)
    assert sorted(d.name for d in ops_of(plan, DeleteRoleJob)) == ["j-ps", "j-worker"]


def test_clean_pod_policy_none_leaves_the_ps():
    job = tfjob_model(cleanPodPolicy="None")
    jobs = [role_job("ps"), role_job("worker")]
    pods = [pod("ps", 0), pod("worker", 0, "Succeeded", 0), pod("worker", 1, "Succeeded", 0)]
    plan = reconcile(resource(running()), job, jobs, pods, rendered(job), NOW)
    assert plan.status["phase"] == "Succeeded"
    assert not ops_of(plan, DeleteRoleJob)
    assert not ops_of(plan, SuspendJob)


def test_worker_failure_is_left_to_kubernetes_and_recorded_once():
    job = tfjob_model(restartPolicy="OnFailure")
    jobs = [role_job("ps"), role_job("worker")]
    pods = [pod("ps", 0), pod("worker", 0, "Failed", 1, name="w0"), pod("worker", 1)]
    plan = reconcile(resource(running()), job, jobs, pods, rendered(job), NOW)
    assert plan.status["phase"] == "Restarting"
    assert plan.status["handledFailures"] == ["w0"]
    assert plan.status["restarts"] == 1
    assert not ops_of(plan, DeletePod)
    assert not ops_of(plan, DeleteRoleJob)
    assert any(e.reason == "ReplicaFailed" for e in ops_of(plan, Event))
    # The next look sees it handled: no second event, same count.
    again = reconcile(resource(plan.status), job, jobs, pods, rendered(job), NOW + 1)
    assert not [e for e in ops_of(again, Event) if e.reason == "ReplicaFailed"]
    assert again.status["restarts"] == 1


def test_non_retryable_exit_fails_the_job():
    job = tfjob_model(restartPolicy="ExitCode")
    jobs = [role_job("ps"), role_job("worker")]
    pods = [pod("ps", 0), pod("worker", 0, "Failed", 3), pod("worker", 1)]
    plan = reconcile(resource(running()), job, jobs, pods, rendered(job), NOW)
    assert plan.status["phase"] == "Failed"
    assert plan.status["reason"] == "ReplicaFailed"
    assert "exit code 3" in plan.status["message"]
    assert "j-ps" in [d.name for d in ops_of(plan, DeleteRoleJob)]


def test_kubernetes_failing_a_worker_job_fails_the_tfjob():
    job = tfjob_model(backoffLimit=5)
    jobs = [role_job("ps"), role_job("worker", condition="BackoffLimitExceeded")]
    pods = [pod("ps", 0), pod("worker", 0), pod("worker", 1)]
    plan = reconcile(resource(running()), job, jobs, pods, rendered(job), NOW)
    assert plan.status["phase"] == "Failed"
    assert plan.status["reason"] == "BackoffLimitExceeded"
    assert "j-worker" in plan.status["message"]


def test_index_kubernetes_gave_up_on_fails_the_tfjob():
    job = tfjob_model(backoffLimit=5)
    jobs = [role_job("ps"), role_job("worker", failed="0")]
    pods = [pod("ps", 0), pod("worker", 0, "Failed", 1), pod("worker", 1)]
    plan = reconcile(resource(running()), job, jobs, pods, rendered(job), NOW)
    assert plan.status["phase"] == "Failed"
    assert "will not retry" in plan.status["message"]


def test_ps_failure_starts_a_new_generation_then_replaces_the_jobs():
    job = tfjob_model(backoff={"baseSeconds": 2, "capSeconds": 10})
    jobs = [role_job("ps", condition="PodFailurePolicy"), role_job("worker")]
    pods = [pod("ps", 0, "Failed", 1, name="ps0"), pod("worker", 0), pod("worker", 1)]
    plan = reconcile(resource(running()), job, jobs, pods, rendered(job), NOW)
    assert plan.status["phase"] == "Restarting"
    assert plan.status["restartGenerations"] == {"ps": 1, "worker": 1}
    assert plan.status["restartsBefore"] == 1
    assert plan.status["restartAt"] == format_time(NOW + 2)
    assert plan.requeue_after == 0.0
    assert not ops_of(plan, DeleteRoleJob)  # the status is written first
    # Next look: both Jobs are stale -> deleted; nothing created before the backoff.
    nxt = reconcile(resource(plan.status), job, jobs, pods, rendered(job), NOW + 0.5)
    assert sorted(d.name for d in ops_of(nxt, DeleteRoleJob)) == ["j-ps", "j-worker"]
    assert not ops_of(nxt, Create)
    assert nxt.status["phase"] == "Restarting"
    assert nxt.status["restarts"] == 1
    # Old Jobs gone and the backoff passed: the new generation is created.
    later = reconcile(resource(nxt.status), job, [], [], rendered(job), NOW + 3)
    created = {op.obj["metadata"]["name"]: op.obj for op in ops_of(later, Create)}
    assert set(created) == {"j-ps", "j-worker"}
    assert created["j-ps"]["metadata"]["annotations"][GENERATION_ANNOTATION] == "1"
    assert later.status["restarts"] == 1


def test_ps_failure_past_the_backoff_limit_fails_the_job():
    job = tfjob_model(backoffLimit=0)
    jobs = [role_job("ps", condition="PodFailurePolicy"), role_job("worker")]
    pods = [pod("ps", 0, "Failed", 1), pod("worker", 0), pod("worker", 1)]
    plan = reconcile(resource(running()), job, jobs, pods, rendered(job), NOW)
    assert plan.status["phase"] == "Failed"
    assert plan.status["reason"] == "BackoffLimitExceeded"


def test_deadline_fails_the_job():
    job = tfjob_model(activeDeadlineSeconds=50)
    jobs = [role_job("ps"), role_job("worker")]
    pods = [pod("ps", 0), pod("worker", 0), pod("worker", 1)]
    plan = reconcile(resource(running(start=NOW - 60)), job, jobs, pods, rendered(job), NOW)
    assert plan.status["reason"] == "DeadlineExceeded"
    assert {d.name for d in ops_of(plan, DeleteRoleJob)} == {"j-ps", "j-worker"}


def test_ttl_deletes_the_tfjob_when_due():
    job = tfjob_model(ttlSecondsAfterFinished=10)
    done = {"phase": "Succeeded", "startTime": format_time(T0), "completionTime": format_time(NOW)}
    early = reconcile(resource(done), job, [], [], rendered(job), NOW + 2)
    assert not ops_of(early, DeleteTFJob)
    assert early.requeue_after == pytest.approx(8.2)
    due = reconcile(resource(done), job, [], [], rendered(job), NOW + 10)
    assert ops_of(due, DeleteTFJob)


def test_terminal_job_without_ttl_is_left_alone():
    job = tfjob_model()
    done = {"phase": "Failed", "startTime": format_time(T0), "completionTime": format_time(NOW)}
    plan = reconcile(resource(done), job, [role_job("worker")], [], rendered(job), NOW + 5)
    assert [op for op in plan.ops if not isinstance(op, Event)] == []
    assert plan.requeue_after is None


def test_suspend_then_resume():
    job = tfjob_model(suspend=True)
    jobs = [role_job("ps"), role_job("worker")]
    pods = [pod("ps", 0), pod("worker", 0), pod("worker", 1)]
    plan = reconcile(resource(running()), job, jobs, pods, rendered(job), NOW)
    assert ops_of(plan, SuspendJob) == [SuspendJob("j-ps", True), SuspendJob("j-worker", True)]
    assert plan.status["reason"] == "Suspended"
    assert plan.requeue_after is None
    resumed_job = tfjob_model()
    suspended = [role_job("ps", suspend=True), role_job("worker", suspend=True)]
    back = reconcile(resource(plan.status), resumed_job, suspended, [], rendered(job), NOW + 50)
    assert ops_of(back, SuspendJob) == [SuspendJob("j-ps", False), SuspendJob("j-worker", False)]
    assert back.status["startTime"] == format_time(NOW + 50)  # the deadline restarts
    assert {c["type"]: c["status"] for c in back.status["conditions"]}["Suspended"] == "False"


def test_stop_annotation_fails_the_job_as_stopped():
    job = tfjob_model()
    jobs = [role_job("ps"), role_job("worker")]
    pods = [pod("ps", 0), pod("worker", 0), pod("worker", 1)]
    tfjob = resource(running(), **{STOP_ANNOTATION: "true"})
    plan = reconcile(tfjob, job, jobs, pods, rendered(job), NOW)
    assert (plan.status["phase"], plan.status["reason"]) == ("Failed", "Stopped")


def test_invalid_spec_is_failed_once():
    plan = invalid_spec_plan(resource(), "spec.replicas.worker: required", NOW)
    assert plan.status["phase"] == "Failed"
    assert plan.status["reason"] == "InvalidSpec"
    assert [e.type for e in ops_of(plan, Event)] == ["Warning"]
    again = invalid_spec_plan(resource(plan.status), "spec.replicas.worker: required", NOW + 1)
    assert again.ops == ()


def test_status_counts_and_conditions():
    job = tfjob_model()
    jobs = [role_job("ps"), role_job("worker")]
    pods = [pod("ps", 0), pod("worker", 0), pod("worker", 1, "Pending")]
    plan = reconcile(resource(running()), job, jobs, pods, rendered(job), NOW)
    assert plan.status["replicaStatuses"]["worker"] == {"active": 2, "succeeded": 0, "failed": 0}
    conditions = {c["type"]: c["status"] for c in plan.status["conditions"]}
    assert conditions["Running"] == "True"
    assert plan.observation is not None
    assert plan.observation.status.replicas[0].state is ReplicaState.RUNNING


def test_owned_keeps_a_job_render_suspended_for_kueue():
    job = tfjob_model()
    objects = rendered(job)
    objects[-1]["spec"]["suspend"] = True  # Kueue admits (un-suspends) it
    jobs = [
        o for o in owned(objects, resource(), suspend=False, generations={}) if o["kind"] == "Job"
    ]
    assert [j["spec"]["suspend"] for j in jobs] == [False, True]


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
    full = observe(tfjob_model(), Prior(), jobs, pods, NOW)
    slim = observe(tfjob_model(), Prior(), jobs, [slim_pod(p) for p in pods], NOW)
    assert slim == full
    assert "managedFields" not in slim_pod(pods[0])["metadata"]
