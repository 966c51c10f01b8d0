"""Model servers as the API and the pages read them: one (another team's is not found),
the actor's teams' list, a job's running ones. What a model server is doing now
(`observed`: starting, ready, failed ...) is the watch loop's, in memory
(`ModelServers.observed`); the query joins it to the row."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session

from tfkube.engines import WorkloadStatus
from tfkube.server.core.scopes import Actor, Scope, scopes, visible
from tfkube.server.core.tables import ModelServer, Team, User
from tfkube.server.queries.views import model_server_out
from tfkube.server.workloads.model_servers import RUNNING
from tfkube.wire import ModelServerOut

Observed = Callable[[ModelServer], WorkloadStatus]
"""What the watch loop last saw of a model server (`ModelServers.observed`)."""


def find(db: Session, actor: Actor, server_id: str) -> ModelServer | None:
    """A model server, if the actor may know of it (else None)."""
    row = db.get(ModelServer, server_id)
    if row is None or not visible(actor, row.team_id):
        return None
    return row


def view(db: Session, row: ModelServer, observed: Observed, base_url: str) -> ModelServerOut:
    team = db.get(Team, row.team_id)
    creator = db.get(User, row.created_by) if row.created_by else None
    return model_server_out(
        row,
        team.name if team else "",
        creator.name if creator else None,
        observed(row),
        base_url,
    )


def list_servers(
    db: Session,
    actor: Actor,
    observed: Observed,
    base_url: str,
    *,
    team: str | None = None,
    job: str | None = None,
    stopped: bool = False,
) -> list[ModelServerOut]:
    """The model servers of the actor's teams that the actor may read (running ones;
    `stopped` adds the stopped), newest first; filtered by team name or job id."""
    query = select(ModelServer)
    if not actor.site_admin:
        query = query.where(ModelServer.team_id.in_(list(actor.roles)))
    if team is not None:
        query = query.where(ModelServer.team_id.in_(select(Team.id).where(Team.name == team)))
    if job is not None:
        query = query.where(ModelServer.job_id == job)
    if not stopped:
        query = query.where(ModelServer.state == RUNNING)
    rows = db.scalars(query.order_by(ModelServer.created_at.desc())).all()
    return [
        view(db, r, observed, base_url)
        for r in rows
        if Scope.SERVING_READ in scopes(actor, r.team_id)
    ]


def running_for_job(
    db: Session, job_id: str, observed: Observed, base_url: str
) -> list[ModelServerOut]:
    """The running model servers of one job's exports (the caller may read them)."""
    rows = db.scalars(
        select(ModelServer).where(ModelServer.job_id == job_id, ModelServer.state == RUNNING)
    ).all()
    return [view(db, r, observed, base_url) for r in rows]
