"""A team as its engine sees it (`tfkube.engines.Tenant`): the one conversion, and making a
team ready on its engine."""

from __future__ import annotations

from fastapi import HTTPException
from sqlalchemy.orm import Session

from tfkube.engines import Engine, NotAvailable, Tenant
from tfkube.server.core.tables import Team


def tenant_of(team: Team) -> Tenant:
    level = (team.allowances or {}).get("pod_security", "restricted")
    return Tenant(team.name, team.namespace, dict(team.quota or {}), level, team.priority or 0)


def prepare_team(engine: Engine, db: Session, team: Team) -> None:
    """Make the team's folder or namespace and quota, then commit; when the engine refuses
    (a cluster down, RBAC), nothing is kept and the caller hears why (502; 409 when the
    engine cannot have this team at all, e.g. a second team where it cannot isolate)."""
    try:
        engine.prepare_tenant(tenant_of(team))
    except NotAvailable as exc:  # the engine refuses it here (e.g. no isolation): 409
        db.rollback()
        raise HTTPException(409, str(exc)) from None
    except Exception as exc:
        db.rollback()
        raise HTTPException(
            502, f"the engine could not prepare team {team.name} ({team.namespace}): {exc}"
        ) from None
    db.commit()
