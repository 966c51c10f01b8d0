"""Each training replica's step rate, read by the server from its kept log, for an engine
that does not watch its replicas' steps itself (a cluster: `Features.step_rates` False;
the local supervisor reads their output directly).

A replica says how many steps of its own it has taken by printing `tfkube-steps: N`
(`tfkube.contract.STEP_LINE`); its kept log (on a shared claim, or shipped by its launcher)
holds those lines. Every STEPS_EVERY seconds the server reads what is new of each running
training replica's newest start (from where it stopped, at most MAX_READ bytes: a chatty
replica's older lines are skipped, its newest count is what matters) and the planner's
`judge_steps` turns the counts into rates and stragglers, as on the local engine. A new
start of a replica begins its samples anew (its first slow steps are never judged). The
log is the job's and is read through `tfkube.safefs`, as every log is.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from tfkube import contract
from tfkube.planner import (
    TRAINING_ROLES,
    Replica,
    ReplicaState,
    StepJudgement,
    judge_steps,
    steps_in,
)
from tfkube.safefs import Refused, closing, open_dir, open_file, open_root, pread_all
from tfkube.server.outputs.logs import log_files

STEPS_EVERY = 5.0
"""Seconds between two looks at one job."""
MAX_READ = 256 * 1024
"""The most of a log read per look."""


@dataclass
class _Followed:
    attempt: int
    offset: int


@dataclass
class _Job:
    looked_at: float = 0.0
    followed: dict[str, _Followed] = field(default_factory=dict)
    samples: dict[str, list[tuple[float, int]]] = field(default_factory=dict)


class StepWatcher:
    """The server's step samples per job (in memory: after a restart of the server a rate
    is known again one window later)."""

    def __init__(self) -> None:
        self._jobs: dict[str, _Job] = {}
        self._lock = threading.Lock()

    def forget(self, job_id: str) -> None:
        with self._lock:
            self._jobs.pop(job_id, None)

    def look(
        self,
        job_id: str,
        output_dir: str,
        replicas: Sequence[Replica],
        window: float,
        now: float,
    ) -> StepJudgement | None:
        """The job's rates and stragglers now; None when it is not time to look again."""
        with self._lock:
            job = self._jobs.setdefault(job_id, _Job())
        if now - job.looked_at < STEPS_EVERY:
            return None
        job.looked_at = now
        watched = {
            r.key for r in replicas if r.state is ReplicaState.RUNNING and r.role in TRAINING_ROLES
        }
        newest: dict[str, int] = {}
        for f in log_files(output_dir):
            if f.replica in watched:
                newest[f.replica] = max(newest.get(f.replica, -1), f.attempt)
        seen: dict[str, int | None] = {}
        for key in watched:
            attempt = newest.get(key)
            if attempt is None:
                continue
            followed = job.followed.get(key)
            if followed is None or followed.attempt != attempt:
                followed = job.followed[key] = _Followed(attempt, 0)
                job.samples.pop(key, None)  # a new start: its rate is known anew
            seen[key] = _new_steps(output_dir, key, followed)
        for key in set(job.followed) - watched:
            del job.followed[key]
            job.samples.pop(key, None)
        return judge_steps(replicas, job.samples, seen, now, window)


def _new_steps(output_dir: str, key: str, followed: _Followed) -> int | None:
    """The last `tfkube-steps: N` in what is new of the log (whole lines only)."""
    try:
        with (
            closing(open_root(output_dir)) as root,
            closing(open_dir(root, (*contract.KEPT_LOGS_SUBDIR, key))) as folder,
            closing(open_file(folder, [f"{followed.attempt}.log"])) as fd,
        ):
            size = os.fstat(fd).st_size
            if size <= followed.offset:
                return None
            start = max(followed.offset, size - MAX_READ)
            data = pread_all(fd, start, size - start)
    except (Refused, OSError):
        return None
    cut = data.rfind(b"\n") + 1  # a line still being written waits for the next look
    if cut == 0:
        return None
    skip = data.find(b"\n") + 1 if start > followed.offset else 0  # from mid-line: skip it
    followed.offset = start + cut
    return steps_in(data[skip:cut].decode(errors="replace"))
