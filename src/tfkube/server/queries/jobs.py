"""Jobs as the API and the pages read them: one job (another team's is not found), one
job's view with its names, the filtered list (a page of rows, the total and the count of
every phase), a job's events, and the counts the metrics export.

A status poll is the server's most frequent request: one job is viewed in one query, a
list in five however long the page (the counts per phase, the page's rows, then the
names of its teams, owners and artifacts, one query each)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, func, select
from sqlalchemy.orm import Session, aliased

from tfkube.planner import JobPhase
from tfkube.server.core.scopes import Actor, visible
from tfkube.server.core.tables import Artifact, Job, JobEvent, JobMetric, Team, User
from tfkube.server.queries.views import event_out, job_out
from tfkube.wire import EventOut, JobList, JobOut

MAX_PAGE = 500
"""The most jobs one list answers with."""
RESULT_COLUMNS = 6
"""The most result names a list offers as columns."""
SORTS = ("created", "name", "phase", "started", "duration")
"""What a list sorts by besides a result (`result.<name>`); `-` first: descending."""


class BadSort(ValueError):
    """A `sort` that names nothing a list sorts by (the message says what does)."""


@dataclass(frozen=True)
class Sort:
    key: str
    """One of SORTS, or `result.<name>`."""
    descending: bool

    @classmethod
    def parse(cls, text: str | None) -> Sort:
        """`-created` (the default: newest first), `name`, `-result.test_accuracy`, ..."""
        text = (text or "-created").strip()
        descending = text.startswith("-")
        key = text.removeprefix("-")
        if key not in SORTS and not (key.startswith("result.") and 0 < len(key) - 7 <= 64):
            raise BadSort(
                f"sort by {', '.join(SORTS)} or result.<name> (a name the jobs report), "
                "with a leading - for descending"
            )
        return cls(key, descending)

    @property
    def text(self) -> str:
        return ("-" if self.descending else "") + self.key

    @property
    def metric(self) -> str | None:
        return self.key[7:] if self.key.startswith("result.") else None


def get(db: Session, job_id: str) -> Job | None:
    """A job by id, whoever may see it (the caller decided that already)."""
    return db.get(Job, job_id)


def unfinished(db: Session, job_id: str) -> Job | None:
    """A job whose replicas may still fetch what their claims open (code, data): one that
    has not ended. Its phase decides as soon as the server read it terminal, not only once
    its pods are gone too (the row's state): a stopped or finished job's claim opens
    nothing, though its pods may take a while to stop."""
    row = db.get(Job, job_id)
    if row is None or row.state == "ended" or JobPhase(row.phase).terminal:
        return None
    return row


def find(db: Session, actor: Actor, job_id: str) -> Job | None:
    """A job the actor may know of: None for none, and for another team's."""
    row = db.get(Job, job_id)
    if row is None or not visible(actor, row.team_id):
        return None
    return row


def view(db: Session, row: Job, detail: bool = True) -> JobOut:
    """One job: its team's, owner's, code's and data set's names in one query (a status
    poll is the server's most frequent request). `detail`: with every replica and the
    TFJob as it runs."""
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


def list_jobs(
    db: Session,
    actor: Actor,
    *,
    team: str | None = None,
    owner: str | None = None,
    phase: str | None = None,
    name: str | None = None,
    q: str | None = None,
    limit: int = 100,
    offset: int = 0,
    sort: Sort | None = None,
) -> JobList:
    """The actor's teams' jobs (a site admin's: every team's), newest first or in `sort`'s
    order; filtered by team name, owner name, phase, exact name or a text in the name
    (`q`). `phases` counts every phase under the other filters; `total` what the filters
    leave; `result_keys` the result names their jobs report most. At most MAX_PAGE rows
    are read. Sorted by a result, jobs without it come last either way."""
    sort = sort or Sort("created", True)
    query = select(Job)
    if not actor.site_admin:
        query = query.where(Job.team_id.in_(list(actor.roles)))
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
    keys = result_keys(db, query)
    metric = sort.metric
    if metric is not None:
        value = aliased(JobMetric)
        query = query.outerjoin(value, and_(value.job_id == Job.id, value.name == metric))
        order: ColumnElement[object] = value.value  # type: ignore[assignment]
    else:
        order = _ORDER[sort.key]  # type: ignore[assignment]
    ordered = (order.desc() if sort.descending else order.asc()).nulls_last()
    rows = list(
        db.scalars(
            query.order_by(ordered, Job.created_at.desc(), Job.id)
            .limit(limit)
            .offset(max(offset, 0))
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
    return JobList(items=items, total=total, phases=phases, result_keys=keys)


_ORDER = {
    "created": Job.created_at,
    "name": Job.name,
    "phase": Job.phase,
    "started": Job.started_at,
    "duration": Job.finished_at - Job.started_at,
}


def result_keys(db: Session, query: Select[Job], most: int = RESULT_COLUMNS) -> list[str]:
    """The numeric result names the jobs of `query` (a select of Job, filtered) report,
    the most common first (ties by name): one grouped query over job_metrics."""
    jobs = query.with_only_columns(Job.id).order_by(None).subquery()
    count = func.count()
    rows = db.execute(
        select(JobMetric.name, count)
        .where(JobMetric.job_id.in_(select(jobs.c.id)))
        .group_by(JobMetric.name)
        .order_by(count.desc(), JobMetric.name)
        .limit(most)
    ).all()
    return [name for name, _ in rows]


def names(db: Session, team_id: int) -> set[str]:
    """Every job name the team has (running, queued or ended)."""
    return set(db.scalars(select(Job.name).where(Job.team_id == team_id)))


def events(db: Session, job_id: str, after: int = 0) -> list[EventOut]:
    """A job's events after the one with id `after`, oldest first."""
    rows = db.scalars(
        select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.id > after).order_by(JobEvent.id)
    )
    return [event_out(e) for e in rows]


def counts_by_team(db: Session) -> list[tuple[str, str, int, int, int, int]]:
    """(team, phase, jobs, their replicas' restarts, their preemptions, their disruptions)
    for every team and phase with jobs."""
    rows = db.execute(
        select(
            Team.name,
            Job.phase,
            func.count(),
            func.coalesce(func.sum(Job.restarts), 0),
            func.coalesce(func.sum(Job.preemptions), 0),
            func.coalesce(func.sum(Job.disruptions), 0),
        )
        .join(Team, Team.id == Job.team_id)
        .group_by(Team.name, Job.phase)
    ).all()
    return [
        (team, phase, int(n), int(restarts), int(pre), int(dis))
        for team, phase, n, restarts, pre, dis in rows
    ]


def running_jobs_with_outputs(db: Session, phase: str) -> list[tuple[str, str, str, list[Any]]]:
    """(team, job name, output folder, replicas as stored) of the jobs in `phase` that
    keep outputs the server reads."""
    rows = db.execute(
        select(Team.name, Job.name, Job.output_dir, Job.replicas)
        .join(Team, Team.id == Job.team_id)
        .where(Job.phase == phase, Job.output_dir.is_not(None))
    ).all()
    return [(team, name, str(out), list(reps or [])) for team, name, out, reps in rows]
