"""Stragglers: which training replica is slow, from each one's own step rate. Pure.

A replica says how many steps of its own it has taken by printing `tfkube-steps: N`
(`tfkube.contract.STEP_LINE`). Its observer (the local supervisor, once a second) keeps
`(time, steps)` samples of its current start; `step_rate` turns them into steps per
second over the last `window` seconds, and `stragglers` flags every training replica
(chief or worker) whose rate is below `fraction` of the median of all of them. A rate is
known only once a replica has been observed for the whole window, so a replica still
starting, or one that has just restarted, is never flagged for its slow first steps.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from tfkube import contract

TRAINING_ROLES = ("chief", "worker")
"""Whose rates are compared (a PS takes no steps; an evaluator trains nothing)."""
FRACTION = 0.5
"""Below half the median is a straggler."""


def steps_in(text: str) -> int | None:
    """The last `tfkube-steps: N` in a piece of a replica's output; None if none."""
    found = None
    for line in text.splitlines():
        head, sep, tail = line.strip().partition(contract.STEP_LINE)
        if sep and not head:
            value = tail.strip()
            if value.isdigit():
                found = int(value)
    return found


def step_rate(samples: Sequence[tuple[float, int]], now: float, window: float) -> float | None:
    """Steps per second over the last `window` seconds, from `(time, steps seen by then)`
    samples in time order; None until the samples cover the whole window."""
    if not samples or now - samples[0][0] < window:
        return None
    start = now - window
    base = samples[0]
    for sample in samples:
        if sample[0] > start:
            break
        base = sample
    elapsed = now - base[0]
    if elapsed <= 0:
        return None
    return max(0, samples[-1][1] - base[1]) / elapsed


def stragglers(rates: Mapping[str, float | None], fraction: float = FRACTION) -> dict[str, float]:
    """Replica key -> its rate, for each one below `fraction` of the median rate of the
    replicas with a known rate (at least two are needed, and a median above 0)."""
    known = {key: rate for key, rate in rates.items() if rate is not None}
    if len(known) < 2:
        return {}
    median = statistics.median(known.values())
    if median <= 0:
        return {}
    return {key: rate for key, rate in known.items() if rate < fraction * median}


def median_rate(rates: Mapping[str, float | None]) -> float | None:
    known = [rate for rate in rates.values() if rate is not None]
    return statistics.median(known) if known else None


def trim(samples: list[tuple[float, int]], now: float, window: float) -> None:
    """Drop the samples `step_rate` no longer needs (keeping one at or before the window's
    start), in place."""
    start = now - window
    while len(samples) > 1 and samples[1][0] <= start:
        del samples[0]
