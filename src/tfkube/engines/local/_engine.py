"""The local engine: every replica a process on this machine, supervised per job.

submit: check everything (spec, code, folders) and install the code's requirements.txt
(a cached virtual environment) while staging in a hidden folder, then move it into
place and start the job's supervisor (`python -m tfkube.engines.local`) in its own
session. Every other call reads the job's folder; delete/stop signal the supervisor, and
stop the replicas' trees themselves should the supervisor be gone.

With a tenant (`TenantIsolation`: a tfkube server's team) the job runs confined: staging
also checks that its folders lie in the tenant's folder and that its commands exist in
the sandbox, makes the job's folder root's only and the log folder (and the data, read
only inside) the team's; the supervisor starts each replica in the sandbox (`_sandbox.py`).

Ctrl-C: staging may be interrupted at any point (its folder is removed, nothing ran).
From the move into place until the supervisor is registered, and while stopping, SIGINT
is held (`_interrupts.py`), so an interrupted submit stops the job it started and an
interrupted stop still finishes.
"""

from __future__ import annotations

import builtins
import contextlib
import ipaddress
import json
import os
import shutil
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

from tfkube.contract import REQUIREMENTS_FILE
from tfkube.engines._artifact import Artifact, prepare_artifact
from tfkube.engines._base import (
    DataFrom,
    JobEvent,
    JobExists,
    JobNotFound,
    JobView,
    ShipTo,
    UsageUnavailable,
)
from tfkube.engines._data import (
    CACHE_LIMIT_ENV,
    Credentials,
    DataSourceError,
    StoreRef,
    cache_limit,
    credentials_from_env,
    credentials_problem,
    hdfs_user_from_env,
    list_objects,
    open_store,
    progress_text,
    writable_tree,
)
from tfkube.engines.local._commands import command_problems
from tfkube.engines.local._gpus import NotEnoughGpus, assign_gpus, available_gpus
from tfkube.engines.local._interrupts import interrupts_held
from tfkube.engines.local._procs import alive, stop_trees, wait_gone
from tfkube.engines.local._sandbox import (
    SYSTEM_PATH,
    TenantIsolation,
    python_installation,
    sees,
    sweep,
)
from tfkube.engines.local._store import (
    DataRecord,
    JobDir,
    JobRecord,
    ReplicaRecord,
    TenantRecord,
    last_line,
    tfkube_cache,
    tfkube_home,
)
from tfkube.engines.local._supervisor import cgroup_prefix, spawn
from tfkube.engines.local._tenants import hand_over
from tfkube.launcher import DepsError, ensure_venv
from tfkube.planner import JobPhase, Replica, ReplicaState, scale_problems
from tfkube.safefs import closing, open_last, pread_all
from tfkube.spec import FieldError, HdfsSource, Role, SpecError, TFJob, dump_job, load_job_text
from tfkube.tfcluster import replica_key

SUPERVISOR_START_TIMEOUT = 20.0
STOP_GRACE_MARGIN = 15.0
SCALE_MARGIN = 60.0
"""How long past the job's grace period `scale` waits for the supervisor to take a
request, while the supervisor lives: it stops the leaving workers (grace, then SIGKILL)
and reaps them on a machine that may be busy with the job itself (20 s in all was not
always enough on a loaded 2-core machine, where the CLI then failed a resize that the
supervisor finished seconds later)."""
"""How long beyond the job's termination grace a supervisor may take to stop."""


def _uv() -> str | None:
    """The uv binary of the `uv` package (a dependency of tfkube), or None: then pip."""
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        return None


def _replica_which(program: str, confined: bool = False) -> str | None:
    """A program as a replica's launcher finds it: on PATH after tfkube's interpreter's
    folder (the supervisor puts it first); confined, the sandbox's PATH."""
    rest = SYSTEM_PATH if confined else os.environ.get("PATH", "")
    return shutil.which(program, path=os.pathsep.join([str(Path(sys.executable).parent), rest]))


def _folder(job: TFJob, base_dir: Path, value: str | None, field: str) -> Path | None:
    """A user-given shared folder, created if need be; None when the default is used."""
    if not value:
        return None
    path = (base_dir / value).resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(
            [FieldError(field, f"cannot create {path}: {exc.strerror}; choose a writable folder")],
            f"job {job.name!r}",
        ) from None
    return path


def _inside_tenant(job: TFJob, base_dir: Path, folder: Path) -> None:
    """A confined job's own folders must lie in its tenant's `folder`: they become the
    team's."""
    root = folder.resolve()
    for which in ("data", "logs"):
        value = getattr(job.spec.storage, which).path
        if value and not (base_dir / value).resolve().is_relative_to(root):
            raise SpecError(
                [
                    FieldError(
                        f"spec.storage.{which}.path",
                        f"{value} is outside the team's folder {root}; a confined job's "
                        "folders must be inside it (or leave path out)",
                    )
                ],
                f"job {job.name!r}",
            )


def _replica_message(
    r: ReplicaRecord, record: JobRecord, state: ReplicaState, now: float
) -> str | None:
    """Why a replica is where it is, for `status` (None when its state says it all)."""
    if state is ReplicaState.PENDING:
        if record.phase.terminal:
            return None
        if record.supervisor is None:
            return "waiting for the job's supervisor to start"
        if record.data is not None and record.data.staging:
            return "waiting for the job's data"
        return r.held or r.message or "starting"
    if state is ReplicaState.BACKOFF and r.next_start_at is not None:
        why = f" after exit code {r.exit_code}" if r.exit_code is not None else ""
        return f"restarting in {max(0.0, r.next_start_at - now):.0f}s{why}" + (
            f": {r.message}" if r.message else ""
        )
    return r.message


class LocalBackend:
    """Runs TFJobs as processes on this machine. State lives under `home/jobs/`."""

    def __init__(
        self,
        home: Path | None = None,
        fork_supervisor: bool = False,
        cache: Path | None = None,
        spawner: Callable[[JobDir, bool], None] = spawn,
        tenant: TenantIsolation | None = None,
        fetch_allowed: tuple[str, ...] | None = None,
        package_indexes: tuple[str, ...] = (),
    ) -> None:
        """`fork_supervisor`: start supervisors by forking this process (see `spawn`);
        only for single-threaded callers such as the CLI. `cache`: where the jobs'
        Python environments are kept (default `tfkube_cache()`). `spawner`: what starts
        a supervisor (a seam for tests that interrupt the start). `tenant`: run every
        replica confined, as this team's OS user (root only; see `_sandbox.py`).
        `fetch_allowed`: a server's team backend: the ranges (CIDRs) its data sources'
        hosts may lie in beside public ones (`--allow-fetch-from`; a NameNode's redirects
        are judged by them); None: `tfkube run`, the user's own, nothing judged.
        `package_indexes`: where requirements.txt installs from (the first is uv's
        index); confined, the only hosts its prepare step reaches (`_egress`); empty:
        PyPI."""
        self.home = home or tfkube_home()
        self.fork_supervisor = fork_supervisor
        self.cache = cache or tfkube_cache()
        self.spawner = spawner
        self.tenant = tenant
        self.fetch_allowed = fetch_allowed
        self.package_indexes = package_indexes
        self.submitted: builtins.list[str] = []
        """Names of the jobs this object started, in order (for a caller that must stop
        them on Ctrl-C: the name alone could be another job's after a replace)."""

    def _dir(self, name: str) -> JobDir:
        return JobDir(self.home / "jobs" / name)

    # -- submit ---------------------------------------------------------------------

    def submit(
        self,
        job: TFJob,
        base_dir: Path,
        replace: bool = False,
        *,
        code_token: str | None = None,
        data_credentials: Credentials | None = None,
        ship: ShipTo | None = None,
        data_from: DataFrom | None = None,
    ) -> JobView:
        """`data_credentials`: the store's credentials for `spec.storage.data.source`
        (default: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY of this process's environment,
        else boto3's own chain). Never written anywhere but a 0600 file of the job that
        its supervisor reads and removes. `ship` and `data_from` go unused: a server
        reads and fills this engine's job folders itself."""
        target = self._dir(job.name)
        if target.root.exists():
            if target.exists() and replace:
                current = self.get(job.name)
                if not current.done:
                    raise JobExists(
                        f"job {job.name!r} is still {current.phase.value}; "
                        f"`tfkube delete {job.name}` first or choose another name"
                    )
                self.delete(job.name)
            elif target.exists():
                current = self.get(job.name)
                raise JobExists(
                    f"a job named {job.name!r} already exists ({current.phase.value}); "
                    f"`tfkube delete {job.name}`, pass --replace, or choose another name"
                )
            else:
                shutil.rmtree(target.root)  # debris of an interrupted submit
        staging = JobDir(self.home / "jobs" / f".staging-{job.name}-{uuid.uuid4().hex[:8]}")
        staging.root.mkdir(parents=True)
        try:
            self._stage(job, base_dir, staging, target, code_token, data_credentials)
            with interrupts_held():
                try:
                    staging.root.rename(target.root)
                except OSError:  # another submit of the same name got there first
                    raise JobExists(f"a job named {job.name!r} was just submitted") from None
                self.submitted.append(job.name)
        except BaseException:
            shutil.rmtree(staging.root, ignore_errors=True)
            raise
        try:
            with interrupts_held():
                self._start_supervisor(target)
        except KeyboardInterrupt:
            # The supervisor is registered: stop what it started. A second signal while
            # it stops asks for what is being done: the caller sees the first one.
            with contextlib.suppress(KeyboardInterrupt):
                self.stop(job.name)
            raise
        return self.get(job.name)

    def _stage(
        self,
        job: TFJob,
        base_dir: Path,
        staging: JobDir,
        target: JobDir,
        code_token: str | None = None,
        data_credentials: Credentials | None = None,
    ) -> JobRecord:
        storage = job.spec.storage
        if self.tenant is not None:
            _inside_tenant(job, base_dir, Path(self.tenant.folder))
        data = _folder(job, base_dir, storage.data.path, "spec.storage.data.path")
        logs = _folder(job, base_dir, storage.logs.path, "spec.storage.logs.path")
        # Default folders live in the job's own folder (moved into place with it).
        for default in ("data", "output"):
            (staging.root / default).mkdir()
        self._check_gpus(job)
        venv = None
        code = job.spec.code
        code_url, code_sha = "", ""
        names: frozenset[str] | None = None
        if code is None:
            pass  # every role runs its own command, checked below
        elif code_token is not None and code.is_url and code.sha256:
            # Fetched by every replica itself, with the token (the server's job-scoped
            # claim), and verified against the pinned sha256: nothing to download here;
            # a requirements.txt is then installed by the first replica's launcher.
            code_url, code_sha = code.source, code.sha256
            staging.write_code_token(code_token)
        else:
            artifact = prepare_artifact(job, base_dir, staging.artifacts)
            code_url = str(target.artifacts / artifact.path.name)
            code_sha = artifact.sha256
            names = artifact.names
        # Confined, only what the sandbox shows counts (system folders, tfkube's Python).
        confined = self.tenant is not None
        shown = python_installation() if confined else None
        problems = command_problems(
            job,
            names,
            which=lambda p: _replica_which(p, confined),
            exists=lambda p: (shown is None or sees(p, shown)) and Path(p).exists(),
            is_dir=lambda p: (shown is None or sees(p, shown)) and Path(p).is_dir(),
            fetched=code is not None and names is None,
        )
        if problems:
            raise SpecError(problems, f"job {job.name!r} (for this machine)")
        data_record = self._check_data(job, staging, data_credentials)
        if names is not None:
            venv = self._python_env(job, artifact, staging)
        # No replicas yet: the supervisor makes them from job.yaml, the one count.
        record = JobRecord(
            name=job.name,
            uid=uuid.uuid4().hex,
            created_at=time.time(),
            data_dir=str(data or target.root / "data"),
            log_dir=str(logs or target.root / "output"),
            artifact=code_url,
            artifact_sha256=code_sha,
            venv=venv,
            data=data_record,
        )
        if self.tenant is not None:
            record.tenant = self._confine(
                staging,
                data or staging.root / "data",
                logs or staging.root / "output",
                own_venvs=code_token is not None,
            )
        # The spec as it runs: absolute paths, every default filled in.
        staging.spec.write_text(dump_job(job))
        staging.logs.mkdir()
        staging.write(record)
        staging.event(f"job submitted with {len(job.replica_keys())} replicas")
        return record

    def _check_data(
        self, job: TFJob, staging: JobDir, credentials: Credentials | None
    ) -> DataRecord | None:
        """A data source is listed now, before anything starts: a missing bucket or
        prefix, refused credentials or an unreachable store is an error on
        `spec.storage.data.source`. What was listed is what the supervisor stages."""
        data = job.spec.storage.data
        source = data.parsed_source
        if source is None:
            return None
        if credentials is None and self.tenant is not None:
            # A team's job reads with its team's secret (the server hands it over), never
            # with whatever credentials the server's own environment holds.
            raise SpecError(
                [
                    FieldError(
                        "spec.storage.data.credentials",
                        "a team's job needs the team's secret for its data source; name it "
                        "in credentials",
                    )
                ],
                f"job {job.name!r}",
            )
        mismatch = credentials_problem(source, credentials)
        if mismatch:
            raise SpecError(
                [FieldError("spec.storage.data.credentials", f"the credentials given: {mismatch}")],
                f"job {job.name!r}",
            )
        store = StoreRef(source, data.endpoint, data.region)
        if isinstance(source, HdfsSource):
            credentials = credentials or hdfs_user_from_env(os.environ)
        else:
            credentials = credentials or credentials_from_env(os.environ)
        allowed = None
        if self.fetch_allowed is not None:
            allowed = tuple(ipaddress.ip_network(n, strict=False) for n in self.fetch_allowed)
        limit = self._data_cache_limit()  # a bad setting refused before the store is asked
        try:
            objects = list_objects(open_store(store, credentials, allowed), store)
        except DataSourceError as exc:
            raise SpecError(
                [FieldError("spec.storage.data.source", f"{exc}; nothing was started")],
                f"job {job.name!r}",
            ) from None
        staging.data_source.write_text(
            json.dumps(
                {
                    "store": store.to_json(),
                    "objects": [o.to_json() for o in objects],
                    # One cache per team (without one: this machine's user), keyed by
                    # content: no team's job is shown another team's cached objects.
                    "cache": str(self.cache / "data" / self._cache_owner()),
                    # Its bound (TFKUBE_DATA_CACHE_LIMIT): least recently used objects
                    # no job shows are evicted after each staging.
                    "cache_limit": limit,
                    "shard": data.shard,
                    "allowed": None if allowed is None else [str(n) for n in allowed],
                }
            )
        )
        if credentials is not None:
            staging.write_data_credentials(credentials.to_json())
        return DataRecord(
            source=str(source),
            shard=data.shard,
            objects=len(objects),
            total_bytes=sum(o.size for o in objects),
        )

    def _data_cache_limit(self) -> int | None:
        self.cache.mkdir(parents=True, exist_ok=True)
        try:
            return cache_limit(os.environ.get(CACHE_LIMIT_ENV), shutil.disk_usage(self.cache).total)
        except ValueError as exc:
            raise SpecError([FieldError(CACHE_LIMIT_ENV, str(exc))], "this machine") from None

    def _cache_owner(self) -> str:
        return "local" if self.tenant is None else self.tenant.identity.name

    def _confine(self, staging: JobDir, data: Path, logs: Path, own_venvs: bool) -> TenantRecord:
        """Hand the job's folders to its team: the log and data folders become the team's
        (the data read-only in the sandbox when it came with files), the job's own folder
        root's alone."""
        assert self.tenant is not None
        tenant = self.tenant.identity
        staging.root.chmod(0o700)
        hand_over(logs, tenant)
        data_read_only = data.is_dir() and any(data.iterdir())
        hand_over(data, tenant, recursive=True)
        if staging.artifacts.is_dir():  # code staged here: read-only in the sandbox
            hand_over(staging.artifacts, tenant, recursive=True)
        venvs = None
        if own_venvs:  # replicas fetch the code: its requirements.txt is installed there
            venvs = self.home / "venvs"
            hand_over(venvs, tenant)
        return TenantRecord(
            user=tenant.name,
            uid=tenant.uid,
            gid=tenant.gid,
            hidden=list(self.tenant.hidden),
            passed_env=list(self.tenant.passed_env),
            data_read_only=data_read_only,
            venv_cache=str(venvs) if venvs else None,
            package_indexes=list(self.package_indexes),
            fetch_allowed=list(self.fetch_allowed or ()),
        )

    def _python_env(self, job: TFJob, artifact: Artifact, staging: JobDir) -> str | None:
        """Install the code's requirements.txt (or reuse the cached environment) before
        any replica starts: a failure is the job's set-up failing, reported once."""
        if artifact.requirements is None:
            return None
        requirements = staging.root / REQUIREMENTS_FILE
        requirements.write_bytes(artifact.requirements)
        try:
            venv = ensure_venv(
                requirements,
                self.cache / "venvs",
                uv=_uv(),
                index_url=self.package_indexes[0] if self.package_indexes else None,
            )
        except DepsError as exc:
            raise SpecError(
                [
                    FieldError(
                        "spec.code.source",
                        f"its {REQUIREMENTS_FILE} does not install: {exc}; fix the "
                        "requirements (or remove the file) and submit again",
                    )
                ],
                f"job {job.name!r}",
            ) from None
        finally:
            requirements.unlink(missing_ok=True)
        return str(venv)

    def _check_gpus(self, job: TFJob) -> dict[str, int]:
        """GPUs each replica needs. More than this machine has is an error now; more than
        are free now only means waiting: the supervisor claims them when they are."""
        requests = {}
        for role, i in job.replica_keys():
            spec = job.spec.replicas.get(role)
            requests[replica_key(role, i)] = spec.resources.gpu if spec else 0
        try:
            assign_gpus(list(requests.items()), available_gpus())
        except NotEnoughGpus as exc:
            role = next(role for role, i in job.replica_keys() if requests[replica_key(role, i)])
            raise SpecError(
                [FieldError(f"spec.replicas.{role.value}.resources.gpu", str(exc))],
                f"job {job.name!r}",
            ) from None
        return requests

    def _start_supervisor(self, target: JobDir) -> None:
        self.spawner(target, self.fork_supervisor)
        deadline = time.monotonic() + SUPERVISOR_START_TIMEOUT
        while time.monotonic() < deadline:
            record = target.read()
            if record.supervisor is not None:
                return
            if "Traceback" in target.supervisor_log.read_text():
                break
            time.sleep(0.05)
        tail = target.supervisor_log.read_text()[-2000:]
        self.stop(target.root.name)
        shutil.rmtree(target.root, ignore_errors=True)
        raise RuntimeError(f"the job's supervisor did not start:\n{tail}")

    # -- reading ----------------------------------------------------------------------

    def get(self, name: str) -> JobView:
        d = self._dir(name)
        if not d.exists():
            raise JobNotFound(name)
        return self._view(d, d.read())

    def _view(self, d: JobDir, record: JobRecord) -> JobView:
        supervisor_alive = alive(record.supervisor) is not None
        phase, reason, message = record.phase, record.reason, record.message
        lost = record.supervisor is not None and not supervisor_alive and not phase.terminal
        if lost:
            # Its launchers end their replicas when it dies; say what happened.
            phase, reason = JobPhase.FAILED, "SupervisorLost"
            message = f"the job's supervisor died unexpectedly; see {d.supervisor_log}"

        def state(r: ReplicaRecord) -> ReplicaState:
            # Whatever of it is gone was stopped with the supervisor (the planner's rule).
            return r.state.after_stop if lost and alive(r.process) is None else r.state

        now = time.time()
        if record.data is not None and record.data.staging and not phase.terminal:
            data = record.data
            reason = "StagingData"
            elapsed = now - data.started_at if data.started_at else 0.0
            message = f"{progress_text(data.done_bytes, data.total_bytes, elapsed)} ({data.source})"
        replicas = []
        for r in record.replicas:
            now_in = state(r)
            replicas.append(
                Replica.of(
                    replace(r.status(), state=now_in),
                    address=f"127.0.0.1:{r.port}" if r.port else None,
                    last_line=last_line(d.log(r.key)),
                    message=_replica_message(r, record, now_in, now) or "",
                    stalled=r.stalled and now_in is ReplicaState.RUNNING,
                    step_rate=r.step_rate if now_in is ReplicaState.RUNNING else None,
                    straggler=r.straggler and now_in is ReplicaState.RUNNING,
                )
            )
        return JobView(
            name=record.name,
            phase=phase,
            restarts=record.restarts,
            created_at=record.created_at,
            started_at=record.started_at,
            finished_at=record.finished_at,
            reason=reason,
            message=message,
            replicas=tuple(replicas),
            pids={r.key: r.process.pid for r in record.replicas if r.process is not None},
            log_dir=record.log_dir,
            data_dir=record.data_dir,
            job_dir=str(d.root),
            supervisor_alive=supervisor_alive or record.supervisor is None,
        )

    def list(self) -> builtins.list[JobView]:
        jobs_dir = self.home / "jobs"
        if not jobs_dir.is_dir():
            return []
        views = []
        for child in sorted(jobs_dir.iterdir()):
            d = JobDir(child)
            if child.name.startswith(".") or not d.exists():
                continue
            try:
                views.append(self._view(d, d.read()))
            except (OSError, ValueError):
                continue  # removed or being written while we looked
        return views

    def events(self, name: str) -> builtins.list[JobEvent]:
        d = self._dir(name)
        if not d.exists():
            raise JobNotFound(name)
        out = []
        for e in d.read_events():
            replica = e.get("replica")
            out.append(
                JobEvent(
                    time=float(e.get("time") or 0.0),  # type: ignore[arg-type]
                    message=str(e.get("message", "")),
                    replica=str(replica) if replica else None,
                )
            )
        return out

    def replica_keys(self, name: str) -> builtins.list[str]:
        return [r.key for r in self.get(name).replicas]

    def logs(self, name: str, replica: str | None = None, follow: bool = False) -> Iterator[str]:
        """Lines of one replica's log, or of all (prefixed with the replica), optionally
        following them until the job is done."""
        d = self._dir(name)
        keys = self.replica_keys(name)
        if replica is not None and replica not in keys:
            raise ValueError(
                f"job {name!r} has no replica {replica!r}; its replicas are {', '.join(keys)}"
            )
        chosen = [replica] if replica else keys
        prefix = replica is None
        files = {k: d.log(k) for k in chosen}
        offsets = dict.fromkeys(chosen, 0)
        partial = dict.fromkeys(chosen, "")
        while True:
            for key, path in files.items():
                try:
                    with closing(open_last(path)) as fd:  # never a link a replica made
                        size = os.fstat(fd).st_size
                        chunk = pread_all(fd, offsets[key], max(0, size - offsets[key]))
                except OSError:  # not there (yet), or not a plain file
                    continue
                offsets[key] += len(chunk)
                text = partial[key] + chunk.decode("utf-8", errors="replace")
                lines = text.split("\n")
                partial[key] = lines.pop()
                for line in lines:
                    yield f"[{key}] {line}" if prefix else line
            if not follow or not d.exists() or self._view(d, d.read()).done:
                for key, rest in partial.items():
                    if rest:
                        yield f"[{key}] {rest}" if prefix else rest
                return
            time.sleep(0.2)

    def usage(self, name: str) -> dict[str, tuple[float, float, int]]:
        raise UsageUnavailable(
            "the local engine keeps each replica's usage itself, with the job's logs"
        )

    # -- resizing ---------------------------------------------------------------------

    def scale(self, name: str, workers: int) -> JobView:
        """Run the job with `workers` workers from now on (`tfkube.planner.scale_problems`
        says which jobs can). The job's supervisor does it: this writes the request and
        waits until the supervisor has taken it and the job's replicas show the new size.
        Raises `SpecError` naming the field when the job cannot be resized."""
        d = self._dir(name)
        if not d.exists():
            raise JobNotFound(name)
        job = load_job_text(d.spec.read_text(), str(d.spec))
        record = d.read()
        problems = scale_problems(job, record.phase, workers)
        if not problems and alive(record.supervisor) is None:
            problems = [FieldError("status", "the job's supervisor does not run: nothing to scale")]
        if problems:
            raise SpecError(problems, f"scaling job {name!r}")
        asked_at = time.time()
        tmp = d.scale_requested.with_name(f".scale.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"workers": workers}))
        tmp.replace(d.scale_requested)
        deadline = time.monotonic() + job.spec.run_policy.termination_grace_seconds + SCALE_MARGIN
        taken = False
        while time.monotonic() < deadline:
            time.sleep(0.05)
            taken = not d.scale_requested.exists()  # the supervisor read it
            record = d.read()
            if taken:
                now = sum(1 for r in record.replicas if r.role == Role.WORKER.value)
                if now == workers:
                    return self._view(d, record)
                refused = [
                    str(e["message"])
                    for e in d.read_events()
                    if float(str(e["time"])) >= asked_at
                    and str(e["message"]).startswith("scale refused")
                ]
                if refused or record.phase.terminal:
                    why = refused[0] if refused else f"the job ended ({record.phase.value})"
                    raise SpecError([FieldError("workers", why)], f"scaling job {name!r}")
            if alive(record.supervisor) is None:
                d.scale_requested.unlink(missing_ok=True)
                if record.phase.terminal:
                    why = f"the job ended ({record.phase.value})"
                    raise SpecError([FieldError("workers", why)], f"scaling job {name!r}")
                raise TimeoutError(f"job {name!r}: its supervisor ended before it resized it")
        now = sum(1 for r in record.replicas if r.role == Role.WORKER.value)
        events = [str(e["message"]) for e in d.read_events()][-3:]
        raise TimeoutError(
            f"job {name!r}: its supervisor did not resize it in time (the request "
            f"{'was taken' if taken else 'was not taken'}; {now} workers, {workers} asked; "
            f"its last events: {'; '.join(events) or 'none'})"
        )

    # -- ending -----------------------------------------------------------------------

    def stop(self, name: str) -> JobView:
        """Stop every replica; the job ends Failed (Stopped). Ctrl-C while this runs is
        held until it is done (see `_interrupts.py`)."""
        d = self._dir(name)
        if not d.exists():
            raise JobNotFound(name)
        with interrupts_held():
            self._stop(d)
        return self.get(name)

    def _stop(self, d: JobDir) -> None:
        # First the file, then the look at the supervisor: one that registers after our
        # look reads the file after registering, and stops by itself.
        d.stop_requested.touch()
        record = d.read()
        grace = self._grace(d)
        if record.supervisor is None and not record.phase.terminal:
            record = self._await_supervisor(d, record)
        if (sup := alive(record.supervisor)) is not None:
            sup.send_signal(signal.SIGTERM)
            if not wait_gone(record.supervisor, grace + STOP_GRACE_MARGIN):  # type: ignore[arg-type]
                sup.kill()
        # Whatever the supervisor left (or if it was gone): stop the trees ourselves.
        record = d.read()
        stop_trees([r.process for r in record.replicas if r.process is not None], grace)
        if record.tenant is not None:  # and the cgroups a killed supervisor left
            sweep(cgroup_prefix(record))

    def _await_supervisor(self, d: JobDir, record: JobRecord) -> JobRecord:
        """A job just submitted may have a supervisor that has not registered yet: wait
        for it (it will read the stop file) rather than leave it to start replicas."""
        deadline = record.created_at + SUPERVISOR_START_TIMEOUT
        while record.supervisor is None and time.time() < deadline:
            time.sleep(0.05)
            record = d.read()
        return record

    def _grace(self, d: JobDir) -> float:
        try:
            job = load_job_text(d.spec.read_text(), str(d.spec))
        except (OSError, SpecError):
            return 5.0
        return job.spec.run_policy.termination_grace_seconds

    def delete(self, name: str) -> JobView:
        view = self.stop(name)
        d = self._dir(name)
        with contextlib.suppress(OSError, ValueError):
            if d.read().data is not None:  # a staged data source is read-only
                writable_tree(d.root / "data")
        shutil.rmtree(self._dir(name).root, ignore_errors=True)
        return view

    def wait(self, name: str, timeout: float | None = None) -> JobView:
        """Block until the job has ended and none of its replicas runs."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            view = self.get(name)
            if view.done:
                # The supervisor exits right after, unless it waits out a TTL.
                record = self._dir(name).read()
                if record.supervisor is not None and not self._has_ttl(name):
                    wait_gone(record.supervisor, 10)
                return view
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {name!r} is still {view.phase.value}")
            time.sleep(0.1)

    def _has_ttl(self, name: str) -> bool:
        spec = self._dir(name).spec
        job = load_job_text(spec.read_text(), str(spec))
        return job.spec.run_policy.ttl_seconds_after_finished is not None
