"""The dashboard's pages: thin handlers that read what the REST API reads (the same
functions of `tfkube.server.queries`, and the outputs' readers; never a route handler),
decide what to show with `_present`, and render Jinja templates (autoescaped). Fragments
(`/jobs/{id}/part/...`, and `/jobs` for htmx) are the same templates' pieces, so a
refreshed piece is exactly what a full load shows.

Every change a page makes goes through the REST API from the browser (`static/app.js`,
with the session's CSRF token): these handlers only read.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse, Response

from tfkube import contract
from tfkube.engines import Features
from tfkube.planner import JobPhase, Replica, scale_problems
from tfkube.server import queries, team_secrets
from tfkube.server.accounts import needs_setup, session_user
from tfkube.server.api.deps import PlatformDep, Principal, SessionDep
from tfkube.server.artifacts import BlobStoreError
from tfkube.server.core.inputs import control_problem
from tfkube.server.core.paths import UnsafePath, safe_parts
from tfkube.server.core.scopes import Scope, allowed
from tfkube.server.core.security import SESSION_COOKIE
from tfkube.server.core.tables import Job
from tfkube.server.jobs.compare import BadSelection, parse_ids
from tfkube.server.outputs.archive import ARCHIVE, GONE
from tfkube.server.outputs.archived import ArchivedOutputs, ArchiveRefused
from tfkube.server.outputs.checkpoints import find_checkpoint
from tfkube.server.outputs.files import NotInOutputs, every_file, list_folder
from tfkube.server.outputs.folder import OutputsFolder
from tfkube.server.outputs.logs import JobPaths, log_files
from tfkube.server.outputs.results import current_result
from tfkube.server.outputs.scalars import progress_hint, progress_of, total_steps
from tfkube.server.web import _present as present
from tfkube.server.web._context import PageUser, is_fragment, page_context
from tfkube.server.web._render import PageError, render
from tfkube.server.web.serving_pages import job_serving
from tfkube.spec import Role, SpecError, load_job_text
from tfkube.wire import ArtifactOut, JobList, JobOut, OutputFile, Progress

router = APIRouter(include_in_schema=False)
JOBS_PER_PAGE = 50
REPLICAS_PER_PAGE = 50
EVENTS_SHOWN = 200


def _not_found(what: str) -> PageError:
    return PageError(404, "Not found", f"There is no {what} here, or you cannot see it.")


def _job_row(job_id: str, principal: Principal, db: SessionDep) -> Job:
    row = queries.jobs.find(db, principal.actor, job_id)
    if row is None:
        raise _not_found(f"job {job_id!r}")
    if not allowed(principal.actor, Scope.JOBS_READ, row.team_id):
        raise PageError(403, "Not allowed", "Your role in this team does not show jobs.")
    return row


# -- sign in, first set-up --------------------------------------------------------------------


@router.get("/")
def home(request: Request, db: SessionDep) -> Response:
    if needs_setup(db):
        return render(request, "setup_missing.html", {}, status=200)
    return RedirectResponse("/jobs", 303)


@router.get("/setup")
def setup_page(request: Request, db: SessionDep, token: str = "") -> Response:
    if not needs_setup(db):
        return RedirectResponse("/login?setup=done", 303)
    return render(request, "setup.html", {"token": token})


@router.get("/login")
def login_page(request: Request, db: SessionDep, next: str = "/jobs", setup: str = "") -> Response:
    if needs_setup(db):
        return render(request, "setup_missing.html", {})
    target = present.safe_next(next)
    cookie = request.cookies.get(SESSION_COOKIE)
    if cookie and session_user(db, cookie) is not None:
        return RedirectResponse(target, 303)
    return render(request, "login.html", {"next": target, "setup_done": setup == "done"})


# -- jobs -------------------------------------------------------------------------------------


def job_progress(platform: PlatformDep, row: Job) -> Progress | None:
    """Progress and ETA from the job's scalars (the same reader as the API), or None."""
    if not row.output_dir:
        return None
    try:
        spec = load_job_text(row.spec, "job")
    except SpecError:
        return None
    outputs = _outputs_of(platform, row)
    if outputs is None:
        return None
    series = platform.scalars.read(outputs)
    found = progress_of(series, total_steps(spec), progress_hint(outputs))
    return found if found.step is not None or found.total is not None else None


@router.get("/jobs")
def jobs_page(
    request: Request,
    principal: PageUser,
    db: SessionDep,
    platform: PlatformDep,
    team: str = "",
    phase: str = "",
    owner: str = "",
    q: str = "",
    page: int = 1,
    sort: str = "",
) -> Response:
    try:
        order = queries.jobs.Sort.parse(sort or None)
    except queries.jobs.BadSort:
        order = queries.jobs.Sort.parse(None)
    params = {"team": team, "phase": phase, "owner": owner, "q": q.strip()}
    if order.text != "-created":
        params["sort"] = order.text
    who = principal.user.name if owner == "me" else owner

    def fetch(at: int) -> JobList:
        return queries.jobs.list_jobs(
            db,
            principal.actor,
            team=team or None,
            owner=who or None,
            phase=phase or None,
            q=params["q"] or None,
            limit=JOBS_PER_PAGE,
            offset=(at - 1) * JOBS_PER_PAGE,
            sort=order,
        )

    listing = fetch(max(page, 1))
    pages = present.pages_of(listing.total, JOBS_PER_PAGE)
    if page > pages:
        page = pages
        listing = fetch(page)
    page = max(page, 1)
    progress: dict[str, Progress | None] = {}
    for item in listing.items:
        if item.phase in {"Running", "Restarting"}:
            row = queries.jobs.get(db, item.id)  # loaded by the list: no query
            progress[item.id] = job_progress(platform, row) if row else None
    all_phases = sum(listing.phases.values()) if not phase else None
    current = order.text

    def header(key: str, first: str = "desc") -> present.SortLink:
        return present.sort_link(params, current, key, first)

    data = {
        "params": params,
        "sorts": {
            "name": header("name", "asc"),
            "phase": header("phase", "asc"),
            "created": header("created"),
            **{f"result.{k}": header(f"result.{k}") for k in listing.result_keys},
        },
        "sort": current,
        "listing": listing,
        "progress": progress,
        "page": page,
        "pages": pages,
        "window": present.pager_window(page, pages),
        "per_page": JOBS_PER_PAGE,
        "all_count": all_phases,
        "multi_team": principal.actor.site_admin or len(principal.actor.roles) != 1,
        "any_active": any(present.is_active(j.phase, j.queued) for j in listing.items),
        "now": time.time(),
    }
    if is_fragment(request):
        return render(request, "_job_list.html", data)
    ctx = page_context(principal, db, platform)
    return render(
        request,
        "jobs.html",
        {**ctx, **data, "owners": queries.users.owners(db, principal.actor), "active": "jobs"},
    )


@router.get("/jobs/new")
def new_job_page(
    request: Request,
    principal: PageUser,
    db: SessionDep,
    platform: PlatformDep,
    team: str = "",
    code: str = "",
) -> Response:
    teams = queries.teams.names_allowed(db, principal.actor, Scope.JOBS_WRITE)
    ctx = page_context(principal, db, platform)
    chosen = team if team in teams else (teams[0] if teams else "")
    artifacts = queries.artifacts.list_artifacts(db, principal.actor)
    code_versions = [a for a in artifacts if a.kind == "code" and a.team in teams]
    data_versions = [a for a in artifacts if a.kind == "data" and a.team in teams]
    return render(
        request,
        "new_job.html",
        {
            **ctx,
            "teams": teams,
            "team": chosen,
            "code_versions": code_versions,
            "data_versions": data_versions,
            # Names only (the chosen team's), offered for the data source's secret.
            "secret_names": team_secrets.names_in(db, chosen) if chosen else [],
            "code": code,
            "upload_teams": queries.teams.names_allowed(db, principal.actor, Scope.ARTIFACTS_WRITE),
            "features": platform.engine.features,
            "active": "new",
            "example_yaml": _example_yaml(code_versions, code),
        },
    )


def _example_yaml(versions: list[ArtifactOut], code: str) -> str:
    ref = code or (f"{versions[0].name}" if versions else "my-code")
    return (
        "apiVersion: tfkube.io/v1alpha1\n"
        "kind: TFJob\n"
        "metadata:\n"
        "  name: my-job\n"
        "spec:\n"
        "  replicas:\n"
        "    ps: {replicas: 1}\n"
        "    worker:\n"
        "      replicas: 2\n"
        '      args: ["--train_steps=1000"]\n'
        "  code:\n"
        f"    source: artifact:{ref}\n"
        "    entrypoint: run.sh\n"
        "  runPolicy:\n"
        "    restartPolicy: OnFailure\n"
        "    backoffLimit: 3\n"
    )


def has_tensorboard(features: Features, row: Job) -> bool:
    """Whether the proxy can open a TensorBoard for the job (the rules of the engines):
    any job with outputs where TensorBoard opens on demand; else a job that runs one. Not
    once the local copy is gone (`--keep-local`): the proxy would answer 409/410."""
    if not row.output_dir or row.outputs_at in {ARCHIVE, GONE}:
        return False
    if features.tensorboard_on_demand:
        return True
    try:
        board = load_job_text(row.spec, "job").spec.tensorboard
    except SpecError:
        return False
    return board is not None and board.enabled


def resizable_workers(features: Features, row: Job, job: JobOut) -> int | None:
    """The job's number of workers when its page offers to change it (an engine that
    resizes, a running job the rules allow: `tfkube.planner.scale_problems`), else None."""
    if not features.resize or job.queued or not present.is_active(job.phase, job.queued):
        return None
    try:
        spec = load_job_text(row.spec, "job")
    except SpecError:
        return None
    if scale_problems(spec, JobPhase(job.phase), 1):
        return None
    return spec.spec.replicas.count(Role.WORKER)


def _summary_data(
    principal: Principal, platform: PlatformDep, row: Job, job: JobOut, db: SessionDep
) -> dict[str, Any]:
    active = present.is_active(job.phase, job.queued)
    found = current_result(row)
    return {
        **job_serving(principal, db, platform, row),
        "job": job,
        "active": active,
        "state": present.job_state(
            job.phase, job.queued, job.reason, job.message, job.replicas or []
        ),
        "result": found.values,
        "result_problem": found.problem,
        "progress": job_progress(platform, row),
        "checkpoint": find_checkpoint(_outputs_of(platform, row)),
        "can_write": allowed(principal.actor, Scope.JOBS_WRITE, row.team_id),
        "tensorboard": has_tensorboard(platform.engine.features, row),
        "workers": resizable_workers(platform.engine.features, row, job),
        "now": time.time(),
    }


def _replica_data(
    job: JobOut, role: str, state: str, q: str, problems: str, page: int
) -> dict[str, Any]:
    flt = present.ReplicaFilter(role=role, state=state, q=q.strip(), problems=problems == "1")
    found = present.replica_page(job.replicas or [], flt, page, REPLICAS_PER_PAGE)
    params = {"role": role, "state": state, "q": flt.q, "problems": "1" if flt.problems else ""}
    return {
        "job": job,
        "rp": found,
        "rparams": params,
        "rwindow": present.pager_window(found.page, found.pages),
        "active": present.is_active(job.phase, job.queued),
    }


def _events_data(db: SessionDep, job: JobOut, paths: JobPaths) -> dict[str, Any]:
    events = [
        e.model_copy(update={"message": paths.shown(e.message)})
        for e in queries.jobs.events(db, job.id)
    ]
    return {
        "job": job,
        "events": events[-EVENTS_SHOWN:],
        "events_hidden": max(0, len(events) - EVENTS_SHOWN),
        "start": events[0].time if events else job.created_at,
        "active": present.is_active(job.phase, job.queued),
    }


def _archive_of(platform: PlatformDep, row: Job) -> tuple[ArchivedOutputs | None, str]:
    """The job's archive when its outputs live only there, and why none can be read."""
    if row.outputs_at == GONE:
        return None, "its logs and outputs were removed by the server's retention"
    try:
        return platform.archived(row), ""
    except (ArchiveRefused, LookupError, BlobStoreError) as exc:
        return None, f"its archive cannot be read: {exc}"


def _outputs_of(platform: PlatformDep, row: Job) -> OutputsFolder | None:
    """Where the job's outputs are read (`Platform.outputs`), or None when nowhere (none
    kept, or the archive cannot be read now: `_archive_of` says why on the outputs part)."""
    return platform.outputs_if_readable(row) if row.outputs_at != GONE else None


def _outputs_data(
    platform: PlatformDep,
    principal: Principal,
    row: Job,
    job: JobOut,
    path: str,
    browse: bool = False,
) -> dict[str, Any]:
    files: list[OutputFile] = []
    missing = ""
    groups: list[present.OutputGroup] = []
    partial = False
    readable = allowed(principal.actor, Scope.OUTPUTS_READ, row.team_id)
    archive, why = _archive_of(platform, row) if readable else (None, "")
    if why:
        missing = why
    elif readable and not path and not browse:
        # The top of the outputs: grouped by what they are, not one long list.
        found, partial = archive.every_file() if archive else every_file(row.output_dir)
        groups = present.group_outputs(found, contract.EXPORT_SUBDIR)
    elif readable and (row.output_dir or archive):
        # What GET /api/v1/jobs/{id}/outputs answers, its refusals as the page's words.
        try:
            if problem := control_problem(path):
                missing = f"path: {problem}"
            else:
                wanted = safe_parts(path)
                if archive is not None:
                    files = archive.list_folder(wanted)
                elif row.output_dir:
                    files = list_folder(row.output_dir, wanted)
        except UnsafePath as exc:
            missing = f"path refused: {exc}"
        except NotInOutputs:
            missing = f"no folder {path!r} in the outputs"
    crumbs = []
    parts = [p for p in path.split("/") if p]
    for i, part in enumerate(parts):
        crumbs.append((part, "/".join(parts[: i + 1])))
    return {
        "job": job,
        "groups": groups,
        "partial": partial,
        "browse": "1" if browse else "",
        "files": [f for f in files if f.path != contract.OWN_SUBDIR],
        "path": "/".join(parts),
        "crumbs": crumbs,
        "missing": missing,
        "active": present.is_active(job.phase, job.queued),
    }


def _job_view(
    platform: PlatformDep, db: SessionDep, row: Job, detail: bool = True
) -> tuple[JobOut, JobPaths]:
    """The job as its pages show it: the server's folders in its messages, its replicas'
    last lines and its spec named as the job knows them (`$TFKUBE_LOG_DIR`, ...:
    `JobService.paths`; the API answers them as written); and that naming, for events."""
    job = queries.jobs.view(db, row, detail=detail)
    paths = platform.jobs.paths(queries.teams.get(db, row.team_id), row)
    replicas = job.replicas
    if replicas is not None:
        replicas = [
            r.model_copy(
                update={"message": paths.shown(r.message), "last_line": paths.shown(r.last_line)}
            )
            if r.message or r.last_line
            else r
            for r in replicas
        ]
    update = {
        "message": paths.shown(job.message) if job.message else job.message,
        "spec": paths.shown(job.spec) if job.spec else job.spec,
        "replicas": replicas,
    }
    return job.model_copy(update=update), paths


@router.get("/jobs/{job_id}")
def job_page(
    request: Request,
    job_id: str,
    principal: PageUser,
    db: SessionDep,
    platform: PlatformDep,
    replica: str = "",
    attempt: int | None = None,
    at: int | None = None,
    line: int | None = None,
) -> Response:
    """A job's page; `replica` opens that replica's log, and with `attempt`, `at` (a byte
    offset) and `line` (its number) at that line: where a log search's hit links."""
    row = _job_row(job_id, principal, db)
    job, paths = _job_view(platform, db, row)
    ctx = page_context(principal, db, platform)
    logs = []
    if allowed(principal.actor, Scope.LOGS_READ, row.team_id):
        archive, _ = _archive_of(platform, row)
        logs = archive.log_files() if archive else log_files(row.output_dir)
    attempts: dict[str, list[int]] = {}
    for f in logs:
        attempts.setdefault(f.replica, []).append(f.attempt)
    replicas: list[Replica] = job.replicas or []
    keys = [r.key for r in sorted(replicas, key=present.role_key)]
    known = replica in keys or replica in attempts
    chosen = replica if known else present.log_replica(replicas, attempts)
    open_at = present.log_position(replica if known else None, attempt, at, line)
    return render(
        request,
        "job.html",
        {
            **ctx,
            **_summary_data(principal, platform, row, job, db),
            **_replica_data(job, "", "", "", "", 1),
            **_events_data(db, job, paths),
            **_outputs_data(platform, principal, row, job, ""),
            "log_attempts": attempts,
            "log_replica": chosen,
            "log_replicas": present.log_choices(keys, attempts, chosen),
            "log_open_at": open_at,
            "active_nav": "jobs",
        },
    )


@router.get("/jobs/{job_id}/part/summary")
def job_summary_part(
    request: Request, job_id: str, principal: PageUser, db: SessionDep, platform: PlatformDep
) -> Response:
    row = _job_row(job_id, principal, db)
    job, _ = _job_view(platform, db, row)
    return render(request, "_job_summary.html", _summary_data(principal, platform, row, job, db))


@router.get("/jobs/{job_id}/part/replicas")
def job_replicas_part(
    request: Request,
    job_id: str,
    principal: PageUser,
    db: SessionDep,
    platform: PlatformDep,
    role: str = "",
    state: str = "",
    q: str = "",
    problems: str = "",
    page: int = 1,
) -> Response:
    row = _job_row(job_id, principal, db)
    job, _ = _job_view(platform, db, row)
    return render(request, "_replicas.html", _replica_data(job, role, state, q, problems, page))


@router.get("/jobs/{job_id}/part/events")
def job_events_part(
    request: Request, job_id: str, principal: PageUser, db: SessionDep, platform: PlatformDep
) -> Response:
    row = _job_row(job_id, principal, db)
    job, paths = _job_view(platform, db, row, detail=False)
    return render(request, "_events.html", _events_data(db, job, paths))


@router.get("/jobs/{job_id}/part/outputs")
def job_outputs_part(
    request: Request,
    job_id: str,
    principal: PageUser,
    db: SessionDep,
    platform: PlatformDep,
    path: str = "",
    browse: str = "",
) -> Response:
    row = _job_row(job_id, principal, db)
    job = queries.jobs.view(db, row, detail=False)
    data = _outputs_data(platform, principal, row, job, path, browse=browse == "1")
    return render(request, "_outputs.html", data)


@router.get("/compare")
def compare_page(
    request: Request,
    principal: PageUser,
    db: SessionDep,
    platform: PlatformDep,
    jobs: list[str] = Query(default=[]),
) -> Response:
    """2 to 10 jobs side by side (what `GET /api/v1/compare` answers): results, curves
    overlaid (drawn from that API with `scalars=true`), arguments and settings diffed.
    The address (`/compare?jobs=ID1,ID2`) is the comparison: shareable with the team."""
    try:
        ids = parse_ids(jobs)
    except BadSelection as exc:
        why = f"{exc}. Tick them on the jobs list."
        raise PageError(400, "Choose 2 to 10 jobs to compare", why) from None
    try:
        found = queries.compare.compare(db, principal.actor, ids)
    except queries.compare.UnknownJob as exc:
        raise _not_found(f"job {exc.args[0]!r}") from None
    except queries.compare.NotAllowed:
        raise PageError(403, "Not allowed", "Your role in this team does not show jobs.") from None
    ctx = page_context(principal, db, platform)
    joined = ",".join(ids)
    return render(
        request,
        "compare.html",
        {
            **ctx,
            "cmp": found,
            "ids": joined,
            "states": [
                present.job_state(j.phase, j.queued, j.reason, j.message, []) for j in found.jobs
            ],
            "differing": [r for r in found.settings if r.differs],
            "same": [r for r in found.settings if not r.differs],
            "now": time.time(),
            "active": "jobs",
        },
    )


# -- code and data, team, admin ---------------------------------------------------------------


@router.get("/code")
def code_page(
    request: Request, principal: PageUser, db: SessionDep, platform: PlatformDep, team: str = ""
) -> Response:
    artifacts = queries.artifacts.list_artifacts(db, principal.actor, team=team or None)
    groups: dict[tuple[str, str], list[ArtifactOut]] = {}
    for a in artifacts:
        groups.setdefault((a.team, a.name), []).append(a)
    writable = queries.teams.names_allowed(db, principal.actor, Scope.ARTIFACTS_WRITE)
    ctx = page_context(principal, db, platform)
    return render(
        request,
        "code.html",
        {
            **ctx,
            "groups": groups,
            "upload_teams": writable,
            "team": team,
            "active": "code",
            "now": time.time(),
        },
    )


@router.get("/team")
def team_page(
    request: Request, principal: PageUser, db: SessionDep, platform: PlatformDep, team: str = ""
) -> Response:
    ctx = page_context(principal, db, platform)
    mine = queries.teams.list_teams(db, principal.actor)
    chosen = next((t for t in mine if t.name == team), mine[0] if mine else None)
    shown = chosen is not None and allowed(principal.actor, Scope.TEAM_READ, chosen.id)
    members = queries.teams.members(db, chosen.id) if chosen and shown else []
    usage = queries.teams.usage(db, chosen.id) if chosen else None
    team_admin = chosen is not None and allowed(principal.actor, Scope.TEAM_ADMIN, chosen.id)
    found = queries.users.addable(db, chosen.id) if chosen and team_admin else ([], 0)
    return render(
        request,
        "team.html",
        {
            **ctx,
            "teams": mine,
            "team": chosen,
            "members": members,
            "usage": usage,
            "team_admin": team_admin,
            "found": found[0],
            "found_total": found[1],
            "search": "",
            "active": "team",
        },
    )


@router.get("/team/part/people")
def team_people_part(
    request: Request, principal: PageUser, db: SessionDep, team: str = "", q: str = ""
) -> Response:
    """The team admin's picker: the people not in the team whose name holds `q`."""
    mine = queries.teams.list_teams(db, principal.actor)
    chosen = next((t for t in mine if t.name == team), None)
    if chosen is None:
        raise _not_found("team")
    if not allowed(principal.actor, Scope.TEAM_ADMIN, chosen.id):
        raise PageError(403, "Not allowed", "Only a team admin adds members.")
    names, total = queries.users.addable(db, chosen.id, q[:100])
    context = {"team": chosen, "found": names, "found_total": total, "search": q.strip()}
    return render(request, "_people.html", context)


@router.get("/admin")
def admin_page(
    request: Request, principal: PageUser, db: SessionDep, platform: PlatformDep
) -> Response:
    if not principal.actor.site_admin:
        raise PageError(403, "Site admins only", "Ask a site admin to add users or teams.")
    ctx = page_context(principal, db, platform)
    users = queries.users.list_users(db)
    teams = queries.teams.list_teams(db, principal.actor)
    usage = {t.id: queries.teams.usage(db, t.id) for t in teams}
    return render(
        request,
        "admin.html",
        {
            **ctx,
            "users": users,
            "teams": teams,
            "usage": usage,
            "engine": platform.engine.name,
            "features": platform.engine.features,
            "active": "admin",
            "now": time.time(),
        },
    )


__all__ = ["router"]
