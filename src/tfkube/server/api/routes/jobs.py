"""Jobs: submit (four fields or a TFJob document), list and filter, detail with every
replica, stop, delete, re-submit a copy, events (JSON or a live SSE stream)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Body, HTTPException, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ValidationError
from sqlalchemy import func, select
from sqlalchemy.orm import Session, aliased

from tfkube.engines import JobExists
from tfkube.server.api.deps import CurrentUser, JobDep, PlatformDep, SessionDep, TeamDep
from tfkube.server.core.scopes import Scope
from tfkube.server.core.tables import Artifact, Job, JobEvent, Team, User
from tfkube.server.jobs.forms import JobForm, form_job
from tfkube.server.views import job_out
from tfkube.spec import FieldError, SpecError, TFJob, errors_from, load_job_text, parse_job
from tfkube.wire import EventOut, JobList, JobOut

router = APIRouter(prefix="/api/v1", tags=["jobs"])
MAX_PAGE = 500


def _spec_error(exc: SpecError) -> HTTPException:
    from tfkube.server.api.errors import FieldHTTPError

    return FieldHTTPError([(e.field, e.message) for e in exc.errors], str(exc))


def _labels(db: Session, rows: list[Job]) -> tuple[dict[int, str], dict[int, str], dict[int, str]]:
    teams = {
        t.id: t.name for t in db.scalars(select(Team).where(Team.id.in_({r.team_id for r in rows})))
    }
    users = {
        u.id: u.name
        for u in db.scalars(
            select(User).where(User.id.in_({r.created_by for r in rows if r.created_by}))
        )
    }
    ids = {r.artifact_id for r in rows if r.artifact_id}
    ids |= {r.data_artifact_id for r in rows if r.data_artifact_id}
    arts = {
        a.id: f"{a.name}:{a.version}"
        for a in db.scalars(select(Artifact).where(Artifact.id.in_(ids)))
    }
    return teams, users, arts


def render_job(db: Session, row: Job, detail: bool = True) -> JobOut:
    """One job: its team's, owner's, code's and data set's names in one query (a status
    poll is the server's most frequent request)."""
    data_set = aliased(Artifact)
    team, owner, code, version, data_name, data_version = db.execute(
        select(
            Team.name, User.name, Artifact.name, Artifact.version, data_set.name, data_set.version
        )
        .select_from(Team)
        .outerjoin(User, User.id == (row.created_by or -1))
        .outerjoin(Artifact, Artifact.id == (row.artifact_id or -1))
        .outerjoin(data_set, data_set.id == (row.data_artifact_id or -1))
        .where(Team.id == row.team_id)
    ).one()
    label = f"{code}:{version}" if code is not None else None
    data = f"{data_name}:{data_version}" if data_name is not None else None
    return job_out(row, team, owner, label, detail=detail, data=data)


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
    try:
        form = JobForm.model_validate(body)
    except ValidationError as exc:
        raise SpecError(errors_from(exc), "form") from None
    return form_job(form), "code"


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
        row = platform.jobs.submit(
            db, team, principal.user.id, job, code_field, description, data=_data_ref(data)
        )
    except SpecError as exc:
        raise _spec_error(exc) from None
    except JobExists as exc:
        raise HTTPException(409, str(exc)) from None
    return render_job(db, row)


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
) -> JobList:
    """The caller's teams' jobs, newest first; filter by team, owner, phase, exact name or
    a text in the name (`q`). `phases` counts every phase under the other filters."""
    query = select(Job)
    if not principal.actor.site_admin:
        query = query.where(Job.team_id.in_(list(principal.actor.roles)))
    if team is not None:
        query = query.where(Job.team_id.in_(select(Team.id).where(Team.name == team)))
    if owner is not None:
        query = query.where(Job.created_by.in_(select(User.id).where(User.name == owner)))
    if name is not None:
        query = query.where(Job.name == name)
    if q:
        query = query.where(Job.name.contains(q, autoescape=True))
    counted = query.with_only_columns(Job.phase, func.count()).group_by(Job.phase)
    phases = dict(db.execute(counted).all())
    if phase is not None:
        query = query.where(Job.phase == phase)
    total = sum(phases.values()) if phase is None else phases.get(phase, 0)
    limit = max(1, min(limit, MAX_PAGE))
    rows = list(
        db.scalars(
            query.order_by(Job.created_at.desc(), Job.id).limit(limit).offset(max(offset, 0))
        )
    )
    teams, users, arts = _labels(db, rows)
    items = [
        job_out(
            r,
            teams.get(r.team_id, ""),
            users.get(r.created_by or -1),
            arts.get(r.artifact_id) if r.artifact_id else None,
            data=arts.get(r.data_artifact_id) if r.data_artifact_id else None,
        )
        for r in rows
    ]
    return JobList(items=items, total=total, phases=phases)


@router.get("/jobs/{job_id}")
def get_job(job: JobDep, db: SessionDep) -> JobOut:
    """One job with every replica (state, restarts, exit code, address/node, why it is
    pending), its TFJob as it runs and the model versions it exported."""
    from tfkube.server.workloads.model_servers import job_exports

    out = render_job(db, job)
    out.exports = job_exports(job)
    return out


@router.post("/jobs/{job_id}/stop")
def stop_job(job: JobDep, principal: CurrentUser, db: SessionDep, platform: PlatformDep) -> JobOut:
    """Stop every replica; the job ends Failed (Stopped) and stays listed."""
    principal.require(Scope.JOBS_WRITE, job.team_id)
    team = db.get(Team, job.team_id)
    assert team is not None
    platform.jobs.stop(db, job, team)
    return render_job(db, job)


@router.delete("/jobs/{job_id}", status_code=204)
def delete_job(job: JobDep, principal: CurrentUser, db: SessionDep, platform: PlatformDep) -> None:
    """Stop the job and remove it with its logs and outputs."""
    principal.require(Scope.JOBS_WRITE, job.team_id)
    team = db.get(Team, job.team_id)
    assert team is not None
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
    team = db.get(Team, job.team_id)
    assert team is not None
    original = load_job_text(job.spec, "job")
    raw = original.model_dump(mode="json", by_alias=True, exclude_none=True)
    name = body.name if body and body.name else _next_name(db, team.id, job.name)
    raw["metadata"]["name"] = name
    raw["spec"].pop("storage", None)
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
    return render_job(db, row)


def _next_name(db: Session, team_id: int, name: str) -> str:
    base = name.rsplit("-", 1)[0] if name.rsplit("-", 1)[-1].isdigit() else name
    taken = set(db.scalars(select(Job.name).where(Job.team_id == team_id)))
    for n in range(2, 10_000):
        candidate = f"{base[: 40 - len(str(n)) - 1]}-{n}"
        if candidate not in taken:
            return candidate
    raise HTTPException(409, "no free name for the copy; give one")


def _events(db: Session, job_id: str, after: int) -> list[EventOut]:
    rows = db.scalars(
        select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.id > after).order_by(JobEvent.id)
    )
    return [EventOut(id=e.id, time=e.time, replica=e.replica, message=e.message) for e in rows]


@router.get("/jobs/{job_id}/events")
def events(job: JobDep, db: SessionDep, after: int = 0) -> list[EventOut]:
    """What happened, oldest first (created, started, exits, restarts and why, the end)."""
    return _events(db, job.id, after)


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
            row = db.get(Job, job_id)
            if row is None:
                return None, []
            return render_job(db, row), _events(db, job_id, after_id)

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
            if (
                out.phase in {"Succeeded", "Failed"}
                and not out.queued
                and all(r.state not in {"Running", "Pending"} for r in out.replicas or [])
            ):
                yield sse("end", "{}")
                return
            if await request.is_disconnected():
                return
            await asyncio.sleep(0.5)

    return StreamingResponse(
        stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
    )
