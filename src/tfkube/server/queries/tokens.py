"""A user's personal API tokens as the API and the pages read them: the list, and one of
one's own (anyone else's is not found)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from tfkube.server.core.tables import ApiToken, Team
from tfkube.server.queries.views import token_out
from tfkube.wire import TokenOut


def list_tokens(db: Session, user_id: int) -> list[TokenOut]:
    """The user's tokens, oldest first (revoked and expired ones too), each with the team
    it is limited to (a notebook's), if it is."""
    rows = db.execute(
        select(ApiToken, Team.name)
        .outerjoin(Team, Team.id == ApiToken.team_id)
        .where(ApiToken.user_id == user_id)
        .order_by(ApiToken.id)
    ).all()
    return [token_out(token, team) for token, team in rows]


def find_own(db: Session, user_id: int, public_id: str) -> ApiToken | None:
    """One of the user's tokens by its public id (another user's: None)."""
    token = db.scalars(select(ApiToken).where(ApiToken.public_id == public_id)).first()
    if token is None or token.user_id != user_id:
        return None
    return token
