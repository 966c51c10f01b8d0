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

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from sqlalchemy.orm import Session

from tfkube.contract import DATA_KEY_PATH, SHIP_REPLICA
from tfkube.engines import (
    STAGED,
    STAGING_FAILED,
    read_state,
    served_digest,
    share_of,
    tar_stream,
)
from tfkube.server import queries
from tfkube.server.api.blobs import blob_response
from tfkube.server.api.deps import PlatformDep, SessionDep
from tfkube.server.core.security import DATA_CLAIM, ClaimError, bearer_claim
from tfkube.server.core.tables import Blob, Team
from tfkube.server.platform import Platform
from tfkube.spec import SpecError, load_job_text

router = APIRouter(prefix="/api/v1/data", tags=["replicas"])

RETRY_SECONDS = 2
"""What a 503 tells the launcher to wait before asking again."""


@dataclass(frozen=True)
class _Blob:
    sha256: str
    size: int


@dataclass(frozen=True)
class _Folder:
    served: Path
    share: str

    @property
    def path(self) -> Path:
        return self.served / self.share


def _resolve(
    job_id: str, replica: str, request: Request, db: Session, platform: Platform
) -> tuple[Team, _Blob | _Folder]:
    """What the request's claim opens for `replica` (the team and the bytes), or the
    HTTPException to answer: 404 (not this claim's), 410 (the staging failed), 503 (the
    server stages: a JSON answer with Retry-After, raised as _Staging)."""
    denied = HTTPException(404, "no such data (or the claim does not open it)")
    header = request.headers.get("authorization", "")
    try:
        claim = bearer_claim(header, platform.key, DATA_CLAIM, time.time())
    except ClaimError:
        raise denied from None
    if claim.job != job_id or not SHIP_REPLICA.fullmatch(replica):
        raise denied
    job = queries.jobs.unfinished(db, job_id)
    if job is None:
        raise denied
    team = db.get(Team, job.team_id)
    if team is None:
        raise denied
    if job.data_sha256:
        blob = db.get(Blob, job.data_sha256)
        if blob is None:
            raise denied
        return team, _Blob(blob.sha256, blob.size)
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
        raise _Staging(text)
    share = share_of(replica, spec.spec.storage.data.shard is not None)
    found = _Folder(storage.served_data, share)
    if not found.path.is_dir():
        raise HTTPException(404, f"{replica} is not a replica of this job")
    return team, found


class _Staging(Exception):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def answer(self) -> JSONResponse:
        return JSONResponse(
            {"detail": self.text}, status_code=503, headers={"Retry-After": str(RETRY_SECONDS)}
        )


def cache_key(team_id: int, sha256: str) -> str:
    """The name a node cache keeps a tar under (pure): the team's own, so one team's
    cached bytes never answer another's request, even for the same content."""
    return hashlib.sha256(f"tfkube-datacache-v1\0{team_id}\0{sha256}".encode()).hexdigest()


@router.get("/{job_id}/{replica}/" + DATA_KEY_PATH)
def data_key(
    job_id: str, replica: str, request: Request, db: SessionDep, platform: PlatformDep
) -> Response:
    """The node cache's question (`tfkube.datacache`), asked with the replica's claim:
    which key, size and sha256 the replica's tar has; the data route's refusals else."""
    try:
        team, found = _resolve(job_id, replica, request, db, platform)
    except _Staging as staging:
        return staging.answer()
    if isinstance(found, _Blob):
        sha256, size = found.sha256, found.size
    else:
        sha256, size = served_digest(found.served, found.share)
    return JSONResponse({"key": cache_key(team.id, sha256), "size": size, "sha256": sha256})


@router.get("/{job_id}/{replica}")
def fetch_data(
    job_id: str, replica: str, request: Request, db: SessionDep, platform: PlatformDep
) -> Response:
    try:
        _team, found = _resolve(job_id, replica, request, db, platform)
    except _Staging as staging:
        return staging.answer()
    if isinstance(found, _Blob):
        response = blob_response(platform.blobs, found.sha256)
        if response is None:
            raise HTTPException(404, "no such data (or the claim does not open it)")
        return response
    return StreamingResponse(tar_stream(found.path), media_type="application/x-tar")
