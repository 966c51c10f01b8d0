"""Teams as the API and the pages read them: one by name (another team is not found),
the actor's list, the members, the teams where the actor holds a scope, and what a team
uses now (`usage`)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from tfkube.server.core.scopes import Actor, Scope, allowed, visible
from tfkube.server.core.tables import Job, Membership, Team, User
from tfkube.server.queries.views import team_out
from tfkube.wire import MemberOut, TeamOut


def get(db: Session, team_id: int) -> Team:
    """The team of a row the caller holds (it exists: a team's rows go with it)."""
    team = db.get(Team, team_id)
    if team is None:
        raise LookupError(f"team {team_id} is gone")
    return team


def named(db: Session, name: str) -> Team | None:
    """A team by name, whoever asks (site admins' business: creating one)."""
    return db.scalars(select(Team).where(Team.name == name)).first()


def find(db: Session, actor: Actor, name: str) -> Team | None:
    """A team by name, if the actor may know of it (else None)."""
    found = named(db, name)
    if found is None or not visible(actor, found.id):
        return None
    return found


def view(team: Team, actor: Actor) -> TeamOut:
    """A team with the actor's role in it (None: a site admin who is no member)."""
    role = actor.roles.get(team.id)
    return team_out(team, role.value if role else None)


def list_teams(db: Session, actor: Actor) -> list[TeamOut]:
    """The actor's teams (a site admin's: every team), by name."""
    teams = db.scalars(select(Team).order_by(Team.name)).all()
    return [view(t, actor) for t in teams if visible(actor, t.id)]


def members(db: Session, team_id: int) -> list[MemberOut]:
    """The team's members and their roles, by name."""
    rows = db.execute(
        select(User.name, Membership.role)
        .join(Membership, Membership.user_id == User.id)
        .where(Membership.team_id == team_id)
        .order_by(User.name)
    ).all()
    return [MemberOut(user=name, role=role) for name, role in rows]


def names_allowed(
    db: Session, actor: Actor, scope: Scope, *, members_only: bool = False
) -> list[str]:
    """The names of the teams where the actor holds `scope`, sorted (`members_only`: of
    those, the ones the actor is a member of, for what is one's own in a team)."""
    teams = db.scalars(select(Team).order_by(Team.name)).all()
    return [
        t.name
        for t in teams
        if (not members_only or t.id in actor.roles) and allowed(actor, scope, t.id)
    ]


@dataclass(frozen=True)
class TeamUsage:
    """What a team uses now: the resources its running jobs requested (what the local
    queue counts against the quota) and how many jobs it has in each state of the
    server's record."""

    cpu: float
    """CPUs requested by the team's running jobs."""
    memory: int
    """Bytes of memory requested by them."""
    gpu: int
    running: int
    """Jobs on the engine (started, not finished)."""
    queued: int
    """Jobs waiting in the server's queue."""


def usage(db: Session, team_id: int) -> TeamUsage:
    live = db.scalars(select(Job.request).where(Job.team_id == team_id, Job.state == "live")).all()
    queued = db.scalar(
        select(func.count()).select_from(Job).where(Job.team_id == team_id, Job.state == "queued")
    )
    return TeamUsage(
        cpu=sum(float((r or {}).get("cpu", 0)) for r in live),
        memory=sum(int((r or {}).get("memory", 0)) for r in live),
        gpu=sum(int((r or {}).get("gpu", 0)) for r in live),
        running=len(live),
        queued=int(queued or 0),
    )
