"""What replicas fetch: their job's code, by sha256, with the job-scoped claim the engine
handed them (TFKUBE_CODE_TOKEN, sent as `Authorization: Bearer`). Not a user endpoint:
no session or API token opens it, and the claim opens one blob for one unfinished job."""

from __future__ import annotations

import time

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import Response

from tfkube.server import queries
from tfkube.server.api.blobs import blob_response
from tfkube.server.api.deps import PlatformDep, SessionDep
from tfkube.server.core.security import ClaimError, bearer_claim

router = APIRouter(prefix="/api/v1", tags=["code"])


@router.get("/code/{sha256}")
def fetch_code(sha256: str, request: Request, db: SessionDep, platform: PlatformDep) -> Response:
    denied = HTTPException(404, "no such code (or the claim does not open it)")
    header = request.headers.get("authorization", "")
    try:
        claim = bearer_claim(header, platform.key, sha256, time.time())
    except ClaimError:
        raise denied from None
    job = queries.jobs.unfinished(db, claim.job)
    if job is None or job.code_sha256 != sha256:
        raise denied
    response = blob_response(platform.blobs, sha256)
    if response is None:
        raise denied
    return response
