"""Set-up (the first admin, once), sign-in and sign-out with a session cookie."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request, Response
from pydantic import BaseModel

from tfkube.server import queries
from tfkube.server.accounts import (
    authenticate,
    close_session,
    create_team,
    create_user,
    needs_setup,
    open_session,
    set_member,
    team_name_problem,
    use_setup_token,
    user_name_problem,
)
from tfkube.server.api.deps import CurrentUser, PlatformDep, SessionDep
from tfkube.server.api.errors import field_error
from tfkube.server.core.config import ServerSettings
from tfkube.server.core.scopes import Role
from tfkube.server.core.security import SESSION_COOKIE, csrf_token, password_problem
from tfkube.server.tenants import prepare_team
from tfkube.wire import SessionOut, UserOut

router = APIRouter(prefix="/api/v1", tags=["auth"])


class SetupIn(BaseModel):
    token: str
    """The one-time token from the link the server printed at its first start."""
    name: str
    password: str
    team: str = "default"
    """A first team, with the new admin as its admin."""


class LoginIn(BaseModel):
    name: str
    password: str


def secure_cookies(settings: ServerSettings) -> bool:
    """Cookies are `Secure` whenever browsers reach the server over https (its public
    URL says so), so the session never travels in clear text."""
    return settings.secure_cookies or (settings.public_url or "").lower().startswith("https:")


def _set_cookie(response: Response, value: str, platform: PlatformDep) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        value,
        max_age=int(platform.settings.session_hours * 3600),
        httponly=True,
        samesite="lax",
        secure=secure_cookies(platform.settings),
        path="/",
    )


@router.get("/setup")
def setup_needed(db: SessionDep) -> dict[str, bool]:
    """Whether the server still waits for its first admin."""
    return {"needed": needs_setup(db)}


@router.post("/setup", status_code=201)
def setup(body: SetupIn, response: Response, db: SessionDep, platform: PlatformDep) -> SessionOut:
    """Create the first admin with the one-time token; signs them in."""
    if problem := user_name_problem(body.name):
        raise field_error("name", problem)
    if problem := password_problem(body.password, body.name):
        raise field_error("password", problem)
    if problem := team_name_problem(body.team):
        raise field_error("team", problem)
    if not use_setup_token(db, body.token):
        raise HTTPException(
            403, "the set-up link is not valid (used already, or replaced by a restart)"
        )
    user = create_user(db, body.name, body.password, site_admin=True)
    team = create_team(db, body.team)
    set_member(db, team, user, Role.ADMIN)
    prepare_team(platform.engine, db, team)
    value = open_session(db, user, platform.settings.session_hours)
    _set_cookie(response, value, platform)
    return SessionOut(user=queries.users.view(db, user), csrf_token=csrf_token(platform.key, value))


@router.post("/auth/login")
def login(
    body: LoginIn, request: Request, response: Response, db: SessionDep, platform: PlatformDep
) -> SessionOut:
    """Sign in; sets the HttpOnly session cookie and returns the CSRF token. Failed
    sign-ins are throttled per name and address (`core/ratelimit.py`); the address is
    the peer's, or what a trusted proxy says it is (`core/forwarded.py`)."""
    client = request.client.host if request.client else "unknown"
    verdict = platform.logins.check(body.name, client)
    if verdict.wait is not None:
        raise HTTPException(
            429,
            f"too many failed sign-ins; try again in {verdict.wait:.0f} s",
            {"Retry-After": str(int(verdict.wait) + 1)},
        )
    user = authenticate(db, body.name, body.password)
    if user is None:
        platform.logins.failed(body.name, client)
        raise HTTPException(401, "wrong user name or password")
    platform.logins.succeeded(body.name, client)
    value = open_session(db, user, platform.settings.session_hours)
    _set_cookie(response, value, platform)
    return SessionOut(user=queries.users.view(db, user), csrf_token=csrf_token(platform.key, value))


@router.post("/auth/logout", status_code=204)
def logout(
    principal: CurrentUser, response: Response, db: SessionDep, platform: PlatformDep
) -> None:
    if principal.session_id is not None:
        close_session(db, principal.session_id)
    response.delete_cookie(
        SESSION_COOKIE,
        path="/",
        secure=secure_cookies(platform.settings),
        httponly=True,
        samesite="lax",
    )


@router.get("/auth/session")
def session(principal: CurrentUser, db: SessionDep, platform: PlatformDep) -> SessionOut:
    """Who is signed in, and the CSRF token of this session (empty with an API token)."""
    token = csrf_token(platform.key, principal.session_id) if principal.session_id else ""
    return SessionOut(user=queries.users.view(db, principal.user), csrf_token=token)


@router.get("/users/me")
def me(principal: CurrentUser, db: SessionDep) -> UserOut:
    return queries.users.view(db, principal.user)
