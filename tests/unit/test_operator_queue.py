"""The operator's work queue: pokes coalesced per TFJob, reconciles fed from the pod
index (no pod is listed), the pause between coalesced reconciles."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from typing import Any

import pytest

from tfkube.kube.errors import Unreachable, error_from
from tfkube.operator._operator import (
    COALESCE_MAX_SECONDS,
    COALESCE_MIN_SECONDS,
    GC_YOUNG_OBJECTS,
    PREEMPTED_EVENTS_SECONDS,
    PROGRESS_MAX_SECONDS,
    JobMemory,
    WorkQueue,
    coalesce_pause,
    job_marks,
    progress_pause,
    same_marks,
    tfjob_marks,
    tune_gc,
)
from tfkube.operator._pods import PodIndex, entry_of


@pytest.mark.parametrize(
    ("last", "expected"),
    [
        pytest.param(0.0, COALESCE_MIN_SECONDS, id="instant-reconcile"),
        pytest.param(0.01, COALESCE_MIN_SECONDS, id="small-job"),
        pytest.param(0.2, 0.4, id="twice-its-cost"),
        pytest.param(0.5, COALESCE_MAX_SECONDS, id="capped"),
        pytest.param(30.0, COALESCE_MAX_SECONDS, id="very-slow"),
    ],
)
def test_coalesce_pause(last: float, expected: float):
    assert coalesce_pause(last) == pytest.approx(expected)


def index_reader(index: dict[tuple[str, str], list[str]]) -> Any:
    """A stand-in pod index: its pods by TFJob, copied as `PodIndex.pods_of` does."""
    return lambda key: list(index.get(key, ()))


def test_the_index_hands_out_a_copy_of_a_jobs_pods():
    index = PodIndex()
    pod = {"metadata": {"name": "p1", "namespace": "ns", "labels": {"tfkube.io/job-name": "a"}}}
    index.put(entry_of(pod))  # type: ignore[arg-type]
    got = index.pods_of(("ns", "a"))
    got.append("p3")
    assert [p["metadata"]["name"] for p in index.pods_of(("ns", "a"))] == ["p1"]
    assert index.pods_of(("ns", "missing")) == []


class Recorder:
    """A reconcile that blocks until released, recording what it was given."""

    def __init__(self, requeue: float | None = None) -> None:
        self.calls: list[tuple[str, str, list[Any]]] = []
        self.release = threading.Event()
        self.requeue = requeue

    def __call__(self, namespace: str, name: str, pods: list[Any]) -> float | None:
        self.calls.append((namespace, name, pods))
        self.release.wait(5)
        return self.requeue


async def settle(queue: WorkQueue) -> None:
    for _ in range(500):
        if not queue.running:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the queue never went idle")


def test_pokes_during_a_reconcile_make_one_more_with_the_newest_pods():
    async def scenario() -> Recorder:
        index = {("ns", "j"): ["pod-0"]}
        work = Recorder()
        queue = WorkQueue(work, index_reader(index))
        queue.poke(("ns", "j"))
        await asyncio.sleep(0.05)
        index[("ns", "j")] = ["pod-0", "pod-1"]
        for _ in range(50):  # a burst of pod events while the first reconcile runs
            queue.poke(("ns", "j"))
        work.release.set()
        await settle(queue)
        return work

    work = asyncio.run(scenario())
    assert work.calls == [("ns", "j", ["pod-0"]), ("ns", "j", ["pod-0", "pod-1"])]


def test_jobs_are_reconciled_independently_and_requeued():
    async def scenario() -> tuple[Recorder, WorkQueue]:
        work = Recorder(requeue=60.0)
        work.release.set()
        queue = WorkQueue(work, index_reader({}))
        queue.poke(("ns", "a"))
        queue.poke(("ns", "b"))
        await settle(queue)
        return work, queue

    work, queue = asyncio.run(scenario())
    assert sorted(c[:2] for c in work.calls) == [("ns", "a"), ("ns", "b")]
    assert set(queue.timers) == {("ns", "a"), ("ns", "b")}


@pytest.mark.parametrize(
    ("error", "traceback"),
    [
        pytest.param(error_from(403, "Forbidden", "{}"), False, id="api-refused-one-line"),
        pytest.param(Unreachable("NewConnectionError"), False, id="api-down-one-line"),
        pytest.param(KeyError("bug"), True, id="a-bug-keeps-its-traceback"),
    ],
)
def test_a_failed_reconcile_is_retried(
    error: Exception, traceback: bool, caplog: pytest.LogCaptureFixture
):
    """An API error is a state of the cluster (a restarted apiserver answers 403 for a
    moment): one warning line; anything else is a bug and keeps its traceback. Both retry."""

    def work(namespace: str, name: str, pods: list[Any]) -> float | None:
        raise error

    async def scenario() -> WorkQueue:
        queue = WorkQueue(work, index_reader({}))
        queue.poke(("ns", "j"))
        await settle(queue)
        return queue

    queue = asyncio.run(scenario())
    assert set(queue.timers) == {("ns", "j")}  # requeued
    [record] = [r for r in caplog.records if "ns/j" in r.getMessage()]
    assert (record.exc_info is not None) is traceback
    assert "retrying" in record.getMessage()


def test_preempted_events_are_read_only_after_a_pod_went():
    """The namespace's Preempted Events (a LIST of every Event there, from etcd) are read by
    a TFJob's first reconcile, once, and for PREEMPTED_EVENTS_SECONDS after its pods were
    last seen to go; not while its pods only come and change (a start of 5,000)."""
    memory, t = JobMemory(), 1000.0
    assert memory.read_events(1, t)  # the first: what went before the operator started
    assert not memory.read_events(1, t + 1)  # once (a job starting: no pod went)
    assert not memory.read_events(1, t + 500)
    assert memory.read_events(2, t + 600)  # a pod went: its Event may come late
    assert memory.read_events(2, t + 600 + PREEMPTED_EVENTS_SECONDS - 1)
    assert not memory.read_events(2, t + 600 + PREEMPTED_EVENTS_SECONDS)
    assert memory.read_events(4, t + 900)


def test_the_operator_collects_young_garbage_less_often_and_keeps_the_rest() -> None:
    before = gc.get_threshold()
    try:
        tune_gc()
        assert gc.get_threshold() == (GC_YOUNG_OBJECTS, before[1], before[2])
        assert before[0] < GC_YOUNG_OBJECTS
    finally:
        gc.set_threshold(*before)


@pytest.mark.parametrize(
    ("last", "expected"),
    [
        pytest.param(0.0, COALESCE_MIN_SECONDS, id="instant-reconcile"),
        pytest.param(0.01, 0.08, id="small-job"),
        pytest.param(0.3, 2.4, id="eight-times-its-cost"),
        pytest.param(30.0, PROGRESS_MAX_SECONDS, id="capped"),
    ],
)
def test_progress_pause(last: float, expected: float):
    assert progress_pause(last) == pytest.approx(expected)
    assert progress_pause(last) >= coalesce_pause(last)


class Steps:
    """A clock that moves `step` seconds at each reading: every reconcile costs `step`."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def reconcile_times(urgent_after: float | None) -> list[float]:
    """When (monotonic s, from the first) a TFJob was reconciled: a first reconcile during
    which its pods only came up, and, `urgent_after` s after it, a poke."""

    async def scenario() -> list[float]:
        times: list[float] = []
        work = Recorder()
        queue = WorkQueue(
            lambda ns, name, pods: times.append(time.monotonic()) or work(ns, name, pods),
            index_reader({}),
            clock=Steps(0.25),  # coalesce_pause 0.5 s, progress_pause 2 s
        )
        queue.poke(("ns", "j"))
        await asyncio.sleep(0.05)
        for _ in range(20):
            queue.progress(("ns", "j"))
        work.release.set()
        if urgent_after is not None:
            await asyncio.sleep(urgent_after)
            queue.poke(("ns", "j"))
        for _ in range(1000):
            if not queue.running:
                break
            await asyncio.sleep(0.01)
        return [t - times[0] for t in times]

    return asyncio.run(scenario())


def test_pods_coming_up_make_one_more_reconcile_after_the_longer_pause():
    first, second = reconcile_times(urgent_after=None)
    assert first == 0
    assert second >= progress_pause(0.25)


def test_a_poke_cuts_the_longer_pause_short():
    _, second = reconcile_times(urgent_after=0.8)
    assert 0.8 <= second < progress_pause(0.25)


def test_progress_of_an_idle_tfjob_reconciles_it_at_once():
    async def scenario() -> Recorder:
        work = Recorder()
        work.release.set()
        queue = WorkQueue(work, index_reader({}))
        queue.progress(("ns", "j"))
        await settle(queue)
        return work

    assert [c[:2] for c in asyncio.run(scenario()).calls] == [("ns", "j")]


TFJOB_BODY = {
    "metadata": {"generation": 1, "labels": {"a": "b"}, "annotations": {}},
    "status": {"phase": "Pending"},
}
JOB_BODY = {
    "metadata": {"generation": 1, "labels": {"tfkube.io/job-name": "j"}},
    "status": {"active": 3, "ready": 1, "succeeded": 0},
}


def changed(body: dict[str, Any], part: str, **fields: Any) -> dict[str, Any]:
    return {**body, part: {**body[part], **fields}}


@pytest.mark.parametrize(
    ("marks", "before", "after", "same"),
    [
        pytest.param(
            tfjob_marks,
            TFJOB_BODY,
            changed(TFJOB_BODY, "status", phase="Running"),
            True,
            id="tfjob-own-status-write",
        ),
        pytest.param(
            tfjob_marks,
            TFJOB_BODY,
            changed(TFJOB_BODY, "metadata", generation=2),
            False,
            id="tfjob-spec",
        ),
        pytest.param(
            tfjob_marks,
            TFJOB_BODY,
            changed(TFJOB_BODY, "metadata", annotations={"stop": "1"}),
            False,
            id="tfjob-annotation",
        ),
        pytest.param(
            tfjob_marks,
            TFJOB_BODY,
            changed(TFJOB_BODY, "metadata", deletionTimestamp="x"),
            False,
            id="tfjob-deleted",
        ),
        pytest.param(
            job_marks,
            JOB_BODY,
            changed(JOB_BODY, "status", active=9, ready=8),
            True,
            id="job-counting-pods",
        ),
        pytest.param(
            job_marks,
            JOB_BODY,
            changed(JOB_BODY, "status", succeeded=1),
            False,
            id="job-a-pod-succeeded",
        ),
        pytest.param(
            job_marks,
            JOB_BODY,
            changed(JOB_BODY, "status", conditions=[{"type": "Failed"}]),
            False,
            id="job-failed",
        ),
        pytest.param(
            job_marks,
            JOB_BODY,
            changed(JOB_BODY, "status", failedIndexes="3"),
            False,
            id="job-failed-index",
        ),
    ],
)
def test_an_event_that_changed_only_counts_or_status_may_wait(
    marks: Any, before: dict[str, Any], after: dict[str, Any], same: bool
):
    assert same_marks(marks(before), marks(after)) is same
    assert not same_marks(None, marks(after))  # the first event of an object: at once
