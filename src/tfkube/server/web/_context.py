"""What every page needs to know about who is asking, and how it is asked: the signed-in
user (or a redirect to sign in), the layout's context, whether htmx asks for a fragment."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request

from tfkube.server import queries
from tfkube.server.accounts import actor_of, session_user
from tfkube.server.api.deps import PlatformDep, Principal, SessionDep
from tfkube.server.core.security import SESSION_COOKIE, csrf_token
from tfkube.server.web._render import SignInFirst


def page_principal(request: Request, db: SessionDep) -> Principal:
    """The signed-in user (session cookie); anyone else is sent to the sign-in page."""
    cookie = request.cookies.get(SESSION_COOKIE)
    user = session_user(db, cookie) if cookie else None
    if user is None or cookie is None:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise SignInFirst(target)
    principal = Principal(user, actor_of(db, user), session_id=cookie)
    db.commit()  # hand the connection back between reads, as the API's dependencies do
    return principal


PageUser = Annotated[Principal, Depends(page_principal)]


def page_context(principal: Principal, db: SessionDep, platform: PlatformDep) -> dict[str, Any]:
    """What every signed-in page's layout needs."""
    assert principal.session_id is not None
    return {
        "me": principal.user,
        "my_teams": queries.users.teams_of(db, principal.user),
        "site_admin": principal.actor.site_admin,
        "csrf": csrf_token(platform.key, principal.session_id),
    }


def is_fragment(request: Request) -> bool:
    return (
        request.headers.get("hx-request") == "true"
        and request.headers.get("hx-history-restore-request") != "true"
    )
