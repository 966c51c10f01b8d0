"""The local engine's queue: which waiting jobs may start now. Pure.

A shared server must not overload its machine, so on the local engine a job starts only
when the CPUs, memory and GPUs its replicas request are free; until then it waits (phase
Pending, reason Queued) with its place in the queue in the message.

Order: fair between teams, first come first served inside a team. At each step the team
that uses the least of the machine (its dominant share: the largest fraction of CPU,
memory or GPUs its running jobs hold) offers its oldest waiting job; when that job does
not fit, nothing jumps past it (small jobs overtaking forever would starve big ones).
A team's quota caps what its own jobs may hold together; a job held back by its quota
does not block other teams. A job larger than the whole machine starts when nothing else
runs (alone), rather than waiting forever.

Priority (a site admin's, per team; 0 by default) comes before fairness: a team of higher
priority offers its jobs first. When the job at the head of the queue does not fit and
jobs of lower priority run, `preemptions` names the fewest of them to stop so that it
fits (lowest priority first, then the newest: the least work lost); the server stops
them and queues them again, to resume from their checkpoints. Equal priorities never
preempt each other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tfkube import contract
from tfkube.spec import TFJob, cpu_cores, memory_bytes


def cpu_of(quantity: str | None) -> float:
    """A Kubernetes CPU quantity ("2", "500m") in cores; none is the default request
    (`contract.DEFAULT_CPU_REQUEST`, as in a team namespace with a quota)."""
    return cpu_cores(quantity or contract.DEFAULT_CPU_REQUEST)


def bytes_of(quantity: str | None) -> int:
    """A Kubernetes memory quantity ("4Gi", "512M") in bytes; 0 when absent."""
    return memory_bytes(quantity) if quantity else 0


@dataclass(frozen=True)
class Amount:
    """Resources: requested by a job, held by a team, or free on the machine."""

    cpu: float = 0.0
    memory: int = 0
    """Bytes."""
    gpu: int = 0

    def __add__(self, other: Amount) -> Amount:
        return Amount(self.cpu + other.cpu, self.memory + other.memory, self.gpu + other.gpu)

    def __sub__(self, other: Amount) -> Amount:
        return Amount(self.cpu - other.cpu, self.memory - other.memory, self.gpu - other.gpu)

    def fits(self, room: Amount) -> bool:
        return self.cpu <= room.cpu + 1e-9 and self.memory <= room.memory and self.gpu <= room.gpu

    def describe(self) -> str:
        parts = [f"{self.cpu:g} CPU"]
        if self.memory:
            parts.append(f"{self.memory / 2**30:.1f} GiB")
        if self.gpu:
            parts.append(f"{self.gpu} GPU")
        return ", ".join(parts)


def job_request(job: TFJob) -> Amount:
    """What all of a job's replicas request together."""
    total = Amount()
    for role, _ in job.replica_keys():
        spec = job.spec.replicas.get(role)
        assert spec is not None
        r = spec.resources
        total = total + Amount(cpu_of(r.cpu), bytes_of(r.memory), r.gpu)
    return total


@dataclass(frozen=True)
class Quota:
    """A team's limits on the local engine; None means no limit."""

    cpu: float | None = None
    memory: int | None = None
    gpu: int | None = None
    jobs: int | None = None
    """Jobs running at once."""

    def allows(self, held: Amount, running: int, extra: Amount) -> bool:
        total = held + extra
        return (
            (self.cpu is None or total.cpu <= self.cpu + 1e-9)
            and (self.memory is None or total.memory <= self.memory)
            and (self.gpu is None or total.gpu <= self.gpu)
            and (self.jobs is None or running + 1 <= self.jobs)
        )


@dataclass(frozen=True)
class Waiting:
    job: str
    """The job's id."""
    team: int
    need: Amount
    priority: int = 0
    """Its team's."""


@dataclass(frozen=True)
class Running:
    team: int
    holds: Amount
    job: str = ""
    """The job's id."""
    priority: int = 0
    """Its team's."""
    started_at: float = 0.0


@dataclass(frozen=True)
class Admission:
    start: tuple[str, ...]
    """Jobs to start now, in order."""
    messages: Mapping[str, str] = field(default_factory=dict)
    """Why each job that keeps waiting waits (its place in the queue included)."""
    head: str | None = None
    """The first job that waits for room (not for its quota): the one a preemption
    would be for."""


def _share(held: Amount, capacity: Amount) -> float:
    fractions = [held.cpu / capacity.cpu if capacity.cpu else 0.0]
    if capacity.memory:
        fractions.append(held.memory / capacity.memory)
    if capacity.gpu:
        fractions.append(held.gpu / capacity.gpu)
    return max(fractions)


def admit(
    capacity: Amount,
    running: Sequence[Running],
    waiting: Sequence[Waiting],
    quotas: Mapping[int, Quota],
) -> Admission:
    """Decide which of `waiting` (oldest first) start now; see the module docstring."""
    held: dict[int, Amount] = {}
    count: dict[int, int] = {}
    for r in running:
        held[r.team] = held.get(r.team, Amount()) + r.holds
        count[r.team] = count.get(r.team, 0) + 1
    free = capacity
    for amount in held.values():
        free = free - amount
    queues: dict[int, list[Waiting]] = {}
    for w in waiting:
        queues.setdefault(w.team, []).append(w)
    order = {w.job: i for i, w in enumerate(waiting)}
    start: list[str] = []
    messages: dict[str, str] = {}
    blocked = False  # the fair head did not fit: nothing else starts this round
    ranked: list[Waiting] = []
    while any(queues.values()):
        candidates = []
        for team, queue in queues.items():
            if not queue:
                continue
            head = queue[0]
            quota = quotas.get(team, Quota())
            if not quota.allows(held.get(team, Amount()), count.get(team, 0), head.need):
                for w in queue:
                    messages[w.job] = (
                        "queued: the team's quota is in use by its running jobs "
                        f"(this job needs {w.need.describe()})"
                    )
                queue.clear()
                continue
            share = _share(held.get(team, Amount()), capacity)
            candidates.append((-head.priority, share, order[head.job], team))
        if not candidates:
            break
        *_, team = min(candidates)
        head = queues[team].pop(0)
        nothing_runs = not held and not start
        if not blocked and (
            head.need.fits(free) or (nothing_runs and not head.need.fits(capacity))
        ):
            start.append(head.job)
            free = free - head.need
        else:
            blocked = True
            ranked.append(head)
        # Count it as held either way: the simulated order is the queue order.
        held[team] = held.get(team, Amount()) + head.need
        count[team] = count.get(team, 0) + 1
    total = len(ranked)
    for place, w in enumerate(ranked, start=1):
        short = "" if w.need.fits(capacity) else " (more than this machine has: it runs alone)"
        messages[w.job] = (
            f"queued: position {place} of {total}; needs {w.need.describe()}{short}, "
            f"free now {_clip(free).describe()}"
        )
    return Admission(tuple(start), messages, ranked[0].job if ranked else None)


def preemptions(capacity: Amount, running: Sequence[Running], waiting: Waiting) -> tuple[str, ...]:
    """The running jobs to stop so that `waiting` fits: only jobs of a lower priority,
    the lowest first and among equals the newest; the fewest such that it fits, or none
    when even stopping them all would not make room (or it fits already)."""
    free = capacity
    for r in running:
        free = free - r.holds
    if waiting.need.fits(free) or not waiting.need.fits(capacity):
        return ()
    lower = sorted(
        (r for r in running if r.priority < waiting.priority),
        key=lambda r: (r.priority, -r.started_at),
    )
    chosen: list[str] = []
    for r in lower:
        chosen.append(r.job)
        free = free + r.holds
        if waiting.need.fits(free):
            return tuple(chosen)
    return ()


def resize_refusal(
    quota: Quota, team_holds: Amount, extra: Amount, machine_free: Amount | None
) -> str | None:
    """Why a running job may not grow by `extra` (`tfkube scale`): past its team's quota
    (`team_holds`: what the team's running jobs, this one included, hold now), or past what
    the machine has free (None: the engine queues itself, e.g. a cluster). None when it
    may; a job that shrinks always may. A resize is no new job: `jobs` is not counted."""
    if extra.cpu <= 1e-9 and extra.memory <= 0 and extra.gpu <= 0:
        return None
    limit = Quota(quota.cpu, quota.memory, quota.gpu)
    if not limit.allows(team_holds, 0, extra):
        return (
            f"the added workers need {extra.describe()}, past the team's quota "
            f"(its running jobs hold {team_holds.describe()}); ask for fewer workers, or "
            "an admin for a larger quota"
        )
    if machine_free is not None and not extra.fits(_clip(machine_free)):
        return (
            f"the added workers need {extra.describe()} and the machine has "
            f"{_clip(machine_free).describe()} free; ask for fewer workers"
        )
    return None


def _clip(a: Amount) -> Amount:
    return Amount(max(a.cpu, 0.0), max(a.memory, 0), max(a.gpu, 0))


def machine_capacity(cpus: float, memory: int, gpus: int) -> Amount:
    return Amount(float(cpus), int(memory), int(gpus))


__all__ = [
    "Admission",
    "Amount",
    "Quota",
    "Running",
    "Waiting",
    "admit",
    "bytes_of",
    "cpu_of",
    "job_request",
    "machine_capacity",
    "preemptions",
    "resize_refusal",
]
