"""Code and data artifacts as the API and the pages read them: one (another team's is not
found), the actor's teams' list, whether an unfinished job uses one."""

from __future__ import annotations

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from tfkube.server.core.scopes import Actor, visible
from tfkube.server.core.tables import Artifact, Job, Team, User
from tfkube.server.queries.views import artifact_out
from tfkube.wire import ArtifactOut


def find(db: Session, actor: Actor, public_id: str) -> Artifact | None:
    """An artifact by its public id, if the actor may know of it (else None)."""
    found = db.scalars(select(Artifact).where(Artifact.public_id == public_id)).first()
    if found is None or not visible(actor, found.team_id):
        return None
    return found


def in_use(db: Session, artifact_id: int) -> bool:
    """Whether a job that has not ended runs this code or data set."""
    return (
        db.scalars(
            select(Job.id)
            .where(
                or_(Job.artifact_id == artifact_id, Job.data_artifact_id == artifact_id),
                Job.state != "ended",
            )
            .limit(1)
        ).first()
        is not None
    )


def view(db: Session, artifact: Artifact) -> ArtifactOut:
    team = db.get(Team, artifact.team_id)
    creator = db.get(User, artifact.created_by) if artifact.created_by else None
    return artifact_out(
        artifact,
        team.name if team else "",
        creator.name if creator else None,
        in_use(db, artifact.id),
    )


def list_artifacts(
    db: Session,
    actor: Actor,
    *,
    team: str | None = None,
    name: str | None = None,
    kind: str | None = None,
) -> list[ArtifactOut]:
    """Artifacts of the actor's teams (or one team), by team and name, newest version
    first."""
    query = select(Artifact, Team.name, User.name).join(Team, Team.id == Artifact.team_id)
    query = query.outerjoin(User, User.id == Artifact.created_by)
    if team is not None:
        query = query.where(Team.name == team)
    if name is not None:
        query = query.where(Artifact.name == name)
    if kind is not None:
        query = query.where(Artifact.kind == kind)
    rows = db.execute(query.order_by(Team.name, Artifact.name, Artifact.version.desc())).all()
    unfinished = db.execute(
        select(Job.artifact_id, Job.data_artifact_id).where(Job.state != "ended")
    ).all()
    busy = {i for pair in unfinished for i in pair if i is not None}
    return [
        artifact_out(a, team_name, creator, a.id in busy)
        for a, team_name, creator in rows
        if visible(actor, a.team_id)
    ]
