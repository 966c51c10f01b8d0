"""Model servers of the teams: create (for a job's latest export, or a chosen version),
watch, count, stop; survive a restart of the server.

    POST /api/v1/jobs/<id>/model-servers -> create:
        choose_version(exports of <job output>/export) -> a row (state running) ->
          local:      `python -m tfkube.serving` on a free loopback port, with a secret
                      only the proxy sends (so the port alone answers nothing)
          kubernetes: render_model_server (the runtime asked for, else the server's
                      --serving-runtime) -> server-side apply in the team's namespace
    /proxy/model/<id>/v1/models/<name>...  -> the process (or the Service), counted here
    watch loop (a thread, every 2 s): local processes probed (`GET /v1/models/<name>`),
        a dead one restarted (at most every RESTART_SECONDS); Deployments read; request
        counts added to the rows
    start-up: a running row whose process still lives (PID + start time) and answers with
        our secret is adopted; anything else is started anew
    shut-down: every local model server stopped by PID; the rows stay `running`, so the
        next start brings them back

Decisions (`observe_local`, `observe_deployment`, `name_problem`, `runtime_for`) are pure
functions.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tfkube.render import ServingRuntime, parse_runtime
from tfkube.server._engines import Engines
from tfkube.server._loopback import alive, free_port, spawn, stop
from tfkube.server.core.config import ServerSettings
from tfkube.server.core.tables import Job, ModelServer, Team
from tfkube.server.outputs.files import exported_versions
from tfkube.serving import choose_version
from tfkube.spec import FieldError, Resources, SpecError, load_job_text

log = logging.getLogger("tfkube.server")

RUNNING, STOPPED = "running", "stopped"
KIND = "model"
"""The proxy kind: `/proxy/model/<id>/...`."""
EXPORT_SUBDIR = "export"
RESTART_SECONDS = 10.0
"""A crashed local model server is started again at most this often."""
TOKEN_ENV = "TFKUBE_SERVING_TOKEN"
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


def runtime_for(engine: str, asked: str | None, default: ServingRuntime) -> ServingRuntime:
    """A new model server's runtime (pure): in a cluster the one asked for, else the
    server's default; on the local engine always tfkube's own model server (a process
    here: the stock TensorFlow Serving has no local form). ValueError says why not."""
    if engine == "local":
        runtime = parse_runtime(asked, ServingRuntime.TFKUBE)
        if runtime is not ServingRuntime.TFKUBE:
            raise ValueError(
                f"the local engine runs tfkube's model server only; leave the runtime out "
                f"or choose {ServingRuntime.TFKUBE.value}"
            )
        return runtime
    return parse_runtime(asked, default)


def base_env(extra: Mapping[str, str]) -> dict[str, str]:
    """The server's environment without its own TFKUBE_* settings (a database URL may hold
    a password), plus `extra`: what a process the server starts gets."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFKUBE_")}
    env.update(extra)
    return env


def export_dir(job: Job) -> Path | None:
    return Path(job.output_dir) / EXPORT_SUBDIR if job.output_dir else None


def job_exports(job: Job) -> list[int]:
    """The versions a job exported (where the server can see its output folder)."""
    return exported_versions(job.output_dir, EXPORT_SUBDIR)  # no link the job made followed


@dataclass(frozen=True)
class Observed:
    status: str
    """Starting | Ready | Failed | Stopped."""
    version: int | None = None
    """The version it serves now."""
    message: str = ""


def observe_local(alive_now: bool, answer: Mapping[str, Any] | None) -> Observed:
    """A local model server from its process and its status answer (pure)."""
    if not alive_now:
        return Observed("Failed", None, "the model server process exited; restarting it")
    if answer is None:
        return Observed("Starting", None, "loading TensorFlow")
    versions = answer.get("model_version_status") or []
    available = [int(v["version"]) for v in versions if v.get("state") == "AVAILABLE"]
    if available:
        return Observed("Ready", max(available))
    failed = [v for v in versions if (v.get("status") or {}).get("error_code", "OK") != "OK"]
    if failed and not any(v.get("state") == "LOADING" for v in versions):
        message = (failed[0].get("status") or {}).get("error_message") or "loading failed"
        return Observed("Failed", None, f"version {failed[0].get('version')}: {message}")
    return Observed("Starting", None, "loading the model")


def observe_deployment(deployment: Mapping[str, Any] | None) -> Observed:
    """A model server in a cluster from its Deployment (pure)."""
    if deployment is None:
        return Observed("Failed", None, "its Deployment is gone")
    status = deployment.get("status") or {}
    if (status.get("readyReplicas") or 0) >= 1:
        return Observed("Ready")
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Progressing" and condition.get("status") == "False":
            return Observed("Failed", None, condition.get("message") or "not progressing")
    return Observed("Starting", None, "waiting for its pod to be ready")


class ModelServers:
    def __init__(
        self,
        settings: ServerSettings,
        engines: Engines,
        sessions: sessionmaker[Session],
        key: bytes,
    ) -> None:
        self.settings = settings
        self.engines = engines
        self.sessions = sessions
        self.key = key
        self._lock = threading.Lock()
        self._observed: dict[str, Observed] = {}
        self._counts: dict[str, list[float]] = {}
        """id -> [requests, errors, last request time] not yet added to the row."""
        self._last_start: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def local(self) -> bool:
        return self.engines.kind == "local"

    def secret(self, server_id: str) -> str:
        """The local model server's token: derived, so a restarted server knows it again."""
        return hmac.new(self.key, f"model-server:{server_id}".encode(), hashlib.sha256).hexdigest()

    def log_file(self, server_id: str) -> Path:
        return self.settings.data_dir / "serving" / f"{server_id}.log"

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
    ) -> ModelServer:
        """A model server for the job's latest export (or `version`), run by `runtime`
        (None: the server's default). Raises SpecError (per field) or ServerConflict."""
        name = name or job.name
        problem = name_problem(name)
        if problem:
            raise SpecError([FieldError("name", problem)], "model server")
        try:
            chosen = runtime_for(self.engines.kind, runtime, self.settings.serving_runtime)
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
            self._start(row, team, job, chosen)
        except Exception as exc:
            log.exception("starting model server %s failed", row.id)
            row.state, row.stopped_at = STOPPED, time.time()
            db.commit()
            raise SpecError(
                [FieldError("job", f"the model server could not start: {exc}")], "model server"
            ) from None
        db.commit()
        return row

    def _start(
        self, row: ModelServer, team: Team, job: Job | None, runtime: ServingRuntime
    ) -> None:
        if self.local:
            self._start_local(row)
            return
        from tfkube.engines.kubernetes import apply_objects
        from tfkube.render import ModelServerSpec, render_model_server

        if job is None:
            raise RuntimeError(f"job {row.job_name} is gone")
        spec = ModelServerSpec(
            name=row.name,
            namespace=team.namespace,
            job=load_job_text(job.spec, f"job {job.name!r}"),
            version=row.version,
            resources=Resources.model_validate(row.resources or {"cpu": "1", "memory": "2Gi"}),
            runtime=runtime,
        )
        apply_objects(self.engines.api_client(), render_model_server(spec))

    def _start_local(self, row: ModelServer) -> None:
        port = free_port()
        argv = [
            sys.executable,
            "-m",
            "tfkube.serving",
            f"--model_name={row.name}",
            f"--model_base_path={row.model_base_path}",
            f"--rest_api_port={port}",
            "--file_system_poll_wait_seconds=2",
        ]
        if row.version is not None:
            argv.append(f"--model_version={row.version}")
        _, started = spawn(
            argv,
            port=port,
            env=base_env({TOKEN_ENV: self.secret(row.id)}),
            log=self.log_file(row.id),
        )
        row.pid, row.pid_started, row.port = started.pid, started.started, port
        self._last_start[row.id] = time.monotonic()
        with self._lock:
            self._observed[row.id] = Observed("Starting", None, "loading TensorFlow")

    def stop(self, db: Session, row: ModelServer) -> None:
        if row.state == RUNNING:
            self._end(db, row)
            row.state, row.stopped_at = STOPPED, time.time()
        self._flush_one(row)
        db.commit()
        with self._lock:
            self._observed[row.id] = Observed("Stopped")

    def _end(self, db: Session, row: ModelServer) -> None:
        if self.local:
            stop(row.pid, row.pid_started)
            row.pid = row.pid_started = None
            return
        from tfkube.engines.kubernetes import delete_objects
        from tfkube.render import ModelServerSpec, render_model_server

        team = db.get(Team, row.team_id)
        job = db.get(Job, row.job_id) if row.job_id else None
        if team is None or job is None:
            return
        spec = ModelServerSpec(
            row.name, team.namespace, load_job_text(job.spec, f"job {job.name!r}")
        )
        # By name: the stock runtime's objects are a superset of tfkube's (gone is fine).
        delete_objects(self.engines.api_client(), render_model_server(spec))

    def stop_for_job(self, db: Session, job: Job) -> None:
        """Before a job (and its output folder) is deleted."""
        rows = db.scalars(
            select(ModelServer).where(ModelServer.job_id == job.id, ModelServer.state == RUNNING)
        ).all()
        for row in rows:
            self.stop(db, row)

    # -- reads ------------------------------------------------------------------------

    def observed(self, row: ModelServer) -> Observed:
        if row.state != RUNNING:
            return Observed("Stopped")
        with self._lock:
            return self._observed.get(row.id, Observed("Starting"))

    def upstream(self, row: ModelServer) -> tuple[str, dict[str, str]]:
        """Where the proxy sends a request for it (local engine), with the secret."""
        if not row.port:
            raise LookupError("the model server is not running")
        return f"http://127.0.0.1:{row.port}", {"Authorization": f"Bearer {self.secret(row.id)}"}

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

    def _probe(self, row: ModelServer) -> dict[str, Any] | None:
        base, headers = self.upstream(row)
        try:
            r = httpx.get(f"{base}/v1/models/{row.name}", headers=headers, timeout=2.0)
        except httpx.HTTPError:
            return None
        if r.status_code == 404 and "error" in r.text:
            return {"model_version_status": []}
        return dict(r.json()) if r.status_code == 200 else None

    def watch_once(self) -> None:
        with self.sessions() as db:
            rows = db.scalars(select(ModelServer).where(ModelServer.state == RUNNING)).all()
            for row in rows:
                self._flush_one(row)
                try:
                    seen = self._observe(db, row)
                except Exception as exc:
                    log.exception("watching model server %s failed", row.id)
                    seen = Observed("Failed", None, str(exc))
                with self._lock:
                    self._observed[row.id] = seen
            db.commit()

    def _observe(self, db: Session, row: ModelServer) -> Observed:
        if not self.local:
            from tfkube.kube.names import model_server_name
            from tfkube.kube.rest import Kube

            team = db.get(Team, row.team_id)
            if team is None:
                return Observed("Failed", None, "its team is gone")
            deployment = Kube(self.engines.api_client()).get(
                "apps/v1", "Deployment", team.namespace, model_server_name(row.name)
            )
            return observe_deployment(deployment)
        is_alive = alive(row.pid, row.pid_started)
        seen = observe_local(is_alive, self._probe(row) if is_alive else None)
        if not is_alive:
            waited = time.monotonic() - self._last_start.get(row.id, 0.0)
            if waited >= RESTART_SECONDS:
                log.warning("model server %s (%s) exited; starting it again", row.id, row.name)
                stop(row.pid, row.pid_started)
                row.restarts += 1
                self._start_local(row)
        return seen

    def restore(self) -> None:
        """At start-up: adopt each running local model server that is still ours and
        answers; start the others anew."""
        if not self.local:
            return
        with self.sessions() as db:
            rows = db.scalars(select(ModelServer).where(ModelServer.state == RUNNING)).all()
            for row in rows:
                if alive(row.pid, row.pid_started) and self._probe(row) is not None:
                    log.info("adopted model server %s (pid %s)", row.id, row.pid)
                    continue
                stop(row.pid, row.pid_started)
                try:
                    self._start_local(row)
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
        """Stop the loop and every local model server (by PID); the rows stay running,
        so the next start of the server starts them again."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        with self.sessions() as db:
            rows = db.scalars(select(ModelServer).where(ModelServer.state == RUNNING)).all()
            for row in rows:
                self._flush_one(row)
                if self.local:
                    stop(row.pid, row.pid_started)
                    row.pid = row.pid_started = None
            db.commit()
