"""Preemption on Kubernetes, decided purely: the scheduler's marks on a preempted pod (its
DisruptionTarget condition, its `Preempted` Event that outlives it) read by
`tfkube.kube.observe`, and the operator's answer (`tfkube.operator._reconcile.preempted`):
the whole job starts again with no backoff, counted as one preemption and no restart.
And where priorities come from: a team's priority as a PriorityClass its jobs' pods get."""

from __future__ import annotations

from typing import Any

import pytest

from tfkube.engines import JobView
from tfkube.engines.kubernetes._backend import with_priority_class
from tfkube.kube._observe import (
    PREEMPTION_SETTLE_SECONDS,
    preempted_by_scheduler,
    preemptions,
    replica_of_pod,
)
from tfkube.kube.names import team_priority_class
from tfkube.kube.observe import Prior, format_time, observe
from tfkube.operator import reconcile
from tfkube.operator._ops import Create, DeleteRoleJob, Event
from tfkube.planner import JobPhase
from tfkube.render import RenderOptions, render_job
from tfkube.render._tenant import priority_class, tenant_objects
from tfkube.server.core.tables import Job, Team
from tfkube.server.jobs.service import JobService
from tfkube.server.tenants import tenant_of

from ._kube_objects import NOW, T0, job_model, pod, role_job
from .test_operator_reconcile import ops_of, rendered, resource, running

PREEMPTED = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "PreemptionByScheduler",
    "message": "default-scheduler: preempting to accommodate a higher priority pod",
}


def preempted_pod(role: str, index: int, **kw: Any) -> dict[str, Any]:
    return pod(role, index, conditions=[PREEMPTED], **kw)


def preempted_event(pod_name: str, at: float, kind: str = "Pod") -> dict[str, Any]:
    """The scheduler's Event, as the core/v1 API shows an events.k8s.io one (eventTime
    with microseconds, no lastTimestamp)."""
    return {
        "reason": "Preempted",
        "message": "Preempted by pod 1234-abcd on node kwok-0",
        "eventTime": format_time(at).replace("Z", ".250000Z"),
        "involvedObject": {"kind": kind, "name": pod_name, "namespace": "ns"},
    }


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        (PREEMPTED, True),
        ({**PREEMPTED, "reason": "DeletionByTaintManager"}, False),  # node lost: not ours
        ({**PREEMPTED, "reason": "EvictionByEvictionAPI"}, False),  # a drain
        ({**PREEMPTED, "status": "False"}, False),
        ({"type": "Ready", "status": "True", "reason": "PreemptionByScheduler"}, False),
    ],
)
def test_only_the_schedulers_preemption_counts(condition: dict[str, Any], expected: bool):
    assert preempted_by_scheduler({"status": {"conditions": [condition]}}) is expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("j-worker-1-x7k2p", "worker-1"),
        ("j-ps-0-abcde", "ps-0"),
        ("j-worker-2-abcde", None),  # the job has workers 0 and 1 only
        ("j-worker-worker-0-abcde", None),  # job "j-worker"'s pod, not job "j"'s
        ("j-worker-1", None),
        ("jj-worker-1-abcde", None),
        ("j-worker-1-ABCDE", None),
    ],
)
def test_a_pod_name_names_its_replica(name: str, expected: str | None):
    assert replica_of_pod(job_model(), name) == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("j-worker-s1-0-abcde", "worker-2"),
        ("j-worker-s2-0-abcde", "worker-4"),
        ("j-worker-1-abcde", "worker-1"),
        ("j-worker-s3-0-abcde", None),  # no such Job
        ("j-worker-s2-1-abcde", None),  # worker-5: the job has 5 workers
    ],
)
def test_a_pod_name_names_its_replica_in_a_later_job(name: str, expected: str | None):
    """Workers in Jobs of 2: a pod of `j-worker-s<k>` is replica k*2 + its index."""
    offsets = {"j-worker-s1": 2, "j-worker-s2": 4}
    assert replica_of_pod(job_model(workers=5), name, offsets) == expected


def test_preemptions_from_pods_and_events_one_per_replica():
    job = job_model()
    prior = Prior(phase=JobPhase.RUNNING, started_at=T0)
    pods = [preempted_pod("worker", 1, dying=True), pod("worker", 0)]
    events = [
        preempted_event("j-ps-0-abcde", NOW - 1),
        preempted_event("j-worker-1-abcde", NOW - 1),  # its pod says it too: once
        preempted_event("j-worker-0-abcde", T0 - 5),  # before the job started: another job
        preempted_event("j-ps-0-abcde", NOW, kind="Node"),
        {**preempted_event("j-worker-0-abcde", NOW), "reason": "Killing"},
    ]
    found = preemptions(job, prior, pods, events)
    assert [p.replica for p in found] == ["ps-0", "worker-1"]
    assert found[0].detail == "Preempted by pod 1234-abcd on node kwok-0"
    assert found[1].detail.startswith("default-scheduler: preempting")


def test_events_of_a_counted_preemption_do_not_count_again():
    """The scheduler preempts one victim per preemptor: the other victims' Events arrive
    after the first was counted; within PREEMPTION_SETTLE_SECONDS they are the same one."""
    job = job_model()
    counted = NOW - 10
    prior = Prior(phase=JobPhase.RUNNING, started_at=T0, preemptions=1, preempted_at=counted)
    late = preempted_event("j-worker-0-abcde", counted + PREEMPTION_SETTLE_SECONDS - 1)
    assert preemptions(job, prior, [], [late]) == ()
    new = preempted_event("j-worker-0-abcde", counted + PREEMPTION_SETTLE_SECONDS + 1)
    assert [p.replica for p in preemptions(job, prior, [], [new])] == ["worker-0"]


def test_pods_of_an_older_generation_say_nothing():
    job = job_model()
    prior = Prior(phase=JobPhase.RUNNING, started_at=T0, generations={"ps": 1, "worker": 1})
    jobs = [role_job("ps", generation=1), role_job("worker", generation=1)]
    stale = [preempted_pod("worker", 0, generation=0, dying=True)]
    assert observe(job, prior, jobs, stale, NOW).preempted == ()


def ps_job_pods() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    jobs = [role_job("ps"), role_job("worker")]
    pods = [pod("ps", 0), preempted_pod("worker", 0, dying=True), pod("worker", 1)]
    return jobs, pods


def test_a_preempted_worker_restarts_the_whole_job_as_a_preemption():
    job = job_model(backoffLimit=0)  # a restart would fail it: a preemption must not
    jobs, pods = ps_job_pods()
    plan = reconcile(resource(running()), job, jobs, pods, rendered(job), NOW)
    assert plan.status["phase"] == "Restarting"
    assert plan.status["reason"] == "Preempted"
    assert plan.status["restarts"] == 0
    assert plan.status["preemptions"] == 1
    assert plan.status["preemptedAt"] == format_time(NOW)
    assert plan.status["restartGenerations"] == {"ps": 1, "worker": 1}
    assert plan.status["restartAt"] == format_time(NOW)  # no backoff: it waits for room
    assert plan.requeue_after == 0.0
    (said,) = [e for e in ops_of(plan, Event) if e.reason == "Preempted"]
    assert said.type == "Normal"
    assert said.message.startswith("worker-0 preempted by the scheduler for a pod of higher")
    assert "the whole job waits for room and resumes from its checkpoint" in said.message
    assert "not a restart (preemption 1)" in said.message
    # No failure said, only the phase change.
    said_restart = [e.message for e in ops_of(plan, Event) if e.reason != "Preempted"]
    assert said_restart == ["job is Restarting"]

    # Next look: the old Jobs are replaced, at once; nothing is counted again.
    nxt = reconcile(resource(plan.status), job, jobs, pods, rendered(job), NOW + 0.5)
    assert sorted(d.name for d in ops_of(nxt, DeleteRoleJob)) == ["j-ps", "j-worker"]
    assert nxt.status["preemptions"] == 1
    assert nxt.status["restarts"] == 0
    assert nxt.status["phase"] == "Restarting"
    later = reconcile(resource(nxt.status), job, [], [], rendered(job), NOW + 1)
    assert {op.obj["metadata"]["name"] for op in ops_of(later, Create)} == {"j-ps", "j-worker"}
    assert later.status["preemptions"] == 1
    assert later.status["phase"] not in ("Failed", "Succeeded")


def test_a_preempted_ps_whose_job_failed_is_a_preemption_not_a_restart():
    """A preempted PS pod ends (exit 137) and fails the managed PS Job at once (FailJob):
    the scheduler's Event still says why, after the pod is gone."""
    job = job_model(backoffLimit=0)
    jobs = [role_job("ps", condition="PodFailurePolicy"), role_job("worker")]
    pods = [pod("worker", 0), pod("worker", 1)]
    events = [preempted_event("j-ps-0-abcde", NOW - 1)]
    plan = reconcile(resource(running()), job, jobs, pods, rendered(job), NOW, events)
    assert plan.status["phase"] == "Restarting"
    assert plan.status["restarts"] == 0
    assert plan.status["preemptions"] == 1
    assert [e.reason for e in ops_of(plan, Event) if e.reason == "Preempted"] == ["Preempted"]
    # Without the Event it is what it always was: a PS failure, counted (and past
    # backoffLimit 0, the end of the job).
    failed = reconcile(resource(running()), job, jobs, pods, rendered(job), NOW)
    assert failed.status["phase"] == "Failed"
    assert "preemptions" not in failed.status


def test_a_second_preemption_counts_two_and_restarts_stay_as_they_were():
    job = job_model()
    jobs = [role_job("ps", generation=1), role_job("worker", generation=1)]
    pods = [
        pod("ps", 0, generation=1),
        pod("worker", 0, "Failed", 1, name="w0-failed", generation=1),
        preempted_pod("worker", 0, generation=1, created=T0 + 1),
        pod("worker", 1, generation=1),
    ]
    status = running(
        preemptions=1,
        preemptedAt=format_time(T0 + 20),
        restartGenerations={"ps": 1, "worker": 1},
        restarts=1,
    )
    plan = reconcile(resource(status), job, jobs, pods, rendered(job), NOW)
    assert plan.status["preemptions"] == 2
    assert plan.status["restarts"] == 1  # the earlier real failure stays counted
    assert plan.status["restartsBefore"] == 1
    assert plan.status["restartGenerations"] == {"ps": 2, "worker": 2}
    assert any("(preemption 2)" in e.message for e in ops_of(plan, Event))


def test_a_finished_or_suspended_job_is_not_preempted():
    job = job_model()
    jobs, pods = ps_job_pods()
    done = {**running(), "phase": "Succeeded", "completionTime": format_time(NOW - 1)}
    plan = reconcile(resource(done), job, jobs, pods, rendered(job), NOW)
    assert "preemptions" not in plan.status
    assert not [e for e in ops_of(plan, Event) if e.reason == "Preempted"]
    paused = job_model(suspend=True)
    plan = reconcile(resource(running()), paused, jobs, pods, rendered(paused), NOW)
    assert "preemptions" not in plan.status


# -- a team's priority as a PriorityClass ----------------------------------------------------


@pytest.mark.parametrize(
    ("priority", "name"),
    [
        (0, None),
        (5, "tfkube-priority-5"),
        (1000, "tfkube-priority-1000"),
        (-3, "tfkube-priority-minus-3"),
    ],
)
def test_a_team_priority_names_its_priority_class(priority: int, name: str | None):
    assert team_priority_class(priority) == name
    cls = priority_class(priority)
    if name is None:
        assert cls is None
        return
    assert cls is not None
    assert cls["metadata"]["name"] == name
    assert cls["value"] == priority
    assert cls["globalDefault"] is False
    assert cls["preemptionPolicy"] == "PreemptLowerPriority"
    assert "namespace" not in cls["metadata"]  # cluster-wide


def test_tenant_objects_carry_the_priority_class_only_when_there_is_a_priority():
    kinds = [o["kind"] for o in tenant_objects("tfkube-vision", {})]
    assert kinds == ["Namespace", "NetworkPolicy"]
    kinds = [o["kind"] for o in tenant_objects("tfkube-vision", {}, "restricted", 7)]
    assert kinds == ["Namespace", "NetworkPolicy", "PriorityClass"]


def test_a_team_job_gets_the_teams_priority_class_unless_it_names_one():
    job = job_model()
    assert job.spec.scheduling is None
    given = with_priority_class(job, "tfkube-priority-5")
    assert given.spec.scheduling is not None
    assert given.spec.scheduling.priority_class_name == "tfkube-priority-5"
    assert given.spec.replicas == job.spec.replicas  # nothing else changed
    assert with_priority_class(job, None) is job
    own = with_priority_class(given, "tfkube-priority-9")
    assert own.spec.scheduling is not None
    assert own.spec.scheduling.priority_class_name == "tfkube-priority-5"
    # The pods of the rendered job carry it.
    rendered_job = render_job(given, RenderOptions(namespace="ns", managed=True))
    worker = next(
        o for o in rendered_job if o["kind"] == "Job" and o["metadata"]["name"] == "j-worker"
    )
    assert worker["spec"]["template"]["spec"]["priorityClassName"] == "tfkube-priority-5"


def test_the_server_gives_the_engine_the_teams_priority():
    team = Team(name="vision", namespace="tfkube-vision", quota={}, priority=4)
    assert tenant_of(team).priority == 4


@pytest.mark.parametrize(("kept", "seen", "expected"), [(0, 2, 2), (3, 0, 3), (1, 1, 1)])
def test_the_server_keeps_the_higher_of_its_count_and_the_engines(
    kept: int, seen: int, expected: int
):
    """The operator's count (`JobView.preemptions`) reaches the job's row, the API, the job
    page and /metrics; the server's own count (its local queue's, whose engine job starts
    anew) is never lowered by an engine that counts none."""
    row = Job(phase="Running", restarts=0, preemptions=kept, replicas=[])
    view = JobView(name="j", phase=JobPhase.RUNNING, restarts=0, created_at=T0, preemptions=seen)
    JobService._apply_view(row, view)
    assert row.preemptions == expected
    assert row.restarts == 0
