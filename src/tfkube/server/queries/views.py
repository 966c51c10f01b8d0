"""Database rows -> the wire shapes of `tfkube.wire` (pure): every conversion the API and
the pages answer with, in one place. The names a row only holds as ids (its team, its
creator) are arguments: the query that found the row looked them up."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from tfkube.engines import WorkloadStatus
from tfkube.server.core.tables import (
    ApiToken,
    Artifact,
    Job,
    JobEvent,
    ModelServer,
    Notebook,
    Team,
    User,
)
from tfkube.server.workloads.model_servers import KIND as MODEL_KIND
from tfkube.server.workloads.notebooks import base_url as notebook_path
from tfkube.wire import (
    ArtifactOut,
    EventOut,
    JobOut,
    ModelServerOut,
    NotebookOut,
    TeamOut,
    TokenOut,
    UserOut,
    replicas_of,
)


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
        preemptions=row.preemptions or 0,
        disruptions=row.disruptions or 0,
        created_at=row.created_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        code=code,
        code_sha256=row.code_sha256,
        data=data,
        on_engine=row.state != "ended" or row.reason not in {"Lost"},
        queued=row.state == "queued",
        counts=dict(counts),
        replicas=replicas_of(row.replicas) if detail else None,
        spec=row.spec if detail else None,
        result=dict(row.result) if row.result else None,
        outputs_at=row.outputs_at or "local",
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
        priority=team.priority or 0,
        created_at=team.created_at,
        role=role,
    )


def token_out(token: ApiToken, team: str | None = None) -> TokenOut:
    """`team`: the name of the team it is limited to (`token.team_id`), if it is."""
    return TokenOut(
        id=token.public_id,
        name=token.name,
        prefix=token.prefix,
        created_at=token.created_at,
        expires_at=token.expires_at,
        revoked_at=token.revoked_at,
        last_used_at=token.last_used_at,
        team=team,
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
        unpacked_size=a.unpacked_size,
    )


def event_out(e: JobEvent) -> EventOut:
    return EventOut(id=e.id, time=e.time, replica=e.replica, message=e.message)


def model_server_out(
    row: ModelServer,
    team: str,
    creator: str | None,
    seen: WorkloadStatus,
    base_url: str,
) -> ModelServerOut:
    """A model server with what its watch loop last saw of it (`seen`)."""
    return ModelServerOut(
        id=row.id,
        team=team,
        name=row.name,
        job=row.job_name,
        job_id=row.job_id,
        version=row.version,
        serving_version=seen.version,
        status=seen.health.value,
        message=seen.message,
        runtime=row.runtime,
        url=f"{base_url}/proxy/{MODEL_KIND}/{row.id}/v1/models/{row.name}",
        requests=row.requests,
        errors=row.errors,
        last_request_at=row.last_request_at,
        restarts=row.restarts,
        resources=dict(row.resources or {}),
        autoscale=dict(row.autoscale) if row.autoscale else None,
        replicas=seen.replicas,
        desired_replicas=seen.desired_replicas,
        created_by=creator,
        created_at=row.created_at,
        stopped_at=row.stopped_at,
    )


def notebook_out(row: Notebook, team: str, user: str, base_url: str) -> NotebookOut:
    return NotebookOut(
        id=row.id,
        team=team,
        user=user,
        state=row.state,
        url=f"{base_url}{notebook_path(row.id)}lab",
        started_at=row.started_at,
        stopped_at=row.stopped_at,
        message=row.message,
    )
