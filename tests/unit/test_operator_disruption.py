"""A PS ended by a planned disruption (a drain's eviction), decided purely: the managed PS
Job fails by its DisruptionTarget rule, whose Failed condition names the pod after the pod
is gone (`tfkube.kube.observe`: disruptions); the operator restarts the whole job at once,
counted as a disruption, not a restart (`tfkube.operator._reconcile.disrupted`). A lost
node's PS (the taint manager's eviction) stays a failure, counted against backoffLimit.

The objects are as Kubernetes v1.34 writes them: the Eviction API's condition
(pkg/registry/core/pod/storage/eviction.go), the taint manager's
(pkg/controller/tainteviction), the scheduler's (pkg/scheduler/framework/preemption), and
the Job controller's message for a FailJob rule on a pod condition
(pkg/controller/job/pod_failure_policy.go)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from tfkube.cli._display import job_panel
from tfkube.engines.kubernetes._backend import job_view
from tfkube.kube._observe import Disruption, disruptions
from tfkube.kube.observe import format_time
from tfkube.operator import reconcile
from tfkube.operator._ops import Create, DeleteRoleJob, Event
from tfkube.server.core.tables import Job
from tfkube.server.jobs.service import JobService
from tfkube.server.queries.views import job_out
from tfkube.server.web._present import job_state
from tfkube.server.web._render import ENV

from ._kube_objects import NOW, job_model, pod, role_job
from .test_operator_reconcile import ops_of, rendered, resource, running

EVICTED = {
    "type": "DisruptionTarget",
    "status": "True",
    "lastTransitionTime": format_time(NOW - 3),
    "reason": "EvictionByEvictionAPI",
    "message": "Eviction API: evicting",
}
NODE_LOST = {
    **EVICTED,
    "reason": "DeletionByTaintManager",
    "message": "Taint manager: deleting due to NoExecute taint",
}
PREEMPTED = {
    **EVICTED,
    "reason": "PreemptionByScheduler",
    "message": "default-scheduler: preempting to accommodate a higher priority pod",
}
PS_POD = "j-ps-0-x7k2p"


def failed_ps_job(message: str, generation: int = 0) -> dict[str, Any]:
    """The managed PS Job as the Job controller leaves it after a FailJob rule matched."""
    job = role_job("ps", generation=generation)
    job["status"] = {
        "failed": 1,
        "conditions": [
            {"type": "FailureTarget", "status": "True", "reason": "PodFailurePolicy",
             "message": message},
            {"type": "Failed", "status": "True", "reason": "PodFailurePolicy",
             "message": message},
        ],
    }  # fmt: skip
    return job


BY_CONDITION = f"Pod ns/{PS_POD} has condition DisruptionTarget matching FailJob rule at index 0"
BY_EXIT_CODE = f"Container tensorflow for pod ns/{PS_POD} failed with exit code 143 matching FailJob rule at index 1"  # noqa: E501


def ps_pod(condition: dict[str, Any] | None, phase: str = "Failed") -> dict[str, Any]:
    """The PS's pod, Terminating (deleted by its eviction), its container ended by SIGTERM."""
    return pod(
        "ps", 0, phase, 143, name=PS_POD, dying=True,
        conditions=[condition] if condition else [],
    )  # fmt: skip


@pytest.mark.parametrize(
    ("message", "pods", "expected"),
    [
        # A drain: the pod is usually gone by the time the Job has failed.
        (BY_CONDITION, [], [Disruption("ps-0", PS_POD, None)]),
        (BY_CONDITION, [ps_pod(EVICTED)], [Disruption("ps-0", PS_POD, "EvictionByEvictionAPI")]),
        # A lost node's pod stays (no kubelet ends it; the operator failed it): a failure.
        (BY_CONDITION, [ps_pod(NODE_LOST)], []),
        (BY_CONDITION, [ps_pod({**EVICTED, "reason": "TerminationByKubelet"})], []),
        # The scheduler's preemption is counted as one (`preemptions`), not here.
        (BY_CONDITION, [ps_pod(PREEMPTED)], []),
        # A crash (the exit-code rule), or a Job that failed otherwise.
        (BY_EXIT_CODE, [ps_pod(None)], []),
        ("Job has reached the specified backoff limit", [], []),
        # Another job's pod named in the message (never ours).
        (BY_CONDITION.replace("j-ps-0", "other-ps-0"), [], []),
    ],
)
def test_which_ps_ends_are_planned_disruptions(
    message: str, pods: list[dict[str, Any]], expected: list[Disruption]
):
    failed = {"ps": failed_ps_job(message)["status"]["conditions"][1]}
    assert list(disruptions(job_model(), failed, pods)) == expected


def test_the_reason_when_the_job_failed_for_backoff_is_not_read():
    condition = {**failed_ps_job(BY_CONDITION)["status"]["conditions"][1], "reason": "Other"}
    assert disruptions(job_model(), {"ps": condition}, [ps_pod(EVICTED)]) == ()


def test_a_drained_ps_restarts_the_whole_job_as_a_disruption_not_a_restart():
    job = job_model(backoffLimit=0)  # a restart would fail it: a drain must not
    jobs = [failed_ps_job(BY_CONDITION), role_job("worker")]
    pods = [pod("worker", 0), pod("worker", 1)]
    plan = reconcile(resource(running()), job, jobs, pods, rendered(job), NOW)
    assert plan.status["phase"] == "Restarting"
    assert plan.status["reason"] == "Disrupted"
    assert plan.status["restarts"] == 0
    assert plan.status["disruptions"] == 1
    assert "preemptions" not in plan.status
    assert plan.status["restartGenerations"] == {"ps": 1, "worker": 1}
    assert plan.status["restartAt"] == format_time(NOW)  # no backoff
    (said,) = [e for e in ops_of(plan, Event) if e.reason == "Disrupted"]
    assert said.type == "Normal"
    assert said.message.startswith("restarted after its PS was evicted: ps-0")
    assert "(its node drained, or the Eviction API)" in said.message
    assert "resumes from its checkpoint" in said.message
    assert "not counted against backoffLimit (disruption 1)" in said.message
    assert plan.status["message"] == said.message  # `tfkube status` says it too
    assert [e.message for e in ops_of(plan, Event) if e.reason != "Disrupted"] == [
        "job is Restarting"
    ]

    # Next look: the old Jobs go, nothing is counted again; then the new generation.
    nxt = reconcile(resource(plan.status), job, jobs, pods, rendered(job), NOW + 0.5)
    assert sorted(d.name for d in ops_of(nxt, DeleteRoleJob)) == ["j-ps", "j-worker"]
    assert (nxt.status["disruptions"], nxt.status["restarts"]) == (1, 0)
    later = reconcile(resource(nxt.status), job, [], [], rendered(job), NOW + 1)
    assert {op.obj["metadata"]["name"] for op in ops_of(later, Create)} == {"j-ps", "j-worker"}
    assert later.status["disruptions"] == 1
    assert later.status["phase"] not in ("Failed", "Succeeded")


def test_a_lost_nodes_ps_is_still_a_counted_failure():
    job = job_model(backoffLimit=6)
    jobs = [failed_ps_job(BY_CONDITION), role_job("worker")]
    pods = [ps_pod(NODE_LOST), pod("worker", 0), pod("worker", 1)]
    plan = reconcile(resource(running()), job, jobs, pods, rendered(job), NOW)
    assert plan.status["phase"] == "Restarting"
    assert plan.status["restarts"] == 1
    assert "disruptions" not in plan.status
    # With backoffLimit 0 that failure ends the job, as before.
    strict = job_model(backoffLimit=0)
    ended = reconcile(resource(running()), strict, jobs, pods, rendered(strict), NOW)
    assert ended.status["phase"] == "Failed"


def test_a_second_drain_counts_two_and_earlier_restarts_stay():
    job = job_model()
    jobs = [failed_ps_job(BY_CONDITION, generation=1), role_job("worker", generation=1)]
    pods = [
        pod("worker", 0, "Failed", 1, name="w0-failed", generation=1),
        pod("worker", 0, generation=1, created=NOW - 5),
        pod("worker", 1, generation=1),
    ]
    status = running(disruptions=1, restartGenerations={"ps": 1, "worker": 1}, restarts=1)
    plan = reconcile(resource(status), job, jobs, pods, rendered(job), NOW)
    assert plan.status["disruptions"] == 2
    assert plan.status["restarts"] == 1  # the worker's own crash stays counted
    assert plan.status["restartGenerations"] == {"ps": 2, "worker": 2}
    assert any("(disruption 2)" in e.message for e in ops_of(plan, Event))


def test_a_preemption_of_the_ps_is_counted_as_a_preemption_only():
    """The preempted PS fails its Job by the same rule; the scheduler's Event says why."""
    job = job_model()
    jobs = [failed_ps_job(BY_CONDITION), role_job("worker")]
    pods = [pod("worker", 0), pod("worker", 1)]
    events = [{
        "reason": "Preempted",
        "message": "Preempted by pod 1234-abcd on node kwok-0",
        "eventTime": format_time(NOW - 1).replace("Z", ".250000Z"),
        "involvedObject": {"kind": "Pod", "name": PS_POD, "namespace": "ns"},
    }]  # fmt: skip
    plan = reconcile(resource(running()), job, jobs, pods, rendered(job), NOW, events)
    assert plan.status["preemptions"] == 1
    assert "disruptions" not in plan.status
    assert plan.status["restarts"] == 0


def test_the_count_reaches_the_users_view_and_the_servers_job():
    """`status.disruptions` is what `tfkube status` and the server's job (API, job page;
    `tfkube_job_disruptions`: tests/unit/test_server_queries.py) show; the server never
    lowers a count it has."""
    job = job_model(backoffLimit=0)
    jobs = [failed_ps_job(BY_CONDITION), role_job("worker")]
    plan = reconcile(resource(running()), job, jobs, [], rendered(job), NOW)
    view = job_view(resource(plan.status), jobs, [], NOW)
    assert (view.disruptions, view.restarts, view.preemptions) == (1, 0, 0)
    assert "disrupted 1x" in job_panel(view, NOW).renderables[0].plain

    row = Job(id="j1", name="j", created_at=NOW, phase="Running", restarts=0, preemptions=0,
              disruptions=0, replicas=[])  # fmt: skip
    JobService._apply_view(row, view)
    assert (row.disruptions, row.restarts) == (1, 0)
    out = job_out(row, "team", None, None)
    assert out.disruptions == 1
    state = job_state(out.phase, out.queued, out.reason, out.message, [])
    page = ENV.get_template("_job_summary.html").render(job=out, state=state, now=NOW)
    assert re.search(r"<dt>Disrupted</dt><dd [^>]*>1\u00d7</dd>", page), page
    JobService._apply_view(row, replace(view, disruptions=0))
    assert row.disruptions == 1  # an engine that counts none (a view of another kind)
