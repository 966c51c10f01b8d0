"""Stragglers and resource samples: the pure decisions (`tfkube.planner._stragglers`,
`tfkube.engines.local._usage`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tfkube import contract
from tfkube.engines.local._usage import (
    Reading,
    append_line,
    cpu_cores,
    sample_line,
    v2_usage_seconds,
)
from tfkube.planner import (
    Replica,
    ReplicaState,
    median_rate,
    step_rate,
    steps_in,
    stragglers,
    trim,
)
from tfkube.server.outputs.usage import parse_samples, thin
from tfkube.server.web._present import has_problem, job_state


@pytest.mark.parametrize(
    ("text", "steps"),
    [
        ("", None),
        ("tfkube-steps: 12\n", 12),
        ("tfkube-steps: 12\nglobal_step=300 loss=0.1\ntfkube-steps: 40\n", 40),
        ("  tfkube-steps: 7  \n", 7),
        ("say tfkube-steps: 7\n", None),  # only at the start of a line
        ("tfkube-steps: -3\ntfkube-steps: many\n", None),
    ],
)
def test_steps_in_reads_the_last_step_line(text: str, steps: int | None) -> None:
    assert steps_in(text) == steps


def test_a_rate_is_known_only_once_the_samples_cover_the_window() -> None:
    samples = [(100.0 + t, 10 * t) for t in range(30)]
    assert step_rate(samples, now=129.0, window=60) is None
    samples = [(100.0 + t, 10 * t) for t in range(61)]
    assert step_rate(samples, now=160.0, window=60) == pytest.approx(10.0)


def test_the_rate_is_over_the_last_window_only() -> None:
    # 10 steps/s for 60 s, then 1 step/s for 60 s.
    samples = [(float(t), 10 * t) for t in range(61)]
    samples += [(60.0 + t, 600 + t) for t in range(1, 61)]
    assert step_rate(samples, now=120.0, window=60) == pytest.approx(1.0)
    # A replica that stopped printing counts as taking no steps until `now`.
    assert step_rate(samples, now=180.0, window=60) == pytest.approx(0.0, abs=0.02)


def test_trim_keeps_what_the_window_needs() -> None:
    samples = [(float(t), t) for t in range(200)]
    trim(samples, now=199.0, window=60)
    assert samples[0] == (139.0, 139)
    assert step_rate(samples, now=199.0, window=60) == pytest.approx(1.0)


def test_a_counter_going_back_is_no_negative_rate() -> None:
    assert step_rate([(0.0, 50), (60.0, 10)], now=60.0, window=60) == 0.0


@pytest.mark.parametrize(
    ("rates", "flagged"),
    [
        ({"worker-0": 10.0, "worker-1": 2.0}, {"worker-1": 2.0}),  # median 6: below 3
        ({"worker-0": 10.0, "worker-1": 4.0}, {}),  # median 7: 4 is above 3.5
        ({"chief-0": 10.0, "worker-0": 9.0, "worker-1": 4.0}, {"worker-1": 4.0}),
        ({"worker-0": 10.0, "worker-1": None}, {}),  # one known rate: nothing to compare
        ({"worker-0": 0.0, "worker-1": 0.0}, {}),  # all idle: no straggler
        ({"worker-0": 10.0, "worker-1": 10.0, "worker-2": 0.0}, {"worker-2": 0.0}),
        ({}, {}),
    ],
)
def test_stragglers_are_below_half_the_median(
    rates: dict[str, float | None], flagged: dict[str, float]
) -> None:
    assert stragglers(rates) == flagged


def test_median_rate_ignores_unknown_rates() -> None:
    assert median_rate({"a": 1.0, "b": None, "c": 3.0}) == 2.0
    assert median_rate({"a": None}) is None


def test_cpu_cores_between_two_readings() -> None:
    assert cpu_cores(Reading(10.0, 5.0, 0), Reading(12.0, 8.0, 0)) == pytest.approx(1.5)
    assert cpu_cores(Reading(10.0, 5.0, 0), Reading(10.0, 8.0, 0)) == 0.0
    assert cpu_cores(Reading(10.0, 5.0, 0), Reading(12.0, 1.0, 0)) == 0.0  # a new start


def test_v2_cpu_stat() -> None:
    assert v2_usage_seconds("usage_usec 2500000\nuser_usec 2000000\n") == 2.5
    assert v2_usage_seconds("nr_periods 0\n") is None


def test_sample_line() -> None:
    assert sample_line(1700000000.04, 0.12345, 1024) == b"[1700000000.0,0.123,1024]\n"


def test_usage_lines_go_below_the_log_folder(tmp_path: Path) -> None:
    assert append_line(str(tmp_path), "worker-0", b"[1.0,0.5,10]\n")
    assert append_line(str(tmp_path), "worker-0", b"[3.0,0.5,10]\n")
    kept = tmp_path.joinpath(*contract.USAGE_SUBDIR, "worker-0.jsonl")
    assert kept.read_bytes() == b"[1.0,0.5,10]\n[3.0,0.5,10]\n"


def test_a_link_planted_for_the_usage_file_is_never_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("precious\n")
    folder = tmp_path.joinpath("logs", *contract.USAGE_SUBDIR)
    folder.mkdir(parents=True)
    (folder / "worker-0.jsonl").symlink_to(target)
    os.link(target, folder / "worker-1.jsonl")
    assert not append_line(str(tmp_path / "logs"), "worker-0", b"[1.0,0.5,10]\n")
    assert not append_line(str(tmp_path / "logs"), "worker-1", b"[1.0,0.5,10]\n")
    assert target.read_text() == "precious\n"


def test_a_linked_usage_folder_is_never_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "logs" / contract.OWN_SUBDIR).mkdir(parents=True)
    (tmp_path / "logs" / contract.OWN_SUBDIR / "usage").symlink_to(elsewhere)
    assert not append_line(str(tmp_path / "logs"), "worker-0", b"[1.0,0.5,10]\n")
    assert list(elsewhere.iterdir()) == []


def test_usage_files_are_parsed_whole_lines_only() -> None:
    data = b'0.5,12]\n[10.0,0.5,1000]\n[12.0,true,5]\n"x"\n[14.0,1.25,2000]\n[16.0,'
    assert parse_samples(data) == [(10.0, 0.5, 1000), (14.0, 1.25, 2000)]


def test_usage_series_are_thinned_keeping_the_newest() -> None:
    points = [(float(t), 0.0, t) for t in range(5000)]
    thinned = thin(points, limit=1000)
    assert len(thinned) <= 1000
    assert thinned[-500:] == points[-500:]
    assert thinned[0] == points[0]


def test_the_job_summary_names_its_stragglers() -> None:
    replicas = [
        Replica(role="worker", index=0, state=ReplicaState.RUNNING, step_rate=100.0),
        Replica(role="worker", index=1, state=ReplicaState.RUNNING, step_rate=3.0, straggler=True),
    ]
    state = job_state("Running", False, None, None, replicas)
    assert state.tone == "warn"
    assert "straggler" in state.sentence
    assert "worker-1 at 3.0 steps/s" in state.detail
    assert has_problem(replicas[1])
    assert not has_problem(replicas[0])


def test_judge_steps_flags_and_clears_with_one_event_each() -> None:
    """The judgement both observers share (the supervisor, the server's StepWatcher)."""
    from tfkube.planner import Replica, ReplicaState, judge_steps

    def running(index: int, straggler: bool = False) -> Replica:
        return Replica(role="worker", index=index, state=ReplicaState.RUNNING, straggler=straggler)

    samples: dict[str, list[tuple[float, int]]] = {}
    replicas = [running(0), running(1), Replica(role="ps", index=0, state=ReplicaState.RUNNING)]
    judged = judge_steps(replicas, samples, {"worker-0": 0, "worker-1": 0}, 0.0, 10.0)
    assert judged.rates == {"worker-0": None, "worker-1": None}  # not a window yet
    judged = judge_steps(replicas, samples, {"worker-0": 100, "worker-1": 10}, 10.0, 10.0)
    assert judged.rates == {"worker-0": 10.0, "worker-1": 1.0}
    assert judged.slow == {"worker-1"}
    assert [k for k, _ in judged.events] == ["worker-1"]
    assert "worker-1 is a straggler: 1.00 steps/s" in judged.events[0][1]
    # Said once: the caller keeps the flag; the next look says nothing new.
    replicas = [running(0), running(1, straggler=True)]
    judged = judge_steps(replicas, samples, {"worker-0": 200, "worker-1": 20}, 20.0, 10.0)
    assert judged.events == ()
    judged = judge_steps(replicas, samples, {"worker-0": 300, "worker-1": 120}, 30.0, 10.0)
    assert judged.slow == frozenset()
    assert judged.events == (("worker-1", "worker-1 is no longer a straggler: 10.00 steps/s"),)
    # No new line: the count stands, so the rate falls.
    judged = judge_steps(replicas, samples, {}, 40.0, 10.0)
    assert judged.rates == {"worker-0": 0.0, "worker-1": 0.0}
