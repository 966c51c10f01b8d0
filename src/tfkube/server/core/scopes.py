"""Who may do what: named scopes per team role, in one place. Pure.

Every request is authorised by one question, `allowed(actor, scope, team)`, answered
from the actor's memberships: a role grants a fixed set of scopes in its team, a site
admin has every scope everywhere. Handlers never compare role names themselves.

Team isolation is not a scope: something of a team the actor is not in is *not found*
(404), never *forbidden* (403), so ids of other teams do not leak. `visible(actor,
team)` says whether the team exists for the actor at all; `allowed` then decides between
200 and 403 for what the actor can see.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class Role(StrEnum):
    """A user's role in one team."""

    ADMIN = "admin"
    """Manages the team's members and quota, and everything a member may do."""
    MEMBER = "member"
    """Uploads artifacts, submits, stops and deletes jobs, opens TensorBoard, serves
    models, opens a notebook."""
    VIEWER = "viewer"
    """Reads jobs, logs, metrics, artifacts and TensorBoard, asks the team's model servers
    for predictions; changes nothing."""


class Scope(StrEnum):
    """One permission. Names read `<thing>:<verb>`."""

    JOBS_READ = "jobs:read"
    JOBS_WRITE = "jobs:write"
    """Submit, stop, delete, re-submit."""
    LOGS_READ = "logs:read"
    METRICS_READ = "metrics:read"
    """Scalars, progress and the job's TensorBoard."""
    OUTPUTS_READ = "outputs:read"
    """List and download a job's outputs (checkpoints, exported models)."""
    SERVING_READ = "serving:read"
    """See the team's model servers and send them requests (predict, status, metadata)."""
    SERVING_WRITE = "serving:write"
    """Start and stop model servers."""
    NOTEBOOKS = "notebooks:use"
    """Open one's own notebook. It runs code as jobs do (locally: as the server's user),
    so it goes with the right to submit jobs."""
    ARTIFACTS_READ = "artifacts:read"
    ARTIFACTS_WRITE = "artifacts:write"
    """Upload and delete code and data."""
    TEAM_READ = "team:read"
    """See the team, its members and quota."""
    TEAM_ADMIN = "team:admin"
    """Add and remove members, change roles and the quota."""
    SITE_ADMIN = "site:admin"
    """Create users and teams; held by site admins only."""


_READ = frozenset(
    {
        Scope.JOBS_READ,
        Scope.LOGS_READ,
        Scope.METRICS_READ,
        Scope.OUTPUTS_READ,
        Scope.ARTIFACTS_READ,
        Scope.TEAM_READ,
        Scope.SERVING_READ,
    }
)
_WRITE = frozenset({Scope.JOBS_WRITE, Scope.ARTIFACTS_WRITE, Scope.SERVING_WRITE, Scope.NOTEBOOKS})
ROLE_SCOPES: Mapping[Role, frozenset[Scope]] = {
    Role.VIEWER: _READ,
    Role.MEMBER: _READ | _WRITE,
    Role.ADMIN: _READ | _WRITE | {Scope.TEAM_ADMIN},
}
"""What each role grants inside its own team."""


@dataclass(frozen=True)
class Actor:
    """The signed-in user as the permission checks see them."""

    user_id: int
    site_admin: bool = False
    roles: Mapping[int, Role] = field(default_factory=dict)
    """team id -> the user's role there."""


def visible(actor: Actor, team_id: int) -> bool:
    """Whether the team (and so anything in it) exists for this actor."""
    return actor.site_admin or team_id in actor.roles


def scopes(actor: Actor, team_id: int | None) -> frozenset[Scope]:
    """Every scope the actor holds in a team (`None`: site-wide scopes only)."""
    if actor.site_admin:
        return frozenset(Scope)
    if team_id is None or team_id not in actor.roles:
        return frozenset()
    return ROLE_SCOPES[actor.roles[team_id]]


def allowed(actor: Actor, scope: Scope, team_id: int | None = None) -> bool:
    return scope in scopes(actor, team_id)
