"""Personal API tokens: created (shown once), listed, revoked; by the user themselves (a
token limited to one team, a notebook's, gets 403: it cannot make itself a wider one)."""

from __future__ import annotations

import time

from fastapi import APIRouter
from pydantic import BaseModel, Field

from tfkube.server import queries
from tfkube.server.accounts import create_token, revoke_token
from tfkube.server.api.deps import PersonalUser, SessionDep, not_found
from tfkube.server.api.errors import field_error
from tfkube.server.core.inputs import control_problem
from tfkube.server.queries.views import token_out
from tfkube.wire import NewToken, TokenOut

router = APIRouter(prefix="/api/v1/tokens", tags=["tokens"])


class TokenIn(BaseModel):
    name: str = Field(min_length=1, max_length=100)
    """What it is for, e.g. 'laptop CLI' (no control characters)."""
    expires_in_days: float | None = Field(90, gt=0, le=3650)
    """None: never expires."""


@router.get("")
def list_tokens(principal: PersonalUser, db: SessionDep) -> list[TokenOut]:
    return queries.tokens.list_tokens(db, principal.user.id)


@router.post("", status_code=201)
def new_token(body: TokenIn, principal: PersonalUser, db: SessionDep) -> NewToken:
    if problem := control_problem(body.name):
        raise field_error("name", problem)
    expires = time.time() + body.expires_in_days * 86400 if body.expires_in_days else None
    token, value = create_token(db, principal.user, body.name, expires)
    return NewToken(**token_out(token).model_dump(), token=value)


@router.delete("/{token_id}", status_code=204)
def revoke(token_id: str, principal: PersonalUser, db: SessionDep) -> None:
    token = queries.tokens.find_own(db, principal.user.id, token_id)
    if token is None:
        raise not_found(f"token {token_id!r}")
    revoke_token(db, token)
