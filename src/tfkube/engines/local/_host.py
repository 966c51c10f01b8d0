"""The local engine as the platform server sees it (`tfkube.engines.Engine`): every team's
jobs, model servers, notebooks and TensorBoards run as processes on this machine.

    <data dir>/teams/<team>/engine        the team's LocalBackend home (its job folders)
                           /outputs/<job id>   a job's output folder (logs, checkpoints, ...)
                           /data/<job id>      an uploaded data set, unpacked for the job
                           /notebooks/<user>   a user's notebook home (JupyterLab's root;
                                               the team's artifacts copied into
                                               team-artifacts/ by the notebook itself)
                           /notebook-artifacts the team's artifacts, unpacked by the server
    <data dir>/serving/<id>.log           a model server's output

The server queues jobs itself (`capacity`: this machine's CPUs, memory and GPUs, or what
the server was told).

Tenancy: where this machine can isolate (`isolation_support`: root, bubblewrap, cgroups),
each team gets its own OS identity when it is prepared (`ensure_identity`) and its jobs
run confined (`TenantIsolation`: as that user, in a sandbox that never shows the data dir;
docs/security.md). Where it cannot, the engine says why when it starts and refuses to
prepare a second team (`NotAvailable`): teams sharing one OS user could read and write
each other's files and the server's database."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

from tfkube.engines._base import Backend
from tfkube.engines._workloads import (
    Capacity,
    Features,
    JobStorage,
    ModelServerWorkload,
    NotAvailable,
    NotebookWorkload,
    Runner,
    RunnersByKind,
    Tenant,
    TensorBoardWorkload,
)
from tfkube.engines.local._engine import LocalBackend
from tfkube.engines.local._gpus import available_gpus
from tfkube.engines.local._sandbox import TenantIsolation, isolation_support
from tfkube.engines.local._services import (
    PASSED_ENV,
    LocalModelServers,
    LocalNotebooks,
    LocalTensorBoards,
    PackageAccess,
    ServiceIsolation,
    relays_for,
)
from tfkube.engines.local._tenants import TenantIdentity, ensure_identity
from tfkube.launcher import FetchError, unpack
from tfkube.render import ServingRuntime, parse_runtime
from tfkube.spec import FieldError, Resources, SpecError


class LocalEngine(RunnersByKind):
    name = "local"
    features = Features(
        data_sets=True,
        tensorboard_on_demand=True,
        namespaces=False,
        replica_usage=True,
        data_sources=True,
        resize=True,
        step_rates=True,
    )
    keeps_running = False
    """Nothing of a team outlives the server here but its training jobs (their supervisors
    are daemons the next server finds again)."""

    def __init__(
        self,
        data_dir: Path,
        cpus: float | None = None,
        memory: int | None = None,
        workload_env: tuple[str, ...] = (),
        fetch_allowed: tuple[str, ...] = (),
        package_indexes: tuple[str, ...] = (),
    ) -> None:
        self.data_dir = data_dir
        self.fetch_allowed = fetch_allowed
        self.package_indexes = package_indexes
        self.cpus = cpus
        self.memory = memory
        self._backends: dict[str, LocalBackend] = {}
        self._lock = threading.Lock()
        self.workload_env = workload_env
        support = isolation_support()
        self.isolation_problem = None if support.ok else support.reason
        """Why this machine cannot keep teams apart (None: it can)."""
        print(
            "tfkube server: local engine: each team's workloads run as the team's own OS "
            "user, sandboxed (docs/security.md)"
            if support.ok
            else "tfkube server: local engine: teams cannot be isolated from each other on "
            f"this machine: {support.reason}; one team only (docs/security.md)",
            file=sys.stderr,
            flush=True,
        )
        self._starter: ThreadPoolExecutor | None = None
        services: ServiceIsolation | None = None
        self._relays: Path | None = None
        if support.ok:
            self._starter = ThreadPoolExecutor(1, thread_name_prefix="tfkube-sandbox-starter")
            self._relays = relays_for(data_dir)
            services = ServiceIsolation(
                self.identity, self._hidden(), self._starter, relays=self._relays
            )
        env = os.environ
        self._runners: dict[type, Runner] = {
            ModelServerWorkload: LocalModelServers(data_dir, env, workload_env, services),
            NotebookWorkload: LocalNotebooks(
                self.notebook_home,
                self.notebook_artifacts,
                env,
                workload_env,
                services,
                PackageAccess(package_indexes, fetch_allowed),
            ),
            TensorBoardWorkload: LocalTensorBoards(env, workload_env, services),
        }

    def team_root(self, tenant: Tenant) -> Path:
        return self.data_dir / "teams" / tenant.name

    def runners(self) -> Mapping[type, Runner]:
        return self._runners

    def notebook_home(self, tenant: Tenant, user: str) -> Path:
        return self.team_root(tenant) / "notebooks" / user

    def notebook_artifacts(self, tenant: Tenant) -> Path:
        return self.team_root(tenant) / "notebook-artifacts"

    # -- tenants and jobs ---------------------------------------------------------------

    def prepare_tenant(self, tenant: Tenant) -> None:
        root = self.team_root(tenant)
        if self.isolation_problem is not None and not root.exists() and self._other_teams(root):
            raise NotAvailable(
                "tenancy needs isolation on this machine: the local engine cannot keep teams "
                f"apart here ({self.isolation_problem}), so this server has one team only "
                "(see docs/security.md)"
            )
        (root / "outputs").mkdir(parents=True, exist_ok=True)
        if self.isolation_problem is None:
            self.identity(tenant)

    def _other_teams(self, root: Path) -> bool:
        teams = root.parent
        return teams.is_dir() and any(p.is_dir() and p != root for p in teams.iterdir())

    def identity(self, tenant: Tenant) -> TenantIdentity:
        """The team's OS identity (made on first use, then found again)."""
        return ensure_identity(self.team_root(tenant), tenant.name)

    def _hidden(self) -> tuple[str, ...]:
        """What no workload may see: the server's data dir, however it is named."""
        return tuple(sorted({str(self.data_dir.absolute()), str(self.data_dir.resolve())}))

    def _isolation(self, tenant: Tenant) -> TenantIsolation | None:
        """How the tenant's jobs are confined (None: this machine cannot)."""
        if self.isolation_problem is not None:
            return None
        return TenantIsolation(
            self.identity(tenant),
            folder=str(self.team_root(tenant)),
            hidden=self._hidden(),
            passed_env=(*PASSED_ENV, *self.workload_env),
        )

    def jobs(self, tenant: Tenant) -> Backend:
        with self._lock:
            found = self._backends.get(tenant.name)
            if found is None:
                found = LocalBackend(
                    home=self.team_root(tenant) / "engine",
                    tenant=self._isolation(tenant),
                    fetch_allowed=self.fetch_allowed,
                    package_indexes=self.package_indexes,
                )
                self._backends[tenant.name] = found
            return found

    def job_storage(self, tenant: Tenant, job_id: str, name: str) -> JobStorage:
        root = self.team_root(tenant)
        out = root / "outputs" / job_id
        # The supervisor's JobDir(<home>/jobs/<name>).work, home being <root>/engine.
        work = root / "engine" / "jobs" / name / "work"
        return JobStorage(
            out, log_path=str(out), data_path=str(root / "data" / job_id), work_path=str(work)
        )

    def stage_data(self, tenant: Tenant, storage: JobStorage, archive: Path) -> None:
        if storage.data_path is None:
            raise NotAvailable("this job has no data folder")
        dest = Path(storage.data_path)
        if dest.is_dir() and any(dest.iterdir()):
            return  # a restart of the job: staged already
        staging = dest.with_name(f".{dest.name}.unpacking")
        shutil.rmtree(staging, ignore_errors=True)
        try:
            unpack(archive, staging)
        except FetchError as exc:
            message = str(exc).replace("the code", "the data set")
            raise SpecError([FieldError("data", message)]) from None
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.exists():
            dest.rmdir()
        staging.rename(dest)

    def capacity(self) -> Capacity:
        cpus = self.cpus or float(os.cpu_count() or 1)
        memory = self.memory or psutil.virtual_memory().total
        return Capacity(cpus, memory, len(available_gpus()))

    def model_server_runtimes(self) -> tuple[str, ...]:
        return (ServingRuntime.TFKUBE.value,)

    def model_server_request(self, resources: Resources) -> tuple[float, int] | None:
        return None  # one process per model server: no replicas to count

    def model_server_runtime(self, asked: str | None) -> str:
        """Always tfkube's own model server (`python -m tfkube.serving`): the stock
        TensorFlow Serving has no local form."""
        runtime = parse_runtime(asked, ServingRuntime.TFKUBE)
        if runtime is not ServingRuntime.TFKUBE:
            raise ValueError(
                f"the local engine runs tfkube's model server only; leave the runtime out "
                f"or choose {runtime.TFKUBE.value}"
            )
        return runtime.value

    def close(self) -> None:
        if self._starter is not None:
            self._starter.shutdown(wait=False)
        if self._relays is not None:
            # Its folder of relay sockets, once no service left one (a service that
            # outlives the server keeps its socket, and the folder).
            with contextlib.suppress(OSError):
                self._relays.rmdir()
