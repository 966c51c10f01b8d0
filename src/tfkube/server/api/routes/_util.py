"""Small helpers the route modules share."""

from __future__ import annotations

from fastapi import HTTPException
from sqlalchemy import select
from sqlalchemy.orm import Session

from tfkube.server.core.tables import Membership, Team, User
from tfkube.server.platform import Platform


class FieldHTTPError(HTTPException):
    """A 422 naming fields: rendered as {detail, errors: [{field, message}]}."""

    def __init__(
        self, errors: list[tuple[str, str]], detail: str = "the request is not valid"
    ) -> None:
        super().__init__(422, detail)
        self.errors = errors


def field_error(field: str, message: str) -> FieldHTTPError:
    return FieldHTTPError([(field, message)], f"{field}: {message}")


def teams_of(db: Session, user: User) -> dict[str, str]:
    rows = db.execute(
        select(Team.name, Membership.role)
        .join(Membership, Membership.team_id == Team.id)
        .where(Membership.user_id == user.id)
        .order_by(Team.name)
    ).all()
    return dict(rows)


def prepare_team(platform: Platform, db: Session, team: Team) -> None:
    """Make the team's folder or namespace and quota, then commit; when the engine refuses
    (a cluster down, RBAC), nothing is kept and the caller hears why (502)."""
    try:
        platform.engines.prepare_team(team)
    except Exception as exc:
        db.rollback()
        raise HTTPException(
            502, f"the engine could not prepare team {team.name} ({team.namespace}): {exc}"
        ) from None
    db.commit()
