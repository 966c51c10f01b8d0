"""A job's replica logs (each start separately) and its outputs (checkpoints, summaries,
exported models): listed, read, followed live (chunked text or SSE), downloaded."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import PlainTextResponse, StreamingResponse
from sqlalchemy import select

from tfkube.engines import JobNotFound
from tfkube.server.api.deps import CurrentUser, JobDep, PlatformDep, SessionDep
from tfkube.server.api.errors import field_error
from tfkube.server.api.routes.jobs import sse
from tfkube.server.core.inputs import content_disposition, control_problem
from tfkube.server.core.paths import UnsafePath, safe_parts
from tfkube.server.core.scopes import Scope
from tfkube.server.core.tables import Job, Team
from tfkube.server.outputs.archive import GONE
from tfkube.server.outputs.archived import ArchivedOutputs, ArchiveRefused
from tfkube.server.outputs.files import (
    NotInOutputs,
    file_chunks,
    kind_of,
    list_folder,
    open_output,
    tar_folder,
)
from tfkube.server.outputs.folder import LocalFolder, OutputsFolder
from tfkube.server.outputs.logs import (
    MAX_QUERY,
    REPLICA,
    BadCursor,
    JobPaths,
    LogRef,
    NoSuchLog,
    SearchCursor,
    log_files,
    log_path,
    read_all,
    search_logs,
)
from tfkube.server.outputs.logs import follow as follow_file
from tfkube.server.outputs.scalars import progress_hint, progress_of, total_steps
from tfkube.server.outputs.usage import read_usage
from tfkube.server.tenants import tenant_of
from tfkube.spec import load_job_text
from tfkube.wire import LogFile, LogSearchOut, OutputFile, Progress, ScalarsOut, UsageOut

router = APIRouter(prefix="/api/v1/jobs/{job_id}", tags=["logs and outputs"])


def _archived(platform: PlatformDep, job: Job) -> ArchivedOutputs | None:
    """The job's archive when its logs and outputs live only there (`--keep-local`),
    else None; a 404 when retention removed them, a 502 for an archive refused."""
    if job.outputs_at == GONE:
        raise HTTPException(
            404, "this job's logs and outputs were removed by the server's retention"
        )
    try:
        return platform.archived(job)
    except ArchiveRefused as exc:
        raise HTTPException(502, f"the archive of this job's outputs was refused: {exc}") from None
    except LookupError as exc:
        raise HTTPException(404, str(exc)) from None


def outputs_folder(platform: PlatformDep, job: Job) -> OutputsFolder | None:
    """Where the job's outputs are read (`Platform.outputs`: the archive once the local
    copy is gone, else the output folder; None: it keeps none), with `_archived`'s 404
    and 502."""
    if (archive := _archived(platform, job)) is not None:
        return archive
    return LocalFolder(job.output_dir) if job.output_dir else None


@router.get("/logs")
def list_logs(job: JobDep, principal: CurrentUser, platform: PlatformDep) -> list[LogFile]:
    """Every replica's log files, one per start (attempt 0, 1, ...)."""
    principal.require(Scope.LOGS_READ, job.team_id)
    if (archive := _archived(platform, job)) is not None:
        return archive.log_files()
    return log_files(job.output_dir)


MAX_SEARCH_HITS = 500


@router.get("/logs/search")
async def search_logs_route(
    job: JobDep,
    principal: CurrentUser,
    db: SessionDep,
    platform: PlatformDep,
    q: str,
    cursor: str | None = None,
    limit: int = 100,
    job_paths: bool = False,
) -> LogSearchOut:
    """The lines holding `q` (ignoring case) in every replica's kept log, every start of
    it, in replica order (chief, PS, workers, evaluator; starts oldest first), each with
    its replica, start (`attempt`), line number and byte offset. One answer reads about
    16 MiB and opens at most 2,000 logs, streaming each, and holds at most `limit` hits
    (1-500); its `next`, passed as `cursor`, goes on where it stopped. `job_paths=true`
    names the server's folders in the lines as the job knows them (as `/logs/{replica}`
    does; the search itself is in the log as written)."""
    principal.require(Scope.LOGS_READ, job.team_id)
    text = q.strip()
    if not text or len(text) > MAX_QUERY:
        raise field_error("q", f"give 1 to {MAX_QUERY} characters to search for")
    if problem := control_problem(text):
        raise field_error("q", problem)
    if not 1 <= limit <= MAX_SEARCH_HITS:
        raise field_error("limit", f"give 1 to {MAX_SEARCH_HITS} hits per answer")
    try:
        at = SearchCursor.parse(cursor) if cursor else None
    except BadCursor as exc:
        raise field_error("cursor", str(exc)) from None
    archive = await asyncio.to_thread(_archived, platform, job)
    if archive is not None:
        found = await asyncio.to_thread(archive.search, text, at, limit)
    else:
        found = await asyncio.to_thread(search_logs, job.output_dir, text, at, max_hits=limit)
    if job_paths and found.hits:
        paths = await asyncio.to_thread(_paths, platform, db, job, None)
        found.hits = [h.model_copy(update={"text": paths.shown(h.text)}) for h in found.hits]
    return found


def _pod_log(platform: PlatformDep, db: SessionDep, job: Job, replica: str, why: str) -> str:
    """No kept log file (a cluster without an outputs claim, or a replica that never
    wrote one): what the engine still has (a cluster's pod log API while the job's pods
    exist). Raises a 404 saying both why there is no kept log and why the engine has none."""
    team = db.get(Team, job.team_id)
    assert team is not None
    hint = ""
    if not platform.jobs.storage(team, job.id, job.name).kept:
        hint = " (logs outlive pods when the server runs with --outputs-claim)"
    if not REPLICA.fullmatch(replica):
        raise HTTPException(404, why)
    newer = db.scalars(
        select(Job.id).where(
            Job.team_id == job.team_id, Job.name == job.name, Job.created_at > job.created_at
        )
    ).first()
    if newer is not None:  # the engine's job of this name is another one now
        raise HTTPException(404, f"{why}; its replicas are gone{hint}")
    backend = platform.engine.jobs(tenant_of(team))
    try:
        lines = list(backend.logs(job.name, replica, False))
    except JobNotFound:
        raise HTTPException(
            404, f"{why}; the engine no longer has the job, so its replicas are gone{hint}"
        ) from None
    except (ValueError, OSError) as exc:  # no kubelet, no such replica, no log
        raise HTTPException(404, f"{why}; {exc}") from None
    if not lines:
        raise HTTPException(404, why)
    return "\n".join(lines) + "\n"


@router.get("/logs/{replica}", response_model=None)
async def read_log(
    job: JobDep,
    replica: str,
    request: Request,
    principal: CurrentUser,
    db: SessionDep,
    platform: PlatformDep,
    attempt: int | None = None,
    offset: int = 0,
    follow: bool = False,
    job_paths: bool = False,
    limit: int | None = None,
) -> StreamingResponse | PlainTextResponse:
    """One replica's log (the latest start, or `attempt`), from `offset` bytes. With
    `follow=true` the answer streams (chunked) until the job finished; with
    `Accept: text/event-stream` it is SSE (`line` events, each with the byte offset after
    it as its id, then `end`). With `job_paths=true` the server's folders are named as the
    job knows them (`$TFKUBE_LOG_DIR`, `$TFKUBE_DATA_DIR`, `$TFKUBE_WORK_DIR`; the rest of
    the server's data folder as `…`): the dashboard's view; otherwise as written. `limit`:
    at most that many bytes from `offset` (a window around a search hit; not with
    `follow`)."""
    principal.require(Scope.LOGS_READ, job.team_id)
    paths = await asyncio.to_thread(_paths, platform, db, job, replica) if job_paths else None

    def show(raw: bytes) -> str:
        text = raw.decode("utf-8", errors="replace")
        return paths.shown(text) if paths else text

    archive = await asyncio.to_thread(_archived, platform, job)
    in_archive: tuple[str, ...] = ()
    ref: LogRef = ("", ())
    try:
        if archive is not None:
            in_archive = archive.log_parts(replica, attempt)
        else:
            ref = log_path(job.output_dir, replica, attempt)
    except NoSuchLog as exc:
        if archive is not None:
            raise HTTPException(404, str(exc)) from None
        text = await asyncio.to_thread(_pod_log, platform, db, job, replica, str(exc))
        return PlainTextResponse(paths.shown(text) if paths else text)
    job_id = job.id

    async def running() -> bool:
        def check() -> bool:
            with platform.sessions() as s:
                row = s.get(Job, job_id)
                return row is not None and row.state != "ended"

        return await asyncio.to_thread(check)

    offset = max(offset, 0)
    if limit is not None and limit < 1:
        raise field_error("limit", "give a number of bytes of at least 1, or leave it out")
    wants_sse = "text/event-stream" in request.headers.get("accept", "")
    if not (follow or wants_sse):
        try:
            if archive is not None:
                data = await asyncio.to_thread(archive.read, in_archive, offset, limit)
            else:
                data = await asyncio.to_thread(read_all, ref, offset, limit)
        except OSError:  # replaced by a link (or removed) since it was found
            raise HTTPException(404, f"{replica} has no such log") from None
        return PlainTextResponse(show(data), headers=WORKLOAD_BYTES)

    def source() -> AsyncIterator[bytes]:
        """The log from `offset`: followed in the output folder, or (an ended job's)
        read from its archive in ranged reads."""
        if archive is None:
            return _follow(ref, offset, running, request)
        return _archived_log(archive, in_archive, offset, request)

    async def lines() -> AsyncIterator[tuple[bytes, int]]:
        """Each line (without its newline; the last one perhaps unfinished) and the byte
        offset in the file after it."""
        at, partial = offset, b""
        async for chunk in source():
            *whole, partial = (partial + chunk).split(b"\n")
            for line in whole:
                at += len(line) + 1
                yield line, at
        if partial:
            yield partial, at + len(partial)

    async def chunks() -> AsyncIterator[bytes]:
        if paths is None:
            async for chunk in source():
                yield chunk
            return
        async for line, _ in lines():
            yield (show(line) + "\n").encode()

    if not wants_sse:
        return StreamingResponse(
            chunks(), media_type="text/plain; charset=utf-8", headers=WORKLOAD_BYTES
        )

    async def events() -> AsyncIterator[str]:
        async for line, at in lines():
            yield sse("line", show(line), str(at))
        yield sse("end", "{}")

    return StreamingResponse(
        events(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", **WORKLOAD_BYTES},
    )


def _paths(platform: PlatformDep, db: SessionDep, job: Job, replica: str | None) -> JobPaths:
    team = db.get(Team, job.team_id)
    assert team is not None
    return platform.jobs.paths(team, job, replica)


async def _follow(
    ref: LogRef, offset: int, running: Callable[[], Awaitable[bool]], request: Request
) -> AsyncIterator[bytes]:
    async for chunk in follow_file(ref, offset, running):
        yield chunk
        if await request.is_disconnected():
            return


async def _archived_log(
    archive: ArchivedOutputs, parts: tuple[str, ...], offset: int, request: Request
) -> AsyncIterator[bytes]:
    _, chunks = await asyncio.to_thread(archive.file_chunks, parts, offset)
    while (chunk := await asyncio.to_thread(next, chunks, None)) is not None:
        yield chunk
        if await request.is_disconnected():
            return


def _outputs_root(job: Job) -> str:
    if not job.output_dir:
        raise HTTPException(404, "this job keeps no outputs on the server")
    return job.output_dir


def _parts(path: str) -> tuple[str, ...]:
    if problem := control_problem(path):
        raise field_error("path", problem)
    try:
        return safe_parts(path)
    except UnsafePath as exc:
        raise HTTPException(400, f"path refused: {exc}") from None


WORKLOAD_BYTES = {
    "Content-Security-Policy": "sandbox; default-src 'none'",
    "X-Content-Type-Options": "nosniff",
}
"""On every answer that carries bytes a job wrote: never run as a page of this origin."""


@router.get("/outputs")
def list_outputs(
    job: JobDep, principal: CurrentUser, platform: PlatformDep, path: str = ""
) -> list[OutputFile]:
    """The files in a folder of the job's outputs (`path` relative to it). Links the job
    made are neither listed nor followed."""
    principal.require(Scope.OUTPUTS_READ, job.team_id)
    parts = _parts(path)
    try:
        if (archive := _archived(platform, job)) is not None:
            return archive.list_folder(parts)
        return list_folder(_outputs_root(job), parts)
    except NotInOutputs:
        raise HTTPException(404, f"no folder {path!r} in the outputs") from None


@router.get("/outputs/{path:path}", response_model=None)
def download_output(
    job: JobDep, path: str, principal: CurrentUser, platform: PlatformDep
) -> StreamingResponse:
    """One file of the outputs, or a folder as a .tar.gz (streamed)."""
    principal.require(Scope.OUTPUTS_READ, job.team_id)
    parts = _parts(path)
    archive = _archived(platform, job)
    root = "" if archive is not None else _outputs_root(job)
    try:
        if (archive.kind_of(parts) if archive else kind_of(root, parts)) == "file":
            if archive is not None:  # ranged reads of the archive
                size, chunks = archive.file_chunks(parts)
            else:
                fd, size = open_output(root, parts)
                chunks = file_chunks(fd, size)
            return StreamingResponse(
                chunks,
                media_type="application/octet-stream",
                headers={
                    "Content-Disposition": content_disposition(parts[-1]),
                    "Content-Length": str(size),
                    **WORKLOAD_BYTES,
                },
            )
    except NotInOutputs:
        raise HTTPException(404, f"no file {path!r} in the outputs") from None
    name = (parts[-1] if parts else job.name) + ".tar.gz"
    return StreamingResponse(
        archive.tar_folder(parts) if archive else tar_folder(root, parts),
        media_type="application/gzip",
        headers={"Content-Disposition": content_disposition(name), **WORKLOAD_BYTES},
    )


@router.get("/scalars")
async def scalars(job: JobDep, principal: CurrentUser, platform: PlatformDep) -> ScalarsOut:
    """Every scalar of the job's TensorBoard event files as series (step, value,
    wall_time), and progress/ETA where the number of steps is known."""
    principal.require(Scope.METRICS_READ, job.team_id)
    outputs = await asyncio.to_thread(outputs_folder, platform, job)
    if outputs is None:
        return ScalarsOut(series=[], progress=Progress())
    series = await asyncio.to_thread(platform.scalars.read, outputs)
    spec = load_job_text(job.spec, "job")
    hint = await asyncio.to_thread(progress_hint, outputs)
    return ScalarsOut(series=series, progress=progress_of(series, total_steps(spec), hint))


USAGE_NOT_AVAILABLE = "this engine records no CPU and memory per replica"


@router.get("/usage")
async def usage(job: JobDep, principal: CurrentUser, platform: PlatformDep) -> UsageOut:
    """What each replica used over time: `[time, cpu cores, memory bytes]` per sample,
    during the job and after it."""
    principal.require(Scope.METRICS_READ, job.team_id)
    if not platform.engine.features.replica_usage:
        return UsageOut(available=False, reason=USAGE_NOT_AVAILABLE)
    outputs = await asyncio.to_thread(outputs_folder, platform, job)
    series = await asyncio.to_thread(read_usage, outputs)
    why = platform.jobs.usage.reason if platform.engine.features.polled_usage else ""
    if why and not series:
        return UsageOut(available=False, reason=why)
    return UsageOut(available=True, replicas=series)
