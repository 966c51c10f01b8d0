"""Searching a job's kept logs (tfkube.server.outputs.logs.search_logs) on real files in
a temporary folder: hits in replica order with true line numbers and offsets, paging by
cursor that finds every hit once, bounds per answer, lines longer than one read, logs
the job replaced by links, and a generated 1,000-replica folder (3 starts each)."""

from __future__ import annotations

import os
import time
import tracemalloc
from pathlib import Path

import pytest

from tfkube import contract
from tfkube.server.outputs.logs import BadCursor, SearchCursor, search_logs
from tfkube.wire import LogHit


def write_log(out: Path, replica: str, attempt: int, text: str | bytes) -> Path:
    folder = out.joinpath(*contract.KEPT_LOGS_SUBDIR, replica)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{attempt}.log"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def line_at(out: Path, replica: str, attempt: int, offset: int) -> str:
    data = out.joinpath(*contract.KEPT_LOGS_SUBDIR, replica, f"{attempt}.log").read_bytes()
    return data[offset:].split(b"\n", 1)[0].decode()


@pytest.fixture
def job(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    write_log(out, "worker-1", 0, "start\nloss=1 NaN here\nend\n")
    write_log(out, "worker-1", 1, "again\nstill nan\n")
    write_log(out, "worker-0", 0, "a\nb\nNaN at step 3\n")
    write_log(out, "ps-0", 0, "ps up\nnan? no\n")
    write_log(out, "chief-0", 0, "no match\nlast line without newline nan")
    write_log(out, "worker-10", 0, "Ünïcode NAN\n")
    return out


def test_hits_in_replica_order_with_their_lines(job: Path) -> None:
    found = search_logs(str(job), "nan")
    got = [(h.replica, h.attempt, h.line, h.text) for h in found.hits]
    assert got == [
        ("chief-0", 0, 2, "last line without newline nan"),
        ("ps-0", 0, 2, "nan? no"),
        ("worker-0", 0, 3, "NaN at step 3"),
        ("worker-1", 0, 2, "loss=1 NaN here"),
        ("worker-1", 1, 2, "still nan"),
        ("worker-10", 0, 1, "Ünïcode NAN"),
    ]
    for h in found.hits:
        assert line_at(job, h.replica, h.attempt, h.offset) == h.text
    assert found.next is None
    assert (found.searched_files, found.total_files) == (6, 6)


def test_a_text_that_is_not_ascii_ignores_case_too(job: Path) -> None:
    found = search_logs(str(job), "üNÏCODE")
    assert [(h.replica, h.line) for h in found.hits] == [("worker-10", 1)]


@pytest.mark.parametrize(
    ("max_hits", "budget", "max_files", "read"),
    [(1, 10**9, 10**9, 2**20), (2, 10**9, 1, 2**20), (100, 5, 10**9, 64), (3, 40, 2, 32)],
)
def test_paging_finds_every_hit_once(
    job: Path, max_hits: int, budget: int, max_files: int, read: int
) -> None:
    whole = [(h.replica, h.attempt, h.line) for h in search_logs(str(job), "nan").hits]
    paged: list[tuple[str, int, int]] = []
    cursor = None
    for _ in range(1000):
        found = search_logs(
            str(job),
            "nan",
            cursor,
            max_hits=max_hits,
            budget=budget,
            max_files=max_files,
            read=read,
        )
        assert len(found.hits) <= max_hits
        assert found.searched_bytes <= budget + read
        paged += [(h.replica, h.attempt, h.line) for h in found.hits]
        if found.next is None:
            break
        cursor = SearchCursor.parse(found.next)
    assert paged == whole
    assert found.searched_files == 6


def test_a_line_longer_than_one_read_keeps_its_number(tmp_path: Path) -> None:
    out = tmp_path / "out"
    long = "x" * 5000 + "needle" + "y" * 5000
    write_log(out, "worker-0", 0, f"one\n{long}\nthree needle\n")
    found = search_logs(str(out), "needle", read=1024)
    assert [h.line for h in found.hits] == [2, 3]
    assert found.hits[0].text.startswith("\N{HORIZONTAL ELLIPSIS}x")
    assert "needle" in found.hits[0].text
    assert len(found.hits[0].text) <= 502


def test_a_log_replaced_by_a_link_is_not_read(tmp_path: Path) -> None:
    out = tmp_path / "out"
    secret = tmp_path / "secret.txt"
    secret.write_text("needle in the server's file\n")
    write_log(out, "worker-0", 0, "needle 0\n")
    folder = out.joinpath(*contract.KEPT_LOGS_SUBDIR, "worker-1")
    folder.mkdir(parents=True)
    (folder / "0.log").symlink_to(secret)
    found = search_logs(str(out), "needle")
    assert [(h.replica, h.text) for h in found.hits] == [("worker-0", "needle 0")]


def test_no_logs(tmp_path: Path) -> None:
    assert search_logs(None, "x").hits == []
    assert search_logs(str(tmp_path / "none"), "x").total_files == 0


@pytest.mark.parametrize(
    "text", ["", "worker-0:0:0:1", "worker-0:0:0:0:0", "../x:0:0:1:0", "worker-0:a:0:1:0"]
)
def test_a_cursor_not_answered_is_refused(text: str) -> None:
    with pytest.raises(BadCursor):
        SearchCursor.parse(text)


def test_a_thousand_replicas_each_started_three_times(tmp_path: Path) -> None:
    """1,000 replicas x 3 starts x ~16 kB (48 MB of logs): a rare text found by paging
    through answers that each read at most the budget and hold little in memory; a
    common one stops at the hit limit at once."""
    out = tmp_path / "out"
    body = "".join(f"step {i}: loss=0.{i:04d} examples/sec=1234.5\n" for i in range(400))
    for index in range(1000):
        for attempt in range(3):
            tail = "Traceback: worker died\n" if (index, attempt) == (777, 1) else ""
            write_log(out, f"worker-{index}", attempt, body + tail)
    size = sum(p.stat().st_size for p in out.rglob("*.log"))
    assert size > 45 * 10**6

    def page_through() -> tuple[list[LogHit], int, float, int]:
        hits: list[LogHit] = []
        answers, cursor, slowest = 0, None, 0.0
        while True:
            t0 = time.perf_counter()
            found = search_logs(str(out), "traceback", cursor)
            slowest = max(slowest, time.perf_counter() - t0)
            answers += 1
            hits += found.hits
            assert found.searched_bytes <= 16 * 2**20 + 2**20
            if found.next is None:
                assert found.searched_files == found.total_files == 3000
                return hits, answers, slowest, found.searched_files
            cursor = SearchCursor.parse(found.next)

    began = time.perf_counter()
    hits, answers, slowest, _ = page_through()
    took = time.perf_counter() - began
    assert [(h.replica, h.attempt, h.line) for h in hits] == [("worker-777", 1, 401)]
    assert answers in (-(-size // (16 * 2**20)), -(-size // (16 * 2**20)) + 1)
    tracemalloc.start()
    page_through()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 24 * 2**20, peak  # never a whole log, nor all of them, in memory

    t0 = time.perf_counter()
    common = search_logs(str(out), "loss=", max_hits=100)
    first = time.perf_counter() - t0
    assert len(common.hits) == 100
    assert common.next is not None
    assert common.hits[-1].replica == "worker-0"
    print(
        f"\n1,000 replicas x 3 starts, {size / 1e6:.0f} MB: a rare text in {answers} answers, "
        f"{took:.2f} s in all, the slowest {slowest:.2f} s, peak {peak / 2**20:.1f} MiB "
        f"traced; 100 hits of a common text in {first * 1000:.0f} ms ({os.cpu_count()} CPUs)"
    )
