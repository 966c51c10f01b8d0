"""The one interface every engine implements, and the views it returns (a job's replicas
are `tfkube.planner.Replica`, the one replica record of every layer).

The CLI, the server and tests talk to a `Backend`; whether replicas are processes on this
machine or pods in a cluster is the backend's business.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tfkube.planner import JobPhase, Replica, settled
from tfkube.spec import TFJob

if TYPE_CHECKING:
    from tfkube.engines._data import Credentials


class JobNotFound(LookupError):
    def __init__(self, name: str) -> None:
        super().__init__(f"no job named {name!r}; `tfkube list` shows the jobs there are")
        self.name = name


class UsageUnavailable(LookupError):
    """The engine cannot say what a job's replicas use now (on Kubernetes: the cluster has
    no metrics API, or it does not answer); the message says why and what to do."""


class JobExists(RuntimeError):
    pass


@dataclass(frozen=True)
class ShipTo:
    """Where a job's replicas send what a server keeps of them (`tfkube.launcher._ship`):
    for an engine whose replicas' folders the server cannot read."""

    url: str
    """`<server>/api/v1/ship/<job id>`, as replicas reach the server."""
    token: str
    """The job-scoped claim; reaches replicas as TFKUBE_SHIP_TOKEN, never in a spec."""


@dataclass(frozen=True)
class DataFrom:
    """Where a job's replicas fetch their data (`tfkube.launcher._data`): for an engine
    whose replicas cannot see the server's folders, when the job has an uploaded data set
    or a data source the server stages (`JobStorage.served_data`)."""

    url: str
    """`<server>/api/v1/data/<job id>`, as replicas reach the server."""
    token: str
    """The job-scoped claim; reaches replicas as TFKUBE_DATA_TOKEN, never in a spec."""


class SubmitDeferred(RuntimeError):
    """The engine cannot take the job now but will later (a cluster's quota full or not yet
    computed, its API server busy or unreachable): the caller keeps it queued and tries
    again. The message says what it waits for."""


@dataclass(frozen=True)
class JobEvent:
    """Something that happened to a job, in order: created, started, a replica's exit, a
    restart and why, PS ended, the final phase."""

    time: float
    message: str
    replica: str | None = None


@dataclass(frozen=True)
class JobView:
    name: str
    phase: JobPhase
    restarts: int
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    reason: str | None = None
    message: str | None = None
    replicas: tuple[Replica, ...] = ()
    pids: dict[str, int] = field(default_factory=dict)
    """Local engine: the process (its launcher) of each replica that runs, by key; what
    `tfkube status` shows on this machine. Never part of a `Replica`: no one else may see
    or use another machine's process ids."""
    log_dir: str | None = None
    data_dir: str | None = None
    job_dir: str | None = None
    supervisor_alive: bool = True
    extra: dict[str, str] = field(default_factory=dict)
    result: dict[str, float | int] | None = None
    """What the job reported in its result file (`tfkube.contract.RESULT_FILE`), when the
    engine read it for us (a server does); else the CLI reads `log_dir` itself."""
    preemptions: int = 0
    """Times the job was stopped for one of higher priority and resumed (not restarts):
    counted by the Kubernetes operator (`status.preemptions`), or by the server's queue."""
    disruptions: int = 0
    """Times the whole job restarted from its checkpoint because a PS was taken away for a
    reason not of its making (evicted by a drain, or gone with its node's removal): not
    restarts, not counted against backoffLimit. Counted by the Kubernetes operator
    (`status.disruptions`); the local engine has none."""

    @property
    def done(self) -> bool:
        return settled(self.phase, self.replicas)

    @property
    def exit_code(self) -> int:
        """The CLI's exit code for this job: 0 when it succeeded."""
        return 0 if self.phase is JobPhase.SUCCEEDED else 1


class Backend(Protocol):
    """An engine that runs TFJobs."""

    def submit(
        self,
        job: TFJob,
        base_dir: Path,
        *,
        code_token: str | None = None,
        data_credentials: Credentials | None = None,
        ship: ShipTo | None = None,
        data_from: DataFrom | None = None,
    ) -> JobView:
        """Check the job fully, then start it. `base_dir` resolves relative paths.

        `data_from`: where the replicas fetch their data (the server's
        `JobStorage.served_data`); an engine that gives no such folder never gets one.

        `ship`: where the replicas send their kept output (the server's `JobStorage.ship`);
        an engine whose job folders the server reads itself never gets one.

        `data_credentials`: the store's credentials for `spec.storage.data.source` (a
        server's team secret); never in the spec, a log, an event or the status.

        `code_token`: a bearer token every replica sends when it fetches an http(s)
        `spec.code.source` (the server's job-scoped claim). The engine hands it to the
        replicas as TFKUBE_CODE_TOKEN, never in the spec, a URL or a log.

        Raises `SpecError` (nothing was created) or `JobExists`."""

    def get(self, name: str) -> JobView: ...

    def list(self) -> list[JobView]: ...

    def logs(self, name: str, replica: str | None, follow: bool) -> Iterator[str]: ...

    def events(self, name: str) -> builtins.list[JobEvent]:
        """What happened to the job so far, oldest first."""

    def delete(self, name: str) -> JobView:
        """Stop every replica of the job and remove it."""

    def stop(self, name: str) -> JobView:
        """Stop every replica; the job ends Failed (Stopped) and stays listed."""

    def scale(self, name: str, workers: int) -> JobView:
        """Run the job with `workers` workers from now on, without restarting anything
        (asynchronous PS training only: `tfkube.planner.scale_problems`). Raises
        `SpecError` naming the field when the job, or the engine, cannot."""

    def wait(self, name: str, timeout: float | None = None) -> JobView:
        """Block until the job is finished and nothing of it runs."""

    def usage(self, name: str) -> dict[str, tuple[float, float, int]]:
        """Each running replica's newest (time, cpu cores, memory bytes), for a server to
        keep (an engine with `Features.polled_usage`). Raises `UsageUnavailable` saying why
        when the engine cannot (or keeps usage itself)."""
