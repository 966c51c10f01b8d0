"""The server's sync loop paces itself (pure): cheap passes every `sync_seconds`, costly
ones (a 1,000-pod job's listing) at most a third of the time."""

from __future__ import annotations

import pytest

from tfkube.server.jobs.service import sync_wait


@pytest.mark.parametrize(
    ("took", "expected"),
    [
        pytest.param(0.0, 1.0, id="idle"),
        pytest.param(0.05, 1.0, id="small-jobs"),
        pytest.param(0.5, 1.0, id="half-a-second"),
        pytest.param(0.9, 1.8, id="a-thousand-pods"),
        pytest.param(3.0, 6.0, id="a-slow-pass"),
    ],
)
def test_sync_wait(took: float, expected: float) -> None:
    assert sync_wait(1.0, took) == pytest.approx(expected)


def test_a_pass_takes_at_most_its_share_of_the_time() -> None:
    for took in (0.01, 0.4, 1.2, 7.0):
        wait = sync_wait(2.0, took, share=0.25)
        assert wait >= 2.0
        assert took / (took + wait) <= 0.25 + 1e-9
