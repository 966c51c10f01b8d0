"""Users as the API and the pages read them: one by name (someone else is not found but
for a site admin), the list, a user with their teams, the owners a job list can be
filtered by, the people a team admin may add (searched by name)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from tfkube.server.core.scopes import Actor
from tfkube.server.core.tables import Membership, Team, User
from tfkube.server.queries.views import user_out
from tfkube.wire import UserOut


def named(db: Session, name: str) -> User | None:
    """A user by name, whoever asks (for a team admin adding a member, a site admin)."""
    return db.scalars(select(User).where(User.name == name)).first()


def find(db: Session, actor: Actor, name: str) -> User | None:
    """A user the actor may change: oneself, or anyone for a site admin (else None)."""
    user = named(db, name)
    if user is None or (user.id != actor.user_id and not actor.site_admin):
        return None
    return user


def teams_of(db: Session, user: User) -> dict[str, str]:
    """The user's teams and their role in each, by team name."""
    rows = db.execute(
        select(Team.name, Membership.role)
        .join(Membership, Membership.team_id == Team.id)
        .where(Membership.user_id == user.id)
        .order_by(Team.name)
    ).all()
    return dict(rows)


def view(db: Session, user: User) -> UserOut:
    """A user with their teams and roles."""
    return user_out(user, teams_of(db, user))


def list_users(db: Session) -> list[UserOut]:
    """Every user, by name (a site admin's list)."""
    return [view(db, u) for u in db.scalars(select(User).order_by(User.name)).all()]


def owners(db: Session, actor: Actor) -> list[str]:
    """The names of the users whose jobs the actor may see: the members of the actor's
    teams (everyone, for a site admin), sorted."""
    query = select(User.name).order_by(User.name)
    if not actor.site_admin:
        query = query.where(
            User.id.in_(select(Membership.user_id).where(Membership.team_id.in_(list(actor.roles))))
        )
    return list(db.scalars(query))


def addable(db: Session, team_id: int, search: str = "", limit: int = 20) -> tuple[list[str], int]:
    """The enabled users who are not members of the team and whose name holds `search`
    (a team admin's picker for adding members): the first `limit` names, sorted, and how
    many match in all."""
    members = select(Membership.user_id).where(Membership.team_id == team_id)
    query = select(User.name).where(User.disabled.is_(False), User.id.not_in(members))
    if search.strip():
        query = query.where(User.name.contains(search.strip(), autoescape=True))
    total = db.scalar(select(func.count()).select_from(query.subquery())) or 0
    return list(db.scalars(query.order_by(User.name).limit(limit))), total
