"""The dashboard's pure decisions for issue 22: one calm state per job, which replicas
need attention, how results are worded, sortable columns and the jobs list's sort,
outputs grouped by kind."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tfkube.planner import Replica, ReplicaState
from tfkube.server.queries.jobs import BadSort, Sort
from tfkube.server.web import _present as p

PENDING = ReplicaState.PENDING
RUNNING = ReplicaState.RUNNING


def r(index: int, state: ReplicaState = PENDING, **kw: object) -> Replica:
    return Replica(role="worker", index=index, state=state, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("phase", "queued", "reason", "message", "replicas", "label", "tone", "detail"),
    [
        pytest.param(
            "Pending",
            True,
            "Queued",
            "queued: waiting for the scheduler",
            [r(0, message="queued")],
            "Queued",
            "wait",
            "waiting for the scheduler",
            id="queued",
        ),
        pytest.param(
            "Pending",
            False,
            None,
            None,
            [r(0, message="starting"), r(1, message="starting")],
            "Starting",
            "wait",
            "2 of 2 replicas waiting: starting",
            id="starting",
        ),
        pytest.param(
            "Pending", False, None, None, [r(0)], "Starting", "wait", "", id="starting-quiet"
        ),
        pytest.param(
            "Running", False, None, None, [r(0, RUNNING)], "Running", "run", "", id="running"
        ),
        pytest.param(
            "Running",
            False,
            None,
            None,
            [r(0, RUNNING), r(1, message="0/5 nodes free")],
            "Running",
            "run",
            "1 of 2 replicas waiting: 0/5 nodes free",
            id="running-some-wait",
        ),
        pytest.param(
            "Running",
            False,
            None,
            "worker-0 stalled",
            [r(0, RUNNING, stalled=True)],
            "Running",
            "warn",
            "worker-0 stalled",
            id="stalled",
        ),
        pytest.param(
            "Restarting",
            False,
            None,
            "worker-1 exited 1",
            [],
            "Restarting",
            "warn",
            "worker-1 exited 1",
            id="restarting",
        ),
        pytest.param(
            "Succeeded",
            False,
            "Succeeded",
            "worker-0 succeeded",
            [],
            "Succeeded",
            "ok",
            "",
            id="succeeded",
        ),
        pytest.param(
            "Failed", False, "Stopped", "stopped", [], "Stopped", "idle", "", id="stopped"
        ),
        pytest.param(
            "Failed",
            False,
            "BackoffLimitExceeded",
            "worker-0 exited 3",
            [],
            "Failed",
            "bad",
            "worker-0 exited 3",
            id="failed",
        ),
    ],
)
def test_one_state_in_one_sentence(
    phase: str,
    queued: bool,
    reason: str | None,
    message: str | None,
    replicas: list[Replica],
    label: str,
    tone: str,
    detail: str,
) -> None:
    state = p.job_state(phase, queued, reason, message, replicas)
    assert (state.label, state.tone, state.detail) == (label, tone, detail)
    assert state.sentence


def test_a_starting_job_needs_no_attention() -> None:
    waiting = [r(i, message="queued") for i in range(3)]
    assert not any(p.has_problem(x) for x in waiting)
    page = p.replica_page(waiting, p.ReplicaFilter(), 1)
    assert page.problems == 0
    assert p.has_problem(r(0, ReplicaState.FAILED))
    assert p.has_problem(r(0, RUNNING, stalled=True))
    assert p.has_problem(r(0, PENDING, restarts=1, message="restarting in 4 s"))
    assert p.has_problem(r(0, RUNNING, message="OOMKilled once"))


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.97123, "0.9712"),
        (1000, "1,000"),
        (1000.0, "1,000"),
        (12.3456, "12.35"),
        (0.0000123, "1.23e-05"),
        (123456789.0, "1.23e+08"),
        (None, ""),
        (0.0, "0"),
    ],
)
def test_metric_wording(value: float | int | None, text: str) -> None:
    assert p.metric(value) == text


def test_sort_links_toggle_and_say_their_order() -> None:
    params = {"team": "", "q": "x"}
    first = p.sort_link(params, "-created", "result.acc")
    assert (first.href_params["sort"], first.aria_sort, first.arrow) == ("-result.acc", "none", "")
    again = p.sort_link(params, "-result.acc", "result.acc")
    assert (again.href_params["sort"], again.aria_sort) == ("result.acc", "descending")
    back = p.sort_link(params, "result.acc", "result.acc")
    assert (back.href_params["sort"], back.aria_sort) == ("-result.acc", "ascending")
    name = p.sort_link(params, "-created", "name", first="asc")
    assert name.href_params["sort"] == "name"
    assert name.href_params["q"] == "x"


@pytest.mark.parametrize(
    ("text", "key", "descending"),
    [
        (None, "created", True),
        ("name", "name", False),
        ("-result.test_accuracy", "result.test_accuracy", True),
    ],
)
def test_a_list_sorts_by(text: str | None, key: str, descending: bool) -> None:
    sort = Sort.parse(text)
    assert (sort.key, sort.descending) == (key, descending)
    assert sort.metric == (key[7:] if key.startswith("result.") else None)


@pytest.mark.parametrize("text", ["nothing", "-", "result.", "result." + "x" * 65, "spec"])
def test_a_list_refuses_an_unknown_sort(text: str) -> None:
    with pytest.raises(BadSort):
        Sort.parse(text)


@dataclass
class F:
    path: str
    size: int = 10
    modified: float = 0.0
    is_dir: bool = False


def test_outputs_grouped_by_kind() -> None:
    files = [
        F("checkpoint", modified=5),
        F("model.ckpt-100.index", modified=1),
        F("model.ckpt-100.data-00000-of-00001", modified=1),
        F("model.ckpt-200.index", modified=2),
        F("model.ckpt-200.data-00000-of-00001", size=90, modified=2),
        F("model.ckpt-200.meta", modified=2),
        F("export/200/saved_model.pb", modified=3),
        F("export/200/variables/variables.index", modified=3),
        F("export/100/saved_model.pb", modified=1),
        F("events.out.tfevents.1.host", modified=4),
        F("train/events.out.tfevents.2.host", modified=4),
        F("result.json", modified=6),
        F("export", is_dir=True),
    ]
    groups = {g.key: g for g in p.group_outputs(files)}
    assert list(groups) == ["exports", "checkpoints", "summaries", "other"]
    assert [i.label for i in groups["exports"].items] == ["version 200", "version 100"]
    assert groups["exports"].items[0].path == "export/200"
    assert groups["exports"].items[0].files == 2
    assert [i.label for i in groups["checkpoints"].items] == [
        "checkpoint (the index of the newest)",
        "model.ckpt-200",
        "model.ckpt-100",
    ]
    newest = groups["checkpoints"].items[1]
    assert (newest.files, newest.size, newest.is_dir) == (3, 110, True)
    assert [i.label for i in groups["summaries"].items] == ["the outputs' top folder", "train/"]
    assert [i.label for i in groups["other"].items] == ["result.json"]
    assert p.group_outputs([]) == []
