"""Team secrets: a team's named values (a data source's credentials: an S3 store's keys,
kind "s3", or the user an HDFS is read as, kind "hdfs"), kept encrypted by the server and
given only to that team's jobs that name them.

    POST /api/v1/teams/{team}/secrets     a team admin stores (or replaces) one
    GET  /api/v1/teams/{team}/secrets     members see names, kinds and times, never values
    DELETE .../secrets/{name}             a team admin removes one
    a job: spec.storage.data.credentials: NAME
      submit: the secret looked up in the job's team only (another team's is "no secret
              named NAME in team T", as if it did not exist), the source listed with it
      start:  decrypted and handed to the engine (`data_credentials`), which keeps it in a
              0600 file its supervisor reads and deletes; never in the stored spec

The value is a Fernet token (AES-128-CBC + HMAC-SHA256, `cryptography`) of its JSON. The
key is a file beside the database, `<data dir>/secrets.key` (0600, made once), not in the
database: a dump or a copy of the database alone (PostgreSQL's backups, a replica) reveals
no secret. Losing the key loses the secrets (the admins store them again), never more.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken
from sqlalchemy import select
from sqlalchemy.orm import Session

from tfkube.engines import Credentials, HdfsCredentials, credentials_from_json
from tfkube.server.core.tables import Team, TeamSecret
from tfkube.spec import check_secret_name

KIND_S3 = "s3"
KIND_HDFS = "hdfs"
KEY_FILE = "secrets.key"
MAX_VALUE = 4096
"""Characters of one credential's part: far more than any store's key needs."""


class SecretBox:
    """Encrypts and decrypts team secrets with the server's secrets key."""

    def __init__(self, key: bytes) -> None:
        self._fernet = Fernet(key)

    def __repr__(self) -> str:
        return "SecretBox(...)"

    @classmethod
    def open(cls, data_dir: Path) -> SecretBox:
        """The key at `data_dir/secrets.key`, made (0600, exclusively) when missing, so
        server processes sharing the data dir agree."""
        path = data_dir / KEY_FILE
        with contextlib.suppress(FileExistsError):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(Fernet.generate_key())
        return cls(path.read_bytes().strip())

    def seal(self, credentials: Credentials) -> str:
        return self._fernet.encrypt(json.dumps(credentials.to_json()).encode()).decode()

    def open_value(self, token: str) -> Credentials:
        """ValueError when the token was not sealed with this key (a new key file)."""
        try:
            return credentials_from_json(json.loads(self._fernet.decrypt(token.encode())))
        except InvalidToken:
            raise ValueError("it cannot be decrypted with this server's secrets.key") from None


@dataclass(frozen=True)
class SecretInfo:
    """What anyone is told of a secret: never its value."""

    name: str
    kind: str
    created_at: float
    updated_at: float


def value_problems(
    name: object, access_key: object, secret_key: object, hadoop_user: object = None
) -> list[tuple[str, str]]:
    """Every problem of a secret to store, as (field, message) (pure); never a value. An
    HDFS user (`hadoop_user_name`) stands alone; else both S3 keys are needed."""
    problems = []
    try:
        check_secret_name(str(name))
    except ValueError as exc:
        problems.append(("name", str(exc)))
    if hadoop_user is not None:
        if access_key or secret_key:
            problems.append(("hadoop_user_name", "an HDFS user alone, or S3 keys alone: not both"))
        values: tuple[tuple[str, object], ...] = (("hadoop_user_name", hadoop_user),)
    else:
        values = (("access_key_id", access_key), ("secret_access_key", secret_key))
    for field, value in values:
        if not isinstance(value, str) or not value.strip():
            problems.append((field, "give the store's credential (a non-empty string)"))
        elif len(value) > MAX_VALUE or any(ord(c) < 0x20 for c in value):
            problems.append((field, f"at most {MAX_VALUE} characters, no control characters"))
    return problems


def info(row: TeamSecret) -> SecretInfo:
    return SecretInfo(row.name, row.kind, row.created_at, row.updated_at)


def listing(db: Session, team: Team) -> list[SecretInfo]:
    rows = db.scalars(
        select(TeamSecret).where(TeamSecret.team_id == team.id).order_by(TeamSecret.name)
    )
    return [info(r) for r in rows]


def names_in(db: Session, team_name: str) -> list[str]:
    """The secrets' names of a team (by name), for a form to offer."""
    query = (
        select(TeamSecret.name)
        .join(Team, Team.id == TeamSecret.team_id)
        .where(Team.name == team_name)
        .order_by(TeamSecret.name)
    )
    return list(db.scalars(query))


def find(db: Session, team: Team, name: str) -> TeamSecret | None:
    return db.scalars(
        select(TeamSecret).where(TeamSecret.team_id == team.id, TeamSecret.name == name)
    ).first()


def store(
    db: Session,
    box: SecretBox,
    team: Team,
    name: str,
    credentials: Credentials,
    user_id: int | None,
) -> tuple[SecretInfo, bool]:
    """Store or replace a secret -> (what it is, whether it is new)."""
    now = time.time()
    row = find(db, team, name)
    created = row is None
    if row is None:
        row = TeamSecret(team_id=team.id, name=name, kind=KIND_S3, created_at=now)
        db.add(row)
    row.kind = KIND_HDFS if isinstance(credentials, HdfsCredentials) else KIND_S3
    row.value = box.seal(credentials)
    row.created_by = user_id if created else row.created_by
    row.updated_at = now
    db.commit()
    return info(row), created


def remove(db: Session, team: Team, name: str) -> bool:
    row = find(db, team, name)
    if row is None:
        return False
    db.delete(row)
    db.commit()
    return True


def credentials_for(db: Session, box: SecretBox, team: Team, name: str) -> Credentials:
    """The job's team's secret `name`, decrypted. LookupError names what is missing (in
    the job's team only: another team's secret of that name is not found)."""
    row = find(db, team, name)
    if row is None:
        raise LookupError(
            f"team {team.name} has no secret named {name!r}; a team admin stores it "
            f"(POST /api/v1/teams/{team.name}/secrets, or the team page)"
        )
    try:
        return box.open_value(row.value)
    except ValueError as exc:
        raise LookupError(f"the secret {name!r}: {exc}; a team admin stores it again") from None
