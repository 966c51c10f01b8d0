"""The dashboard's Models and Notebooks pages, and what a job's page shows of its exports
and model servers. Thin: they read through the same queries as the serving and notebook
API (`queries/model_servers.py`, `queries/notebooks.py`); every change (Serve, Roll to a
version, Stop, New notebook) is a button that calls the REST API from the browser."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from tfkube.server import queries
from tfkube.server.api.deps import PlatformDep, Principal, SessionDep
from tfkube.server.core.scopes import Scope, allowed
from tfkube.server.core.tables import Job
from tfkube.server.web._context import PageUser, is_fragment, page_context
from tfkube.server.web._render import render
from tfkube.server.workloads.model_servers import job_exports
from tfkube.wire import ModelServerOut

router = APIRouter(include_in_schema=False)

RUNTIME_LABELS = {
    "tensorflow-serving": "TensorFlow Serving (its image)",
    "tfkube": "tfkube's model server (tfkube's image)",
}
"""How the Serve button's choice names each runtime (the engines' `model_server_runtimes`)."""


def job_serving(
    principal: Principal, db: SessionDep, platform: PlatformDep, row: Job
) -> dict[str, Any]:
    """A job page's part: its exported versions, whether the caller may serve them, and
    the running model servers of its exports."""
    servers: list[ModelServerOut] = []
    if allowed(principal.actor, Scope.SERVING_READ, row.team_id):
        servers = queries.model_servers.running_for_job(
            db, row.id, platform.model_servers.observed, platform.settings.base_url
        )
    return {
        "exports": job_exports(row),
        "can_serve": allowed(principal.actor, Scope.SERVING_WRITE, row.team_id),
        "serve_runtimes": [
            (runtime, RUNTIME_LABELS.get(runtime, runtime))
            for runtime in platform.engine.model_server_runtimes()
        ],
        "model_servers": servers,
    }


def roll_choices(
    db: SessionDep, servers: list[ModelServerOut], writable: set[str]
) -> dict[str, list[int]]:
    """The exported versions each running model server the caller may change can roll to
    (its Roll control)."""
    choices: dict[str, list[int]] = {}
    for server in servers:
        if server.status == "Stopped" or server.team not in writable or not server.job_id:
            continue
        job = db.get(Job, server.job_id)
        if job is not None:
            choices[server.id] = job_exports(job)
    return choices


@router.get("/models")
def models_page(
    request: Request,
    principal: PageUser,
    db: SessionDep,
    platform: PlatformDep,
    stopped: str = "",
) -> Response:
    servers = queries.model_servers.list_servers(
        db,
        principal.actor,
        platform.model_servers.observed,
        platform.settings.base_url,
        stopped=stopped == "1",
    )
    writable = set(queries.teams.names_allowed(db, principal.actor, Scope.SERVING_WRITE))
    data = {
        "servers": servers,
        "writable": writable,
        "versions": roll_choices(db, servers, writable),
        "stopped": stopped == "1",
        "starting": any(s.status == "Starting" for s in servers),
        "now": time.time(),
    }
    if is_fragment(request):
        return render(request, "_models.html", data)
    return render(
        request,
        "models.html",
        {**page_context(principal, db, platform), **data, "active": "models"},
    )


@router.get("/notebooks")
def notebooks_page(
    request: Request, principal: PageUser, db: SessionDep, platform: PlatformDep
) -> Response:
    base = platform.settings.base_url
    mine = {n.team: n for n in queries.notebooks.list_own(db, principal.user.id, base)}
    teams = queries.teams.names_allowed(db, principal.actor, Scope.NOTEBOOKS, members_only=True)
    return render(
        request,
        "notebooks.html",
        {
            **page_context(principal, db, platform),
            "teams": teams,
            "mine": mine,
            "idle_minutes": round(platform.settings.notebook_idle_seconds / 60),
            "active": "notebooks",
            "now": time.time(),
        },
    )
