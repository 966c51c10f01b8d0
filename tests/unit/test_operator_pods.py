"""The operator's pod informer, its pure part: the index a watch event or a relist leaves,
the TFJobs each pokes, a watch stream cut into lines, the backoff. Its I/O against the real
API server: tests/cluster/test_operator_pods.py."""

from __future__ import annotations

import ssl
from typing import Any

import pytest

from tfkube.kube.errors import ServerError
from tfkube.kube.rest import Endpoint
from tfkube.operator._pods import (
    BACKOFF_MAX_SECONDS,
    REPLICA_PODS,
    Expired,
    PodIndex,
    PodInformer,
    PodStream,
    backoff,
    entry_of,
    progress_only,
    split_lines,
)


def pod(
    name: str, job: str = "a", ns: str = "ns", phase: str = "Pending", rv: str = "1"
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": ns,
            "resourceVersion": rv,
            "labels": {
                "tfkube.io/job-name": job,
                "tfkube.io/replica-type": "worker",
                "tfkube.io/component": "replica",
            },
            "managedFields": [{"manager": "kube-controller-manager"}],
            "finalizers": ["batch.kubernetes.io/job-tracking"],
        },
        "spec": {"containers": [{"name": "tensorflow", "image": "x"}]},
        "status": {"phase": phase},
    }


def names(index: PodIndex, job: str, ns: str = "ns") -> list[str]:
    return sorted(p["metadata"]["name"] for p in index.pods_of((ns, job)))


def entries(*pods: dict[str, Any]) -> list[Any]:
    return [e for e in map(entry_of, pods) if e is not None]


def test_the_selector_is_every_replica_pod_of_tfkube():
    """Replica pods carry no managed-by label (`names.replica_pod_labels`): the job name
    and the replica type select them, as the operator's RBAC lets it see them."""
    assert REPLICA_PODS == "tfkube.io/job-name,tfkube.io/replica-type"


def test_added_modified_deleted():
    index = PodIndex()
    assert index.apply("ADDED", pod("a-0")) == {("ns", "a")}
    assert index.apply("ADDED", pod("b-0", job="b")) == {("ns", "b")}
    assert index.apply("MODIFIED", pod("a-0", phase="Running")) == {("ns", "a")}
    [kept] = index.pods_of(("ns", "a"))
    assert kept["status"]["phase"] == "Running"
    assert "managedFields" not in kept["metadata"]  # slimmed
    assert index.apply("DELETED", pod("a-0", phase="Running")) == {("ns", "a")}
    assert index.pods_of(("ns", "a")) == []
    assert index.jobs() == {("ns", "b")}
    assert len(index) == 1


def test_a_change_the_reconcile_cannot_see_pokes_nothing():
    """The Job controller removing its tracking finalizer, a new resourceVersion: the
    slimmed pod is the same, so no reconcile is asked for."""
    index = PodIndex()
    index.apply("ADDED", pod("a-0", rv="1"))
    moved_on = pod("a-0", rv="2")
    moved_on["metadata"]["finalizers"] = []
    assert index.apply("MODIFIED", moved_on) == set()


def test_a_pod_is_replaced_never_changed_in_place():
    """A reconcile's thread may still read the pods it was given."""
    index = PodIndex()
    index.apply("ADDED", pod("a-0"))
    given = index.pods_of(("ns", "a"))
    index.apply("MODIFIED", pod("a-0", phase="Running"))
    assert given[0]["status"]["phase"] == "Pending"


def test_a_deleted_pod_the_index_never_had_pokes_nothing():
    assert PodIndex().apply("DELETED", pod("gone")) == set()


def test_a_pod_whose_job_label_changes_moves_and_pokes_both():
    index = PodIndex()
    index.apply("ADDED", pod("p"))
    assert index.apply("MODIFIED", pod("p", job="b")) == {("ns", "a"), ("ns", "b")}
    assert names(index, "a") == []
    assert names(index, "b") == ["p"]


def test_same_names_in_two_namespaces_are_two_pods():
    index = PodIndex()
    index.apply("ADDED", pod("p", ns="one"))
    index.apply("ADDED", pod("p", ns="two"))
    index.apply("DELETED", pod("p", ns="one"))
    assert names(index, "a", "one") == []
    assert names(index, "a", "two") == ["p"]


def test_a_relist_replaces_the_index_and_pokes_what_changed_or_vanished():
    index = PodIndex()
    index.replace(entries(pod("a-0"), pod("a-1"), pod("b-0", job="b"), pod("c-0", job="c")), None)
    changed = index.replace(
        entries(
            pod("a-0"),  # a: a-1 deleted meanwhile
            pod("b-0", job="b", phase="Running"),  # b: changed
            pod("c-0", job="c", rv="9"),  # c: nothing it reads changed
            pod("d-0", job="d"),  # d: new
        ),
        None,
    )
    assert changed == {("ns", "a"), ("ns", "b"), ("ns", "d")}
    assert names(index, "a") == ["a-0"]
    assert index.apply("DELETED", pod("a-1")) == set()  # forgotten: no ghost left behind
    assert index.replace([], None) == {("ns", "a"), ("ns", "b"), ("ns", "c"), ("ns", "d")}
    assert len(index) == 0


def test_a_relist_of_one_namespace_leaves_the_others():
    index = PodIndex()
    index.replace(entries(pod("p", ns="one")), "one")
    index.replace(entries(pod("q", ns="two")), "two")
    assert index.replace(entries(pod("r", ns="one")), "one") == {("one", "a")}
    assert names(index, "a", "one") == ["r"]
    assert names(index, "a", "two") == ["q"]
    assert index.apply("DELETED", pod("q", ns="two")) == {("two", "a")}


def test_the_first_list_pokes_every_tfjob_with_pods():
    assert PodIndex().replace(entries(pod("a-0"), pod("b-0", job="b")), None) == {
        ("ns", "a"),
        ("ns", "b"),
    }


def test_the_snapshot_counts_the_pods_that_went():
    """What a reconcile cannot see in the pods themselves: that one went (deleted, or moved
    to another TFJob), or may have come and gone unseen (a relist)."""
    index = PodIndex()
    a, b = ("ns", "a"), ("ns", "b")
    assert index.snapshot(a) == ([], 0)
    index.apply("ADDED", pod("a-0"))
    index.apply("ADDED", pod("a-1"))
    index.apply("MODIFIED", pod("a-0", phase="Running"))
    seen = index.snapshot(a)
    assert (sorted(p["metadata"]["name"] for p in seen.pods), seen.gone) == (["a-0", "a-1"], 0)
    index.apply("DELETED", pod("a-1"))
    assert index.snapshot(a).gone == 1
    index.apply("MODIFIED", pod("a-0", job="b"))  # moved: gone from a, not from b
    assert (index.snapshot(a).gone, index.snapshot(b).gone) == (2, 0)
    index.apply("DELETED", pod("never-seen"))
    assert index.snapshot(a).gone == 2
    index.apply("ADDED", pod("c-0", ns="other", job="c"))
    index.replace(entries(pod("a-2")), "ns")
    assert (index.snapshot(a).gone, index.snapshot(b).gone) == (3, 1)  # relisted there
    assert index.snapshot(("other", "c")).gone == 0  # another namespace: not relisted


@pytest.mark.parametrize(
    ("chunks", "lines", "left"),
    [
        pytest.param([b'{"a":1}\n'], [[b'{"a":1}']], b"", id="one-line"),
        pytest.param(
            [b'{"a":', b"1}\n{", b'"b":2}\n'],
            [[], [b'{"a":1}'], [b'{"b":2}']],
            b"",
            id="split-across-chunks",
        ),
        pytest.param([b"x\ny\nz"], [[b"x", b"y"]], b"z", id="unfinished-line-kept"),
        pytest.param([b"\n\nx\n"], [[b"x"]], b"", id="empty-lines-skipped"),
    ],
)
def test_split_lines(chunks: list[bytes], lines: list[list[bytes]], left: bytes):
    buffer = bytearray()
    assert [split_lines(buffer, c) for c in chunks] == lines
    assert bytes(buffer) == left


def test_backoff_doubles_to_a_cap():
    assert backoff(0) == 0
    assert [backoff(n) for n in (1, 2, 3)] == [0.5, 1.0, 2.0]
    assert backoff(100) == BACKOFF_MAX_SECONDS


def informer(namespaces: tuple[str, ...] = ()) -> tuple[PodInformer, list[tuple[str, str]]]:
    pokes: list[tuple[str, str]] = []
    endpoint = Endpoint("https://127.0.0.1:1", ssl.create_default_context(), None)
    return PodInformer(endpoint, namespaces, PodIndex(), pokes.append), pokes


def test_watch_events_update_the_index_poke_and_move_the_version_on():
    inf, pokes = informer()
    [stream] = inf.streams
    inf.listed(stream, [], "10")
    inf.handle(stream, {"type": "ADDED", "object": pod("a-0", rv="11")})
    inf.handle(stream, {"type": "MODIFIED", "object": pod("a-0", rv="12")})  # same to observe
    inf.handle(
        stream,
        {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "20"}}},
    )
    assert pokes == [("ns", "a")]
    assert stream.resource_version == "20"
    inf.handle(stream, {"type": "DELETED", "object": pod("a-0", rv="21")})
    assert pokes == [("ns", "a"), ("ns", "a")]
    assert inf.index.pods_of(("ns", "a")) == []
    assert stream.resource_version == "21"


def test_an_expired_watch_raises_expired_and_other_errors_their_api_error():
    inf, _ = informer()
    [stream] = inf.streams
    gone = {
        "kind": "Status",
        "code": 410,
        "reason": "Expired",
        "message": "too old resource version",
    }
    with pytest.raises(Expired, match="too old"):
        inf.handle(stream, {"type": "ERROR", "object": gone})
    failed = {"kind": "Status", "code": 500, "reason": "InternalError", "message": "etcd"}
    with pytest.raises(ServerError):
        inf.handle(stream, {"type": "ERROR", "object": failed})


def test_synced_only_once_every_namespace_is_listed():
    inf, pokes = informer(("one", "two"))
    one, two = inf.streams
    inf.listed(one, entries(pod("p", ns="one")), "5")
    assert not inf._synced.is_set()
    inf.listed(two, [], "6")
    assert inf._synced.is_set()
    assert pokes == [("one", "a")]
    assert (one.lists, two.lists) == (1, 1)
    assert [s.scope for s in inf.streams] == ["one", "two"]
    assert PodStream(None).scope == "all namespaces"


def test_the_kubeconfigs_proxy_is_used_as_the_official_client_uses_it():
    from kubernetes.client import Configuration

    conf = Configuration()
    conf.proxy = "http://127.0.0.1:3128"
    endpoint = Endpoint("https://127.0.0.1:1", ssl.create_default_context(), conf)
    assert PodInformer(endpoint, (), PodIndex(), print).proxy == "http://127.0.0.1:3128"
    assert informer()[0].proxy is None


def with_status(p: dict[str, Any], **status: Any) -> dict[str, Any]:
    return {**p, "status": {**p["status"], **status}}


def deleting(p: dict[str, Any]) -> dict[str, Any]:
    return {**p, "metadata": {**p["metadata"], "deletionTimestamp": "2026-12-05T10:00:00Z"}}


RUNNING = pod("a-0", phase="Running")
TERMINATED = {"name": "tensorflow", "state": {"terminated": {"exitCode": 1}}}
RESTARTED = {
    "name": "tensorflow",
    "state": {"running": {}},
    "lastState": {"terminated": {"exitCode": 137}},
}
EVICTION = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}


@pytest.mark.parametrize(
    ("old", "new", "progress"),
    [
        pytest.param(None, pod("a-0"), True, id="made"),
        pytest.param(pod("a-0"), RUNNING, True, id="started"),
        pytest.param(
            RUNNING,
            with_status(RUNNING, conditions=[{"type": "Ready", "status": "True"}]),
            True,
            id="ready",
        ),
        pytest.param(RUNNING, pod("a-0", phase="Succeeded"), False, id="succeeded"),
        pytest.param(RUNNING, pod("a-0", phase="Failed"), False, id="failed"),
        pytest.param(RUNNING, None, False, id="gone"),
        pytest.param(RUNNING, deleting(RUNNING), False, id="being-deleted"),
        pytest.param(
            RUNNING, with_status(RUNNING, containerStatuses=[TERMINATED]), False, id="exited"
        ),
        pytest.param(
            RUNNING, with_status(RUNNING, containerStatuses=[RESTARTED]), False, id="restarted"
        ),
        pytest.param(RUNNING, with_status(RUNNING, conditions=[EVICTION]), False, id="evicted"),
        pytest.param(RUNNING, with_status(RUNNING, reason="Evicted"), False, id="reason"),
        pytest.param(pod("a-0", job="b"), pod("a-0"), False, id="moved-to-another-tfjob"),
        pytest.param(pod("a-0", phase="Failed"), pod("a-0"), False, id="after-an-end"),
    ],
)
def test_only_a_replica_coming_up_is_progress(
    old: dict[str, Any] | None, new: dict[str, Any] | None, progress: bool
):
    def slim(p: dict[str, Any] | None) -> dict[str, Any] | None:
        e = None if p is None else entry_of(p)
        return None if e is None else e[2]

    assert progress_only(slim(old), slim(new)) is progress


def test_a_replica_coming_up_calls_progress_anything_else_pokes():
    progressed: list[tuple[str, str]] = []
    inf, pokes = informer()
    inf.progress = progressed.append
    [stream] = inf.streams
    inf.listed(stream, [], "10")
    inf.handle(stream, {"type": "ADDED", "object": pod("a-0", rv="11")})
    inf.handle(stream, {"type": "MODIFIED", "object": pod("a-0", phase="Running", rv="12")})
    assert (progressed, pokes) == ([("ns", "a")] * 2, [])
    inf.handle(stream, {"type": "MODIFIED", "object": pod("a-0", phase="Failed", rv="13")})
    inf.handle(stream, {"type": "DELETED", "object": pod("a-0", phase="Failed", rv="14")})
    assert pokes == [("ns", "a")] * 2
    inf.handle(stream, {"type": "ADDED", "object": pod("a-1", job="b", rv="15")})
    inf.handle(stream, {"type": "MODIFIED", "object": pod("a-1", rv="16")})  # moved to a
    assert pokes[:2] == [("ns", "a")] * 2
    assert sorted(pokes[2:]) == [("ns", "a"), ("ns", "b")]
