"""Everything an engine runs besides training jobs, as plain data, and the one protocol
every engine implements for all of it.

The platform server keeps rows and policy (who may, what is recorded, when something is
idle); an engine decides how a workload runs and isolates it: a process on this machine
for the local engine, objects in the tenant's namespace for Kubernetes. So the server
never asks "local or Kubernetes?": it describes a workload, hands it to `Engine.start`,
keeps the `Handle` it gets back (opaque JSON), and later asks `status`, `upstream`
(where its proxy sends a request) and `stop` with the same description and handle.

    server row ──> workload (ModelServerWorkload | NotebookWorkload | TensorBoardWorkload)
                     │ Engine.start(tenant, workload) -> Handle     (stored with the row)
                     │ Engine.status(tenant, workload, handle) -> WorkloadStatus
                     │ Engine.upstream(tenant, workload, handle) -> Upstream (the proxy's target)
                     │ Engine.stop(tenant, workload, handle)
                     └ Engine.release(...) at server shutdown -> whether it keeps running

Training jobs go through `Engine.jobs(tenant)`, the per-tenant `Backend` the CLI uses too.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from tfkube.engines._base import Backend
from tfkube.spec import Autoscale, Resources, TFJob


@dataclass(frozen=True)
class Tenant:
    """Whom a workload runs for: a team. Each engine gives a tenant its own identity (a
    namespace with its quota in a cluster; folders, and an OS user where the machine
    allows it, locally)."""

    name: str
    """The team's name (a DNS label)."""
    namespace: str
    """The team's namespace in a cluster (chosen when the team was made)."""
    quota: Mapping[str, Any] = field(default_factory=dict)
    """cpu (cores), memory (bytes), gpu, jobs: what the team's jobs may use together."""
    pod_security: str = "restricted"
    """The Pod Security level its pods are held to in a cluster (`restricted`, or
    `baseline` when a site admin allowed it): the namespace enforces it."""
    priority: int = 0
    """The team's priority (a site admin's): the local queue's order; in a cluster, the
    PriorityClass its job pods get (`tfkube.kube.names.team_priority_class`)."""


@dataclass(frozen=True)
class ModelServerWorkload:
    """A model server for a job's exported SavedModels (TensorFlow Serving's REST API)."""

    id: str
    """The server's public id (its proxy path `/proxy/model/<id>/`)."""
    name: str
    """The model's name in `/v1/models/<name>`; names cluster objects `<name>-serving`."""
    job: TFJob
    """The job whose exports it serves, as it ran (its storage says where they are)."""
    export_dir: Path
    """The job's export folder as the server sees it."""
    version: int | None = None
    """None: the latest export, and newer ones as they appear."""
    resources: Resources | None = None
    """None: the engine's default."""
    runtime: str | None = None
    """Which model server runs (`tensorflow-serving` or `tfkube`), as resolved by
    `Engine.model_server_runtime`."""
    secret: str = ""
    """A token only the server's proxy sends: the model server answers nothing without it
    where its port is reachable by others (locally)."""
    autoscale: Autoscale | None = None
    """None: one replica. Else its replicas follow its CPU load within these bounds
    (an engine with `Features.autoscale`; the server refuses it elsewhere)."""


@dataclass(frozen=True)
class ArtifactCopy:
    """One of the team's artifacts as a notebook sees it (read-only)."""

    kind: str
    """code | data."""
    name: str
    sha256: str
    blob: Path
    """The archive in the server's blob store."""


@dataclass(frozen=True)
class NotebookWorkload:
    """A user's JupyterLab in one of their teams."""

    id: str
    user: str
    base_url: str
    """The proxy's path for it (`/proxy/notebook/<id>/`): JupyterLab serves below it."""
    server_url: str
    """How the notebook's `tfkube.Client()` reaches the server."""
    jupyter_token: str
    """Jupyter's own token: the proxy sends it, so the notebook's port alone grants nothing."""
    client_token: str
    """The user's API token for `tfkube.Client()` (TFKUBE_TOKEN)."""
    artifacts: tuple[ArtifactCopy, ...] = ()
    """The team's latest artifacts, offered read-only in the home where the engine can."""


@dataclass(frozen=True)
class TensorBoardWorkload:
    """A job's TensorBoard."""

    job_id: str
    job: TFJob
    logdir: Path
    """The job's output folder as the server sees it."""
    base_url: str
    """The proxy's path for it (`/proxy/tensorboard/<job id>`)."""


Workload = ModelServerWorkload | NotebookWorkload | TensorBoardWorkload


@dataclass(frozen=True)
class Handle:
    """What an engine needs to find a workload it started again (after a restart of the
    server too). Opaque to the server, which stores `data` as JSON with its row."""

    data: Mapping[str, Any] = field(default_factory=dict)


class Health(StrEnum):
    STARTING = "Starting"
    READY = "Ready"
    FAILED = "Failed"
    STOPPED = "Stopped"


@dataclass(frozen=True)
class WorkloadStatus:
    health: Health
    message: str = ""
    """Why it is not ready, for a person."""
    version: int | None = None
    """A model server: the version it serves now."""
    exited: bool = False
    """Its process is gone and nothing brings it back by itself: the server may start it
    again (locally). In a cluster Kubernetes restarts what fails, so never."""
    replicas: int | None = None
    """A model server in a cluster: its ready replicas now (None: the engine does not
    count them)."""
    desired_replicas: int | None = None
    """A model server in a cluster: the replicas it should have (its autoscaler's choice
    when autoscaled, else its Deployment's)."""


@dataclass(frozen=True)
class Upstream:
    """Where the server's proxy sends a request for a workload: `prefix` + the rest of the
    caller's path below `/proxy/<kind>/<id>/`."""

    prefix: str
    headers: dict[str, str] = field(default_factory=dict)
    """Sent besides the caller's own headers: the workload's credential (the caller's
    credentials never go upstream)."""
    verify: ssl.SSLContext | bool = True
    """TLS verification for an https upstream (the API server's CA)."""
    params: dict[str, str] = field(default_factory=dict)
    """Query parameters added to the caller's."""
    grpc: str | None = None
    """`host:port` (or `unix:<path>`, its relay's socket) of the workload's gRPC door, when
    it has one the server can reach (a model server's TensorFlow Serving gRPC API: a local
    one's relay; on Kubernetes its Service's `grpc` port, when the server reaches the
    cluster's Service network). None: no gRPC door (`no_grpc` says why)."""
    grpc_metadata: dict[str, str] = field(default_factory=dict)
    """Sent with each gRPC call as metadata (lower-case keys): the workload's own
    credential, never `headers` (on Kubernetes those are the engine's credentials for the
    API server, which must not reach a model server)."""
    no_grpc: str = ""
    """Why there is no gRPC door, for the caller (what would give one)."""
    unix: str | None = None
    """A Unix socket to connect to instead of `prefix`'s host and port (whose URL still
    names the request, Host header included): the workload is in a network namespace of
    its own, reached through its relay (locally, where teams are isolated)."""


@dataclass(frozen=True)
class JobStorage:
    """Where a job of the server keeps what outlives it, decided by the engine."""

    output_dir: Path
    """The job's output folder (logs, summaries, checkpoints, exports) as the server
    sees it."""
    log_path: str | None = None
    """The job's `spec.storage.logs.path` (locally: the output folder itself)."""
    data_path: str | None = None
    """The job's `spec.storage.data.path`, where an uploaded data set is unpacked
    (None: data sets do not reach this engine's jobs)."""
    logs_claim: str | None = None
    """The job's `spec.storage.logs.claimName` (a cluster's outputs claim), if any."""
    work_path: str | None = None
    """Where the replicas' working folders are on this machine, `<work_path>/<replica>`
    being a replica's TFKUBE_WORK_DIR (locally; None where the server cannot know)."""
    kept: bool = True
    """Whether the server can read `output_dir` (and removes it with the job)."""
    ship: bool = False
    """Whether the replicas send what the server keeps (logs, event files, the result)
    into `output_dir` (`tfkube.launcher._ship`): a cluster without an outputs claim."""
    served_data: Path | None = None
    """Where the server stages the job's data source for its replicas to fetch through the
    data door (`tfkube.engines._served`), which they also fetch an uploaded data set
    through: an engine whose replicas cannot see the server's folders (a cluster). None:
    the engine stages data itself (`stage_data`, its supervisor)."""
    data_cache: Path | None = None
    """With `served_data`: the team's content-keyed cache of data sources' objects."""


@dataclass(frozen=True)
class Capacity:
    """What jobs may use together on an engine that queues them itself."""

    cpus: float
    memory: int
    """Bytes."""
    gpus: int


@dataclass(frozen=True)
class Features:
    """What an engine offers, for the server to say so (pages, errors)."""

    data_sets: bool
    """Uploaded data sets are unpacked into a job's data folder."""
    tensorboard_on_demand: bool
    """Any job's TensorBoard opens on demand (else only a job that asked for one)."""
    namespaces: bool
    """Tenants are namespaces (the dashboard shows them)."""
    data_sets_hint: str = ""
    """What to do instead, where data sets do not reach jobs."""
    data_sources: bool = False
    """A job's `spec.storage.data.source` is staged before it starts (the local engine);
    elsewhere the server refuses it at submit."""
    replica_usage: bool = False
    """Each replica's CPU and memory over time is kept with the job's logs
    (`tfkube.contract.USAGE_SUBDIR`): the local engine samples its replicas' cgroups or
    process trees; on Kubernetes the server keeps what `polled_usage` gives."""
    polled_usage: bool = False
    """The engine does not keep usage itself: a server asks each running job's backend for
    its replicas' newest samples (`usage(name)`, the kubelet's resource metrics through the
    metrics API) every few seconds and keeps them there (`server/outputs/usage.py`)."""
    step_rates: bool = False
    """The engine watches each replica's `tfkube-steps: N` lines itself and reports step
    rates and stragglers in its views (the local supervisor); else a server reads them from
    the replicas' kept logs (`server/outputs/steps.py`)."""
    resize: bool = False
    """A running asynchronous PS job changes its number of workers (`Backend.scale`): the
    local engine; Kubernetes refuses it for now."""
    autoscale: bool = False
    """A model server's replicas follow its load (`ModelServerWorkload.autoscale`):
    Kubernetes (a HorizontalPodAutoscaler); the local engine runs one process per model
    server, so the server refuses `autoscale` there."""


class NotAvailable(LookupError):
    """The engine cannot run or reach this workload (now); the message says why and what
    to do."""


class Runner(Protocol):
    """How one engine runs one kind of workload (the workload half of `Engine`, per kind)."""

    def start(self, tenant: Tenant, workload: Any) -> Handle: ...

    def status(self, tenant: Tenant, workload: Any, handle: Handle) -> WorkloadStatus: ...

    def upstream(self, tenant: Tenant, workload: Any, handle: Handle) -> Upstream: ...

    def stop(self, tenant: Tenant, workload: Any, handle: Handle) -> None: ...


class RunnersByKind:
    """The workload half of an `Engine`, written once: each call goes to the engine's
    runner for the workload's kind (`runners()`)."""

    keeps_running: bool
    """Whether its workloads outlive the server (a cluster's pods) or not (processes)."""

    def runners(self) -> Mapping[type, Runner]:
        """Workload type -> the engine's runner for it."""
        raise NotImplementedError

    def _runner(self, workload: Workload) -> Runner:
        return self.runners()[type(workload)]

    def start(self, tenant: Tenant, workload: Workload) -> Handle:
        return self._runner(workload).start(tenant, workload)

    def status(self, tenant: Tenant, workload: Workload, handle: Handle) -> WorkloadStatus:
        return self._runner(workload).status(tenant, workload, handle)

    def upstream(self, tenant: Tenant, workload: Workload, handle: Handle) -> Upstream:
        return self._runner(workload).upstream(tenant, workload, handle)

    def stop(self, tenant: Tenant, workload: Workload, handle: Handle) -> None:
        self._runner(workload).stop(tenant, workload, handle)

    def roll(self, tenant: Tenant, old: Workload, new: Workload, handle: Handle) -> Handle:
        runner = self._runner(new)
        roll = getattr(runner, "roll", None)
        if roll is not None:
            return Handle(roll(tenant, old, new, handle).data)
        runner.stop(tenant, old, handle)
        return runner.start(tenant, new)

    def release(self, tenant: Tenant, workload: Workload, handle: Handle) -> bool:
        if self.keeps_running:
            return True
        self.stop(tenant, workload, handle)
        return False


class Engine(Protocol):
    """Runs and isolates every workload of every tenant (see the module docstring)."""

    name: str
    """`local` or `kubernetes`: for people (pages, logs), never for decisions."""
    features: Features

    def prepare_tenant(self, tenant: Tenant) -> None:
        """Make a new or changed tenant ready (idempotent): its folders and identity, or its
        namespace with its quota."""

    def jobs(self, tenant: Tenant) -> Backend:
        """The tenant's training jobs."""

    def job_storage(self, tenant: Tenant, job_id: str, name: str) -> JobStorage:
        """Where a new job of the tenant keeps its outputs and data."""

    def capacity(self) -> Capacity | None:
        """What queued jobs may use together, for a server that queues them itself; None
        when the engine queues and enforces quotas (a cluster)."""

    def stage_data(self, tenant: Tenant, storage: JobStorage, archive: Path) -> None:
        """Unpack a data set (an archive checked as code is) into the job's data folder
        before it starts; kept for restarts. Raises SpecError naming `data`, or
        NotAvailable where data sets do not reach jobs."""

    def model_server_runtime(self, asked: str | None) -> str:
        """The runtime a new model server gets when `asked` (None: the default). Raises
        ValueError saying why not and what to choose."""

    def model_server_runtimes(self) -> tuple[str, ...]:
        """The runtimes a model server may be given here, the default first (what the
        job page's Serve offers)."""

    def model_server_request(self, resources: Resources) -> tuple[float, int] | None:
        """(cores, bytes) each replica of a model server given `resources` asks of the
        team's quota here (the defaults filled in as the engine fills them), or None
        where a model server has no replicas to count (one process)."""

    def start(self, tenant: Tenant, workload: Workload) -> Handle:
        """Start it (or make it exist); returns at once or when it runs. Raises
        NotAvailable or RuntimeError (saying why it did not start)."""

    def status(self, tenant: Tenant, workload: Workload, handle: Handle) -> WorkloadStatus: ...

    def upstream(self, tenant: Tenant, workload: Workload, handle: Handle) -> Upstream:
        """Where the proxy reaches it. Raises NotAvailable."""

    def stop(self, tenant: Tenant, workload: Workload, handle: Handle) -> None:
        """Stop it and remove what it left (gone already is fine)."""

    def roll(self, tenant: Tenant, old: Workload, new: Workload, handle: Handle) -> Handle:
        """Change a running workload from `old` to `new` (e.g. a model server's version):
        in place where the runner can (a Kubernetes Deployment's rolling update: the old pod
        answers until the new one is ready), else stop then start (a short gap: the local
        engine's process). Returns the new handle."""

    def release(self, tenant: Tenant, workload: Workload, handle: Handle) -> bool:
        """The server is shutting down: stop what must not outlive it; True when the
        workload keeps running (a cluster's pods), False when it was stopped."""

    def close(self) -> None: ...
