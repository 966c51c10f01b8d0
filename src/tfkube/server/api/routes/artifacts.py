"""Code and data artifacts of a team: upload (streamed, checked, stored once per sha256),
list, download, delete (refused while a job that is not finished uses it)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from tfkube import contract
from tfkube.server import queries
from tfkube.server.api.blobs import blob_response
from tfkube.server.api.deps import (
    ArtifactDep,
    CurrentUser,
    PlatformDep,
    SessionDep,
    TeamDep,
    not_found,
)
from tfkube.server.api.errors import field_error
from tfkube.server.api.middleware import CLOSE, too_large
from tfkube.server.artifacts import (
    MAX_DATA_UPLOAD_BYTES,
    MAX_FORM_OVERHEAD,
    MAX_UPLOAD_BYTES,
    BadArchive,
    BadForm,
    Contents,
    TooLarge,
    archive_kind,
    check_tar,
    files_to_targz,
    receive,
    receive_form,
    record_artifact,
    remove_artifact,
    zip_to_targz,
)
from tfkube.server.core.inputs import content_disposition, control_problem, declared_too_large
from tfkube.server.core.scopes import Scope
from tfkube.server.queries.views import artifact_out
from tfkube.wire import ArtifactOut

router = APIRouter(prefix="/api/v1", tags=["artifacts"])
NAME = re.compile(r"^[a-z0-9]([-a-z0-9_.]{0,62}[a-z0-9])?$")
KINDS = ("code", "data")


@router.get("/artifacts")
def list_artifacts(
    principal: CurrentUser,
    db: SessionDep,
    team: str | None = None,
    name: str | None = None,
    kind: str | None = None,
) -> list[ArtifactOut]:
    """Artifacts of the caller's teams (or one team), newest version first."""
    return queries.artifacts.list_artifacts(db, principal.actor, team=team, name=name, kind=kind)


@router.get("/artifacts/{artifact_id}")
def get_artifact(artifact: ArtifactDep, db: SessionDep) -> ArtifactOut:
    return queries.artifacts.view(db, artifact)


@router.get("/artifacts/{artifact_id}/download")
def download(artifact: ArtifactDep, platform: PlatformDep) -> Response:
    name = f"{artifact.name}-{artifact.version}.tar.gz"
    response = blob_response(
        platform.blobs, artifact.sha256, {"Content-Disposition": content_disposition(name)}
    )
    if response is None:
        raise HTTPException(404, f"the bytes of {artifact.name}:{artifact.version} are missing")
    return response


@router.delete("/artifacts/{artifact_id}", status_code=204)
def delete_artifact(
    artifact: ArtifactDep, principal: CurrentUser, db: SessionDep, platform: PlatformDep
) -> None:
    principal.require(Scope.ARTIFACTS_WRITE, artifact.team_id)
    if queries.artifacts.in_use(db, artifact.id):
        raise HTTPException(
            409,
            f"{artifact.name}:{artifact.version} is used by a job that is not finished; "
            "stop or delete that job first",
        )
    remove_artifact(db, platform.blobs, artifact)


async def _stream(request: Request) -> AsyncIterator[bytes]:
    async for chunk in request.stream():
        if chunk:
            yield chunk


def _limit(kind: str | None) -> int:
    return MAX_DATA_UPLOAD_BYTES if kind == "data" else MAX_UPLOAD_BYTES


@router.post("/teams/{team}/artifacts", status_code=201)
async def upload(
    request: Request,
    team: TeamDep,
    principal: CurrentUser,
    db: SessionDep,
    platform: PlatformDep,
    name: Annotated[str | None, Query(description="The artifact's name.")] = None,
    kind: Annotated[str | None, Query(description="code (the default) or data.")] = None,
    entrypoint: Annotated[
        str | None,
        Query(description=f"Code: the script that must be in it ({contract.DEFAULT_ENTRYPOINT})."),
    ] = None,
    filename: Annotated[str, Query(description="Raw body: its file name.")] = "upload.tar.gz",
) -> ArtifactOut:
    """Upload a `.tar.gz`/`.zip` as the raw body, or as multipart/form-data: `file` (one
    archive) or several `files` whose names are paths relative to the folder, with
    `name`, `kind`, `entrypoint` as fields before the files (or in the query). Streamed
    either way: memory stays bounded however large, and a body over the kind's limit is
    refused as it passes it (413; at once when its Content-Length says so). A new version
    when the bytes differ from the latest."""
    principal.require(Scope.ARTIFACTS_WRITE, team.id)
    for field, value in (
        ("name", name),
        ("kind", kind),
        ("entrypoint", entrypoint),
        ("filename", filename),
    ):
        if value is not None and (problem := control_problem(value)):
            raise field_error(field, problem)
    content_type = request.headers.get("content-type", "")
    multipart = content_type.startswith("multipart/form-data")
    if multipart:
        declared = (_limit(kind) if kind else MAX_DATA_UPLOAD_BYTES) + MAX_FORM_OVERHEAD
    else:
        declared = _limit(kind)
    if declared_too_large(request.headers.get("content-length"), declared):
        raise too_large(declared, "the upload")
    blobs = platform.blobs
    staged: list[Path] = []
    try:
        uploads: list[tuple[str, Path]] = []
        if multipart:
            form = await receive_form(
                content_type,
                _stream(request),
                blobs.temp,
                staged,
                lambda fields: _limit(kind or fields.get("kind")),
            )
            name = name or form.fields.get("name") or None
            kind = kind or form.fields.get("kind")
            entrypoint = entrypoint or form.fields.get("entrypoint")
            uploads = [(n, p) for f, n, p in form.files if f in {"file", "files"}]
        kind = kind or "code"
        if not name or not NAME.fullmatch(name):
            raise field_error(
                "name", "give the artifact a name: lower-case letters, digits, '-', '_', '.'"
            )
        if kind not in KINDS:
            raise field_error("kind", "must be code or data")
        needed = (entrypoint or contract.DEFAULT_ENTRYPOINT) if kind == "code" else None
        if not multipart:
            raw = blobs.temp()
            staged.append(raw)
            await receive(_stream(request), raw, _limit(kind))
            final, contents = await run_in_threadpool(
                _check, raw, filename, needed, blobs.temp, staged
            )
        elif not uploads:
            raise field_error(
                "file", "attach an archive as `file` or the folder's files as `files`"
            )
        elif len(uploads) == 1 and archive_kind(uploads[0][0]) != "file":
            final, contents = await run_in_threadpool(
                _check, uploads[0][1], uploads[0][0], needed, blobs.temp, staged
            )
        else:
            out = blobs.temp()
            staged.append(out)
            contents = await run_in_threadpool(files_to_targz, uploads, out, needed)
            final = out
        sha, size = await run_in_threadpool(blobs.keep, final)
    except TooLarge as exc:
        raise HTTPException(413, f"upload refused: {exc}; nothing was kept", CLOSE) from None
    except BadForm as exc:
        raise field_error(exc.field, str(exc)) from None
    except BadArchive as exc:
        raise HTTPException(400, f"upload refused: {exc}; nothing was kept") from None
    finally:
        for path in staged:
            path.unlink(missing_ok=True)
    artifact, new = record_artifact(db, team, principal.user, name, kind, sha, size, contents)
    busy = not new and queries.artifacts.in_use(db, artifact.id)
    return artifact_out(artifact, team.name, principal.user.name, busy)


def _check(
    raw: Path, filename: str, entrypoint: str | None, temp: object, staged: list[Path]
) -> tuple[Path, Contents]:
    """Check an uploaded archive; a .zip is re-packed as .tar.gz. -> (file to keep, what
    it holds)."""
    if archive_kind(filename) == "zip":
        out = temp()  # type: ignore[operator]
        staged.append(out)
        return out, zip_to_targz(raw, out, entrypoint)
    if archive_kind(filename) == "tar":
        return raw, check_tar(raw, entrypoint)
    raise BadArchive(f"{filename!r} is not a .tar.gz, .tgz, .tar or .zip archive")


__all__ = ["not_found", "router"]
