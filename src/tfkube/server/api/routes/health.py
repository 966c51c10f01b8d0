"""`/healthz`: for probes and load balancers; no authentication, no database work beyond
one trivial query."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import text

from tfkube.server.api.deps import SessionDep

router = APIRouter()


@router.get("/healthz", tags=["health"])
def healthz(db: SessionDep) -> dict[str, str]:
    db.execute(text("SELECT 1"))
    return {"status": "ok"}
