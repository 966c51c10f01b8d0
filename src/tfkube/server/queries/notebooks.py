"""Notebooks as the API and the pages read them: a user's own, each team's (anyone
else's is not found)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from tfkube.server.core.tables import Notebook, Team, User
from tfkube.server.queries.views import notebook_out
from tfkube.wire import NotebookOut


def find_own(db: Session, user_id: int, notebook_id: str) -> Notebook | None:
    """One of the user's notebooks (another user's: None)."""
    row = db.get(Notebook, notebook_id)
    if row is None or row.user_id != user_id:
        return None
    return row


def view(db: Session, row: Notebook, base_url: str) -> NotebookOut:
    team, user = db.get(Team, row.team_id), db.get(User, row.user_id)
    return notebook_out(row, team.name if team else "", user.name if user else "", base_url)


def list_own(
    db: Session, user_id: int, base_url: str, team_id: int | None = None
) -> list[NotebookOut]:
    """The user's notebooks (one per team at most; `team_id`: that team's only)."""
    query = select(Notebook).where(Notebook.user_id == user_id)
    if team_id is not None:
        query = query.where(Notebook.team_id == team_id)
    rows = db.scalars(query).all()
    return [view(db, r, base_url) for r in rows]
