"""What replicas ship (`tfkube.launcher._ship`, the protocol in `tfkube.contract`): their
output, event files and result, for a job whose log folder the server cannot read (a
cluster job without an outputs claim). Not a user endpoint: only the job-scoped claim the
engine handed the job's replicas (TFKUBE_SHIP_TOKEN) opens it, for that job only, while
it runs and SHIP_GRACE_SECONDS after it ended (its replicas' last words)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse

from tfkube.server import queries
from tfkube.server.api.deps import PlatformDep, SessionDep
from tfkube.server.core.security import SHIP_CLAIM, ClaimError, bearer_claim
from tfkube.server.core.tables import Team
from tfkube.server.outputs.shipped import Behind, ShipRefused

router = APIRouter(prefix="/api/v1/ship/{job_id}", tags=["replicas"])

SHIP_GRACE_SECONDS = 600.0
"""How long after a job ended its replicas may still ship (a last round of a pod that
ended with it)."""


def _shipping_to(job_id: str, request: Request, db: SessionDep, platform: PlatformDep) -> str:
    """The output folder of the job the bearer claim opens shipping for, if it may still
    ship; else 404 (410 once it ended long enough ago). A plain function: FastAPI runs it
    in its thread pool, so the database is never read on the event loop."""
    denied = HTTPException(404, "no such job to ship to (or the token does not open it)")
    now = time.time()
    try:
        claim = bearer_claim(
            request.headers.get("authorization", ""), platform.key, SHIP_CLAIM, now
        )
    except ClaimError:
        raise denied from None
    if claim.job != job_id:
        raise denied
    job = queries.jobs.get(db, job_id)
    if job is None or not job.output_dir:
        raise denied
    if job.state == "ended" and (job.finished_at or job.updated_at) < now - SHIP_GRACE_SECONDS:
        raise HTTPException(410, "the job ended; nothing more is kept of its replicas")
    team = db.get(Team, job.team_id)
    if team is None or not platform.jobs.storage(team, job.id, job.name).ship:
        raise denied
    return str(job.output_dir)


ShipTo = Annotated[str, Depends(_shipping_to)]


async def _write(
    request: Request, offset: int, write: Callable[[bytes], int | Behind]
) -> JSONResponse:
    """Read the chunk (bounded by the middleware: SHIP_CHUNK_BYTES), write it off the event
    loop, answer with the server's length of the file."""
    if offset < 0:
        raise HTTPException(400, "offset: give the byte position the chunk starts at (>= 0)")
    data = await request.body()
    try:
        result = await asyncio.to_thread(write, data)
    except ShipRefused as exc:
        raise HTTPException(exc.status, str(exc)) from None
    if isinstance(result, Behind):
        return JSONResponse({"size": result.size}, status_code=409)
    return JSONResponse({"size": result})


@router.post("/log/{replica}/{start}")
async def ship_log(
    job_id: str,
    replica: str,
    start: str,
    request: Request,
    output_dir: ShipTo,
    platform: PlatformDep,
    offset: int = 0,
) -> JSONResponse:
    """Bytes of one start of a replica's output, at `offset` of it."""
    return await _write(
        request,
        offset,
        lambda data: platform.shipped.log(job_id, output_dir, replica, start, offset, data),
    )


@router.post("/file/{path:path}")
async def ship_file(
    job_id: str,
    path: str,
    request: Request,
    output_dir: ShipTo,
    platform: PlatformDep,
    offset: int = 0,
    whole: bool = False,
) -> JSONResponse:
    """Bytes of an event file at `offset`, or the whole result file (`whole=1`)."""
    return await _write(
        request,
        offset,
        lambda data: platform.shipped.file(job_id, output_dir, path, offset, data, whole),
    )
