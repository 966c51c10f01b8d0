"""What the planner sees (observed state), what it decides (actions), and the one record
of a replica everyone else sees (`Replica`). Plain data."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, computed_field

from tfkube.tfcluster import replica_key


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

    @property
    def stoppable(self) -> bool:
        """Whether stopping changes it: it is live, or waiting to be started again."""
        return self.live or self is ReplicaState.BACKOFF

    @property
    def after_stop(self) -> ReplicaState:
        """Its state once tfkube stopped it (a `Stop`, or its job ended some other way: a
        supervisor lost, a job the server ended): a live replica, or one waiting to be
        started again, is STOPPED; an exit it made on its own stays as it was."""
        return ReplicaState.STOPPED if self.stoppable else self


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
        return replica_key(self.role, self.index)


class Replica(BaseModel):
    """One replica as everyone outside an engine sees it: `tfkube status`, the server's
    database (`jobs.replicas`, this model's JSON), its API (`JobOut.replicas`), the
    dashboard and the client. Each engine builds it from the planner's `ReplicaStatus`
    (`of`), adding what people read: where it runs and why it is where it is. What only
    one engine knows (a process id, a pod's name) stays in that engine."""

    model_config = ConfigDict(frozen=True, extra="ignore", use_attribute_docstrings=True)

    role: str
    index: int
    state: ReplicaState = ReplicaState.PENDING
    restarts: int = 0
    exit_code: int | None = None
    address: str | None = None
    """Where its TensorFlow server listens (`host:port`)."""
    node: str | None = None
    """Where it runs: a node's name in a cluster; None locally."""
    message: str = ""
    """Why it is pending, stalled or failed, for a person (the scheduler's words, GPUs in
    use, its launcher's own reason); empty when its state says it all."""
    last_line: str = ""
    """The last line it wrote (where the engine can read it)."""
    stalled: bool = False
    """Running, but no progress for runPolicy.stallSeconds (shown as `Stalled`)."""
    step_rate: float | None = None
    """Its own training steps per second over runPolicy.stragglerSeconds, from its
    `tfkube-steps: N` lines (where the engine observes them: locally); None unknown."""
    straggler: bool = False
    """Running, with a step rate below half the median of the job's training replicas."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def key(self) -> str:
        """Its name, `<role>-<index>` (`tfkube.tfcluster.replica_key`)."""
        return replica_key(self.role, self.index)

    @classmethod
    def of(
        cls,
        status: ReplicaStatus,
        *,
        message: str = "",
        address: str | None = None,
        node: str | None = None,
        last_line: str = "",
        stalled: bool = False,
        step_rate: float | None = None,
        straggler: bool = False,
    ) -> Replica:
        """The planner's state of a replica plus what people read about it."""
        return cls(
            role=status.role,
            index=status.index,
            state=status.state,
            restarts=status.restarts,
            exit_code=status.exit_code,
            address=address,
            node=node,
            message=message,
            last_line=last_line,
            stalled=stalled,
            step_rate=step_rate,
            straggler=straggler,
        )


def settled(phase: JobPhase | str, replicas: Iterable[Replica]) -> bool:
    """Whether a job is over: its phase is terminal and none of its replicas is live any
    more (what waiting for a job waits for, on any engine and through the server)."""
    return JobPhase(phase).terminal and not any(r.state.live for r in replicas)


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
    checkpoints_kept: bool = True
    """Whether the job's log/checkpoint folder is shared by its replicas and outlives
    them (always locally; in a cluster only on a claim): when it is not, a restart
    after a PS failure starts training from scratch."""

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
