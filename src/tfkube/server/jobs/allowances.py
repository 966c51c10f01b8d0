"""The server's side of Kubernetes admission: who submits, and what their team allows.

`refusals` is the one call in the submit path (`JobService.submit`): it reads the
submitter's role and the team's allowances and asks the pure policy
(`tfkube.engines.admission_refusals`) before anything is recorded or created, so a refused
job is a 422 naming every field, and nothing exists of it anywhere. The policy holds on
both engines (the local engine refuses cluster-only fields anyway, with its own words).
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from tfkube.engines import Allowances, Submitter, admission_refusals
from tfkube.server.accounts import actor_of
from tfkube.server.core.scopes import Role
from tfkube.server.core.tables import Team, User
from tfkube.spec import FieldError, TFJob


def allowances_of(team: Team) -> Allowances:
    """The team's allowances as stored (none, and `restricted`, when never set)."""
    return Allowances.model_validate(team.allowances or {})


def submitter_of(db: Session, team: Team, user_id: int) -> Submitter:
    """A site admin, the team's admin, or a member (anyone else cannot submit: the route
    already answered 403 or 404)."""
    user = db.get(User, user_id)
    actor = actor_of(db, user) if user is not None else None
    if actor is not None and actor.site_admin:
        return Submitter.SITE_ADMIN
    if actor is not None and actor.roles.get(team.id) is Role.ADMIN:
        return Submitter.TEAM_ADMIN
    return Submitter.MEMBER


def refusals(db: Session, team: Team, user_id: int, job: TFJob) -> list[FieldError]:
    """Why the job may not run for this user in this team ([] when it may)."""
    return admission_refusals(job, submitter_of(db, team, user_id), allowances_of(team))
