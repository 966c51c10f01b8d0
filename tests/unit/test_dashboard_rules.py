"""The dashboard's pure decisions for issue 22: one calm state per job, which replicas
need attention, how results are worded, sortable columns and the jobs list's sort,
outputs grouped by kind."""

from __future__ import annotations

import pytest

from tfkube.planner import Replica, ReplicaState
from tfkube.server.queries.jobs import BadSort, Sort
from tfkube.server.web import _present as p

PENDING = ReplicaState.PENDING
RUNNING = ReplicaState.RUNNING


def r(index: int, state: ReplicaState = PENDING, **kw: object) -> Replica:
    return Replica(role="worker", index=index, state=state, **kw)  # type: ignore[arg-type]


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
