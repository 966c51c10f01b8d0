"""Serving TensorBoards and notebooks on origins of their own (`core/origins.py` says why
and how): the middleware that tells a workload origin's requests from the dashboard's,
the enter step that turns a grant into the target's pass cookie, and who a request on a
workload origin is.

    every request ── WorkloadHosts: Host `<kind>-<id>.<suffix>`?
        no  -> the dashboard's origin, as before
        yes -> only `/.tfkube/enter` and `/proxy/<kind>/<id>/...` of that very target
               (anything else 404: no dashboard page, no API, no other target there);
               the target is put in the scope for the proxy (`workload_in`)
"""

from __future__ import annotations

import functools
import secrets
import time
from urllib.parse import urlencode

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import RedirectResponse
from sqlalchemy.orm import Session
from starlette.datastructures import Headers
from starlette.requests import HTTPConnection
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from tfkube.server.api.deps import PlatformDep, Principal, SessionDep
from tfkube.server.core.config import ServerSettings
from tfkube.server.core.origins import (
    ENTER_PATH,
    GRANT_SECONDS,
    PASS_COOKIE,
    Origins,
    Pass,
    PassError,
    UsedGrants,
    open_grant,
    open_pass,
    origins_for,
    parse_workload_url,
    safe_next,
    sign_grant,
    sign_pass,
    workload_of,
)
from tfkube.server.core.security import digest
from tfkube.server.core.tables import LoginSession, User

router = APIRouter(tags=["proxy"])
SCOPE_KEY = "tfkube.workload"
"""Where WorkloadHosts puts (kind, target) in a workload origin's request scope."""
NO_ORIGIN = (
    "TensorBoards and notebooks are served on origins of their own, and this server has "
    "none for the name it was reached by; an administrator sets one with "
    "`tfkube server --workload-url https://*.<a wildcard name of yours>` (see "
    "docs/security.md), or open the dashboard on this machine's loopback address"
)


@functools.lru_cache(maxsize=8)
def _parsed(value: str) -> Origins:
    return parse_workload_url(value)


def configured(settings: ServerSettings) -> Origins | None:
    return _parsed(settings.workload_url) if settings.workload_url else None


def workload_in(conn: HTTPConnection) -> tuple[str, str] | None:
    """(kind, target) when the request came to a workload origin (see WorkloadHosts)."""
    found: tuple[str, str] | None = conn.scope.get(SCOPE_KEY)
    return found


class WorkloadHosts:
    """Plain ASGI: a request to a workload origin reaches its own target only."""

    def __init__(self, app: ASGIApp, settings: ServerSettings) -> None:
        self.app = app
        self.origins = configured(settings)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in {"http", "websocket"}:
            await self.app(scope, receive, send)
            return
        found = workload_of(self.origins, Headers(scope=scope).get("host", ""))
        if found is not None:
            kind, target = found
            top = f"/proxy/{kind}/{target}"
            path = scope["path"]
            ours = path == top or path.startswith(f"{top}/")
            if not ours and not (scope["type"] == "http" and path == ENTER_PATH):
                await _not_here(scope, receive, send)
                return
            scope[SCOPE_KEY] = found
        await self.app(scope, receive, send)


async def _not_here(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 4404})
        return
    response = PlainTextResponse("not found on a workload's origin", 404)
    await response(scope, receive, send)


def _used(request: Request) -> UsedGrants:
    used: UsedGrants | None = getattr(request.app.state, "used_grants", None)
    if used is None:
        used = request.app.state.used_grants = UsedGrants()
    return used


def _live_session(db: Session, p: Pass, now: float) -> tuple[User, LoginSession]:
    session = db.get(LoginSession, p.session)
    user = db.get(User, p.user)
    if (
        session is None
        or session.user_id != p.user
        or session.expires_at < now
        or user is None
        or user.disabled
    ):
        raise PassError("the login session has ended")
    return user, session


def enter_location(
    conn: HTTPConnection, principal: Principal, key: bytes, settings: ServerSettings,
    kind: str, target: str, path: str,
) -> str:  # fmt: skip
    """Where the dashboard's origin sends a signed-in browser for a workload: the
    target's origin, with a grant for this person, this session and this target only."""
    origins = origins_for(configured(settings), conn.url.scheme, conn.headers.get("host", ""))
    if origins is None:
        raise HTTPException(503, NO_ORIGIN)
    if principal.session_id is None:
        raise HTTPException(403, "open workloads from the dashboard (signed in)")
    grant = Pass(
        user=principal.user.id,
        session=digest(principal.session_id),
        kind=kind,
        target=target,
        exp=time.time() + GRANT_SECONDS,
        nonce=secrets.token_urlsafe(16),
    )
    wanted = f"/proxy/{kind}/{target}/{path}"
    if conn.url.query:
        wanted += f"?{conn.url.query}"
    query = urlencode({"grant": sign_grant(key, grant), "next": safe_next(kind, target, wanted)})
    return f"{origins.url(kind, target)}{ENTER_PATH}?{query}"


@router.get(ENTER_PATH, include_in_schema=False)
def enter(
    request: Request, db: SessionDep, platform: PlatformDep, grant: str = "", next: str = ""
) -> RedirectResponse:
    """The grant from the dashboard's origin, exchanged once for this target's pass."""
    found = workload_in(request)
    if found is None:
        raise HTTPException(404, "not found")
    kind, target = found
    now = time.time()
    try:
        opened = open_grant(platform.key, grant, kind, target, now)
        _, session = _live_session(db, opened, now)
        if not _used(request).use(opened, now):
            raise PassError("already used")
    except PassError:
        raise HTTPException(
            403, "this link was used or has expired; open the workload again from the dashboard"
        ) from None
    db.commit()
    value = sign_pass(
        platform.key, Pass(opened.user, opened.session, kind, target, session.expires_at)
    )
    response = RedirectResponse(safe_next(kind, target, next), status_code=303)
    origins = configured(platform.settings)
    response.set_cookie(
        PASS_COOKIE,
        value,
        max_age=max(1, int(session.expires_at - now)),
        httponly=True,
        samesite="lax",
        secure=platform.settings.secure_cookies or (origins is not None and origins.secure),
        path="/",
    )
    return response


def pass_principal(
    conn: HTTPConnection, db: Session, key: bytes, kind: str, target: str
) -> Principal:
    """Who a request on a workload origin is: its pass, for this target, of a login
    session that is still valid (checked on every request)."""
    from tfkube.server.accounts import actor_of

    now = time.time()
    try:
        opened = open_pass(key, conn.cookies.get(PASS_COOKIE) or "", kind, target, now)
        user, _ = _live_session(db, opened, now)
    except PassError:
        raise HTTPException(401, "open this workload from the dashboard (signed in)") from None
    return Principal(user, actor_of(db, user))
