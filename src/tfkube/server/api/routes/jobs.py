"""Jobs: submit (four fields or a TFJob document), list and filter, detail with every
replica, stop, scale (the number of workers), delete, re-submit a copy, events (JSON or a
live SSE stream)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Body, HTTPException, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel
from sqlalchemy.orm import Session

from tfkube.engines import JobExists
from tfkube.planner import settled
from tfkube.server import queries
from tfkube.server.api.deps import CurrentUser, JobDep, PlatformDep, SessionDep, TeamDep
from tfkube.server.core.scopes import Scope
from tfkube.server.jobs.forms import artifact_job
from tfkube.spec import (
    FieldError,
    SpecError,
    TFJob,
    form_errors,
    load_job_text,
    parse_job,
    read_form,
)
from tfkube.wire import CompareOut, EventOut, JobList, JobOut

router = APIRouter(prefix="/api/v1", tags=["jobs"])


def _spec_error(exc: SpecError) -> HTTPException:
    from tfkube.server.api.errors import FieldHTTPError

    return FieldHTTPError([(e.field, e.message) for e in exc.errors], str(exc))


MAX_DESCRIPTION = 2000


def _description(value: object) -> str:
    """A job's optional description (either way of submitting): text, at most 2,000
    characters. Kept and shown as it is (escaped), never interpreted."""
    from tfkube.server.api.errors import field_error
    from tfkube.server.core.inputs import control_problem

    if value is None:
        return ""
    if not isinstance(value, str):
        raise field_error("description", "give the description as text")
    if len(value) > MAX_DESCRIPTION:
        raise field_error("description", f"at most {MAX_DESCRIPTION:,} characters, please")
    if problem := control_problem(value, allowed="\n\r\t"):
        raise field_error("description", problem)
    return value.strip()


def _data_ref(value: object) -> str | None:
    from tfkube.server.api.errors import field_error

    if value is not None and not isinstance(value, str):
        raise field_error("data", "give the data set as NAME, NAME:VERSION or sha256:HEX")
    return value


def _parse_submission(body: dict[str, Any]) -> tuple[TFJob, str]:
    """-> (job, the field the code reference came from)."""
    manifest = body.get("manifest")
    if manifest is not None:
        if isinstance(manifest, str):
            return load_job_text(manifest, "manifest"), "spec.code.source"
        if isinstance(manifest, dict):
            return parse_job(manifest, "manifest"), "spec.code.source"
        raise SpecError([FieldError("manifest", "give the TFJob as YAML text or a JSON object")])
    return artifact_job(read_form(body)), "code"


@router.post("/teams/{team}/jobs", status_code=201)
def submit(
    team: TeamDep,
    principal: CurrentUser,
    db: SessionDep,
    platform: PlatformDep,
    body: dict[str, Any] = Body(
        openapi_examples={
            "form": {
                "summary": "The four fields",
                "value": {"name": "mnist", "workers": 2, "ps": 1, "code": "mnist-code"},
            },
            "manifest": {
                "summary": "A TFJob (or Kubeflow TFJob) document",
                "value": {"manifest": "apiVersion: tfkube.io/v1alpha1\nkind: TFJob\n..."},
            },
        }
    ),
) -> JobOut:
    """Submit with the four fields (`name`, `workers`, `ps`, `code` = an artifact of the
    team; optional advanced fields, see JobForm) or `{"manifest": <TFJob YAML or object>}`
    whose `spec.code.source` is `artifact:NAME[:VERSION]`, `sha256:HEX` or an http(s) URL.
    A 422 lists every problem as {field, message}, in the CLI's wording."""
    principal.require(Scope.JOBS_WRITE, team.id)
    body = dict(body)
    description = _description(body.pop("description", ""))
    data = body.pop("data", None) or None
    try:
        job, code_field = _parse_submission(body)
    except SpecError as exc:
        raise _spec_error(exc) from None
    try:
        row = platform.jobs.submit(
            db, team, principal.user.id, job, code_field, description, data=_data_ref(data)
        )
    except SpecError as exc:
        # A form's job is refused in the form's own fields (data_source, data_secret, ...).
        raise _spec_error(form_errors(exc) if "manifest" not in body else exc) from None
    except JobExists as exc:
        raise HTTPException(409, str(exc)) from None
    return queries.jobs.view(db, row)


@router.get("/jobs")
def list_jobs(
    principal: CurrentUser,
    db: SessionDep,
    team: str | None = None,
    owner: str | None = None,
    phase: str | None = None,
    name: str | None = None,
    q: str | None = None,
    limit: int = 100,
    offset: int = 0,
    sort: str | None = None,
) -> JobList:
    """The caller's teams' jobs, newest first; filter by team, owner, phase, exact name or
    a text in the name (`q`). `phases` counts every phase under the other filters.
    `sort`: created, name, phase, started, duration or `result.<name>` (a number the jobs
    reported in their result file; jobs without it last), `-` first for descending
    (default `-created`); `result_keys` names the results these jobs report most."""
    from tfkube.server.api.errors import field_error

    try:
        order = queries.jobs.Sort.parse(sort)
    except queries.jobs.BadSort as exc:
        raise field_error("sort", str(exc)) from None
    return queries.jobs.list_jobs(
        db,
        principal.actor,
        team=team,
        owner=owner,
        phase=phase,
        name=name,
        q=q,
        limit=limit,
        offset=offset,
        sort=order,
    )


@router.get("/compare")
def compare_jobs(
    principal: CurrentUser,
    db: SessionDep,
    platform: PlatformDep,
    jobs: list[str] = Query(
        description="2 to 10 job ids: comma-separated (jobs=ID1,ID2) or repeated"
    ),
    scalars: bool = False,
) -> CompareOut:
    """2 to 10 jobs side by side, in the order given: each job (with its result), the
    results row by row (the best of each marked; lower is better for a loss, an error or
    a time), each role's arguments flag by flag and the rest of the TFJobs as dotted
    paths, each row saying whether the jobs differ. `scalars=true` adds each job's
    training curves (as `/jobs/{id}/scalars`). The dashboard's `/compare?jobs=...` shows
    the same. A job another team owns is 404, as everywhere."""
    from tfkube.server.api.errors import field_error
    from tfkube.server.jobs.compare import BadSelection, parse_ids

    try:
        ids = parse_ids(jobs)
    except BadSelection as exc:
        raise field_error("jobs", str(exc)) from None
    try:
        return queries.compare.compare(
            db,
            principal.actor,
            ids,
            platform.scalars if scalars else None,
            platform.outputs_if_readable,
        )
    except queries.compare.UnknownJob as exc:
        raise HTTPException(404, f"job {exc.args[0]!r} not found") from None
    except queries.compare.NotAllowed as exc:
        raise HTTPException(403, str(exc)) from None


@router.get("/jobs/{job_id}")
def get_job(job: JobDep, db: SessionDep) -> JobOut:
    """One job with every replica (state, restarts, exit code, address/node, why it is
    pending), its TFJob as it runs, the model versions it exported and its result (kept
    when it ended; read from its result file as it is now while it runs)."""
    from tfkube.server.outputs.results import current_result
    from tfkube.server.workloads.model_servers import job_exports

    out = queries.jobs.view(db, job)
    out.exports = job_exports(job)
    found = current_result(job)
    out.result, out.result_problem = found.values, found.problem or None
    return out


@router.post("/jobs/{job_id}/stop")
def stop_job(job: JobDep, principal: CurrentUser, db: SessionDep, platform: PlatformDep) -> JobOut:
    """Stop every replica; the job ends Failed (Stopped) and stays listed."""
    principal.require(Scope.JOBS_WRITE, job.team_id)
    team = queries.teams.get(db, job.team_id)
    platform.jobs.stop(db, job, team)
    return queries.jobs.view(db, job)


class ScaleIn(BaseModel):
    workers: int
    """How many workers the job runs with from now on."""


@router.post("/jobs/{job_id}/scale")
def scale_job(
    job: JobDep, body: ScaleIn, principal: CurrentUser, db: SessionDep, platform: PlatformDep
) -> JobOut:
    """Change a running job's number of workers (asynchronous PS training: a PS, no
    chief): added workers join it, removed ones (the highest indexes) stop; nothing
    restarts. Growing counts against the team's quota and the machine's free room."""
    principal.require(Scope.JOBS_WRITE, job.team_id)
    team = queries.teams.get(db, job.team_id)
    try:
        platform.jobs.scale(db, job, team, body.workers, principal.user.name)
    except SpecError as exc:
        raise _spec_error(exc) from None
    return queries.jobs.view(db, job)


@router.delete("/jobs/{job_id}", status_code=204)
def delete_job(job: JobDep, principal: CurrentUser, db: SessionDep, platform: PlatformDep) -> None:
    """Stop the job and remove it with its logs and outputs."""
    principal.require(Scope.JOBS_WRITE, job.team_id)
    team = queries.teams.get(db, job.team_id)
    platform.model_servers.stop_for_job(db, job)  # they read the outputs deleted here
    platform.jobs.delete(db, job, team)


class CopyIn(BaseModel):
    name: str | None = None
    """The copy's name (default: the original's with a number added)."""


@router.post("/jobs/{job_id}/copy", status_code=201)
def copy_job(
    job: JobDep,
    principal: CurrentUser,
    db: SessionDep,
    platform: PlatformDep,
    body: CopyIn | None = None,
) -> JobOut:
    """Re-submit the same job (same code version) under a new name."""
    principal.require(Scope.JOBS_WRITE, job.team_id)
    team = queries.teams.get(db, job.team_id)
    original = load_job_text(job.spec, "job")
    raw = original.model_dump(mode="json", by_alias=True, exclude_none=True)
    name = body.name if body and body.name else _next_name(db, team.id, job.name)
    raw["metadata"]["name"] = name
    # The server's folders go; a data source (with its secret's name) stays with the job.
    data_source = raw["spec"].pop("storage", {}).get("data", {})
    kept = ("source", "endpoint", "region", "credentials")
    if data_source.get("source"):
        raw["spec"]["storage"] = {"data": {k: data_source[k] for k in kept if k in data_source}}
    if job.code_sha256 and job.artifact_id:
        raw["spec"]["code"]["source"] = f"sha256:{job.code_sha256}"
        raw["spec"]["code"].pop("sha256", None)
    try:
        data = f"sha256:{job.data_sha256}" if job.data_sha256 else None
        row = platform.jobs.submit(
            db, team, principal.user.id, parse_job(raw, "copy"), "name", job.description, data=data
        )
    except SpecError as exc:
        raise _spec_error(exc) from None
    except JobExists as exc:
        raise HTTPException(409, str(exc)) from None
    return queries.jobs.view(db, row)


def _next_name(db: Session, team_id: int, name: str) -> str:
    base = name.rsplit("-", 1)[0] if name.rsplit("-", 1)[-1].isdigit() else name
    taken = queries.jobs.names(db, team_id)
    for n in range(2, 10_000):
        candidate = f"{base[: 40 - len(str(n)) - 1]}-{n}"
        if candidate not in taken:
            return candidate
    raise HTTPException(409, "no free name for the copy; give one")


@router.get("/jobs/{job_id}/events")
def events(job: JobDep, db: SessionDep, after: int = 0) -> list[EventOut]:
    """What happened, oldest first (created, started, exits, restarts and why, the end)."""
    return queries.jobs.events(db, job.id, after)


def sse(event: str, data: str, event_id: str | None = None) -> str:
    lines = [f"event: {event}"]
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines += [f"data: {line}" for line in data.splitlines() or [""]]
    return "\n".join(lines) + "\n\n"


@router.get("/jobs/{job_id}/watch")
async def watch(job: JobDep, request: Request, platform: PlatformDep) -> StreamingResponse:
    """Server-Sent Events: `job` (the detail, whenever it changes), `event` (each new
    event; its id is the SSE id, so a reconnect with Last-Event-ID resumes), and `end`
    once the job finished and everything was sent."""
    job_id = job.id
    last = request.headers.get("last-event-id", "0")
    after = int(last) if last.isdigit() else 0

    def snapshot(after_id: int) -> tuple[JobOut | None, list[EventOut]]:
        with platform.sessions() as db:
            row = queries.jobs.get(db, job_id)
            if row is None:
                return None, []
            return queries.jobs.view(db, row), queries.jobs.events(db, job_id, after_id)

    async def stream() -> AsyncIterator[str]:
        nonlocal after
        seen = ""
        while True:
            out, new = await asyncio.to_thread(snapshot, after)
            if out is None:
                yield sse("end", json.dumps({"deleted": True}))
                return
            text = out.model_dump_json()
            if text != seen:
                seen = text
                yield sse("job", text)
            for e in new:
                after = e.id
                yield sse("event", e.model_dump_json(), str(e.id))
            if not out.queued and settled(out.phase, out.replicas or []):
                yield sse("end", "{}")
                return
            if await request.is_disconnected():
                return
            await asyncio.sleep(0.5)

    return StreamingResponse(
        stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
    )
