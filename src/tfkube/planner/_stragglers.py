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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from tfkube import contract
from tfkube.planner._types import ReplicaState

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


class Watched(Protocol):
    """What `judge_steps` reads of a replica (a `Replica`, or the supervisor's record)."""

    @property
    def key(self) -> str: ...
    @property
    def role(self) -> str: ...
    @property
    def state(self) -> ReplicaState: ...
    @property
    def straggler(self) -> bool: ...


@dataclass(frozen=True)
class StepJudgement:
    rates: dict[str, float | None]
    """Each running training replica's steps per second over the window, rounded to
    hundredths (None: not known yet); a replica not in it has no rate."""
    slow: frozenset[str]
    """The stragglers among them."""
    events: tuple[tuple[str, str], ...]
    """(replica key, message) for each replica that became or stopped being a straggler."""


def judge_steps(
    replicas: Iterable[Watched],
    samples: dict[str, list[tuple[float, int]]],
    seen: Mapping[str, int | None],
    now: float,
    window: float,
) -> StepJudgement:
    """One look at a job's step counts: each running training replica's new sample
    (`seen`: the last `tfkube-steps: N` it printed since the last look; None, or absent:
    its count stands) kept in `samples` (updated in place), its rate over `window`, which
    are stragglers, and what to say about those that changed (`replica.straggler` is what
    was said before). Both observers use it: the local supervisor (its replicas' output)
    and the server (their kept logs, on an engine that does not watch steps)."""
    replicas = list(replicas)
    rates: dict[str, float | None] = {}
    for r in replicas:
        if r.state is not ReplicaState.RUNNING or r.role not in TRAINING_ROLES:
            continue
        kept = samples.setdefault(r.key, [])
        count = seen.get(r.key)
        last = kept[-1][1] if kept else 0
        if count is not None or kept:
            kept.append((now, last if count is None else count))
        trim(kept, now, window)
        rates[r.key] = step_rate(kept, now, window)
    slow = stragglers(rates)
    median = median_rate(rates)
    events: list[tuple[str, str]] = []
    for r in replicas:
        flagged = r.key in slow
        if flagged == r.straggler:
            continue
        if flagged:
            events.append(
                (
                    r.key,
                    f"{r.key} is a straggler: {slow[r.key]:.2f} steps/s over the last "
                    f"{window:.0f}s, below half the training replicas' median of "
                    f"{median or 0:.2f} steps/s",
                )
            )
        elif r.state is ReplicaState.RUNNING:
            rate = rates.get(r.key)
            events.append((r.key, f"{r.key} is no longer a straggler: {rate or 0:.2f} steps/s"))
    rounded = {k: None if v is None else round(v, 2) for k, v in rates.items()}
    return StepJudgement(rounded, frozenset(slow), tuple(events))
