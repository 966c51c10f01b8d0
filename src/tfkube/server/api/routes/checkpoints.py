"""A job's final checkpoint: what it is, and the files that make it up as one .tar.gz
(the trained model, ready for `tf.train.latest_checkpoint` wherever it is unpacked).
Found and packed without following anything the job linked (`outputs/files.py`)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException
from fastapi.responses import StreamingResponse

from tfkube.server.api.deps import CurrentUser, JobDep, PlatformDep
from tfkube.server.api.errors import field_error
from tfkube.server.api.routes.logs import WORKLOAD_BYTES, outputs_folder
from tfkube.server.core.inputs import content_disposition, control_problem
from tfkube.server.core.scopes import Scope
from tfkube.server.core.tables import Job
from tfkube.server.outputs.checkpoints import INDEX, FinalCheckpoint, find_checkpoint
from tfkube.server.outputs.folder import OutputsFolder
from tfkube.wire import CheckpointOut

router = APIRouter(prefix="/api/v1/jobs/{job_id}", tags=["logs and outputs"])


def _checkpoint_of(
    job: Job, principal: CurrentUser, platform: PlatformDep
) -> tuple[FinalCheckpoint, OutputsFolder]:
    """The newest checkpoint and where it is read from (the output folder, or the archive
    once the local copy is gone)."""
    principal.require(Scope.OUTPUTS_READ, job.team_id)
    outputs = outputs_folder(platform, job)
    found = find_checkpoint(outputs)
    if found is None or outputs is None:
        raise HTTPException(404, "this job has written no checkpoint (yet)")
    return found, outputs


@router.get("/checkpoint")
def checkpoint(job: JobDep, principal: CurrentUser, platform: PlatformDep) -> CheckpointOut:
    """The job's newest checkpoint: its name, folder and files (404 when there is none)."""
    found, _ = _checkpoint_of(job, principal, platform)
    return CheckpointOut(prefix=found.prefix, folder=found.folder, files=list(found.files))


@router.get("/checkpoint/download")
def download_checkpoint(
    job: JobDep, principal: CurrentUser, platform: PlatformDep
) -> StreamingResponse:
    """The newest checkpoint as `<job>-<checkpoint>.tar.gz`: its files and a `checkpoint`
    index naming it (relatively), streamed (from the archive in ranged reads once the
    local copy is gone)."""
    found, outputs = _checkpoint_of(job, principal, platform)
    if (problem := control_problem(found.prefix)) or '"' in found.prefix:
        # Its index names it in quotes, one line: such a name cannot be written there.
        raise field_error(
            "checkpoint",
            f"the job named its checkpoint {found.prefix!r}, which "
            + (problem or "holds a quote")
            + "; download its files from the outputs instead",
        )
    name = f"{job.name}-{found.prefix}.tar.gz"
    files = [(path.split("/"), path.rsplit("/", 1)[-1]) for path in found.files]
    return StreamingResponse(
        outputs.tar_files(files, {INDEX: found.index_text().encode()}),
        media_type="application/gzip",
        headers={"Content-Disposition": content_disposition(name), **WORKLOAD_BYTES},
    )
