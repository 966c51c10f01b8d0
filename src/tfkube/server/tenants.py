"""A team as its engine sees it (`tfkube.engines.Tenant`): the one conversion, and making a
team ready on its engine."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from fastapi import HTTPException
from sqlalchemy import select
from sqlalchemy.orm import Session

from tfkube.engines import Engine, NotAvailable, Tenant
from tfkube.server.core.tables import Team

log = logging.getLogger("tfkube.server")


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


def prepare_teams(engine: Engine, sessions: Callable[[], Session]) -> None:
    """Every team made ready again as this version makes it (idempotent), once at start:
    an upgraded server brings the teams made before it what it now makes (on Kubernetes,
    the namespace's NetworkPolicy). A team the engine refuses is logged and left as it
    was; the others go on."""
    with sessions() as db:
        tenants = [tenant_of(team) for team in db.scalars(select(Team))]
    done = 0
    for tenant in tenants:
        try:
            engine.prepare_tenant(tenant)
            done += 1
        except Exception as exc:
            log.warning("team %s (%s) could not be made ready again: %s",
                        tenant.name, tenant.namespace, exc)  # fmt: skip
    log.info("%d of %d teams made ready again", done, len(tenants))


def prepare_teams_in_background(engine: Engine, sessions: Callable[[], Session]) -> None:
    """`prepare_teams` in a thread of its own: a slow or absent cluster never holds the
    server's start."""
    threading.Thread(
        target=prepare_teams, args=(engine, sessions), name="prepare-teams", daemon=True
    ).start()
