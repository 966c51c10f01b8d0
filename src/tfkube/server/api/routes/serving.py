"""Model servers: serve a job's exported model (the latest or a chosen version), list the
team's servers with URL, status, version and request counts, roll to another version,
stop, delete. Requests to a
model go through the proxy: `<url>:predict` (routes/proxy.py, kind `model`)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, Field, ValidationError
from sqlalchemy.orm import Session

from tfkube.engines import NotAvailable
from tfkube.server import queries
from tfkube.server.api.deps import CurrentUser, JobDep, PlatformDep, SessionDep, not_found
from tfkube.server.api.errors import FieldHTTPError
from tfkube.server.core.scopes import Scope
from tfkube.server.core.tables import ModelServer
from tfkube.server.outputs.archive import needs_local_copy
from tfkube.server.workloads.model_servers import ServerConflict
from tfkube.spec import Autoscale, Resources, SpecError, errors_from
from tfkube.wire import ModelServerOut

router = APIRouter(prefix="/api/v1", tags=["serving"])


class ServeIn(BaseModel):
    name: str | None = None
    """The model's name in `/v1/models/<name>` (default: the job's name)."""
    version: int | None = Field(None, ge=0)
    """An exported version (default: the latest, and newer exports as they appear)."""
    cpu: str | None = None
    """Kubernetes engine: the model server's CPU (default 1)."""
    memory: str | None = None
    """Kubernetes engine: its memory (default 2Gi)."""
    runtime: str | None = None
    """Kubernetes engine: `tensorflow-serving` (the stock image) or `tfkube` (tfkube's model
    server in tfkube's image); default: the server's `--serving-runtime`. The local engine
    runs tfkube's model server only."""
    autoscale: Autoscale | None = None
    """Kubernetes engine: `{minReplicas, maxReplicas, targetCPUUtilization (percent of
    each replica's CPU), scaleDownStabilizationSeconds}`; its replicas then follow its CPU
    load (a HorizontalPodAutoscaler). maxReplicas is bounded by the server's
    `--serving-max-replicas` and by the team's quota (422 naming `autoscale.maxReplicas`).
    Absent: one replica."""


def _get(db: Session, server_id: str, principal: CurrentUser) -> ModelServer:
    row = queries.model_servers.find(db, principal.actor, server_id)
    if row is None:
        raise not_found(f"model server {server_id!r}")
    principal.require(Scope.SERVING_READ, row.team_id)
    return row


def _view(db: Session, row: ModelServer, platform: PlatformDep) -> ModelServerOut:
    return queries.model_servers.view(
        db, row, platform.model_servers.observed, platform.settings.base_url
    )


@router.post("/jobs/{job_id}/model-servers", status_code=201)
def serve(
    job: JobDep,
    principal: CurrentUser,
    db: SessionDep,
    platform: PlatformDep,
    body: ServeIn | None = None,
) -> ModelServerOut:
    """Serve the job's latest export (or `version`) with TensorFlow Serving's REST API at
    the answer's `url`. 422 when the job exported nothing (yet) or not that version; 409
    when a running model server of the team has that name, or when the server dropped
    the job's output folder after archiving it (`--keep-local`; 410 once the archive is
    gone too): serving reads the exports from that folder. 422 naming `autoscale...` for
    autoscaling the engine or a site admin does not allow."""
    principal.require(Scope.SERVING_WRITE, job.team_id)
    if (gone := needs_local_copy(job.outputs_at, "serving")) is not None:
        raise HTTPException(*gone)
    body = body or ServeIn()
    team = queries.teams.get(db, job.team_id)
    try:
        resources = Resources.model_validate(
            {k: v for k, v in (("cpu", body.cpu), ("memory", body.memory)) if v}
        )
    except ValidationError as exc:
        errors = errors_from(exc)
        raise FieldHTTPError([(e.field, e.message) for e in errors], "bad resources") from None
    try:
        row = platform.model_servers.create(
            db,
            team,
            job,
            principal.user.id,
            name=body.name,
            version=body.version,
            resources=resources,
            runtime=body.runtime,
            autoscale=body.autoscale,
        )
    except SpecError as exc:
        raise FieldHTTPError([(e.field, e.message) for e in exc.errors], str(exc)) from None
    except ServerConflict as exc:
        raise HTTPException(409, str(exc)) from None
    return _view(db, row, platform)


@router.get("/model-servers")
def list_servers(
    principal: CurrentUser,
    db: SessionDep,
    platform: PlatformDep,
    team: str | None = None,
    job: str | None = None,
    stopped: bool = False,
) -> list[ModelServerOut]:
    """The model servers of the caller's teams (running ones; `stopped=true` adds the
    stopped), newest first; filter by team name or job id."""
    return queries.model_servers.list_servers(
        db,
        principal.actor,
        platform.model_servers.observed,
        platform.settings.base_url,
        team=team,
        job=job,
        stopped=stopped,
    )


@router.get("/model-servers/{server_id}")
def get_server(
    server_id: str, principal: CurrentUser, db: SessionDep, platform: PlatformDep
) -> ModelServerOut:
    return _view(db, _get(db, server_id, principal), platform)


class RollIn(BaseModel):
    version: int | None = Field(..., ge=0)
    """The version to serve from now on; null: the latest (and newer exports)."""


@router.patch("/model-servers/{server_id}")
def roll_server(
    server_id: str, body: RollIn, principal: CurrentUser, db: SessionDep, platform: PlatformDep
) -> ModelServerOut:
    """Roll a running model server to another exported version (`null`: the latest). On
    Kubernetes a rolling update: the old pod answers until the new version's pod is ready,
    so clients see no failed request; locally its process is restarted (a short gap).
    422 naming `version` when the job has no such export or the server is stopped."""
    row = _get(db, server_id, principal)
    principal.require(Scope.SERVING_WRITE, row.team_id)
    try:
        platform.model_servers.roll(db, row, body.version)
    except SpecError as exc:
        raise FieldHTTPError([(e.field, e.message) for e in exc.errors], str(exc)) from None
    except NotAvailable as exc:
        raise FieldHTTPError([("version", str(exc))], str(exc)) from None
    return _view(db, row, platform)


@router.post("/model-servers/{server_id}/stop")
def stop_server(
    server_id: str, principal: CurrentUser, db: SessionDep, platform: PlatformDep
) -> ModelServerOut:
    """Stop it (its process, or its Deployment); it stays listed as stopped."""
    row = _get(db, server_id, principal)
    principal.require(Scope.SERVING_WRITE, row.team_id)
    platform.model_servers.stop(db, row)
    return _view(db, row, platform)


@router.delete("/model-servers/{server_id}", status_code=204)
def delete_server(
    server_id: str, principal: CurrentUser, db: SessionDep, platform: PlatformDep
) -> None:
    row = _get(db, server_id, principal)
    principal.require(Scope.SERVING_WRITE, row.team_id)
    platform.model_servers.stop(db, row)
    db.delete(row)
    db.commit()
