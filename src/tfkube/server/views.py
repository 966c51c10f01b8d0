"""Database rows -> the wire shapes of `tfkube.wire` (pure)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from tfkube.server.core.tables import ApiToken, Artifact, Job, Team, User
from tfkube.wire import ArtifactOut, JobOut, ReplicaOut, TeamOut, TokenOut, UserOut


def job_out(
    row: Job,
    team: str,
    owner: str | None,
    code: str | None,
    *,
    detail: bool = False,
    data: str | None = None,
) -> JobOut:
    counts = Counter(str(r.get("state")) for r in row.replicas)
    return JobOut(
        id=row.id,
        team=team,
        name=row.name,
        description=row.description or "",
        owner=owner,
        phase=row.phase,
        reason=row.reason,
        message=row.message,
        restarts=row.restarts,
        created_at=row.created_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        code=code,
        code_sha256=row.code_sha256,
        data=data,
        on_engine=row.state != "ended" or row.reason not in {"Lost"},
        queued=row.state == "queued",
        counts=dict(counts),
        replicas=[ReplicaOut.model_validate(r) for r in row.replicas] if detail else None,
        spec=row.spec if detail else None,
    )


def user_out(user: User, teams: Mapping[str, str]) -> UserOut:
    return UserOut(
        id=user.id,
        name=user.name,
        site_admin=user.site_admin,
        disabled=user.disabled,
        created_at=user.created_at,
        teams=dict(teams),
    )


def team_out(team: Team, role: str | None) -> TeamOut:
    return TeamOut(
        id=team.id,
        name=team.name,
        namespace=team.namespace,
        quota=dict(team.quota or {}),
        created_at=team.created_at,
        role=role,
    )


def token_out(token: ApiToken) -> TokenOut:
    return TokenOut(
        id=token.public_id,
        name=token.name,
        prefix=token.prefix,
        created_at=token.created_at,
        expires_at=token.expires_at,
        revoked_at=token.revoked_at,
        last_used_at=token.last_used_at,
    )


def artifact_out(a: Artifact, team: str, creator: str | None, in_use: bool) -> ArtifactOut:
    return ArtifactOut(
        id=a.public_id,
        team=team,
        name=a.name,
        version=a.version,
        kind=a.kind,
        sha256=a.sha256,
        size=a.size,
        files=a.files,
        created_by=creator,
        created_at=a.created_at,
        in_use=in_use,
    )
