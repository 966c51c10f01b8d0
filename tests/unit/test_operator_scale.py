"""`tfkube scale` on Kubernetes, decided purely: the operator's `resize` phase and whole
reconciles of a resized job (the worker Job resized, removed workers neither failed nor
restarted), the render's size ConfigMap, and the cluster's own refusal (a gang)."""

from __future__ import annotations

from typing import Any

import pytest

from tfkube.kube.observe import Prior, observe
from tfkube.operator import reconcile
from tfkube.operator._ops import Event, ResizeWorkers
from tfkube.operator._reconcile import resize
from tfkube.planner import JobPhase, cluster_scale_problems
from tfkube.render import RenderOptions, render_job
from tfkube.spec import parse_job

from ._kube_objects import NOW, job_model, pod, role_job
from .test_operator_reconcile import ops_of, rendered, resource, running


def sized(role: str, count: int) -> dict[str, Any]:
    """The role's Job as Kubernetes has it: `count` completions and parallelism."""
    job = role_job(role)
    job["spec"].update(completions=count, parallelism=count)
    return job


def scaled(workers: int, before: int, pods: list[dict[str, Any]], **status: Any) -> Any:
    """One reconcile of a running job whose spec says `workers`, its worker Job `before`."""
    job = job_model(workers=workers)
    jobs = [sized("ps", 1), sized("worker", before)]
    return reconcile(resource(running(**status)), job, jobs, pods, rendered(job), NOW)


def test_growing_resizes_the_worker_job_and_says_so_once():
    plan = scaled(4, 2, [pod("ps", 0), pod("worker", 0), pod("worker", 1)])
    assert ops_of(plan, ResizeWorkers) == [ResizeWorkers("j-worker", "j-size", 4)]
    said = [op.message for op in ops_of(plan, Event) if op.reason == "Scaled"]
    assert said == ["scaled from 2 to 4 workers: added worker-2, worker-3"]
    assert plan.status["workers"] == 4
    assert plan.status["phase"] == "Running"
    states = {k: r.status.state.value for k, r in plan.observation.replicas.items()}
    assert states["worker-2"] == states["worker-3"] == "Pending"  # Kubernetes makes them

    # The next look finds the Job resized: nothing more to do or say.
    job = job_model(workers=4)
    jobs = [sized("ps", 1), sized("worker", 4)]
    again = reconcile(resource(plan.status), job, jobs, [], rendered(job), NOW)
    assert not ops_of(again, ResizeWorkers)
    assert not [op for op in ops_of(again, Event) if op.reason == "Scaled"]
    assert again.status["workers"] == 4


def test_removed_workers_are_neither_failures_nor_restarts():
    """4 -> 1: the Job controller deletes the pods of indexes 1-3 (the example exits 143
    on SIGTERM): the job reads only the spec's indexes."""
    pods = [
        pod("ps", 0),
        pod("worker", 0),
        pod("worker", 1, "Failed", code=143),
        pod("worker", 2, "Failed", code=143, dying=True),
        pod("worker", 3, dying=True),
    ]
    plan = scaled(1, 4, pods)
    assert ops_of(plan, ResizeWorkers) == [ResizeWorkers("j-worker", "j-size", 1)]
    said = [op.message for op in ops_of(plan, Event) if op.reason == "Scaled"]
    assert said == ["scaled from 4 to 1 workers: stopped worker-1, worker-2, worker-3"]
    assert not [op for op in ops_of(plan, Event) if op.type == "Warning"]
    assert plan.status["restarts"] == 0
    assert plan.status["replicas"] == 2
    assert plan.status["replicaStatuses"]["worker"] == {"active": 1, "succeeded": 0, "failed": 0}
    assert "handledFailures" not in plan.status or plan.status["handledFailures"] == []
    assert plan.decision is not None
    assert plan.decision.phase is JobPhase.RUNNING

    # worker-0 succeeds: the job succeeds with the size it has now.
    done = scaled(1, 1, [pod("ps", 0), pod("worker", 0, "Succeeded", code=0), *pods[2:]])
    assert done.status["phase"] == "Succeeded"
    assert done.status["restarts"] == 0


def test_a_job_that_cannot_resize_keeps_its_size_and_says_so_once():
    job = job_model(workers=3, chief=1)
    jobs = [sized("chief", 1), sized("ps", 1), sized("worker", 2)]
    plan = reconcile(resource(running()), job, jobs, [], rendered(job), NOW)
    assert not ops_of(plan, ResizeWorkers)
    warned = [op for op in ops_of(plan, Event) if op.reason == "ScaleRefused"]
    assert len(warned) == 1
    assert warned[0].type == "Warning"
    assert warned[0].message.startswith("not scaled from 2 to 3 workers: spec.replicas.chief:")
    assert plan.status["workers"] == 2
    assert plan.status["refusedWorkers"] == 3
    again = reconcile(resource(plan.status), job, jobs, [], rendered(job), NOW)
    assert not [op for op in ops_of(again, Event) if op.reason == "ScaleRefused"]
    # Put back to its size: the refusal is forgotten.
    back = job_model(workers=2, chief=1)
    settled = reconcile(resource(again.status), back, jobs, [], rendered(back), NOW)
    assert "refusedWorkers" not in settled.status
    assert settled.status["workers"] == 2


@pytest.mark.parametrize(
    ("status", "jobs", "expected"),
    [
        pytest.param({}, [], ((), None), id="no-worker-job-yet"),
        pytest.param({}, [sized("worker", 2)], ((), 2), id="same-size"),
        pytest.param(
            {"workers": 1, "refusedWorkers": 5}, [sized("worker", 2)], ((), 2), id="forgets"
        ),
        pytest.param(
            {},
            [sized("worker", 3)],
            ((ResizeWorkers("j-worker", "j-size", 2),), 2),
            id="shrinks",
        ),
    ],
)
def test_resize(status: dict[str, Any], jobs: list[Any], expected: Any):
    job = job_model(workers=2)
    obs = observe(job, Prior.from_status(status), jobs, [], NOW)
    out = resize(job, JobPhase.RUNNING, status, obs)
    ops, workers = expected
    assert tuple(op for op in out.ops if isinstance(op, ResizeWorkers)) == ops
    assert out.status.get("workers") == workers
    assert "refusedWorkers" not in out.status


def test_a_gang_does_not_resize_in_a_cluster():
    job = parse_job(
        {
            "apiVersion": "tfkube.io/v1alpha1",
            "kind": "TFJob",
            "metadata": {"name": "j"},
            "spec": {
                "replicas": {"ps": {"replicas": 1}, "worker": {"replicas": 2}},
                "code": {"source": "https://code.example/c.tar.gz"},
                "scheduling": {"gang": "Volcano"},
            },
        }
    )
    (problem,) = cluster_scale_problems(job)
    assert problem.field == "spec.scheduling.gang"
    assert "Volcano" in problem.message
    assert "resubmit" in problem.message
    assert cluster_scale_problems(job_model()) == []


def _render(**replicas: int) -> list[dict[str, Any]]:
    job = parse_job(
        {
            "apiVersion": "tfkube.io/v1alpha1",
            "kind": "TFJob",
            "metadata": {"name": "j"},
            "spec": {
                "replicas": {role: {"replicas": n} for role, n in replicas.items()},
                "code": {"source": "https://code.example/c.tar.gz"},
            },
        }
    )
    return render_job(job, RenderOptions(namespace="ns", launcher_zipapp=b"z"))


def _num_workers(objects: list[dict[str, Any]], role: str) -> dict[str, Any]:
    job = next(o for o in objects if o["kind"] == "Job" and o["metadata"]["name"] == f"j-{role}")
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    found: dict[str, Any] = next(e for e in env if e["name"] == "TFKUBE_NUM_WORKERS")
    return found


def test_only_a_resizable_job_reads_its_size_from_a_configmap():
    objects = _render(ps=1, worker=3)
    size = next(o for o in objects if o["metadata"]["name"] == "j-size")
    assert size["kind"] == "ConfigMap"
    assert size["data"] == {"workers": "3"}
    assert size["metadata"]["labels"]["tfkube.io/component"] == "size"
    ref = {"configMapKeyRef": {"name": "j-size", "key": "workers"}}
    assert _num_workers(objects, "worker") == {"name": "TFKUBE_NUM_WORKERS", "valueFrom": ref}
    assert _num_workers(objects, "ps") == {"name": "TFKUBE_NUM_WORKERS", "valueFrom": ref}
    job = next(o for o in objects if o["kind"] == "Job" and o["metadata"]["name"] == "j-worker")
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 3  # elastic: equal

    for fixed in (_render(worker=2), _render(chief=1, ps=1, worker=2)):
        assert not [o for o in fixed if o["metadata"]["name"] == "j-size"]
        assert _num_workers(fixed, "worker") == {"name": "TFKUBE_NUM_WORKERS", "value": "2"}


def test_resizable_is_the_planners_rule():
    assert job_model(ps=1, workers=2).resizable()
    assert not job_model(ps=0, workers=2).resizable()
    assert not job_model(ps=1, workers=2, chief=1).resizable()
