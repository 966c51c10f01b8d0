"""The web dashboard: server-rendered pages over the REST API.

    browser ── GET /jobs, /jobs/{id}, /compare, /code, /team, /admin, /login, /setup,
       │         /models, /notebooks (serving_pages.py), /account (account_pages.py: the
       │         user's own API tokens and notifications)
       │         pages.py: read through tfkube.server.queries (the API's own reads; never a
       │         route handler) -> _present (pure: wording, filters, paging) -> Jinja
       │         templates (autoescape)
       ├─ htmx: GET the same pages' fragments (the job list, a job's summary, replicas,
       │        events, outputs) when a live page refreshes a piece of itself
       ├─ EventSource: /api/v1/jobs/{id}/watch (refresh on change), /logs/{replica} (follow)
       ├─ fetch: /api/v1/jobs/{id}/scalars, /api/v1/compare?scalars=true -> uPlot charts;
       │        /api/v1/jobs/{id}/logs/search -> a job page's log search
       └─ fetch/XHR: every change (submit, stop, upload, tokens, users) goes to /api/v1/...
                with the session's X-CSRF-Token: the pages themselves never change anything
    static/  app.css, app.js (ours); vendor/ (htmx, uPlot: from npm by tools/web/build.sh)

`install(app)` adds the pages, the static files and the page-only error handlers.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

from tfkube.server.web._render import (
    STATIC,
    PageError,
    SignInFirst,
    page_error,
    sign_in_first,
    vendor_missing,
)
from tfkube.server.web.account_pages import router as account_router
from tfkube.server.web.pages import router
from tfkube.server.web.serving_pages import router as serving_router


class _Static(StaticFiles):
    """Static files, cacheable for a day (URLs carry a version that changes with them)."""

    async def get_response(self, path: str, scope: Scope) -> Any:
        response = await super().get_response(path, scope)
        if response.status_code == 200:
            response.headers["Cache-Control"] = "public, max-age=86400"
        return response


def install(app: FastAPI) -> None:
    app.include_router(router)
    app.include_router(serving_router)
    app.include_router(account_router)
    app.mount("/static", _Static(directory=STATIC), name="static")
    app.add_exception_handler(PageError, page_error)  # type: ignore[arg-type]
    app.add_exception_handler(SignInFirst, sign_in_first)  # type: ignore[arg-type]


__all__ = ["install", "vendor_missing"]
