"""The operator's reconcile, decided purely: each phase on its own (ensure, decide,
announce, act, finish, record, requeue_after), then whole reconciles from API objects to
operations and status."""

from __future__ import annotations

from typing import Any

import pytest

from tfkube.kube.names import GENERATION_ANNOTATION, STOP_ANNOTATION
from tfkube.kube.observe import Prior, format_time, observe
from tfkube.operator import reconcile
from tfkube.operator._ops import (
    Create,
    DeletePod,
    DeleteRoleJob,
    DeleteTFJob,
    Event,
    FailPod,
    SuspendJob,
)
from tfkube.operator._reconcile import (
    Acted,
    WholeJobRestart,
    act,
    announce,
    decide,
    ensure,
    finish,
    invalid_spec_plan,
    owned,
    record,
    release_stranded,
    requeue_after,
    whole_job_restart,
)
from tfkube.planner import Decision, DeleteJob, JobPhase, ReplicaState, Restart, Stop

from ._kube_objects import NOW, T0, job_model, pod, role_job, running_pod

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
    job = job_model()
    objects = owned(rendered(job), resource(), suspend=True, generations={"ps": 3})
    by_name = {o["metadata"]["name"]: o for o in objects}
    assert by_name["j"]["metadata"]["ownerReferences"][0]["uid"] == "tfjob-uid"
    assert by_name["j"]["metadata"]["ownerReferences"][0]["controller"] is True
    assert "ownerReferences" not in by_name["tfkube-tenant"]["metadata"]
    assert by_name["j-ps"]["spec"]["suspend"] is True
    assert by_name["j-ps"]["metadata"]["annotations"][GENERATION_ANNOTATION] == "3"
    assert by_name["j-worker"]["metadata"]["annotations"][GENERATION_ANNOTATION] == "0"


def test_first_reconcile_creates_everything_once():
    job = job_model()
    plan = reconcile(resource(), job, [], [], rendered(job), NOW)
    created = [op.obj["metadata"]["name"] for op in ops_of(plan, Create)]
    assert created == ["j", "tfkube-tenant", "j-ps", "j-worker"]
    assert plan.status["phase"] == "Pending"
    assert plan.status["startTime"] == format_time(NOW)
    assert plan.requeue_after is not None


def test_later_reconcile_recreates_only_a_missing_role_job():
    job = job_model()
    plan = reconcile(resource(running()), job, [role_job("ps")], [pod("ps", 0)], rendered(job), NOW)
    assert [op.obj["metadata"]["name"] for op in ops_of(plan, Create)] == ["j-worker"]


def test_success_ends_the_ps_within_the_same_reconcile():
    job = job_model()
    jobs = [role_job("ps"), role_job("worker")]
    pods = [pod("ps", 0), pod("worker", 0, "Succeeded", 0), pod("worker", 1)]
    plan = reconcile(resource(running()), job, jobs, pods, rendered(job), NOW)
    assert plan.status["phase"] == "Succeeded"
    assert plan.status["completionTime"] == format_time(NOW)
    # Both role Jobs are suspended: Kubernetes deletes the running pods (the PS, worker-1)
    # all at once and keeps worker-0's success.
    assert not ops_of(plan, DeleteRoleJob)
    assert ops_of(plan, SuspendJob) == [SuspendJob("j-ps", True), SuspendJob("j-worker", True)]
    # Once suspended, nothing more is asked of them.
    suspended = [role_job("ps", suspend=True), role_job("worker", suspend=True)]
    ps_dying = [pod("ps", 0, dying=True), pods[1], pod("worker", 1, dying=True)]
    again = reconcile(resource(plan.status), job, suspended, ps_dying, rendered(job), NOW + 1)
    assert not ops_of(again, SuspendJob)
    assert not ops_of(again, DeleteRoleJob)
    assert any(e.reason == "Succeeded" for e in ops_of(plan, Event))


def test_clean_pod_policy_all_deletes_every_job():
    job = job_model(cleanPodPolicy="All")
    jobs = [role_job("ps"), role_job("worker")]
    pods = [pod("ps", 0), pod("worker", 0, "Succeeded", 0), pod("worker", 1)]
    plan = reconcile(resource(running()), job, jobs, pods, rendered(job), NOW)
    assert sorted(d.name for d in ops_of(plan, DeleteRoleJob)) == ["j-ps", "j-worker"]


def test_clean_pod_policy_none_leaves_the_ps():
    job = job_model(cleanPodPolicy="None")
    jobs = [role_job("ps"), role_job("worker")]
    pods = [pod("ps", 0), pod("worker", 0, "Succeeded", 0), pod("worker", 1, "Succeeded", 0)]
    plan = reconcile(resource(running()), job, jobs, pods, rendered(job), NOW)
    assert plan.status["phase"] == "Succeeded"
    assert not ops_of(plan, DeleteRoleJob)
    assert not ops_of(plan, SuspendJob)


def test_worker_failure_is_left_to_kubernetes_and_recorded_once():
    job = job_model(restartPolicy="OnFailure")
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
    job = job_model(restartPolicy="ExitCode")
    jobs = [role_job("ps"), role_job("worker")]
    pods = [pod("ps", 0), pod("worker", 0, "Failed", 3), pod("worker", 1)]
    plan = reconcile(resource(running()), job, jobs, pods, rendered(job), NOW)
    assert plan.status["phase"] == "Failed"
    assert plan.status["reason"] == "ReplicaFailed"
    assert "exit code 3" in plan.status["message"]
    assert SuspendJob("j-ps", True) in ops_of(plan, SuspendJob)


def test_kubernetes_failing_a_worker_job_fails_the_tfjob():
    job = job_model(backoffLimit=5)
    jobs = [role_job("ps"), role_job("worker", condition="BackoffLimitExceeded")]
    pods = [pod("ps", 0), pod("worker", 0), pod("worker", 1)]
    plan = reconcile(resource(running()), job, jobs, pods, rendered(job), NOW)
    assert plan.status["phase"] == "Failed"
    assert plan.status["reason"] == "BackoffLimitExceeded"
    assert "j-worker" in plan.status["message"]


def test_index_kubernetes_gave_up_on_fails_the_tfjob():
    job = job_model(backoffLimit=5)
    jobs = [role_job("ps"), role_job("worker", failed="0")]
    pods = [pod("ps", 0), pod("worker", 0, "Failed", 1), pod("worker", 1)]
    plan = reconcile(resource(running()), job, jobs, pods, rendered(job), NOW)
    assert plan.status["phase"] == "Failed"
    assert "will not retry" in plan.status["message"]


def test_ps_failure_starts_a_new_generation_then_replaces_the_jobs():
    job = job_model(backoff={"baseSeconds": 2, "capSeconds": 10})
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


def with_volumes(objects: list[dict[str, Any]], **volumes: str) -> list[dict[str, Any]]:
    """The rendered role Jobs' pods mount `data`/`logs` as given: a claim's name, or
    `emptyDir` (the PS has no data volume)."""
    for obj in objects:
        if obj["kind"] != "Job":
            continue
        mounted = []
        for which, source in volumes.items():
            if which == "data" and obj["metadata"]["labels"]["tfkube.io/replica-type"] == "ps":
                continue
            if source == "emptyDir":
                mounted.append({"name": which, "emptyDir": {}})
            else:
                mounted.append({"name": which, "persistentVolumeClaim": {"claimName": source}})
        obj["spec"] = {"template": {"spec": {"volumes": mounted}}}
    return objects


@pytest.mark.parametrize(
    ("volumes", "storage", "words"),
    [
        pytest.param(
            {"logs": "emptyDir", "data": "emptyDir"},
            {"logs": "emptyDir", "data": "emptyDir"},
            ["each pod's own folder (emptyDir; no claim asked for)", "starts training from "
             "scratch", "give spec.storage.logs a claim", "data: each pod's own folder"],
            id="nothing-asked",
        ),
        pytest.param(
            {"logs": "j-logs", "data": "imagenet"},
            {"logs": "claim j-logs", "data": "claim imagenet"},
            ["logs and checkpoints: claim j-logs, shared by every replica",
             "data: claim imagenet"],
            id="claims",
        ),
    ],
)  # fmt: skip
def test_storage_is_said_once_and_kept_in_the_status(
    volumes: dict[str, str], storage: dict[str, str], words: list[str]
):
    job = job_model()
    plan = reconcile(resource(), job, [], [], with_volumes(rendered(job), **volumes), NOW)
    assert plan.status["storage"] == storage
    said = [e.message for e in ops_of(plan, Event) if e.reason == "Storage"]
    assert len(said) == 1
    for w in words:
        assert w in said[0], said[0]
    again = reconcile(
        resource(plan.status), job, [role_job("ps"), role_job("worker")], [],
        with_volumes(rendered(job), **volumes), NOW + 1,
    )  # fmt: skip
    assert not [e for e in ops_of(again, Event) if e.reason == "Storage"]
    assert again.status["storage"] == storage


def test_a_ps_failure_without_a_logs_claim_restarts_from_scratch_and_says_so():
    """No claim keeps the checkpoints: the restart event and every waiting replica's
    message (what `tfkube status` shows) say the job starts again from scratch."""
    job = job_model(backoff={"baseSeconds": 2, "capSeconds": 10})
    objects = with_volumes(rendered(job), logs="emptyDir")
    jobs = [role_job("ps", condition="PodFailurePolicy"), role_job("worker")]
    pods = [pod("ps", 0, "Failed", 1, name="ps0"), pod("worker", 0), pod("worker", 1)]
    first = reconcile(
        resource(running(storage={"logs": "emptyDir"})), job, jobs, pods, objects, NOW
    )
    assert first.status["phase"] == "Restarting"
    lines = [e.message for e in ops_of(first, Event)]
    assert any("restarting the replicas that use it, from scratch" in m for m in lines), lines
    assert not any("resume from the last checkpoint" in m for m in lines), lines
    nxt = reconcile(resource(first.status), job, [], [], objects, NOW + 0.5)
    assert nxt.observation is not None
    for key, seen in nxt.observation.replicas.items():
        assert seen.message.startswith("whole-job restart from scratch"), (key, seen.message)
    # With a claim the same restart resumes, and says so.
    kept = with_volumes(rendered(job), logs="j-logs")
    resumed = reconcile(resource(running()), job, jobs, pods, kept, NOW)
    assert any("to resume from the last checkpoint" in e.message for e in ops_of(resumed, Event))


@pytest.mark.parametrize(
    "ps_pods",
    [
        pytest.param([pod("ps", 0, "Failed", 143, name="ps0", dying=True)], id="pod-dying"),
        pytest.param([], id="pod-already-gone"),
    ],
)
def test_a_deleted_ps_pod_restarts_the_whole_job(ps_pods: list[Any]):
    """Deleting the PS pod (a user, an eviction) fails the managed PS Job while the pod is
    only "being stopped": the failed Job is the PS's failure, so the whole job restarts
    (seen on a real kubelet, where the pod ends with 143 and then disappears)."""
    job = job_model()
    jobs = [role_job("ps", condition="PodFailurePolicy"), role_job("worker")]
    pods = [*ps_pods, pod("worker", 0), pod("worker", 1)]
    obs = observe(job, Prior(phase=JobPhase.RUNNING), jobs, pods, NOW)
    assert obs.replicas["ps-0"].status.state is ReplicaState.FAILED
    assert obs.replicas["ps-0"].status.exit_code == (143 if ps_pods else None)
    plan = reconcile(resource(running()), job, jobs, pods, rendered(job), NOW)
    assert plan.status["phase"] == "Restarting"
    assert plan.status["restartGenerations"] == {"ps": 1, "worker": 1}


def test_ps_failure_past_the_backoff_limit_fails_the_job():
    job = job_model(backoffLimit=0)
    jobs = [role_job("ps", condition="PodFailurePolicy"), role_job("worker")]
    pods = [pod("ps", 0, "Failed", 1), pod("worker", 0), pod("worker", 1)]
    plan = reconcile(resource(running()), job, jobs, pods, rendered(job), NOW)
    assert plan.status["phase"] == "Failed"
    assert plan.status["reason"] == "BackoffLimitExceeded"


def test_deadline_fails_the_job():
    job = job_model(activeDeadlineSeconds=50)
    jobs = [role_job("ps"), role_job("worker")]
    pods = [pod("ps", 0), pod("worker", 0), pod("worker", 1)]
    plan = reconcile(resource(running(start=NOW - 60)), job, jobs, pods, rendered(job), NOW)
    assert plan.status["reason"] == "DeadlineExceeded"
    assert {d.name for d in ops_of(plan, SuspendJob)} == {"j-ps", "j-worker"}


def test_ttl_deletes_the_tfjob_when_due():
    job = job_model(ttlSecondsAfterFinished=10)
    done = {"phase": "Succeeded", "startTime": format_time(T0), "completionTime": format_time(NOW)}
    early = reconcile(resource(done), job, [], [], rendered(job), NOW + 2)
    assert not ops_of(early, DeleteTFJob)
    assert early.requeue_after == pytest.approx(8.2)
    due = reconcile(resource(done), job, [], [], rendered(job), NOW + 10)
    assert ops_of(due, DeleteTFJob)


def test_terminal_job_without_ttl_is_left_alone():
    job = job_model()
    done = {"phase": "Failed", "startTime": format_time(T0), "completionTime": format_time(NOW)}
    plan = reconcile(resource(done), job, [role_job("worker")], [], rendered(job), NOW + 5)
    assert [op for op in plan.ops if not isinstance(op, Event)] == []
    assert plan.requeue_after is None


def test_suspend_then_resume():
    job = job_model(suspend=True)
    jobs = [role_job("ps"), role_job("worker")]
    pods = [pod("ps", 0), pod("worker", 0), pod("worker", 1)]
    plan = reconcile(resource(running()), job, jobs, pods, rendered(job), NOW)
    assert ops_of(plan, SuspendJob) == [SuspendJob("j-ps", True), SuspendJob("j-worker", True)]
    assert plan.status["reason"] == "Suspended"
    assert plan.requeue_after is None
    resumed_job = job_model()
    suspended = [role_job("ps", suspend=True), role_job("worker", suspend=True)]
    back = reconcile(resource(plan.status), resumed_job, suspended, [], rendered(job), NOW + 50)
    assert ops_of(back, SuspendJob) == [SuspendJob("j-ps", False), SuspendJob("j-worker", False)]
    assert back.status["startTime"] == format_time(NOW + 50)  # the deadline restarts
    assert {c["type"]: c["status"] for c in back.status["conditions"]}["Suspended"] == "False"


def test_stop_annotation_fails_the_job_as_stopped():
    job = job_model()
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
    job = job_model()
    jobs = [role_job("ps"), role_job("worker")]
    pods = [pod("ps", 0), pod("worker", 0), pod("worker", 1, "Pending")]
    plan = reconcile(resource(running()), job, jobs, pods, rendered(job), NOW)
    assert plan.status["replicaStatuses"]["worker"] == {"active": 2, "succeeded": 0, "failed": 0}
    conditions = {c["type"]: c["status"] for c in plan.status["conditions"]}
    assert conditions["Running"] == "True"
    assert plan.observation is not None
    assert plan.observation.status.replicas[0].state is ReplicaState.RUNNING


def test_owned_keeps_a_job_render_suspended_for_kueue():
    job = job_model()
    objects = rendered(job)
    objects[-1]["spec"]["suspend"] = True  # Kueue admits (un-suspends) it
    jobs = [
        o for o in owned(objects, resource(), suspend=False, generations={}) if o["kind"] == "Job"
    ]
    assert [j["spec"]["suspend"] for j in jobs] == [False, True]


# -- the phases, one at a time --------------------------------------------------------------

LIVE = [role_job("ps"), role_job("worker")]
LIVE_PODS = [pod("ps", 0, name="ps0"), pod("worker", 0, name="w0"), pod("worker", 1, name="w1")]


def seen(
    jobs: list[Any] = LIVE, pods: list[Any] = LIVE_PODS, prior: Prior | None = None, **policy: Any
) -> tuple[Any, Any]:
    job = job_model(**policy)
    return job, observe(job, prior or Prior(started_at=T0), jobs, pods, NOW)


def kinds(ops: Any) -> list[str]:
    """Each operation as `Kind name` (Events as `Event reason`)."""
    out = []
    for op in ops:
        if isinstance(op, Create):
            out.append(f"Create {op.obj['metadata']['name']}")
        elif isinstance(op, Event):
            out.append(f"Event {op.reason}")
        else:
            out.append(f"{type(op).__name__} {getattr(op, 'name', '')}".strip())
    return out


@pytest.mark.parametrize(
    ("jobs", "prior", "first", "now", "expected"),
    [
        pytest.param(
            [],
            Prior(),
            True,
            NOW,
            [
                "Create j",
                "Create tfkube-tenant",
                "Create j-ps",
                "Create j-worker",
                "Event Created",
                "Event Storage",
            ],
            id="first-look-creates-everything",
        ),
        pytest.param(LIVE, Prior(started_at=T0), False, NOW, [], id="all-there"),
        pytest.param(
            [role_job("ps")], Prior(started_at=T0), False, NOW, ["Create j-worker"], id="lost-job"
        ),
        pytest.param(
            [role_job("ps", dying=True)],
            Prior(started_at=T0),
            False,
            NOW,
            ["Create j-worker"],
            id="dying-job-not-recreated-yet",
        ),
        pytest.param(
            LIVE,
            Prior(started_at=T0, generations={"ps": 1}, restart_at=NOW + 1),
            False,
            NOW,
            ["DeleteRoleJob j-ps"],
            id="stale-deleted-before-the-backoff",
        ),
        pytest.param(
            [role_job("worker")],
            Prior(started_at=T0, generations={"ps": 1}, restart_at=NOW + 1),
            False,
            NOW,
            [],
            id="new-generation-waits-for-the-backoff",
        ),
        pytest.param(
            [role_job("worker")],
            Prior(started_at=T0, generations={"ps": 1}, restart_at=NOW - 1),
            False,
            NOW,
            ["Create j-ps"],
            id="new-generation-once-due",
        ),
        pytest.param(
            [], Prior(phase=JobPhase.SUCCEEDED, started_at=T0), False, NOW, [], id="finished"
        ),
    ],
)
def test_ensure(jobs: list[Any], prior: Prior, first: bool, now: float, expected: list[str]):
    job = job_model()
    objects = owned(rendered(job), resource(), suspend=False, generations=prior.generations)
    obs = observe(job, prior, jobs, [], now)
    assert kinds(ensure(job, prior, obs, objects, first, now)) == expected


@pytest.mark.parametrize(
    ("jobs", "pods", "annotations", "phase", "reason"),
    [
        pytest.param(LIVE, LIVE_PODS, {}, "Running", None, id="planner-alone"),
        pytest.param(
            LIVE, LIVE_PODS, {STOP_ANNOTATION: "true"}, "Failed", "Stopped", id="stop-asked"
        ),
        pytest.param(
            [role_job("ps"), role_job("worker", failed="0")],
            [pod("ps", 0), pod("worker", 0, "Failed", 1), pod("worker", 1)],
            {},
            "Failed",
            "BackoffLimitExceeded",
            id="kubernetes-gave-up-on-an-index",
        ),
        pytest.param(
            [role_job("ps"), role_job("worker", condition="DeadlineExceeded")],
            LIVE_PODS,
            {},
            "Failed",
            "DeadlineExceeded",
            id="kubernetes-failed-a-worker-job",
        ),
        pytest.param(
            [role_job("ps", condition="PodFailurePolicy"), role_job("worker")],
            [pod("ps", 0, "Failed", 1), pod("worker", 0), pod("worker", 1)],
            {},
            "Restarting",
            None,
            id="a-failed-ps-job-is-a-whole-job-restart",
        ),
    ],
)
def test_decide(
    jobs: list[Any], pods: list[Any], annotations: dict[str, str], phase: str, reason: str | None
):
    job, obs = seen(jobs, pods, backoffLimit=3)
    decision = decide(resource(running(), **annotations), job, obs, NOW)
    assert (decision.phase.value, decision.reason) == (phase, reason)


def test_whole_job_restart_only_for_a_failed_ps():
    job, obs = seen([role_job("ps"), role_job("worker")], LIVE_PODS)
    assert whole_job_restart(decide(resource(running()), job, obs, NOW), obs, Prior()) is None
    jobs = [role_job("ps", generation=2), role_job("worker")]
    pods = [
        pod("ps", 0, "Failed", 1, generation=2),
        pod("worker", 0, "Failed", 1, name="w0"),
        pod("worker", 1),
    ]
    prior = Prior(started_at=T0, generations={"ps": 2})
    job, obs = seen(jobs, pods, prior=prior, backoff={"baseSeconds": 4, "capSeconds": 10})
    decision = decide(resource(running()), job, obs, NOW)
    restart = whole_job_restart(decision, obs, prior)
    assert restart is not None
    assert restart.generations == {"ps": 3, "worker": 1}
    assert restart.restarts_before == decision.restarts  # every role restarts: none kept
    assert restart.status()["restartAt"] == format_time(NOW + 4)


@pytest.mark.parametrize(
    ("decision", "prior_phase", "expected"),
    [
        pytest.param(Decision(JobPhase.RUNNING, 0), JobPhase.RUNNING, [], id="nothing-new"),
        pytest.param(
            Decision(JobPhase.RUNNING, 0), JobPhase.PENDING, ["Normal Running"], id="phase-change"
        ),
        pytest.param(
            Decision(JobPhase.RESTARTING, 1, events=("worker-0 failed (exit code 1)",)),
            JobPhase.RUNNING,
            ["Warning ReplicaFailed", "Normal Restarting"],
            id="replica-failed",
        ),
        pytest.param(
            Decision(JobPhase.RESTARTING, 1, events=("restarting worker-0 in 2s",)),
            JobPhase.RESTARTING,
            ["Normal Restarting"],
            id="restart-line",
        ),
        pytest.param(
            Decision(JobPhase.SUCCEEDED, 0, finished=True, events=("job Succeeded: done",)),
            JobPhase.RUNNING,
            [],
            id="finished-said-by-finish",
        ),
    ],
)
def test_announce(decision: Decision, prior_phase: JobPhase, expected: list[str]):
    ops = announce(decision, Prior(phase=prior_phase))
    assert [f"{e.type} {e.reason}" for e in ops] == expected


@pytest.mark.parametrize(
    ("pods", "actions", "whole_job", "ops", "handled", "stop_roles"),
    [
        pytest.param(
            [pod("ps", 0), pod("worker", 0, "Failed", 1, name="w0"), pod("worker", 1)],
            (Restart("worker-0", NOW, "failed"),),
            False,
            [],
            {"w0"},
            set(),
            id="failed-replica-left-to-kubernetes",
        ),
        pytest.param(
            LIVE_PODS,
            (Restart("worker-1", NOW, "ps failed"),),
            False,
            ["DeletePod w1"],
            set(),
            set(),
            id="live-replica-pod-deleted",
        ),
        pytest.param(
            [pod("ps", 0, "Failed", 1, name="ps0"), pod("worker", 0), pod("worker", 1)],
            (Restart("ps-0", NOW, "failed"), Restart("worker-0", NOW, "ps failed")),
            True,
            [],
            set(),
            set(),
            id="whole-job-restart-replaces-jobs-instead",
        ),
        pytest.param(
            LIVE_PODS,
            (Stop("ps-0", "job ended"), Stop("worker-1", "job ended")),
            False,
            [],
            set(),
            {"ps", "worker"},
            id="stops-by-role",
        ),
        pytest.param(
            [], (DeleteJob(),), False, ["Event Deleted", "DeleteTFJob"], set(), set(), id="ttl"
        ),
    ],
)
def test_act(
    pods: list[Any],
    actions: tuple[Any, ...],
    whole_job: bool,
    ops: list[str],
    handled: set[str],
    stop_roles: set[str],
):
    job, obs = seen(LIVE, pods)
    decision = Decision(JobPhase.RUNNING, 0, actions=actions)
    acted = act(job, obs, decision, frozenset(), whole_job=whole_job)
    assert (kinds(acted.ops), set(acted.handled), set(acted.stop_roles)) == (
        ops,
        handled,
        stop_roles,
    )
    assert all(op.grace_seconds >= 0 for op in acted.ops if isinstance(op, DeletePod))


def test_finish_ends_tensorboard_once_and_says_how_the_job_ended():
    job, obs = seen(LIVE, [pod("ps", 0), pod("worker", 0, "Succeeded", 0), pod("worker", 1)])
    tensorboard = {"kind": "Deployment", "metadata": {"name": "j-tensorboard"}}
    done = Decision(JobPhase.SUCCEEDED, 0, reason="Succeeded", message="ok", finished=True)
    ops = finish(job, obs, done, frozenset({"ps", "worker"}), [tensorboard])
    assert kinds(ops) == [
        "SuspendJob j-ps",
        "SuspendJob j-worker",
        "DeleteObject j-tensorboard",
        "DeleteObject j-tensorboard",
        "Event Succeeded",
    ]
    later = Decision(JobPhase.SUCCEEDED, 0)  # already finished: no second event
    assert kinds(finish(job, obs, later, frozenset(), [tensorboard])) == []


def test_record_keeps_only_live_handled_failures_and_flips_conditions():
    pods = [pod("ps", 0), pod("worker", 0, "Failed", 1, name="w0"), pod("worker", 1)]
    _, obs = seen(LIVE, pods)
    old = running(conditions=[{"type": "Running", "status": "True", "lastTransitionTime": "t"}])
    decision = Decision(JobPhase.FAILED, 1, reason="ReplicaFailed", message="m", finished=True)
    acted = Acted((), frozenset({"w0", "gone"}), frozenset())
    status = record(old, Prior(), obs, decision, acted, None, NOW)
    assert status["handledFailures"] == ["w0"]
    assert status["completionTime"] == format_time(NOW)
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "Created": "True",
        "Running": "False",
        "Failed": "True",
    }
    assert "restartGenerations" not in status


@pytest.mark.parametrize(
    ("phase", "pods", "policy", "restart", "deleting", "expected"),
    [
        pytest.param(JobPhase.RUNNING, LIVE_PODS, {}, False, False, 2.0, id="live"),
        pytest.param(JobPhase.RESTARTING, LIVE_PODS, {}, True, False, 0.0, id="whole-job"),
        pytest.param(
            JobPhase.SUCCEEDED,
            [],
            {"ttlSecondsAfterFinished": 10},
            False,
            False,
            pytest.approx(10.2),
            id="ttl-due-later",
        ),
        pytest.param(
            JobPhase.SUCCEEDED,
            [],
            {"ttlSecondsAfterFinished": 10},
            False,
            True,
            None,
            id="ttl-deleting",
        ),
        pytest.param(JobPhase.FAILED, LIVE_PODS, {}, False, False, 2.0, id="still-stopping"),
        pytest.param(
            JobPhase.FAILED,
            LIVE_PODS,
            {"cleanPodPolicy": "None"},
            False,
            False,
            None,
            id="left-running-on-purpose",
        ),
        pytest.param(JobPhase.SUCCEEDED, [], {}, False, False, None, id="done"),
    ],
)
def test_requeue_after(
    phase: JobPhase,
    pods: list[Any],
    policy: dict[str, Any],
    restart: bool,
    deleting: bool,
    expected: Any,
):
    prior = Prior(phase=phase, started_at=T0, finished_at=NOW if phase.terminal else None)
    job, obs = seen(LIVE, pods, prior, **policy)
    marker = WholeJobRestart({}, 0, NOW) if restart else None
    decision = Decision(phase, 0)
    assert requeue_after(job, obs, decision, marker, deleting, NOW) == expected


# -- stall detection: the planner's Report / Restart / Fail carried out on Kubernetes --------


def stall_job(action: str) -> Any:
    return job_model(ps=0, workers=1, stallSeconds=15, stallAction=action, backoffLimit=1)


def test_a_reported_stall_is_recorded_and_announced_once():
    job = stall_job("Report")
    quiet = [running_pod(False, NOW - 5)]
    plan = reconcile(resource(running()), job, [role_job("worker")], quiet, rendered(job), NOW)
    assert plan.status["phase"] == "Running"
    assert plan.status["stalledReplicas"] == ["worker-0"]
    assert [op.message for op in ops_of(plan, Event)] == [
        "worker-0 is stalled: no progress for 20s"
    ]
    assert not ops_of(plan, DeletePod)
    again = reconcile(
        resource(plan.status), job, [role_job("worker")], quiet, rendered(job), NOW + 2
    )
    assert not ops_of(again, Event)
    moving = [running_pod(True, NOW + 3)]
    back = reconcile(
        resource(again.status), job, [role_job("worker")], moving, rendered(job), NOW + 4
    )
    assert [op.message for op in ops_of(back, Event)] == ["worker-0 makes progress again"]
    assert "stalledReplicas" not in back.status


def test_a_stall_restart_deletes_the_pod_and_counts_once_until_the_backoff_limit():
    job = stall_job("Restart")
    jobs = [role_job("worker")]
    first = running_pod(False, NOW - 5)
    plan = reconcile(resource(running()), job, jobs, [first], rendered(job), NOW)
    assert [op.name for op in ops_of(plan, DeletePod)] == [first["metadata"]["name"]]
    assert (plan.status["restarts"], plan.status["restartsBefore"]) == (1, 1)
    # Its pod being deleted, then gone and replaced: the restart stays counted, once.
    dying = [running_pod(False, NOW - 5)]
    dying[0]["metadata"]["deletionTimestamp"] = format_time(NOW)
    later = reconcile(resource(plan.status), job, jobs, dying, rendered(job), NOW + 1)
    assert not ops_of(later, DeletePod)
    assert later.status["restarts"] == 1
    second = running_pod(True, NOW + 20, created=NOW + 10, started=NOW + 12)
    fine = reconcile(resource(later.status), job, jobs, [second], rendered(job), NOW + 30)
    assert (fine.status["phase"], fine.status["restarts"]) == ("Running", 1)
    # A second stall is one restart too many for backoffLimit 1.
    stalled = running_pod(False, NOW + 50, created=NOW + 10, started=NOW + 12)
    done = reconcile(resource(fine.status), job, jobs, [stalled], rendered(job), NOW + 52)
    assert (done.status["phase"], done.status["reason"]) == ("Failed", "BackoffLimitExceeded")
    assert "worker-0 stalled after 1 restarts" in done.status["message"]


def test_a_stall_fails_the_job_with_reason_stalled():
    job = stall_job("Fail")
    quiet = [running_pod(False, NOW - 5)]
    plan = reconcile(resource(running()), job, [role_job("worker")], quiet, rendered(job), NOW)
    assert (plan.status["phase"], plan.status["reason"]) == ("Failed", "Stalled")
    assert plan.status["message"].startswith("worker-0 made no progress for 20s")
    assert ops_of(plan, SuspendJob) == [SuspendJob("j-worker", True)]


def test_a_stalled_ps_restarts_the_whole_job_as_a_failed_one():
    job = job_model(ps=1, workers=1, stallSeconds=15, stallAction="Restart")
    ps = running_pod(False, NOW - 5, role="ps")
    jobs = [role_job("ps"), role_job("worker")]
    plan = reconcile(resource(running()), job, jobs, [ps, pod("worker", 0)], rendered(job), NOW)
    assert plan.status["restartGenerations"] == {"ps": 1, "worker": 1}
    assert (plan.status["restarts"], plan.status["restartsBefore"]) == (1, 1)
    assert not ops_of(plan, DeletePod)  # the generation's Jobs are replaced instead


def test_pods_stranded_on_a_lost_node_are_failed():
    """An evicted pod whose node is gone is marked Failed (then its Job replaces it);
    one its kubelet may still end, or deleted for another reason, is left alone."""
    stranded = pod("worker", 0)
    stranded["metadata"]["deletionTimestamp"] = format_time(NOW - 30)
    stranded["status"]["conditions"] = [
        {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"}
    ]
    fresh = pod("worker", 1)
    fresh["metadata"]["deletionTimestamp"] = format_time(NOW)
    fresh["status"]["conditions"] = stranded["status"]["conditions"]
    assert release_stranded([stranded, fresh, pod("ps", 0)], NOW) == [
        FailPod(stranded["metadata"]["name"])
    ]
