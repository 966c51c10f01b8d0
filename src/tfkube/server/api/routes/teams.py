"""Teams (the tenant), their members and roles, their quota, and their allowances (what
members' jobs may use in the team's Kubernetes namespace: `tfkube.engines.admission_refusals`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, Field, ValidationError

from tfkube.engines import Allowances
from tfkube.server import queries
from tfkube.server.accounts import create_team, remove_from_team, set_member, team_name_problem
from tfkube.server.api.deps import (
    CurrentUser,
    PlatformDep,
    SessionDep,
    SiteAdmin,
    TeamDep,
    not_found,
)
from tfkube.server.api.errors import FieldHTTPError, field_error
from tfkube.server.core.scopes import Role, Scope
from tfkube.server.jobs.allowances import allowances_of
from tfkube.server.queries.views import team_out
from tfkube.server.tenants import prepare_team
from tfkube.spec import errors_from
from tfkube.wire import MemberOut, TeamOut

router = APIRouter(prefix="/api/v1/teams", tags=["teams"])


class QuotaIn(BaseModel):
    """A team's limits; absent means no limit. On Kubernetes they become the namespace's
    ResourceQuota; locally the queue enforces them."""

    cpu: float | None = Field(None, gt=0)
    memory: int | None = Field(None, gt=0)
    """Bytes."""
    gpu: int | None = Field(None, ge=0)
    jobs: int | None = Field(None, gt=0)
    """Jobs running at once."""


PRIORITY = Field(None, ge=-1000, le=1000)
"""Local engine: a higher priority's jobs are queued first, and a job that does not fit
stops running jobs of lower priority (they resume from their checkpoints later).
Kubernetes: the team's job pods get the PriorityClass `tfkube-priority-<n>` (made with the
team), so the scheduler preempts pods of lower priority for them."""


class TeamIn(BaseModel):
    name: str
    quota: QuotaIn = QuotaIn()
    priority: int | None = PRIORITY


class TeamPatch(BaseModel):
    quota: QuotaIn | None = None
    """Absent: unchanged."""
    priority: int | None = PRIORITY
    """Absent: unchanged."""


class MemberIn(BaseModel):
    role: Role


@router.get("")
def list_teams(principal: CurrentUser, db: SessionDep) -> list[TeamOut]:
    return queries.teams.list_teams(db, principal.actor)


@router.post("", status_code=201)
def add_team(body: TeamIn, _: SiteAdmin, db: SessionDep, platform: PlatformDep) -> TeamOut:
    if problem := team_name_problem(body.name):
        raise field_error("name", problem)
    if queries.teams.named(db, body.name) is not None:
        raise HTTPException(409, f"a team named {body.name!r} exists already")
    team = create_team(db, body.name)
    team.quota = body.quota.model_dump(exclude_none=True)
    team.priority = body.priority or 0
    prepare_team(platform.engine, db, team)
    return team_out(team, None)


@router.get("/{team}")
def get_team(team: TeamDep, principal: CurrentUser) -> TeamOut:
    return queries.teams.view(team, principal.actor)


@router.patch("/{team}")
def change_team(
    team: TeamDep, body: TeamPatch, _: SiteAdmin, db: SessionDep, platform: PlatformDep
) -> TeamOut:
    if body.quota is not None:
        team.quota = body.quota.model_dump(exclude_none=True)
    if body.priority is not None:
        team.priority = body.priority
    prepare_team(platform.engine, db, team)
    platform.jobs.poke.set()
    return team_out(team, None)


@router.get("/{team}/members")
def members(team: TeamDep, principal: CurrentUser, db: SessionDep) -> list[MemberOut]:
    principal.require(Scope.TEAM_READ, team.id)
    return queries.teams.members(db, team.id)


@router.put("/{team}/members/{user}")
def put_member(
    team: TeamDep, user: str, body: MemberIn, principal: CurrentUser, db: SessionDep
) -> MemberOut:
    principal.require(Scope.TEAM_ADMIN, team.id)
    found = queries.users.named(db, user)
    if found is None:
        raise not_found(f"user {user!r}")
    set_member(db, team, found, body.role)
    db.commit()
    return MemberOut(user=found.name, role=body.role.value)


@router.delete("/{team}/members/{user}", status_code=204)
def remove_member(team: TeamDep, user: str, principal: CurrentUser, db: SessionDep) -> None:
    principal.require(Scope.TEAM_ADMIN, team.id)
    found = queries.users.named(db, user)
    if found is None or not remove_from_team(db, team, found):
        raise not_found(f"member {user!r}")


@router.get("/{team}/allowances")
def get_allowances(team: TeamDep, principal: CurrentUser) -> Allowances:
    """What the team's members' jobs may use in its namespace beyond their own, and the
    Pod Security level the namespace enforces (every member may read it: a refusal points
    here)."""
    principal.require(Scope.TEAM_READ, team.id)
    return allowances_of(team)


@router.put("/{team}/allowances")
def put_allowances(
    team: TeamDep,
    body: dict[str, Any],
    principal: CurrentUser,
    db: SessionDep,
    platform: PlatformDep,
) -> Allowances:
    """Replace the team's allowances (team admins). A name or a prefix (`datasets-*`) per
    entry; platform credentials and notebook homes are refused (422 naming the entry).
    `pod_security` (`restricted` or `baseline`), `priority_classes`, `toleration_keys`,
    `schedulers` and `volcano_queues` are a site admin's: they decide what runs on the
    nodes every team shares, at what priority, on whose nodes, by whose rules and share.
    The namespace is labelled again with its level (also what brings a team made before the
    labels up to date); 502 when the cluster refuses, and nothing changes."""
    principal.require(Scope.TEAM_ADMIN, team.id)
    try:
        wanted = Allowances.model_validate(body)
    except ValidationError as exc:
        errors = [(e.field, e.message) for e in errors_from(exc)]
        raise FieldHTTPError(errors, f"{errors[0][0]}: {errors[0][1]}") from None
    before = allowances_of(team)
    site_admins = (
        "pod_security",
        "priority_classes",
        "toleration_keys",
        "schedulers",
        "volcano_queues",
    )
    if any(getattr(wanted, key) != getattr(before, key) for key in site_admins):
        principal.require(Scope.SITE_ADMIN)
    team.allowances = wanted.model_dump(mode="json")
    prepare_team(platform.engine, db, team)  # the namespace's Pod Security labels, then commit
    return wanted
