"""The dashboard's pure decisions: wording, URLs, paging, the replica table, which log a
job page opens, and which files are a job's final checkpoint."""

from __future__ import annotations

import pytest

from tfkube.planner import Replica
from tfkube.server.outputs.checkpoints import final_checkpoint, latest_prefix
from tfkube.server.web import _present as p
from tfkube.tfcluster import parse_replica_key


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        pytest.param(0, "just now", id="now"),
        pytest.param(4.9, "just now", id="under-5s"),
        pytest.param(12, "12 s ago", id="seconds"),
        pytest.param(185, "3 min ago", id="minutes"),
        pytest.param(7300, "2 h ago", id="hours"),
        pytest.param(86400, "1 day ago", id="one-day"),
        pytest.param(5 * 86400 + 10, "5 days ago", id="days"),
    ],
)
def test_ago(seconds: float, text: str) -> None:
    assert p.ago(seconds) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        pytest.param(None, "", id="none"),
        pytest.param(-1, "", id="negative"),
        pytest.param(float("nan"), "", id="nan"),
        pytest.param(44.6, "45 s", id="seconds"),
        pytest.param(200, "3 min 20 s", id="minutes"),
        pytest.param(3900, "1 h 05 min", id="hours"),
        pytest.param(2 * 86400 + 3 * 3600, "2 days 3 h", id="days"),
    ],
)
def test_duration(seconds: float | None, text: str) -> None:
    assert p.duration(seconds) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        pytest.param(None, "", id="unknown"),
        pytest.param(0, "done", id="done"),
        pytest.param(30, "less than a minute left", id="seconds"),
        pytest.param(125, "about 2 min left", id="minutes"),
        pytest.param(3 * 3600 + 40, "about 3 h 01 min left", id="hours"),
    ],
)
def test_eta(seconds: float | None, text: str) -> None:
    assert p.eta(seconds) == text


@pytest.mark.parametrize(
    ("n", "text"),
    [
        pytest.param(None, "", id="none"),
        pytest.param(999, "999 B", id="bytes"),
        pytest.param(1200, "1.2 kB", id="kilo"),
        pytest.param(34_000_000, "34 MB", id="mega"),
        pytest.param(2_100_000_000, "2.1 GB", id="giga"),
        pytest.param(5 * 10**15, "5000 TB", id="beyond"),
    ],
)
def test_size(n: int | None, text: str) -> None:
    assert p.size(n) == text


@pytest.mark.parametrize(
    ("params", "changes", "url"),
    [
        pytest.param({}, {}, "/jobs", id="nothing"),
        pytest.param({"q": "", "phase": None}, {}, "/jobs", id="empties-dropped"),
        pytest.param({"q": "a b"}, {"page": 2}, "/jobs?q=a+b&page=2", id="encoded"),
        pytest.param({"phase": "Running"}, {"page": 1}, "/jobs?phase=Running", id="page-1-dropped"),
        pytest.param({"phase": "Running"}, {"phase": ""}, "/jobs", id="cleared"),
        pytest.param({"q": "<x>&"}, {}, "/jobs?q=%3Cx%3E%26", id="markup-encoded"),
    ],
)
def test_query_url(params: dict[str, object], changes: dict[str, object], url: str) -> None:
    assert p.query_url("/jobs", params, **changes) == url


@pytest.mark.parametrize(
    ("page", "pages", "window"),
    [
        pytest.param(1, 1, [1], id="one"),
        pytest.param(1, 3, [1, 2, 3], id="few"),
        pytest.param(1, 20, [1, 2, 3, None, 20], id="start"),
        pytest.param(10, 20, [1, None, 8, 9, 10, 11, 12, None, 20], id="middle"),
        pytest.param(20, 20, [1, None, 18, 19, 20], id="end"),
        pytest.param(4, 20, [1, 2, 3, 4, 5, 6, None, 20], id="no-gap-of-one"),
    ],
)
def test_pager_window(page: int, pages: int, window: list[int | None]) -> None:
    assert p.pager_window(page, pages) == window


def test_clamp_page() -> None:
    assert p.clamp_page(0, 100, 50) == 1
    assert p.clamp_page(9, 100, 50) == 2
    assert p.clamp_page(3, 0, 50) == 1


def rep(key: str, state: str = "Running", **kw: object) -> Replica:
    role, index = parse_replica_key(key)
    return Replica(role=role, index=index, state=state, **kw)  # type: ignore[arg-type]


def big_job() -> list[Replica]:
    replicas = [rep(f"ps-{i}") for i in range(10)]
    replicas += [rep(f"worker-{i}", "Pending" if i >= 900 else "Running") for i in range(990)]
    replicas[500] = rep("worker-490", "Failed", exit_code=3, message="worker-490 exited with 3")
    return list(reversed(replicas))  # order must not matter


def test_replica_page_of_a_thousand() -> None:
    page = p.replica_page(big_job(), p.ReplicaFilter(), 1, 50)
    assert (page.total, page.matched, page.pages) == (1000, 1000, 20)
    assert page.by_role == {"ps": 10, "worker": 990}
    assert [g.role for g in page.groups] == ["ps", "worker"]
    assert [r.key for r in page.groups[0].rows] == [f"ps-{i}" for i in range(10)]
    assert page.groups[1].rows[0].key == "worker-0"
    assert page.groups[1].total == 990
    assert page.groups[1].states == {"Running": 899, "Pending": 90, "Failed": 1}
    assert page.problems == 1


@pytest.mark.parametrize(
    ("flt", "page", "matched", "first"),
    [
        pytest.param(p.ReplicaFilter(role="ps"), 1, 10, "ps-0", id="role"),
        pytest.param(p.ReplicaFilter(state="Pending"), 2, 90, "worker-950", id="state-page-2"),
        pytest.param(p.ReplicaFilter(q="WORKER-98"), 1, 11, "worker-98", id="text-any-case"),
        pytest.param(p.ReplicaFilter(q="exited"), 1, 1, "worker-490", id="text-in-message"),
        pytest.param(p.ReplicaFilter(problems=True), 1, 1, "worker-490", id="problems"),
        pytest.param(p.ReplicaFilter(role="chief"), 1, 0, None, id="no-match"),
        pytest.param(p.ReplicaFilter(), 99, 1000, "worker-940", id="past-the-end-clamped"),
    ],
)
def test_replica_filter(flt: p.ReplicaFilter, page: int, matched: int, first: str | None) -> None:
    found = p.replica_page(big_job(), flt, page, 50)
    assert found.matched == matched
    rows = [r for g in found.groups for r in g.rows]
    assert (rows[0].key if rows else None) == first


def test_state_counts_follow_the_role_filter() -> None:
    found = p.replica_page(big_job(), p.ReplicaFilter(role="ps"), 1)
    assert found.by_state == {"Running": 10}


@pytest.mark.parametrize(
    ("replicas", "with_logs", "chosen"),
    [
        pytest.param(
            [rep("ps-0"), rep("worker-0")], ["ps-0", "worker-0"], "worker-0", id="worker-0"
        ),
        pytest.param(
            [rep("chief-0"), rep("worker-0")], ["chief-0", "worker-0"], "chief-0", id="chief"
        ),
        pytest.param(
            [rep("worker-0", "Succeeded"), rep("worker-1", "Failed")],
            ["worker-0", "worker-1"],
            "worker-1",
            id="the-failed-one",
        ),
        pytest.param([rep("worker-1", "Failed")], [], "worker-1", id="failed-no-logs-yet"),
        pytest.param([rep("ps-0")], ["ps-0"], "ps-0", id="any-with-a-log"),
        pytest.param([rep("ps-0"), rep("worker-0")], [], "worker-0", id="no-log-yet"),
        pytest.param([], [], None, id="nothing"),
    ],
)
def test_log_replica(replicas: list[Replica], with_logs: list[str], chosen: str | None) -> None:
    assert p.log_replica(replicas, with_logs) == chosen


def test_state_summary_and_running() -> None:
    assert p.state_summary({"Pending": 1, "Running": 3, "Failed": 0}) == "3 running, 1 pending"
    assert p.running_of({"Running": 2, "Succeeded": 1}) == (2, 3)


INDEX = 'model_checkpoint_path: "/data/out/model.ckpt-1001"\nall_model_checkpoint_paths: "x"\n'
FILES = [
    "checkpoint",
    "model.ckpt-1001.index",
    "model.ckpt-1001.data-00000-of-00001",
    "model.ckpt-1001.meta",
    "model.ckpt-10010.index",
    "model.ckpt-901.index",
]


@pytest.mark.parametrize(
    ("text", "prefix"),
    [
        pytest.param(INDEX, "model.ckpt-1001", id="absolute"),
        pytest.param('model_checkpoint_path: "model.ckpt-5"', "model.ckpt-5", id="relative"),
        pytest.param('model_checkpoint_path: "C:\\\\out\\\\m.ckpt-2"', "m.ckpt-2", id="windows"),
        pytest.param("garbage", None, id="unreadable"),
        pytest.param('model_checkpoint_path: ""', None, id="empty"),
    ],
)
def test_latest_prefix(text: str, prefix: str | None) -> None:
    assert latest_prefix(text) == prefix


def test_final_checkpoint_files() -> None:
    found = final_checkpoint("", INDEX, FILES)
    assert found is not None
    assert found.files == (
        "model.ckpt-1001.data-00000-of-00001",
        "model.ckpt-1001.index",
        "model.ckpt-1001.meta",
    )
    assert 'model_checkpoint_path: "model.ckpt-1001"' in found.index_text()
    nested = final_checkpoint("train", INDEX, FILES)
    assert nested is not None
    assert nested.files[0] == "train/model.ckpt-1001.data-00000-of-00001"


def test_no_final_checkpoint_without_its_index_file() -> None:
    assert final_checkpoint("", INDEX, ["checkpoint", "model.ckpt-1001.meta"]) is None
    assert final_checkpoint("", "nothing", FILES) is None


def test_common_wait() -> None:
    replicas = [
        rep("worker-0", "Pending", message="Unschedulable: no room"),
        rep("worker-1", "Pending", message="Unschedulable: no room"),
        rep("worker-2", "Pending", message="pulling the image"),
        rep("worker-3", "Running", message="Unschedulable: no room"),
    ]
    assert p.common_wait(replicas) == ("Unschedulable: no room", 2)
    assert p.common_wait([rep("worker-0", "Pending")]) is None


def test_log_choices() -> None:
    small = [f"worker-{i}" for i in range(3)]
    assert p.log_choices(small, [], None) == small
    big = [f"worker-{i}" for i in range(1000)]
    assert p.log_choices(big, ["worker-7", "worker-3"], "worker-0") == [
        "worker-0",
        "worker-3",
        "worker-7",
    ]


@pytest.mark.parametrize(
    ("target", "safe"),
    [
        pytest.param("/jobs/abc?x=1", "/jobs/abc?x=1", id="path"),
        pytest.param("https://evil.example/", "/jobs", id="absolute-url"),
        pytest.param("//evil.example/", "/jobs", id="scheme-relative"),
        pytest.param("/\\evil.example/", "/jobs", id="backslash"),
        pytest.param("/\tjobs", "/jobs", id="control-character"),
        pytest.param("jobs", "/jobs", id="relative"),
        pytest.param("", "/jobs", id="empty"),
    ],
)
def test_safe_next(target: str, safe: str) -> None:
    assert p.safe_next(target) == safe


@pytest.mark.parametrize(
    ("args", "opened"),
    [
        (("worker-1", 0, 120, 7), {"attempt": 0, "at": 120, "line": 7}),
        ((None, 0, 120, 7), None),  # not a replica of the job
        (("worker-1", None, 120, 7), None),
        (("worker-1", 0, None, 7), None),
        (("worker-1", 0, 120, None), None),
        (("worker-1", -1, 120, 7), None),
        (("worker-1", 0, -5, 7), None),
        (("worker-1", 0, 120, 0), None),
    ],
)
def test_log_position_from_a_search_hits_link(
    args: tuple[str | None, int | None, int | None, int | None], opened: dict[str, int] | None
) -> None:
    assert p.log_position(*args) == opened
