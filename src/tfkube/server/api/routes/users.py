"""Users (site admins create them) and the caller's own password."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel

from tfkube.server import queries
from tfkube.server.accounts import create_user, set_password, user_name_problem
from tfkube.server.api.deps import CurrentUser, SessionDep, SiteAdmin, not_found
from tfkube.server.api.errors import field_error
from tfkube.server.core.security import password_problem, verify_password
from tfkube.server.queries.views import user_out
from tfkube.wire import UserOut

router = APIRouter(prefix="/api/v1/users", tags=["users"])


class UserIn(BaseModel):
    name: str
    password: str
    site_admin: bool = False


class UserPatch(BaseModel):
    password: str | None = None
    current_password: str | None = None
    """Required when changing one's own password."""
    disabled: bool | None = None
    """Site admins only."""
    site_admin: bool | None = None
    """Site admins only."""


@router.get("")
def list_users(_: SiteAdmin, db: SessionDep) -> list[UserOut]:
    return queries.users.list_users(db)


@router.post("", status_code=201)
def add_user(body: UserIn, _: SiteAdmin, db: SessionDep) -> UserOut:
    if problem := user_name_problem(body.name):
        raise field_error("name", problem)
    if problem := password_problem(body.password, body.name):
        raise field_error("password", problem)
    if queries.users.named(db, body.name) is not None:
        raise HTTPException(409, f"a user named {body.name!r} exists already")
    user = create_user(db, body.name, body.password, site_admin=body.site_admin)
    db.commit()
    return user_out(user, {})


@router.patch("/{name}")
def change_user(name: str, body: UserPatch, principal: CurrentUser, db: SessionDep) -> UserOut:
    principal.personal()  # a password, a user's flags: never with a notebook's token
    user = queries.users.find(db, principal.actor, name)
    is_admin = principal.actor.site_admin
    if user is None:
        raise not_found(f"user {name!r}")
    if (body.disabled is not None or body.site_admin is not None) and not is_admin:
        raise HTTPException(403, "only a site admin may change that")
    if body.password is not None:
        if user.id == principal.user.id and not verify_password(
            user.password_hash, body.current_password or ""
        ):
            raise field_error("current_password", "does not match your current password")
        if problem := password_problem(body.password, user.name):
            raise field_error("password", problem)
        keep = principal.session_id if user.id == principal.user.id else None
        set_password(db, user, body.password, keep_session=keep)
    if body.disabled is not None:
        user.disabled = body.disabled
    if body.site_admin is not None:
        user.site_admin = body.site_admin
    db.commit()
    return queries.users.view(db, user)
