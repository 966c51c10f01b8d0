"""What the planner sees (observed state) and what it decides (actions). Plain data."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class JobPhase(StrEnum):
    """A job's phase. `Succeeded` and `Failed` are terminal: they never change again."""

    PENDING = "Pending"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"

    @property
    def terminal(self) -> bool:
        return self in (JobPhase.SUCCEEDED, JobPhase.FAILED)


class ReplicaState(StrEnum):
    """One replica's state as the engine observed it."""

    PENDING = "Pending"
    """Not started yet."""
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    """Exited 0."""
    FAILED = "Failed"
    """Exited non-zero on its own (not stopped by tfkube); `exit_code` says how."""
    BACKOFF = "BackOff"
    """Waiting to be started again at `next_start_at`."""
    STOPPED = "Stopped"
    """Stopped by tfkube (job ended, or cancelled)."""

    @property
    def live(self) -> bool:
        return self in (ReplicaState.PENDING, ReplicaState.RUNNING)


@dataclass(frozen=True)
class ReplicaStatus:
    role: str
    index: int
    state: ReplicaState = ReplicaState.PENDING
    exit_code: int | None = None
    restarts: int = 0
    next_start_at: float | None = None
    message: str | None = None
    """The termination message of its last exit: the launcher's own reason when it failed
    (see `tfkube.contract.launcher_failure`), else whatever the container left there."""
    progress_at: float | None = None
    """When it last showed progress (a log line, a write in the log/checkpoint folder);
    None when the engine does not observe progress (then it never stalls)."""
    stalled: bool = False
    """Whether the previous decision found it stalled (so events mark only changes)."""
    held: str | None = None
    """Why it cannot start yet although it is due (e.g. its GPUs are in use by other
    jobs); a held replica is not started."""

    @property
    def key(self) -> str:
        return f"{self.role}-{self.index}"


@dataclass(frozen=True)
class JobStatus:
    phase: JobPhase
    started_at: float
    replicas: tuple[ReplicaStatus, ...]
    restarts: int = 0
    """Restarts taken so far (counted against backoffLimit)."""
    finished_at: float | None = None
    reason: str | None = None
    message: str | None = None

    def replica(self, key: str) -> ReplicaStatus:
        for r in self.replicas:
            if r.key == key:
                return r
        raise KeyError(key)


@dataclass(frozen=True)
class Start:
    """Start the replica (its first run, or a restart whose backoff has passed)."""

    key: str


@dataclass(frozen=True)
class Restart:
    """Stop the replica if it still runs; start it again at `at` (epoch seconds)."""

    key: str
    at: float
    reason: str


@dataclass(frozen=True)
class Stop:
    """Stop the replica's whole process tree (or pod); it will not run again."""

    key: str
    reason: str


@dataclass(frozen=True)
class DeleteJob:
    """Delete the job and everything it created (its TTL has passed)."""


Action = Start | Restart | Stop | DeleteJob


@dataclass(frozen=True)
class Decision:
    phase: JobPhase
    restarts: int
    actions: tuple[Action, ...] = ()
    reason: str | None = None
    message: str | None = None
    finished: bool = False
    """True when this decision moved the job into a terminal phase."""
    events: tuple[str, ...] = field(default=())
    """Human-readable lines worth recording (why a restart, why the job ended)."""
    stalled: frozenset[str] = frozenset()
    """Running replicas that made no progress for runPolicy.stallSeconds."""
