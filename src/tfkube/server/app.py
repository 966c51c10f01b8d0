"""The FastAPI application and `serve`: start-up (migrate, keys, set-up link, the job
sync loop), the routers, error shapes, shut-down (every process it started, by PID)."""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session, sessionmaker
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tfkube.engines import open_engine
from tfkube.server import web
from tfkube.server.accounts import needs_setup, new_setup_token, secret_key
from tfkube.server.api import middleware as guards
from tfkube.server.api.errors import FieldHTTPError
from tfkube.server.api.routes import (
    artifacts,
    auth,
    checkpoints,
    code,
    data,
    health,
    jobs,
    logs,
    notebooks,
    notifications,
    proxy,
    secrets,
    serving,
    ship,
    teams,
    tokens,
    users,
    workload_origin,
)
from tfkube.server.api.routes import (
    metrics as metrics_route,
)
from tfkube.server.api.routes.workload_origin import WorkloadHosts
from tfkube.server.artifacts import BlobStore, BlobStoreError
from tfkube.server.core.config import ServerSettings
from tfkube.server.core.db import database_url, make_engine, migrate, session_factory
from tfkube.server.core.tables import Job, Team
from tfkube.server.jobs.service import JobService
from tfkube.server.metrics import Metrics
from tfkube.server.notifications import Notifier
from tfkube.server.outputs.archive import BOTH, LOCAL
from tfkube.server.platform import Platform
from tfkube.server.retention import Retention
from tfkube.server.s3blobs import ArchiveReader, OutputArchiver, S3BlobStore, open_client
from tfkube.server.tenants import prepare_teams_in_background
from tfkube.server.workloads.model_servers import ModelServers
from tfkube.server.workloads.notebooks import Notebooks
from tfkube.server.workloads.tensorboards import TensorBoards
from tfkube.wire import ErrorBody

log = logging.getLogger("tfkube.server")


def open_blobs(settings: ServerSettings) -> BlobStore:
    """The artifact store: `<data-dir>/blobs`, or the `--store` bucket (checked by the
    command before the server starts: `s3blobs.check_store`)."""
    if settings.store is None:
        return BlobStore(settings.data_dir / "blobs")
    cache = settings.data_dir / "s3-cache" / "blobs"
    return S3BlobStore(cache, open_client(settings.store), settings.store)


def open_archiver(blobs: BlobStore, sessions: sessionmaker[Session]) -> OutputArchiver | None:
    """With `--store s3://`: what archives an ended job's outputs and logs there, and
    records it on the job's row (an archive written for a job deleted meanwhile goes)."""
    if not isinstance(blobs, S3BlobStore):
        return None

    def archived(job_id: str, key: str) -> None:
        with sessions() as db:
            row = db.get(Job, job_id)
            if row is None:
                archiver.remove_key(key, job_id)
                return
            row.archive_key, row.archived_at = key, time.time()
            if row.outputs_at == LOCAL:
                row.outputs_at = BOTH
            db.commit()

    archiver = OutputArchiver(blobs, archived)
    return archiver


def archive_ended(archiver: OutputArchiver, row: Job, team: Team) -> None:
    """An ended job's outputs archived once: never again once archived (the local copy
    may be gone by then)."""
    if row.outputs_at == LOCAL and row.archived_at is None:
        archiver.submit(team.name, row.id, row.output_dir)


def build_platform(settings: ServerSettings) -> Platform:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    # Not ours to change when it is a volume's root (in a pod: root's, our group's).
    with contextlib.suppress(PermissionError):
        settings.data_dir.chmod(0o700)
    database = make_engine(database_url(settings.database_url, settings.data_dir))
    migrate(database)
    sessions = session_factory(database)
    with sessions() as db:
        key = secret_key(db)
    runs_on = open_engine(settings.engine_settings)
    blobs = open_blobs(settings)
    blobs.clear_incoming()
    jobs_service = JobService(settings, runs_on, sessions, blobs, key)
    archiver = open_archiver(blobs, sessions)
    if archiver is not None:
        jobs_service.on_ended = lambda row, team: archive_ended(archiver, row, team)
        jobs_service.on_deleted = lambda row, team: archiver.remove(team.name, row.id)
    model_servers = ModelServers(settings, runs_on, sessions, key)
    notebooks = Notebooks(settings, runs_on, sessions, blobs, key)
    notifier = Notifier(settings, sessions, key)
    jobs_service.on_event = notifier.enqueue
    platform = Platform(
        settings,
        database,
        sessions,
        key,
        runs_on,
        jobs_service,
        blobs,
        model_servers,
        notebooks,
        TensorBoards(runs_on, settings.tensorboard_idle_seconds),
        notifier,
    )
    platform.starting.append(lambda: prepare_teams_in_background(runs_on, sessions))
    if archiver is not None:
        assert isinstance(blobs, S3BlobStore)
        platform.archive = ArchiveReader(blobs)
        retention = Retention(
            sessions,
            archiver,
            settings.keep_local_days,
            settings.archive_retention_days,
            settings.retention_interval,
        )
        platform.starting.append(retention.start_loop)
        platform.closing.append(retention.stop_loop)
        platform.closing.append(archiver.close)
    return platform


def announce_setup(platform: Platform) -> str | None:
    """When nobody can sign in yet: a fresh one-time set-up link, printed (not logged)."""
    with platform.sessions() as db:
        if not needs_setup(db):
            return None
        token = new_setup_token(db)
    link = f"{platform.settings.base_url}/setup?token={token}"
    print(
        f"tfkube server: no users yet. Open this one-time link to create the first admin:\n"
        f"  {link}\n"
        f"(or: tfkube login {platform.settings.base_url} --setup-token {token})",
        file=sys.stderr,
        flush=True,
    )
    return link


class _Measure:
    """Every answer: its latency by route template (Prometheus), and `no-store` and
    `nosniff` headers. Plain ASGI, observed when the answer starts (a stream's life is not
    its latency): Starlette's BaseHTTPMiddleware costs a task and a body copy per request,
    which showed in the server_load benchmark."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.setdefault("Cache-Control", "no-store")
                headers.setdefault("X-Content-Type-Options", "nosniff")
                elapsed = time.perf_counter() - started
                template = getattr(scope.get("route"), "path", "(unmatched)")
                method = scope["method"]
                self.metrics.request_seconds.labels(
                    method, template, str(message["status"])
                ).observe(elapsed)
                if template == "/api/v1/teams/{team}/jobs" and method == "POST":
                    self.metrics.submit_seconds.observe(elapsed)
            await send(message)

        await self.app(scope, receive, sending)


def error_answer(
    status: int,
    detail: str,
    errors: Iterable[tuple[str, str]] = (),
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """Every error the API answers with: one `tfkube.wire.ErrorBody` (the client reads it
    with the same model)."""
    body = ErrorBody.of(detail, errors).model_dump(mode="json")
    return JSONResponse(body, status_code=status, headers=headers)


def create_app(settings: ServerSettings, platform: Platform | None = None) -> FastAPI:
    built = platform or build_platform(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        announce_setup(built)
        built.jobs.start_loop()
        for start in built.starting:
            start()
        built.model_servers.start_loop()
        built.notebooks.start_loop()
        built.notifier.start_loop()
        app.state.proxy_client = httpx.AsyncClient(timeout=proxy.TIMEOUT)
        grpc_proxy = None
        if settings.grpc_port is not None:
            from tfkube.server.api.grpc_proxy import GrpcProxy

            grpc_proxy = GrpcProxy(built, settings.host, settings.grpc_port)
            grpc_proxy.start()
        try:
            yield
        finally:
            if grpc_proxy is not None:
                grpc_proxy.stop()
            await app.state.proxy_client.aclose()
            built.jobs.stop_loop()
            for close in built.closing:
                close()
            built.notifier.stop_loop()
            built.notebooks.close()
            built.model_servers.close()
            built.tensorboards.close()
            built.engine.close()
            built.database.dispose()

    app = FastAPI(
        title="tfkube",
        summary="Distributed TensorFlow training for teams: upload code, submit, follow.",
        version=__import__("tfkube").__version__,
        lifespan=lifespan,
        docs_url="/docs",
        openapi_url="/openapi.json",
    )
    app.state.platform = built

    @app.exception_handler(FieldHTTPError)
    async def _field_errors(_request: Request, exc: FieldHTTPError) -> JSONResponse:
        return error_answer(422, exc.detail, exc.errors)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = []
        for e in exc.errors():
            loc = [str(p) for p in e.get("loc", ()) if p not in {"body", "query", "path"}]
            errors.append((".".join(loc) or "(request)", str(e.get("msg"))))
        return error_answer(422, "; ".join(f"{f}: {m}" for f, m in errors), errors)

    @app.exception_handler(BlobStoreError)
    async def _store_down(_request: Request, exc: BlobStoreError) -> JSONResponse:
        return error_answer(503, str(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_answer(exc.status_code, exc.detail, headers=getattr(exc, "headers", None))

    metrics = built.metrics
    assert metrics is not None

    guards.install(app, built.settings.trusted_proxies)
    app.add_middleware(_Measure, metrics=metrics)
    app.add_middleware(WorkloadHosts, settings=built.settings)  # workloads' own origins

    for module in (
        health,
        auth,
        users,
        teams,
        secrets,
        tokens,
        artifacts,
        jobs,
        logs,
        code,
        data,
        metrics_route,
        serving,
        ship,
        notebooks,
        notifications,
        proxy,
        workload_origin,
    ):
        app.include_router(module.router)
    app.include_router(checkpoints.router)
    proxy.quiet_upstream_cuts()  # an upstream's cut answer: the proxy's one line, no traceback
    web.install(app)
    return app


def serve(settings: ServerSettings) -> None:
    """Run the server in this process until SIGINT/SIGTERM (uvicorn)."""
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # httpx logs every proxied request's URL (TensorBoard's queries) at INFO: not for us.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    app = create_app(settings)
    print(
        f"tfkube server: {settings.engine} engine, data in {settings.data_dir}, "
        f"listening on {settings.base_url}\n  dashboard: {settings.base_url}/  "
        f"API docs: {settings.base_url}/docs",
        file=sys.stderr,
        flush=True,
    )
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level="warning",
        access_log=False,
        proxy_headers=False,  # forwarding headers: only from --trusted-proxy (api/middleware)
        timeout_graceful_shutdown=5,
    )
