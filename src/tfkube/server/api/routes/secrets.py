"""A team's secrets (`tfkube.server.team_secrets`): team admins store and remove them,
members list their names; no answer ever holds a value. Another team's secrets answer
404, as the team itself does."""

from __future__ import annotations

from fastapi import APIRouter, Response
from pydantic import BaseModel

from tfkube.engines import Credentials, HdfsCredentials, S3Credentials
from tfkube.server import team_secrets
from tfkube.server.api.deps import CurrentUser, PlatformDep, SessionDep, TeamDep, not_found
from tfkube.server.api.errors import FieldHTTPError
from tfkube.server.core.scopes import Scope
from tfkube.wire import SecretOut

router = APIRouter(prefix="/api/v1/teams", tags=["secrets"])


class SecretIn(BaseModel):
    """An S3-compatible store's credentials, or the user an HDFS is read as
    (`hadoop_user_name`, simple authentication), under a name the team's jobs give in
    `spec.storage.data.credentials`."""

    name: str
    access_key_id: str = ""
    secret_access_key: str = ""
    session_token: str | None = None
    hadoop_user_name: str | None = None

    def __repr__(self) -> str:  # never a value in a traceback or a log
        return f"SecretIn(name={self.name!r})"


def _out(found: team_secrets.SecretInfo) -> SecretOut:
    return SecretOut(
        name=found.name,
        kind=found.kind,
        created_at=found.created_at,
        updated_at=found.updated_at,
    )


@router.get("/{team}/secrets")
def list_secrets(team: TeamDep, principal: CurrentUser, db: SessionDep) -> list[SecretOut]:
    principal.require(Scope.TEAM_READ, team.id)
    return [_out(s) for s in team_secrets.listing(db, team)]


@router.post("/{team}/secrets", status_code=201)
def put_secret(
    team: TeamDep,
    body: SecretIn,
    principal: CurrentUser,
    db: SessionDep,
    platform: PlatformDep,
    response: Response,
) -> SecretOut:
    """Store a secret, or replace the one of that name (200 then)."""
    principal.require(Scope.TEAM_ADMIN, team.id)
    problems = team_secrets.value_problems(
        body.name, body.access_key_id, body.secret_access_key, body.hadoop_user_name
    )
    if body.session_token is not None and not body.session_token.strip():
        problems.append(("session_token", "leave it out, or give the store's session token"))
    if problems:
        raise FieldHTTPError(problems, f"{problems[0][0]}: {problems[0][1]}")
    credentials: Credentials = S3Credentials(
        body.access_key_id.strip(), body.secret_access_key.strip(), body.session_token
    )
    if body.hadoop_user_name is not None:
        credentials = HdfsCredentials(body.hadoop_user_name.strip())
    found, created = team_secrets.store(
        db, platform.jobs.secret_box, team, body.name, credentials, principal.actor.user_id
    )
    if not created:
        response.status_code = 200
    return _out(found)


@router.delete("/{team}/secrets/{name}", status_code=204)
def delete_secret(team: TeamDep, name: str, principal: CurrentUser, db: SessionDep) -> None:
    principal.require(Scope.TEAM_ADMIN, team.id)
    if not team_secrets.remove(db, team, name):
        raise not_found(f"secret {name!r}")
