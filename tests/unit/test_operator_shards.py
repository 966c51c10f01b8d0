"""A role split into several Indexed Jobs (shards, `RenderOptions.max_pods_per_job`),
decided purely: observing replicas across shards (offsets from labels), creating, ending,
restarting and resizing them, and which shard size a job keeps."""

from __future__ import annotations

from typing import Any

import pytest

from tfkube.kube.names import (
    GENERATION_ANNOTATION,
    INDEX_KEY,
    JOB_NAME_KEY,
    JOB_UID_KEY,
    LABEL_INDEX_OFFSET,
    LABEL_JOB,
    LABEL_ROLE,
    role_job_shard,
)
from tfkube.kube.observe import (
    ADDRESSING,
    PODS_PER_JOB,
    SERVICE_PER_JOB,
    UNSHARDED,
    Layout,
    Prior,
    format_time,
    layout,
    observe,
    pod_index,
    slim_pod,
)
from tfkube.kube.resources import SERVICE
from tfkube.operator import reconcile
from tfkube.operator._ops import (
    Create,
    DeleteObject,
    DeleteRoleJob,
    Event,
    ResizeWorkers,
    SuspendJob,
)
from tfkube.operator._reconcile import _delete_role_job
from tfkube.operator._settings import OperatorSettings
from tfkube.planner import JobPhase
from tfkube.render import RenderOptions, render_job

from ._kube_objects import NOW, T0, job_model
from .test_operator_reconcile import ops_of, resource, running


def render(job: Any, size: int) -> list[dict[str, Any]]:
    options = RenderOptions(
        namespace="ns", managed=True, launcher_zipapp=b"x", max_pods_per_job=size
    )
    return render_job(job, options)


def kube_jobs(rendered: list[dict[str, Any]], **status: dict[str, Any]) -> list[dict[str, Any]]:
    """The rendered Jobs as Kubernetes has them (uid `uid-<name>`, generation 0); `status`
    by Job name (underscores for dashes)."""
    out = []
    for obj in rendered:
        if obj["kind"] != "Job":
            continue
        meta = {
            **obj["metadata"],
            "uid": f"uid-{obj['metadata']['name']}",
            "annotations": {GENERATION_ANNOTATION: "0"},
        }
        key = obj["metadata"]["name"].replace("-", "_")
        out.append({"metadata": meta, "spec": dict(obj["spec"]), "status": status.get(key, {})})
    return out


def shard_pod(job_name: str, role: str, local: int, offset: int, phase: str = "Running",
              code: int | None = None, *, old: bool = False) -> dict[str, Any]:  # fmt: skip
    """A replica pod of Job `job_name`; `old`: as operators before the offset annotation
    made it (the offset a label)."""
    labels = {LABEL_JOB: "j", LABEL_ROLE: role, INDEX_KEY: str(local)}
    annotations = {}
    if offset:
        (labels if old else annotations)[LABEL_INDEX_OFFSET] = str(offset)
    body: dict[str, Any] = {"phase": phase}
    if code is not None:
        body["containerStatuses"] = [{"state": {"terminated": {"exitCode": code}}}]
    return {
        "metadata": {
            "name": f"{job_name}-{local}-abcde",
            "creationTimestamp": format_time(T0),
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [{"controller": True, "uid": f"uid-{job_name}"}],
        },
        "status": body,
    }


ALL_PODS = [
    shard_pod("j-ps", "ps", 0, 0),
    shard_pod("j-worker", "worker", 0, 0),
    shard_pod("j-worker", "worker", 1, 0),
    shard_pod("j-worker-s1", "worker", 0, 2),
    shard_pod("j-worker-s1", "worker", 1, 2),
    shard_pod("j-worker-s2", "worker", 0, 4),
]


def test_role_job_shard_reads_the_names_render_gives():
    assert role_job_shard("j", "worker", "j-worker") == 0
    assert role_job_shard("j", "worker", "j-worker-s2") == 2
    for other in ("j-worker-s0", "j-worker-s01", "j-worker-2", "j-ps", "j-worker-sx", "jj-worker"):
        assert role_job_shard("j", "worker", other) is None


def test_pod_index_adds_its_jobs_offset():
    assert [pod_index(p) for p in ALL_PODS] == [0, 0, 1, 2, 3, 4]


def test_pod_index_reads_older_operators_offset_label_and_survives_slimming():
    """Pods made before the offset became an annotation (a label) keep their index, and the
    operator's slimmed copy of a pod keeps the annotation it needs."""
    old = shard_pod("j-worker-s2", "worker", 1, 4, old=True)
    assert old["metadata"]["annotations"] == {}
    assert pod_index(old) == 5
    new = shard_pod("j-worker-s2", "worker", 1, 4)
    assert LABEL_INDEX_OFFSET not in new["metadata"]["labels"]
    new["metadata"]["annotations"]["other"] = "x"
    slim = slim_pod(new)
    assert slim["metadata"]["annotations"] == {LABEL_INDEX_OFFSET: "4"}
    assert pod_index(slim) == 5


def test_observe_reads_every_replica_from_its_shard():
    """1 PS + 5 workers, S=2: each replica's pod is found through its Job's offset, and
    each Job's completed/failed indexes are its replicas'."""
    job = job_model(workers=5)
    jobs = kube_jobs(
        render(job, 2),
        j_worker_s1={"completedIndexes": "1"},
        j_worker_s2={"failedIndexes": "0"},
    )
    pods = [*ALL_PODS[:4], shard_pod("j-worker-s1", "worker", 1, 2, "Succeeded", 0)]
    pods.append({**ALL_PODS[5], "status": {"phase": "Failed"}})
    obs = observe(job, Prior(phase=JobPhase.RUNNING, started_at=T0), jobs, pods, NOW)
    states = {k: r.status.state.value for k, r in obs.replicas.items()}
    assert states == {
        "ps-0": "Running",
        "worker-0": "Running",
        "worker-1": "Running",
        "worker-2": "Running",
        "worker-3": "Succeeded",
        "worker-4": "Failed",
    }
    assert obs.replicas["worker-2"].pod == "j-worker-s1-0-abcde"
    assert obs.gave_up == frozenset({"worker-4"})
    assert [j["metadata"]["name"] for j in obs.role_jobs["worker"]] == [
        "j-worker",
        "j-worker-s1",
        "j-worker-s2",
    ]
    assert obs.counts["worker"].active == 3


def test_a_new_job_creates_every_shard():
    job = job_model(workers=5)
    plan = reconcile(resource(), job, [], [], render(job, 2), NOW)
    created = [op.obj["metadata"]["name"] for op in ops_of(plan, Create) if op.obj["kind"] == "Job"]
    assert created == ["j-ps", "j-worker", "j-worker-s1", "j-worker-s2"]


def test_success_suspends_every_ps_shard():
    """3 PS in Jobs of 2 and 1: worker-0 succeeds, both PS Jobs are suspended."""
    job = job_model(ps=3, workers=1)
    rendered = render(job, 2)
    jobs = kube_jobs(rendered, j_worker={"completedIndexes": "0"})
    pods = [
        shard_pod("j-ps", "ps", 0, 0),
        shard_pod("j-ps", "ps", 1, 0),
        shard_pod("j-ps-s1", "ps", 0, 2),
        shard_pod("j-worker", "worker", 0, 0, "Succeeded", 0),
    ]
    plan = reconcile(resource(running()), job, jobs, pods, rendered, NOW)
    assert plan.status["phase"] == "Succeeded"
    assert ops_of(plan, SuspendJob) == [SuspendJob("j-ps", True), SuspendJob("j-ps-s1", True)]


def test_clean_pod_policy_all_deletes_every_shard_with_its_own_pods():
    job = job_model(workers=5, cleanPodPolicy="All")
    rendered = render(job, 2)
    jobs = kube_jobs(rendered, j_worker={"completedIndexes": "0"})
    pods = [ALL_PODS[0], shard_pod("j-worker", "worker", 0, 0, "Succeeded", 0), *ALL_PODS[2:]]
    plan = reconcile(resource(running()), job, jobs, pods, rendered, NOW)
    assert plan.status["phase"] == "Succeeded"
    selector = "tfkube.io/job-name=j,tfkube.io/replica-type=worker"
    assert [op for op in ops_of(plan, DeleteRoleJob) if "worker" in op.name] == [
        DeleteRoleJob("j-worker", selector),
        DeleteRoleJob("j-worker-s1", f"{JOB_UID_KEY}=uid-j-worker-s1"),
        DeleteRoleJob("j-worker-s2", f"{JOB_UID_KEY}=uid-j-worker-s2"),
    ]


def test_a_later_shard_without_a_uid_is_deleted_by_its_offset_label():
    """What older operators' pods carry (and a Job read without its uid): the offset."""
    rendered = [o for o in render(job_model(workers=5), 2) if o["kind"] == "Job"]
    s1 = next(o for o in rendered if o["metadata"]["name"] == "j-worker-s1")
    selector = "tfkube.io/job-name=j,tfkube.io/replica-type=worker"
    op = _delete_role_job("j", "worker", s1)
    assert op == DeleteRoleJob("j-worker-s1", f"{selector},{LABEL_INDEX_OFFSET}=2")


def test_a_whole_job_restart_deletes_every_stale_shard():
    """A new generation for the workers (status.restartGenerations): each of their stale
    Jobs is deleted; none re-created until all are gone."""
    job = job_model(workers=5)
    rendered = render(job, 2)
    status = running(restartGenerations={"ps": 1, "worker": 1})
    plan = reconcile(resource(status), job, kube_jobs(rendered), [], rendered, NOW)
    deleted = [op.name for op in ops_of(plan, DeleteRoleJob)]
    assert deleted == ["j-ps", "j-worker", "j-worker-s1", "j-worker-s2"]
    assert not [op for op in ops_of(plan, Create) if op.obj["kind"] == "Job"]


def resized(workers: int, size: int, running_jobs: list[dict[str, Any]]) -> Any:
    job = job_model(workers=workers)
    return reconcile(
        resource(running(podsPerJob=size)), job, running_jobs, [], render(job, size), NOW
    )


def test_growing_past_a_shard_boundary_grows_the_last_job_and_adds_shards():
    """2 -> 5 workers, S=3: the size ConfigMap first (with the first Job, grown to 3),
    then the new shard `j-worker-s1` of 2, made as rendered (offset 3), after its own
    headless Service (its pods' subdomain)."""
    plan = resized(5, 3, kube_jobs(render(job_model(workers=2), 3)))
    assert ops_of(plan, ResizeWorkers) == [ResizeWorkers("j-worker", "j-size", 5, 3)]
    created = [op.obj for op in ops_of(plan, Create)]
    assert [(o["kind"], o["metadata"]["name"]) for o in created] == [
        ("Service", "j-worker-s1"),
        ("Job", "j-worker-s1"),
    ]
    service, shard = created
    assert service["spec"]["selector"] == {JOB_NAME_KEY: "j-worker-s1"}
    assert shard["spec"]["template"]["spec"]["subdomain"] == "j-worker-s1"
    assert shard["spec"]["completions"] == 2
    assert shard["metadata"]["labels"][LABEL_INDEX_OFFSET] == "3"
    first = next(i for i, op in enumerate(plan.ops) if isinstance(op, ResizeWorkers))
    assert first < next(i for i, op in enumerate(plan.ops) if isinstance(op, Create))
    said = [op.message for op in ops_of(plan, Event) if op.reason == "Scaled"]
    assert said == ["scaled from 2 to 5 workers: added worker-2, worker-3, worker-4"]
    assert plan.status["workers"] == 5


def test_shrinking_across_a_boundary_deletes_later_shards_and_keeps_worker_0():
    """5 -> 1 workers, S=3: `j-worker-s1` deleted with its own pods only, `j-worker`
    shrunk to 1 (worker-0 stays)."""
    plan = resized(1, 3, kube_jobs(render(job_model(workers=5), 3)))
    assert ops_of(plan, ResizeWorkers) == [ResizeWorkers("j-worker", "j-size", 1)]
    assert ops_of(plan, DeleteRoleJob) == [
        DeleteRoleJob("j-worker-s1", f"{JOB_UID_KEY}=uid-j-worker-s1")
    ]
    assert ops_of(plan, DeleteObject) == [DeleteObject(SERVICE, "j-worker-s1")]  # its Service
    assert plan.status["workers"] == 1


def test_a_job_with_one_service_keeps_it_when_it_grows_and_shrinks():
    """A job made before 2026-12-04 (`RenderOptions.one_service`): its shards are made and
    deleted without Services of their own (a Service of that name is someone else's)."""
    options = RenderOptions(
        namespace="ns", managed=True, launcher_zipapp=b"x", max_pods_per_job=3, one_service=True
    )
    small, big = (render_job(job_model(workers=n), options) for n in (2, 5))
    assert [o["metadata"]["name"] for o in big if o["kind"] == "Service"] == ["j"]
    grown = reconcile(
        resource(running(podsPerJob=3)), job_model(workers=5), kube_jobs(small), [], big, NOW
    )
    created = [(op.obj["kind"], op.obj["metadata"]["name"]) for op in ops_of(grown, Create)]
    assert created == [("Job", "j-worker-s1")]
    shrunk = reconcile(
        resource(running(podsPerJob=3)),
        job_model(workers=1),
        kube_jobs(big),
        [],
        render_job(job_model(workers=1), options),
        NOW,
    )
    assert [op.name for op in ops_of(shrunk, DeleteRoleJob)] == ["j-worker-s1"]
    assert not ops_of(shrunk, DeleteObject)


def test_a_lost_role_job_is_made_again_after_its_service():
    job = job_model(workers=5)
    rendered = render(job, 3)
    jobs = [j for j in kube_jobs(rendered) if not j["metadata"]["name"].startswith("j-worker")]
    plan = reconcile(resource(running(podsPerJob=3)), job, jobs, [], rendered, NOW)
    created = [(op.obj["kind"], op.obj["metadata"]["name"]) for op in ops_of(plan, Create)]
    assert created == [
        ("Service", "j-worker"),
        ("Job", "j-worker"),
        ("Service", "j-worker-s1"),
        ("Job", "j-worker-s1"),
    ]


def test_growing_within_the_last_shard():
    plan = resized(5, 3, kube_jobs(render(job_model(workers=4), 3)))
    assert ops_of(plan, ResizeWorkers) == [
        ResizeWorkers("j-worker", "j-size", 5, 3),  # unchanged: it carries the size
        ResizeWorkers("j-worker-s1", "j-size", 5, 2),
    ]
    assert not ops_of(plan, Create)


STARTED = {"startTime": "2026-01-01T00:00:00Z"}


@pytest.mark.parametrize(
    ("status", "setting", "expected"),
    [
        pytest.param({}, 3, Layout(3, False), id="new-job-takes-the-setting"),
        pytest.param(None, 3, Layout(3, False), id="no-status"),
        pytest.param(
            {**STARTED, PODS_PER_JOB: 500, ADDRESSING: SERVICE_PER_JOB},
            3,
            Layout(500, False),
            id="kept-for-its-life",
        ),
        pytest.param(STARTED, 3, Layout(UNSHARDED, True), id="made-before-shards"),
        pytest.param(
            {**STARTED, PODS_PER_JOB: 500}, 3, Layout(500, True), id="made-before-services"
        ),
        pytest.param({PODS_PER_JOB: 0}, 3, Layout(3, False), id="nonsense-recorded"),
        pytest.param(
            {**STARTED, ADDRESSING: "other"}, 3, Layout(UNSHARDED, True), id="unknown-addressing"
        ),
    ],
)
def test_layout(status, setting, expected):
    assert layout(status, setting) == expected


@pytest.mark.parametrize("made", [Layout(500, False), Layout(7, True)])
def test_layout_reads_back_what_it_records(made):
    assert layout({**STARTED, **made.status()}, 3) == made


def test_operator_setting_from_flag_and_environment():
    assert OperatorSettings.read({}).max_pods_per_job == 500
    assert OperatorSettings.read({"TFKUBE_MAX_PODS_PER_JOB": "3"}).max_pods_per_job == 3
    flag = OperatorSettings.read({"TFKUBE_MAX_PODS_PER_JOB": "3"}, max_pods_per_job=7)
    assert flag.max_pods_per_job == 7
    for bad in ("0", "x", "-1"):
        with pytest.raises(ValueError, match="TFKUBE_MAX_PODS_PER_JOB"):
            OperatorSettings.read({"TFKUBE_MAX_PODS_PER_JOB": bad})
