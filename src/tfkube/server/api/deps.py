"""Typed dependencies: each route declares what it needs (`SessionDep`, `CurrentUser`,
`TeamDep`, `JobDep`, ...) and reads as its own business alone.

Authentication, in order: `Authorization: Bearer <personal API token>`, else the session
cookie. A cookie-authenticated request that changes state must pass the CSRF check
(`_security.check_csrf`: the X-CSRF-Token header and the Origin). Something of a team
the user is not in answers 404, exactly as if it did not exist (`queries.<resource>.find`
says None for both).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from sqlalchemy.orm import Session

from tfkube.server import queries
from tfkube.server.accounts import Bearer, actor_of, session_user, token_bearer
from tfkube.server.core.scopes import Actor, Scope, allowed
from tfkube.server.core.security import CSRF_HEADER, SESSION_COOKIE, check_csrf, csrf_token
from tfkube.server.core.tables import Artifact, Job, Team, User
from tfkube.server.platform import Platform


def get_platform(request: Request) -> Platform:
    platform: Platform = request.app.state.platform
    return platform


PlatformDep = Annotated[Platform, Depends(get_platform)]


async def get_db(platform: PlatformDep) -> AsyncIterator[Session]:
    """The request's session. Async so that closing it (handing the connection back)
    never waits for a worker thread; and every dependency below ends its reads with a
    commit, which hands the connection back too (objects stay loaded: expire_on_commit is
    off). So a request holds a connection only while its code runs on a thread, never
    while it waits for one: under a burst, more requests wait than the pool has
    connections (benchmarks/server_load)."""
    session = platform.sessions()
    try:
        yield session
    finally:
        session.close()


SessionDep = Annotated[Session, Depends(get_db)]


@dataclass(frozen=True)
class Principal:
    user: User
    actor: Actor
    session_id: str | None = None
    """The session cookie's value when signed in by cookie (None with a token)."""
    team_id: int | None = None
    """Signed in with a token limited to this team (a notebook's): `actor` holds the
    user's role there only, and the user's own account (tokens, password, notebooks of
    other teams) is out of its reach (`personal`)."""

    def require(self, scope: Scope, team_id: int | None = None) -> None:
        if not allowed(self.actor, scope, team_id):
            raise HTTPException(403, f"your role does not allow this ({scope.value})")

    def personal(self) -> None:
        """Refuse a token limited to one team: what is the user's own, not a team's."""
        if self.team_id is not None:
            raise HTTPException(
                403, "this token is limited to one team (a notebook's); use your own token"
            )


def not_found(what: str) -> HTTPException:
    return HTTPException(404, f"{what} not found")


def bearer_principal(db: Session, bearer: Bearer) -> Principal:
    """The principal of an API token (its team limit kept)."""
    return Principal(bearer.user, actor_of(db, bearer.user, bearer.team_id), team_id=bearer.team_id)


def current_principal(request: Request, db: SessionDep, platform: PlatformDep) -> Principal:
    header = request.headers.get("authorization", "")
    if header:
        scheme, _, value = header.partition(" ")
        bearer = token_bearer(db, value.strip()) if scheme.lower() == "bearer" and value else None
        if bearer is None:
            raise HTTPException(
                401,
                "the API token is not valid (expired or revoked?)",
                {"WWW-Authenticate": "Bearer"},
            )
        principal = bearer_principal(db, bearer)
        db.commit()
        return principal
    cookie = request.cookies.get(SESSION_COOKIE)
    user = session_user(db, cookie) if cookie else None
    if user is None or cookie is None:
        raise HTTPException(401, "sign in first (or send an API token as Authorization: Bearer)")
    verdict = check_csrf(
        method=request.method,
        cookie_auth=True,
        sent_token=request.headers.get(CSRF_HEADER),
        expected_token=csrf_token(platform.key, cookie),
        origin=request.headers.get("origin"),
        referer=request.headers.get("referer"),
        host=request.headers.get("host"),
    )
    if not verdict.ok:
        raise HTTPException(403, f"refused: {verdict.reason} (CSRF protection)")
    principal = Principal(user, actor_of(db, user), session_id=cookie)
    db.commit()
    return principal


CurrentUser = Annotated[Principal, Depends(current_principal)]


def personal_principal(principal: CurrentUser) -> Principal:
    principal.personal()
    return principal


PersonalUser = Annotated[Principal, Depends(personal_principal)]
"""Signed in as the user themselves (a session, or a token not limited to one team)."""


def site_admin(principal: CurrentUser) -> Principal:
    principal.require(Scope.SITE_ADMIN)
    return principal


SiteAdmin = Annotated[Principal, Depends(site_admin)]


def get_team(team: str, principal: CurrentUser, db: SessionDep) -> Team:
    found = queries.teams.find(db, principal.actor, team)
    if found is None:
        raise not_found(f"team {team!r}")
    db.commit()
    return found


TeamDep = Annotated[Team, Depends(get_team)]


def get_job(job_id: str, principal: CurrentUser, db: SessionDep) -> Job:
    found = queries.jobs.find(db, principal.actor, job_id)
    if found is None:
        raise not_found(f"job {job_id!r}")
    principal.require(Scope.JOBS_READ, found.team_id)
    db.commit()
    return found


JobDep = Annotated[Job, Depends(get_job)]


def get_artifact(artifact_id: str, principal: CurrentUser, db: SessionDep) -> Artifact:
    found = queries.artifacts.find(db, principal.actor, artifact_id)
    if found is None:
        raise not_found(f"artifact {artifact_id!r}")
    principal.require(Scope.ARTIFACTS_READ, found.team_id)
    db.commit()
    return found


ArtifactDep = Annotated[Artifact, Depends(get_artifact)]
