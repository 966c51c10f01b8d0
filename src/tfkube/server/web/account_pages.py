"""A user's own page, `/account` (the menu under their name, top right): their personal
API tokens and their notifications. Read only, through the API's reads (`queries.tokens`,
`queries.notifications`); every change goes to the REST API from the browser
(`/api/v1/tokens`, `/api/v1/users/me/notifications`) with the CSRF token."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request
from fastapi.responses import Response

from tfkube.server import queries
from tfkube.server.api.deps import PlatformDep, SessionDep
from tfkube.server.web._context import PageUser, page_context
from tfkube.server.web._render import render

router = APIRouter(include_in_schema=False)


@router.get("/account")
def account_page(
    request: Request, principal: PageUser, db: SessionDep, platform: PlatformDep
) -> Response:
    return render(
        request,
        "account.html",
        {
            **page_context(principal, db, platform),
            "tokens": queries.tokens.list_tokens(db, principal.user.id),
            "notify": queries.notifications.prefs(
                db, principal.user.id, platform.notifier.smtp is not None
            ),
            "sent": queries.notifications.recent(db, principal.user.id),
            "base_url": platform.settings.base_url,
            "active": "account",
            "now": time.time(),
        },
    )


__all__ = ["router"]
