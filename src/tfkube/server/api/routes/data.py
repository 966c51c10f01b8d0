"""The data door: what a job's replicas fetch into their data folder when they cannot see
the server's folders (a cluster's pods; `tfkube.launcher._data`, the protocol in
`tfkube.contract`, "Data"). Not a user endpoint: only the job-scoped claim the engine
handed the job's replicas (TFKUBE_DATA_TOKEN) opens it, for that job only, while it has
not ended.

    GET /api/v1/data/<job id>/<replica>
        an uploaded data set: its archive (checked at start; the launcher checks again)
        a data source: 503 while the server stages it (the progress in `detail`), then a
        tar of the replica's folder of the staged view (its shard with a shard rule), or
        410 with the reason the staging failed
"""

from __future__ import annotations

import time

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from tfkube.contract import SHIP_REPLICA
from tfkube.engines import STAGED, STAGING_FAILED, read_state, share_of, tar_stream
from tfkube.server import queries
from tfkube.server.api.blobs import blob_response
from tfkube.server.api.deps import PlatformDep, SessionDep
from tfkube.server.core.security import DATA_CLAIM, ClaimError, bearer_claim
from tfkube.server.core.tables import Team
from tfkube.spec import SpecError, load_job_text

router = APIRouter(prefix="/api/v1/data", tags=["replicas"])

RETRY_SECONDS = 2
"""What a 503 tells the launcher to wait before asking again."""


@router.get("/{job_id}/{replica}")
def fetch_data(
    job_id: str, replica: str, request: Request, db: SessionDep, platform: PlatformDep
) -> Response:
    denied = HTTPException(404, "no such data (or the claim does not open it)")
    header = request.headers.get("authorization", "")
    try:
        claim = bearer_claim(header, platform.key, DATA_CLAIM, time.time())
    except ClaimError:
        raise denied from None
    if claim.job != job_id or not SHIP_REPLICA.fullmatch(replica):
        raise denied
    job = queries.jobs.get(db, job_id)
    if job is None or job.state == "ended":
        raise denied
    team = db.get(Team, job.team_id)
    if team is None:
        raise denied
    if job.data_sha256:
        response = blob_response(platform.blobs, job.data_sha256)
        if response is None:
            raise denied
        return response
    storage = platform.jobs.storage(team, job.id, job.name)
    spec = load_job_text(job.spec, f"job {job.name!r}")
    if storage.served_data is None or spec.spec.storage.data.source is None:
        raise denied
    state = read_state(storage.served_data)
    phase = (state or {}).get("phase")
    if phase == STAGING_FAILED:
        raise HTTPException(410, str((state or {}).get("text") or "staging failed"))
    if phase != STAGED:
        # Staging here, or cut short by a restart of the server: go on with it.
        try:
            platform.jobs.stage_served(db, job, team, spec)
        except SpecError as exc:  # its team's secret removed since: never staged
            raise HTTPException(410, f"cannot stage the job's data: {exc}") from None
        text = str(((read_state(storage.served_data) or {}).get("text")) or "staging data")
        return JSONResponse(
            {"detail": text}, status_code=503, headers={"Retry-After": str(RETRY_SECONDS)}
        )
    folder = storage.served_data / share_of(replica, spec.spec.storage.data.shard is not None)
    if not folder.is_dir():
        raise HTTPException(404, f"{replica} is not a replica of this job")
    return StreamingResponse(tar_stream(folder), media_type="application/x-tar")
