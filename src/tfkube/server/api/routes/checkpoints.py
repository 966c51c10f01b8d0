"""A job's final checkpoint: what it is, and the files that make it up as one .tar.gz
(the trained model, ready for `tf.train.latest_checkpoint` wherever it is unpacked)."""

from __future__ import annotations

import io
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import StreamingResponse

from tfkube.server.api.deps import CurrentUser, JobDep
from tfkube.server.api.errors import field_error
from tfkube.server.api.routes.logs import _Pipe
from tfkube.server.core.inputs import content_disposition, control_problem
from tfkube.server.core.scopes import Scope
from tfkube.server.core.tables import Job
from tfkube.server.outputs.checkpoints import INDEX, FinalCheckpoint, find_checkpoint
from tfkube.wire import CheckpointOut

router = APIRouter(prefix="/api/v1/jobs/{job_id}", tags=["logs and outputs"])


def _checkpoint_of(job: Job, principal: CurrentUser) -> FinalCheckpoint:
    principal.require(Scope.OUTPUTS_READ, job.team_id)
    found = find_checkpoint(job.output_dir)
    if found is None:
        raise HTTPException(404, "this job has written no checkpoint (yet)")
    return found


@router.get("/checkpoint")
def checkpoint(job: JobDep, principal: CurrentUser) -> CheckpointOut:
    """The job's newest checkpoint: its name, folder and files (404 when there is none)."""
    found = _checkpoint_of(job, principal)
    return CheckpointOut(prefix=found.prefix, folder=found.folder, files=list(found.files))


@router.get("/checkpoint/download")
def download_checkpoint(job: JobDep, principal: CurrentUser) -> StreamingResponse:
    """The newest checkpoint as `<job>-<checkpoint>.tar.gz`: its files and a `checkpoint`
    index naming it (relatively), streamed."""
    found = _checkpoint_of(job, principal)
    if (problem := control_problem(found.prefix)) or '"' in found.prefix:
        # Its index names it in quotes, one line: such a name cannot be written there.
        raise field_error(
            "checkpoint",
            f"the job named its checkpoint {found.prefix!r}, which "
            + (problem or "holds a quote")
            + "; download its files from the outputs instead",
        )
    root = Path(job.output_dir or "").resolve()
    name = f"{job.name}-{found.prefix}.tar.gz"
    return StreamingResponse(
        _stream(root, found),
        media_type="application/gzip",
        headers={"Content-Disposition": content_disposition(name)},
    )


def _stream(root: Path, found: FinalCheckpoint) -> Iterator[bytes]:
    pipe = _Pipe()
    with tarfile.open(fileobj=pipe, mode="w|gz") as tar:
        index = found.index_text().encode()
        info = tarfile.TarInfo(INDEX)
        info.size, info.mtime, info.mode = len(index), int(time.time()), 0o644
        tar.addfile(info, io.BytesIO(index))
        for path in found.files:
            tar.add(root / path, arcname=Path(path).name, recursive=False)
            if len(pipe.buffer) > 1 << 20:
                yield pipe.take()
    yield pipe.take()
