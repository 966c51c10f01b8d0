"""Model servers: serve a job's exported model (the latest or a chosen version), list the
team's servers with URL, status, version and request counts, stop, delete. Requests to a
model go through the proxy: `<url>:predict` (routes/proxy.py, kind `model`)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, Field, ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from tfkube.server.api.deps import CurrentUser, JobDep, PlatformDep, SessionDep, not_found
from tfkube.server.api.errors import FieldHTTPError
from tfkube.server.core.scopes import Scope, visible
from tfkube.server.core.tables import ModelServer, Team, User
from tfkube.server.workloads.model_servers import KIND, ServerConflict
from tfkube.spec import Resources, SpecError, errors_from
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


def server_out(
    db: Session, row: ModelServer, base_url: str, platform: PlatformDep
) -> ModelServerOut:
    team = db.get(Team, row.team_id)
    creator = db.get(User, row.created_by) if row.created_by else None
    seen = platform.model_servers.observed(row)
    return ModelServerOut(
        id=row.id,
        team=team.name if team else "",
        name=row.name,
        job=row.job_name,
        job_id=row.job_id,
        version=row.version,
        serving_version=seen.version,
        status=seen.health.value,
        message=seen.message,
        url=f"{base_url}/proxy/{KIND}/{row.id}/v1/models/{row.name}",
        requests=row.requests,
        errors=row.errors,
        last_request_at=row.last_request_at,
        restarts=row.restarts,
        resources=dict(row.resources or {}),
        created_by=creator.name if creator else None,
        created_at=row.created_at,
        stopped_at=row.stopped_at,
    )


def _get(db: Session, server_id: str, principal: CurrentUser) -> ModelServer:
    row = db.get(ModelServer, server_id)
    if row is None or not visible(principal.actor, row.team_id):
        raise not_found(f"model server {server_id!r}")
    principal.require(Scope.SERVING_READ, row.team_id)
    return row


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
    when a running model server of the team has that name."""
    principal.require(Scope.SERVING_WRITE, job.team_id)
    body = body or ServeIn()
    team = db.get(Team, job.team_id)
    assert team is not None
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
        )
    except SpecError as exc:
        raise FieldHTTPError([(e.field, e.message) for e in exc.errors], str(exc)) from None
    except ServerConflict as exc:
        raise HTTPException(409, str(exc)) from None
    return server_out(db, row, platform.settings.base_url, platform)


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
    query = select(ModelServer)
    if not principal.actor.site_admin:
        query = query.where(ModelServer.team_id.in_(list(principal.actor.roles)))
    if team is not None:
        query = query.where(ModelServer.team_id.in_(select(Team.id).where(Team.name == team)))
    if job is not None:
        query = query.where(ModelServer.job_id == job)
    if not stopped:
        query = query.where(ModelServer.state == "running")
    rows = db.scalars(query.order_by(ModelServer.created_at.desc())).all()
    base = platform.settings.base_url
    return [
        server_out(db, r, base, platform)
        for r in rows
        if Scope.SERVING_READ in _scopes(principal, r.team_id)
    ]


def _scopes(principal: CurrentUser, team_id: int) -> frozenset[Scope]:
    from tfkube.server.core.scopes import scopes

    return scopes(principal.actor, team_id)


@router.get("/model-servers/{server_id}")
def get_server(
    server_id: str, principal: CurrentUser, db: SessionDep, platform: PlatformDep
) -> ModelServerOut:
    return server_out(db, _get(db, server_id, principal), platform.settings.base_url, platform)


@router.post("/model-servers/{server_id}/stop")
def stop_server(
    server_id: str, principal: CurrentUser, db: SessionDep, platform: PlatformDep
) -> ModelServerOut:
    """Stop it (its process, or its Deployment); it stays listed as stopped."""
    row = _get(db, server_id, principal)
    principal.require(Scope.SERVING_WRITE, row.team_id)
    platform.model_servers.stop(db, row)
    return server_out(db, row, platform.settings.base_url, platform)


@router.delete("/model-servers/{server_id}", status_code=204)
def delete_server(
    server_id: str, principal: CurrentUser, db: SessionDep, platform: PlatformDep
) -> None:
    row = _get(db, server_id, principal)
    principal.require(Scope.SERVING_WRITE, row.team_id)
    platform.model_servers.stop(db, row)
    db.delete(row)
    db.commit()
