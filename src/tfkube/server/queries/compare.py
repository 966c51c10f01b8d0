"""2 to 10 jobs side by side, as `GET /api/v1/compare` answers and the compare page shows:
the jobs the actor may see (another team's id is "not found", as everywhere), each one's
result (`outputs.results.current_result`: kept at its end, else its file as it is now)
and TFJob, compared by the pure rules of `tfkube.server.jobs.compare`; with `scalars`, each
job's training curves through the server's one `ScalarReader` (cached per job)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from tfkube.server.core.scopes import Actor, Scope, allowed
from tfkube.server.core.tables import Job
from tfkube.server.jobs.compare import build
from tfkube.server.outputs.folder import LocalFolder, OutputsFolder
from tfkube.server.outputs.results import current_result
from tfkube.server.outputs.scalars import ScalarReader
from tfkube.server.queries.jobs import find, view
from tfkube.spec import SpecError, load_job_text
from tfkube.wire import CompareOut, JobOut, Progress, ScalarsOut


class UnknownJob(LookupError):
    """A job id that names no job the actor may see (the caller answers 404)."""


class NotAllowed(PermissionError):
    """The actor's role in a job's team does not allow reading it (the caller: 403)."""


def _spec(row: Job) -> dict[str, Any]:
    try:
        job = load_job_text(row.spec, "job")
    except SpecError:
        return {}
    return job.model_dump(mode="json", by_alias=True, exclude_none=True)


def compare(
    db: Session,
    actor: Actor,
    ids: list[str],
    scalars: ScalarReader | None = None,
    outputs_of: Callable[[Job], OutputsFolder | None] | None = None,
) -> CompareOut:
    """The jobs of `ids` (already checked by `jobs.compare.parse_ids`), compared. Raises
    UnknownJob for the first id the actor cannot see, NotAllowed where their role does
    not show jobs (or, with `scalars`, metrics). `outputs_of`: where a job's outputs are
    read (`Platform.outputs_if_readable`: the archive once the local copy is gone);
    without it, the output folder."""
    rows: list[Job] = []
    for job_id in ids:
        row = find(db, actor, job_id)
        if row is None:
            raise UnknownJob(job_id)
        if not allowed(actor, Scope.JOBS_READ, row.team_id):
            raise NotAllowed(f"your role does not allow this ({Scope.JOBS_READ.value})")
        if scalars is not None and not allowed(actor, Scope.METRICS_READ, row.team_id):
            raise NotAllowed(f"your role does not allow this ({Scope.METRICS_READ.value})")
        rows.append(row)
    jobs: list[JobOut] = []
    for row in rows:
        out = view(db, row, detail=False)
        found = current_result(row)
        out.result, out.result_problem = found.values, found.problem or None
        jobs.append(out)
    curves = None
    if scalars is not None:
        curves = []
        for row in rows:
            if outputs_of is not None:
                outputs = outputs_of(row)
            else:
                outputs = LocalFolder(row.output_dir) if row.output_dir else None
            series = scalars.read(outputs) if outputs is not None else []
            curves.append(ScalarsOut(series=series, progress=Progress()))
    return build(jobs, [_spec(row) for row in rows], curves)
