"""Model servers of the teams: create (for a job's latest export, or a chosen version),
watch, count, stop; survive a restart of the server.

    POST /api/v1/jobs/<id>/model-servers -> create:
        choose_version(exports of <job output>/export) -> a row (state running) ->
        Engine.start(team, ModelServerWorkload) -> its handle, kept in the row
    PATCH /api/v1/model-servers/<id> {version} -> roll:
        choose_version -> the row's version -> Engine.roll(team, old, new workload)
    /proxy/model/<id>/v1/models/<name>...  -> Engine.upstream (counted here)
    watch loop (a thread, every 2 s): Engine.status of each running row; one whose process
        is gone (`exited`: the local engine) is started again, at most every RESTART_SECONDS;
        request counts added to the rows
    start-up: a running row whose workload still runs is adopted; one that exited is
        started anew
    shut-down: Engine.release (the local engine stops the process, a cluster's keeps
        running); the rows stay `running`, so the next start brings them back

The engine decides how a model server runs (a process with a secret only the proxy sends,
or a Deployment in the team's namespace, with a HorizontalPodAutoscaler when autoscaled);
this module decides who may, what is recorded, and when to restart. `name_problem` and
`autoscale_problems` (how many replicas a team may ask for) are pure.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import threading
import time
import uuid
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tfkube import contract
from tfkube.engines import (
    Engine,
    Handle,
    Health,
    ModelServerWorkload,
    NotAvailable,
    Upstream,
    WorkloadStatus,
)
from tfkube.server.core.config import ServerSettings
from tfkube.server.core.tables import Job, ModelServer, Team
from tfkube.server.outputs.files import exported_versions
from tfkube.server.tenants import tenant_of
from tfkube.serving import choose_version
from tfkube.spec import Autoscale, FieldError, Resources, SpecError, load_job_text

log = logging.getLogger("tfkube.server")

RUNNING, STOPPED = "running", "stopped"
KIND = "model"
"""The proxy kind: `/proxy/model/<id>/...`."""
RESTART_SECONDS = 10.0
"""A model server whose process exited is started again at most this often."""
_NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


class ServerConflict(RuntimeError):
    """A running model server of the team has that name already."""


def name_problem(name: str) -> str | None:
    """Why a model server name is refused (it names `/v1/models/<name>` and cluster
    objects `<name>-serving`), or None."""
    if len(name) > 40:
        return f"{name!r} is longer than 40 characters; choose a shorter name"
    if not _NAME.fullmatch(name):
        return (
            f"{name!r} is not a DNS label; use lower-case letters, digits and '-', starting "
            "with a letter"
        )
    return None


def autoscale_problems(
    autoscale: Autoscale,
    each_replica: tuple[float, int] | None,
    *,
    engine_scales: bool,
    max_replicas: int,
    quota: dict[str, object],
    team: str,
) -> list[FieldError]:
    """Why a team may not have this autoscaling (empty: it may). A site admin bounds it
    twice: `max_replicas` (the server's `--serving-max-replicas`) for every team, and the
    team's quota (`cpu`, `memory`), which the model server at its most replicas must fit
    alone; Kubernetes' ResourceQuota refuses pods past it anyway, but silently to the
    member (the autoscaler would want pods that never come). `each_replica`: (cores,
    bytes) one replica asks, as the engine renders it (`Engine.model_server_request`)."""
    where = "autoscale.maxReplicas"
    if not engine_scales:
        return [
            FieldError(
                "autoscale",
                "this server's engine runs each model server as one process; autoscaling "
                "needs the Kubernetes engine (leave autoscale out)",
            )
        ]
    asked = autoscale.max_replicas
    if asked > max_replicas:
        return [
            FieldError(
                where,
                f"{asked} is more than this server allows ({max_replicas}: its "
                "--serving-max-replicas); ask for fewer, or ask a site admin",
            )
        ]
    if each_replica is None:  # the engine counts no replicas
        return []
    cpu, memory = each_replica
    problems: list[FieldError] = []
    # In whole units (millicores, bytes): 3 x 0.1 CPU fits a quota of 0.3.
    limits = (("cpu", 1000, cpu, _cores), ("memory", 1, memory, _gib))
    for key, unit, per_replica, show in limits:
        allowed = quota.get(key)
        each = round(per_replica * unit)
        if not isinstance(allowed, int | float) or each <= 0:
            continue
        if asked * each > round(allowed * unit):
            fits = round(allowed * unit) // each
            problems.append(
                FieldError(
                    where,
                    f"{asked} replicas of {show(per_replica)} each need "
                    f"{show(asked * each / unit)}, more than team {team}'s quota of "
                    f"{show(allowed)} allows (at most {fits}); "
                    "ask for fewer or smaller replicas, or a larger quota from a site admin",
                )
            )
    return problems


def _gib(value: float) -> str:
    return f"{value / 2**30:g}Gi"


def _cores(value: float) -> str:
    return f"{value:g} CPU"


def export_dir(job: Job) -> Path | None:
    return Path(job.output_dir) / contract.EXPORT_SUBDIR if job.output_dir else None


def job_exports(job: Job) -> list[int]:
    """The versions a job exported (where the server can see its output folder)."""
    return exported_versions(job.output_dir, contract.EXPORT_SUBDIR)  # no link followed


class ModelServers:
    def __init__(
        self,
        settings: ServerSettings,
        engine: Engine,
        sessions: sessionmaker[Session],
        key: bytes,
    ) -> None:
        self.settings = settings
        self.engine = engine
        self.sessions = sessions
        self.key = key
        self._lock = threading.Lock()
        self._observed: dict[str, WorkloadStatus] = {}
        self._counts: dict[str, list[float]] = {}
        """id -> [requests, errors, last request time] not yet added to the row."""
        self._last_start: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def secret(self, server_id: str) -> str:
        """The model server's token: derived, so a restarted server knows it again."""
        return hmac.new(self.key, f"model-server:{server_id}".encode(), hashlib.sha256).hexdigest()

    def workload(self, db: Session, row: ModelServer) -> tuple[Team, ModelServerWorkload]:
        """The row as its engine's workload. Raises NotAvailable when its team or job is
        gone."""
        team = db.get(Team, row.team_id)
        job = db.get(Job, row.job_id) if row.job_id else None
        if team is None or job is None:
            raise NotAvailable(f"the job {row.job_name} of model server {row.name} is gone")
        return team, ModelServerWorkload(
            id=row.id,
            name=row.name,
            job=load_job_text(job.spec, f"job {job.name!r}"),
            export_dir=Path(row.model_base_path),
            version=row.version,
            resources=Resources.model_validate(row.resources) if row.resources else None,
            runtime=row.runtime,
            secret=self.secret(row.id),
            autoscale=Autoscale.model_validate(row.autoscale) if row.autoscale else None,
        )

    # -- create, stop ---------------------------------------------------------------------

    def create(
        self,
        db: Session,
        team: Team,
        job: Job,
        user_id: int,
        *,
        name: str | None,
        version: int | None,
        resources: Resources,
        runtime: str | None = None,
        autoscale: Autoscale | None = None,
    ) -> ModelServer:
        """A model server for the job's latest export (or `version`), run by `runtime`
        (None: the engine's default), its replicas following its load within `autoscale`
        (None: one). Raises SpecError (per field) or ServerConflict."""
        name = name or job.name
        problem = name_problem(name)
        if problem:
            raise SpecError([FieldError("name", problem)], "model server")
        if autoscale is not None:
            problems = autoscale_problems(
                autoscale,
                self.engine.model_server_request(resources),
                engine_scales=self.engine.features.autoscale,
                max_replicas=self.settings.serving_max_replicas,
                quota=dict(team.quota or {}),
                team=team.name,
            )
            if problems:
                raise SpecError(problems, "model server")
        try:
            chosen = self.engine.model_server_runtime(runtime)
        except ValueError as exc:
            raise SpecError([FieldError("runtime", str(exc))], "model server") from None
        clash = db.scalars(
            select(ModelServer).where(
                ModelServer.team_id == team.id,
                ModelServer.name == name,
                ModelServer.state == RUNNING,
            )
        ).first()
        if clash is not None:
            raise ServerConflict(
                f"team {team.name} already serves a model named {name!r}; stop it or choose "
                "another name (name=...)"
            )
        folder = export_dir(job)
        if folder is None:
            raise SpecError(
                [FieldError("job", "the server cannot see this job's output folder")],
                "model server",
            )
        _, why = choose_version(job_exports(job), version)
        if why is not None:
            raise SpecError([FieldError("version" if version else "job", why)], "model server")
        row = ModelServer(
            id=uuid.uuid4().hex[:16],
            team_id=team.id,
            job_id=job.id,
            job_name=job.name,
            name=name,
            model_base_path=str(folder),
            version=version,
            resources=resources.model_dump(exclude_none=True, exclude_defaults=True),
            runtime=chosen,
            autoscale=autoscale.model_dump(by_alias=True) if autoscale else None,
            handle={},
            state=RUNNING,
            restarts=0,
            requests=0,
            errors=0,
            created_by=user_id,
            created_at=time.time(),
        )
        db.add(row)
        db.commit()
        try:
            self._start(db, row)
        except Exception as exc:
            log.exception("starting model server %s failed", row.id)
            row.state, row.stopped_at = STOPPED, time.time()
            db.commit()
            raise SpecError(
                [FieldError("job", f"the model server could not start: {exc}")], "model server"
            ) from None
        db.commit()
        return row

    def _start(self, db: Session, row: ModelServer) -> None:
        team, workload = self.workload(db, row)
        handle = self.engine.start(tenant_of(team), workload)
        row.handle = dict(handle.data)
        self._last_start[row.id] = time.monotonic()
        with self._lock:
            self._observed[row.id] = WorkloadStatus(Health.STARTING, "starting")

    def roll(self, db: Session, row: ModelServer, version: int | None) -> None:
        """Serve `version` (None: the latest, and newer ones) from now on: the engine rolls
        it (Kubernetes: a rolling update with no gap; locally: the process restarted).
        Raises SpecError naming `version`, or NotAvailable when its job is gone."""
        if row.state != RUNNING:
            raise SpecError(
                [FieldError("version", "the model server is stopped; serve the job again")],
                "model server",
            )
        job = db.get(Job, row.job_id) if row.job_id else None
        if job is None:
            raise NotAvailable(f"the job {row.job_name} of model server {row.name} is gone")
        _, why = choose_version(job_exports(job), version)
        if why is not None:
            raise SpecError([FieldError("version", why)], "model server")
        team, old = self.workload(db, row)
        row.version = version
        _, new = self.workload(db, row)
        handle = self.engine.roll(tenant_of(team), old, new, Handle(row.handle or {}))
        row.handle = dict(handle.data)
        self._last_start[row.id] = time.monotonic()
        db.commit()
        log.info("model server %s (%s) rolled to version %s", row.id, row.name, version)

    def stop(self, db: Session, row: ModelServer) -> None:
        if row.state == RUNNING:
            try:
                team, workload = self.workload(db, row)
            except NotAvailable:
                pass
            else:
                self.engine.stop(tenant_of(team), workload, Handle(row.handle or {}))
            row.handle = {}
            row.state, row.stopped_at = STOPPED, time.time()
        self._flush_one(row)
        db.commit()
        with self._lock:
            self._observed[row.id] = WorkloadStatus(Health.STOPPED)

    def stop_for_job(self, db: Session, job: Job) -> None:
        """Before a job (and its output folder) is deleted."""
        rows = db.scalars(
            select(ModelServer).where(ModelServer.job_id == job.id, ModelServer.state == RUNNING)
        ).all()
        for row in rows:
            self.stop(db, row)

    # -- reads ------------------------------------------------------------------------

    def observed(self, row: ModelServer) -> WorkloadStatus:
        if row.state != RUNNING:
            return WorkloadStatus(Health.STOPPED)
        with self._lock:
            return self._observed.get(row.id, WorkloadStatus(Health.STARTING))

    def upstream(self, db: Session, row: ModelServer) -> Upstream:
        """Where the proxy sends a request for it. Raises NotAvailable."""
        team, workload = self.workload(db, row)
        return self.engine.upstream(tenant_of(team), workload, Handle(row.handle or {}))

    def count(self, server_id: str, status: int) -> None:
        """One request answered through the proxy (kept in memory, added to the row by
        the watch loop)."""
        with self._lock:
            counts = self._counts.setdefault(server_id, [0, 0, 0.0])
            counts[0] += 1
            counts[1] += 1 if status >= 400 else 0
            counts[2] = time.time()

    def _flush_one(self, row: ModelServer) -> None:
        with self._lock:
            counts = self._counts.pop(row.id, None)
        if counts:
            row.requests += int(counts[0])
            row.errors += int(counts[1])
            row.last_request_at = counts[2]

    # -- the watch loop, start-up, shut-down ------------------------------------------------

    def watch_once(self) -> None:
        with self.sessions() as db:
            rows = db.scalars(select(ModelServer).where(ModelServer.state == RUNNING)).all()
            for row in rows:
                self._flush_one(row)
                try:
                    seen = self._observe(db, row)
                except Exception as exc:
                    log.exception("watching model server %s failed", row.id)
                    seen = WorkloadStatus(Health.FAILED, str(exc))
                with self._lock:
                    self._observed[row.id] = seen
            db.commit()

    def _observe(self, db: Session, row: ModelServer) -> WorkloadStatus:
        team, workload = self.workload(db, row)
        tenant = tenant_of(team)
        seen = self.engine.status(tenant, workload, Handle(row.handle or {}))
        if seen.exited:
            waited = time.monotonic() - self._last_start.get(row.id, 0.0)
            if waited >= RESTART_SECONDS:
                log.warning("model server %s (%s) exited; starting it again", row.id, row.name)
                self.engine.stop(tenant, workload, Handle(row.handle or {}))
                row.restarts += 1
                self._start(db, row)
        return seen

    def restore(self) -> None:
        """At start-up: adopt each running model server that still runs; start the ones
        whose process is gone anew."""
        with self.sessions() as db:
            rows = db.scalars(select(ModelServer).where(ModelServer.state == RUNNING)).all()
            for row in rows:
                try:
                    team, workload = self.workload(db, row)
                    tenant = tenant_of(team)
                    handle = Handle(row.handle or {})
                    if not self.engine.status(tenant, workload, handle).exited:
                        log.info("adopted model server %s", row.id)
                        continue
                    self.engine.stop(tenant, workload, handle)
                    self._start(db, row)
                except Exception:
                    log.exception("restarting model server %s failed", row.id)
            db.commit()

    def _loop(self) -> None:
        while not self._stop.wait(2.0):
            try:
                self.watch_once()
            except Exception:
                log.exception("the model server watch failed")

    def start_loop(self) -> None:
        try:
            self.restore()
        except Exception:
            log.exception("restoring model servers failed")
        self._thread = threading.Thread(target=self._loop, name="tfkube-serving", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the loop; release every model server (the local engine stops its process);
        the rows stay running, so the next start of the server brings them back."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        with self.sessions() as db:
            rows = db.scalars(select(ModelServer).where(ModelServer.state == RUNNING)).all()
            for row in rows:
                self._flush_one(row)
                try:
                    team, workload = self.workload(db, row)
                    if not self.engine.release(tenant_of(team), workload, Handle(row.handle or {})):
                        row.handle = {}
                except Exception:
                    log.exception("releasing model server %s failed", row.id)
            db.commit()
