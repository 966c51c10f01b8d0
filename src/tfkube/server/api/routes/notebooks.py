"""Notebooks: the caller's JupyterLab server in a team (one per user and team), started
on request or when its URL is opened, stopped when idle or on request. Only its owner
can open it (anyone else gets 404, as for something that does not exist)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from tfkube.server import queries
from tfkube.server.api.deps import CurrentUser, PlatformDep, SessionDep, TeamDep, not_found
from tfkube.server.core.scopes import Scope
from tfkube.wire import NotebookOut

router = APIRouter(prefix="/api/v1", tags=["notebooks"])


@router.post("/teams/{team}/notebook")
def open_notebook(
    team: TeamDep, principal: CurrentUser, db: SessionDep, platform: PlatformDep
) -> NotebookOut:
    """Start (or find) the caller's notebook in the team; its `url` opens JupyterLab.
    Its `tfkube.Client()` is signed in as the caller; the team's code and data artifacts
    are in `team-artifacts/` (read-only) on this machine."""
    principal.require(Scope.NOTEBOOKS, team.id)
    try:
        row = platform.notebooks.ensure(db, principal.user, team)
    except RuntimeError as exc:
        raise HTTPException(503, str(exc)) from None
    return queries.notebooks.view(db, row, platform.settings.base_url)


@router.get("/notebooks")
def list_notebooks(
    principal: CurrentUser, db: SessionDep, platform: PlatformDep
) -> list[NotebookOut]:
    """The caller's own notebooks (each team's; a token limited to one team: that team's)."""
    return queries.notebooks.list_own(
        db, principal.user.id, platform.settings.base_url, principal.team_id
    )


@router.post("/notebooks/{notebook_id}/stop")
def stop_notebook(
    notebook_id: str, principal: CurrentUser, db: SessionDep, platform: PlatformDep
) -> NotebookOut:
    """Stop it now (its home folder stays; opening it again starts it)."""
    row = queries.notebooks.find_own(db, principal.user.id, notebook_id)
    if row is None or principal.team_id not in (None, row.team_id):
        raise not_found(f"notebook {notebook_id!r}")
    if row.state == "running":
        platform.notebooks.stop(db, row, "stopped by its owner")
    return queries.notebooks.view(db, row, platform.settings.base_url)
