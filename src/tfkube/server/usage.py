"""What a team uses now: the resources its running jobs requested (what the local queue
counts against the quota) and how many jobs it has in each state of the server's record."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from tfkube.server.core.tables import Job


@dataclass(frozen=True)
class TeamUsage:
    cpu: float
    """CPUs requested by the team's running jobs."""
    memory: int
    """Bytes of memory requested by them."""
    gpu: int
    running: int
    """Jobs on the engine (started, not finished)."""
    queued: int
    """Jobs waiting in the server's queue."""


def team_usage(db: Session, team_id: int) -> TeamUsage:
    live = db.scalars(select(Job.request).where(Job.team_id == team_id, Job.state == "live")).all()
    queued = db.scalar(
        select(func.count()).select_from(Job).where(Job.team_id == team_id, Job.state == "queued")
    )
    return TeamUsage(
        cpu=sum(float((r or {}).get("cpu", 0)) for r in live),
        memory=sum(int((r or {}).get("memory", 0)) for r in live),
        gpu=sum(int((r or {}).get("gpu", 0)) for r in live),
        running=len(live),
        queued=int(queued or 0),
    )
