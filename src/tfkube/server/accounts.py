"""Users, teams, sessions, API tokens and the one-time set-up link (database shell over
`_security` and `_scopes`)."""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from tfkube.server.core.scopes import Actor, Role
from tfkube.server.core.security import (
    DUMMY_HASH,
    digest,
    hash_password,
    new_api_token,
    new_secret,
    verify_password,
)
from tfkube.server.core.tables import ApiToken, LoginSession, Membership, SiteState, Team, User

USER_NAME = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?$")
TEAM_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")
SETUP_KEY = "setup_token"
SECRET_KEY = "secret_key"


def user_name_problem(name: str) -> str | None:
    if not USER_NAME.fullmatch(name):
        return (
            "use 1-64 lower-case letters, digits, '.', '_' or '-', starting and ending with "
            "a letter or digit"
        )
    return None


def team_name_problem(name: str) -> str | None:
    if not TEAM_NAME.fullmatch(name):
        return (
            "use at most 40 lower-case letters, digits and '-', starting and ending with a "
            "letter or digit (it names a folder and a Kubernetes namespace)"
        )
    return None


def _state(db: Session, key: str) -> str | None:
    row = db.get(SiteState, key)
    return row.value if row else None


def _set_state(db: Session, key: str, value: str | None) -> None:
    row = db.get(SiteState, key)
    if value is None:
        if row is not None:
            db.delete(row)
    elif row is None:
        db.add(SiteState(key=key, value=value))
    else:
        row.value = value


def secret_key(db: Session) -> bytes:
    """The server's HMAC key (CSRF tokens, code claims), made once and kept in the database
    so every server process sharing it agrees."""
    value = _state(db, SECRET_KEY)
    if value is None:
        value = secrets.token_hex(32)
        _set_state(db, SECRET_KEY, value)
        db.commit()
    return bytes.fromhex(value)


def needs_setup(db: Session) -> bool:
    return db.scalars(select(User.id).limit(1)).first() is None


def new_setup_token(db: Session) -> str:
    """A fresh one-time set-up token (the previous one stops working)."""
    token = new_secret()
    _set_state(db, SETUP_KEY, digest(token))
    db.commit()
    return token


def use_setup_token(db: Session, token: str) -> bool:
    stored = _state(db, SETUP_KEY)
    if stored is None or not needs_setup(db) or not secrets.compare_digest(stored, digest(token)):
        return False
    _set_state(db, SETUP_KEY, None)
    return True


def create_user(db: Session, name: str, password: str, site_admin: bool = False) -> User:
    user = User(
        name=name,
        password_hash=hash_password(password),
        site_admin=site_admin,
        disabled=False,
        created_at=time.time(),
    )
    db.add(user)
    db.flush()
    return user


def create_team(db: Session, name: str, namespace: str | None = None) -> Team:
    team = Team(
        name=name, namespace=namespace or f"tfkube-{name}", quota={}, created_at=time.time()
    )
    db.add(team)
    db.flush()
    return team


def set_member(db: Session, team: Team, user: User, role: Role) -> None:
    found = db.get(Membership, (user.id, team.id))
    if found is None:
        db.add(Membership(user_id=user.id, team_id=team.id, role=role.value))
    else:
        found.role = role.value


def remove_from_team(db: Session, team: Team, user: User) -> bool:
    """Take the user out of the team (commits); False when they were not in it."""
    found = db.get(Membership, (user.id, team.id))
    if found is None:
        return False
    db.delete(found)
    db.commit()
    return True


def authenticate(db: Session, name: str, password: str) -> User | None:
    user = db.scalars(select(User).where(User.name == name)).first()
    if user is None:
        verify_password(DUMMY_HASH, password)  # same time either way
        return None
    if user.disabled or not verify_password(user.password_hash, password):
        return None
    return user


def set_password(db: Session, user: User, password: str, keep_session: str | None) -> None:
    """A new password, and every way in that the old one opened closed: the user's
    sessions (but `keep_session`, the cookie value of the session that changed it, if
    any) end, and their API tokens are revoked (a token made by someone who knew the old
    password must not outlive it; programs sign in again). Commits."""
    user.password_hash = hash_password(password)
    kept = digest(keep_session) if keep_session else None
    for found in db.scalars(select(LoginSession).where(LoginSession.user_id == user.id)).all():
        if found.id_hash != kept:
            db.delete(found)
    now = time.time()
    for token in db.scalars(
        select(ApiToken).where(ApiToken.user_id == user.id, ApiToken.revoked_at.is_(None))
    ).all():
        token.revoked_at = now
    db.commit()


def open_session(db: Session, user: User, hours: float) -> str:
    """A new session; returns the cookie value (stored only as its digest)."""
    value = new_secret()
    now = time.time()
    db.add(
        LoginSession(
            id_hash=digest(value), user_id=user.id, created_at=now, expires_at=now + hours * 3600
        )
    )
    db.commit()
    return value


def session_user(db: Session, value: str) -> User | None:
    found = db.get(LoginSession, digest(value))
    if found is None or found.expires_at < time.time():
        return None
    user = db.get(User, found.user_id)
    return None if user is None or user.disabled else user


def close_session(db: Session, value: str) -> None:
    found = db.get(LoginSession, digest(value))
    if found is not None:
        db.delete(found)
        db.commit()


def create_token(
    db: Session, user: User, name: str, expires_at: float | None, team_id: int | None = None
) -> tuple[ApiToken, str]:
    """A new API token of the user's (`team_id`: limited to that team, `Bearer`). Commits."""
    value = new_api_token()
    token = ApiToken(
        user_id=user.id,
        name=name,
        token_hash=digest(value),
        prefix=value[:10],
        created_at=time.time(),
        expires_at=expires_at,
        team_id=team_id,
    )
    db.add(token)
    db.commit()
    return token, value


def revoke_token(db: Session, token: ApiToken) -> None:
    """Revoke a token now (one revoked already keeps its time). Commits."""
    token.revoked_at = token.revoked_at or time.time()
    db.commit()


@dataclass(frozen=True)
class Bearer:
    """Who an API token speaks for."""

    user: User
    team_id: int | None = None
    """A token limited to one team (a notebook's): only the user's role there counts, and
    nothing site-wide (`actor_of`); None: the user's own token, wherever they may act."""


def token_bearer(db: Session, value: str) -> Bearer | None:
    """The token's user and its limit, or None for an unknown, revoked or expired token
    (or a disabled user)."""
    token = db.scalars(select(ApiToken).where(ApiToken.token_hash == digest(value))).first()
    now = time.time()
    if token is None or token.revoked_at is not None:
        return None
    if token.expires_at is not None and token.expires_at < now:
        return None
    user = db.get(User, token.user_id)
    if user is None or user.disabled:
        return None
    if token.last_used_at is None or now - token.last_used_at > 60:
        token.last_used_at = now  # at most once a minute: no write per request
        db.commit()
    return Bearer(user, token.team_id)


def actor_of(db: Session, user: User, team_id: int | None = None) -> Actor:
    """The user as the permission checks see them; `team_id`: as a token limited to that
    team (a notebook's) sees them: their role in that team only (none once they left it),
    never a site admin."""
    query = select(Membership).where(Membership.user_id == user.id)
    if team_id is not None:
        query = query.where(Membership.team_id == team_id)
    roles = {m.team_id: Role(m.role) for m in db.scalars(query).all()}
    return Actor(user_id=user.id, site_admin=user.site_admin and team_id is None, roles=roles)
