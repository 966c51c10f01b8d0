"""Jobs on the server: submit (pin, queue or start), the sync loop, stop, delete, copy.

    POST /jobs ─> submit: resolve the code artifact, pin the job to the server
                  (`_forms.place_job`), insert a row
                    local engine: state `queued` (phase Pending, reason Queued)
                    kubernetes:   started at once (the cluster queues and enforces quota)
    sync loop (a thread, every `sync_seconds` or when poked):
      1. every `live` job: the team's backend -> phase, replicas, events into the row;
         a finished job becomes `ended` (its final status kept); a job the engine forgot
         (TTL) is `ended` too and stays listed with its logs and outputs
      2. local engine: `_admission.admit` picks the queued jobs that fit; they start
         (backend.submit with a job-scoped code token); the others get their place in the
         queue as their message
Handlers read the database only, so a status poll never waits for an engine.
"""

from __future__ import annotations

import logging
import os
import shutil
import tarfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from sqlalchemy import CursorResult, delete, or_, select, update
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.orm.exc import StaleDataError

from tfkube.engines import JobExists, JobNotFound, JobView
from tfkube.launcher._fetch import FetchError, unpack
from tfkube.planner import JobPhase
from tfkube.server._engines import Engines
from tfkube.server.artifacts import BlobStore
from tfkube.server.core.config import ServerSettings
from tfkube.server.core.fetch import FetchPolicy, parse_ranges
from tfkube.server.core.security import CodeClaim, sign_claim
from tfkube.server.core.tables import Artifact, Job, JobEvent, Team
from tfkube.server.jobs import admission
from tfkube.server.jobs.fetched import fetch_code, release_fetched
from tfkube.server.jobs.forms import ArtifactRef, parse_ref, place_job, server_problems
from tfkube.spec import FieldError, SpecError, TFJob, dump_job, load_job_text

log = logging.getLogger("tfkube.server")

QUEUED, LIVE, ENDED = "queued", "live", "ended"
STARTING = "Starting"
"""The reason of a queued job that one caller is handing to its engine (a lease)."""
START_LEASE_SECONDS = 300.0
"""A start that has not ended by then (its server died mid-way) may be taken again."""
CODE_CLAIM_SECONDS = 7 * 24 * 3600
"""How long a job's code claim is valid at most; it is refused anyway once the job ended,
so a replica restarted late in a long job can still fetch its code."""


RETRY_SECONDS = 3.0
"""How soon a job the cluster turned away for a while is submitted again."""


def passing_refusal(exc: Exception) -> str | None:
    """Why a submit failed for a while only (the job waits and is tried again), or None
    when the failure is final. Pure: the quota admission's "exceeded quota" and "status
    unknown for quota" (a new or changed quota not computed yet), an API server that is
    busy or unreachable."""
    from tfkube.kube.rest import ApiError

    if isinstance(exc, ApiError):
        if exc.status == 403 and "quota" in exc.message:
            return f"waiting for the team's quota in the cluster: {exc.message}"
        if exc.status in {429, 500, 502, 503, 504}:
            return f"waiting for the cluster: {exc.message}"
        return None
    if isinstance(exc, OSError) or type(exc).__module__.startswith("urllib3"):
        return f"waiting for the cluster: cannot reach it ({type(exc).__name__}: {exc})"
    return None


def new_job_id() -> str:
    return uuid.uuid4().hex[:16]


def _entrypoint_in(archive: Path, entrypoint: str) -> bool:
    try:
        with tarfile.open(archive, "r:*") as tar:
            return any(m.name.removeprefix("./") == entrypoint for m in tar)
    except (tarfile.TarError, OSError, EOFError):
        return False


def replica_dicts(view: JobView) -> list[dict[str, Any]]:
    return [
        {
            "key": r.key,
            "role": r.role,
            "index": r.index,
            "state": r.state.value,
            "restarts": r.restarts,
            "exit_code": r.exit_code,
            "address": r.address,
            "node": r.node,
            "message": r.message,
            "last_line": r.last_line,
        }
        for r in view.replicas
    ]


def pending_replicas(job: TFJob, message: str) -> list[dict[str, Any]]:
    return [
        {
            "key": f"{role.value}-{i}",
            "role": role.value,
            "index": i,
            "state": "Pending",
            "restarts": 0,
            "exit_code": None,
            "address": None,
            "node": None,
            "message": message,
            "last_line": "",
        }
        for role, i in job.replica_keys()
    ]


class JobService:
    def __init__(
        self,
        settings: ServerSettings,
        engines: Engines,
        sessions: sessionmaker[Session],
        blobs: BlobStore,
        key: bytes,
        on_change: Callable[[Job], None] = lambda _job: None,
    ) -> None:
        self.settings = settings
        self.engines = engines
        self.sessions = sessions
        self.blobs = blobs
        self.key = key
        self.on_change = on_change
        self.poke = threading.Event()
        self._retry_at: dict[str, float] = {}
        """Kubernetes: job id -> when to submit again a job the cluster turned away."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.fetch_policy = FetchPolicy(allowed=parse_ranges(settings.allow_fetch_from))

    # -- submit -------------------------------------------------------------------------

    def output_dir(self, team: Team, job_id: str, name: str) -> Path:
        if self.engines.kind == "kubernetes":
            return self.engines.outputs(team.name) / name
        return self.engines.outputs(team.name) / job_id

    def data_dir(self, team: Team, job_id: str) -> Path:
        return self.engines.team_root(team.name) / "data" / job_id

    def resolve_data(self, db: Session, team: Team, reference: str) -> Artifact:
        """The team's data artifact a job names (`data`: NAME, NAME:VERSION, sha256:HEX)."""
        if self.engines.kind != "local":
            raise SpecError(
                [
                    FieldError(
                        "data",
                        "uploaded data sets reach jobs on the local engine only; on Kubernetes "
                        "give the job a claim holding the data (spec.storage.data.claimName)",
                    )
                ],
                "data",
            )
        ref = parse_ref(reference)
        found = self._artifact(db, team, ref, "data") if ref else None
        if found is None:
            raise SpecError(
                [
                    FieldError(
                        "data",
                        f"team {team.name} has no data set {reference!r}; upload it (kind data) "
                        "or pick one from the list of artifacts",
                    )
                ],
                "data",
            )
        return found

    @staticmethod
    def _artifact(db: Session, team: Team, ref: ArtifactRef, kind: str) -> Artifact | None:
        query = select(Artifact).where(Artifact.team_id == team.id, Artifact.kind == kind)
        if ref.sha256:
            query = query.where(Artifact.sha256 == ref.sha256)
        else:
            query = query.where(Artifact.name == ref.name)
            if ref.version is not None:
                query = query.where(Artifact.version == ref.version)
        return db.scalars(query.order_by(Artifact.version.desc()).limit(1)).first()

    def resolve_code(
        self, db: Session, team: Team, job: TFJob, code_field: str
    ) -> tuple[Artifact | None, str | None]:
        """The team's code artifact a job names (or None for an http(s) URL, or for a job
        without code: every role runs its own command, e.g. from its image)."""
        if job.spec.code is None:
            return None, None
        source = job.spec.code.source
        ref = parse_ref(source)
        if ref is None:
            if job.spec.code.is_url:
                return None, None
            raise SpecError(
                [
                    FieldError(
                        code_field,
                        f"{source!r} is not an uploaded artifact; upload the folder first and "
                        "give artifact:NAME (or NAME:VERSION, sha256:HEX), or an http(s) URL",
                    )
                ],
                f"job {job.name!r}",
            )
        found = self._artifact(db, team, ref, "code")
        if found is None:
            wanted = source.removeprefix("artifact:")
            raise SpecError(
                [
                    FieldError(
                        code_field,
                        f"team {team.name} has no code artifact {wanted!r}; upload it or "
                        "pick one from the list of artifacts",
                    )
                ],
                f"job {job.name!r}",
            )
        if job.spec.runs_entrypoint() and not _entrypoint_in(
            self.blobs.path(found.sha256), job.spec.code.entrypoint
        ):
            raise SpecError(
                [
                    FieldError(
                        "entrypoint" if code_field == "code" else "spec.code.entrypoint",
                        f"{job.spec.code.entrypoint!r} is not in {found.name}:{found.version}; "
                        "add it to the code or name the script to run",
                    )
                ],
                f"job {job.name!r}",
            )
        return found, f"{found.name}:{found.version}"

    def submit(
        self,
        db: Session,
        team: Team,
        user_id: int,
        job: TFJob,
        code_field: str = "spec.code.source",
        description: str = "",
        data: str | None = None,
    ) -> Job:
        """Pin, record and queue (or start) a job. Raises SpecError or JobExists."""
        problems = server_problems(job)
        if problems:
            raise SpecError(problems, f"job {job.name!r}")
        same_name = select(Job).where(Job.team_id == team.id, Job.name == job.name)
        active = db.scalars(same_name.where(Job.state != ENDED)).first()
        if active is not None:
            raise JobExists(
                f"team {team.name} already has a job named {job.name!r} ({active.phase}); "
                "stop or delete it, or choose another name"
            )
        if self.engines.kind == "kubernetes" and self.settings.outputs_claim:
            # Kept outputs live under the job's name on the team's claim (its subPath): a
            # second job of that name would resume from the first one's checkpoint.
            kept = db.scalars(same_name).first()
            if kept is not None:
                raise JobExists(
                    f"team {team.name} keeps the logs and outputs of an earlier job named "
                    f"{job.name!r} under that name; delete it first, or choose another name"
                )
        artifact, _ = self.resolve_code(db, team, job, code_field)
        data_set = self.resolve_data(db, team, data) if data else None
        job_id = new_job_id()
        local = self.engines.kind == "local"
        fetched = None
        if artifact is None and local and job.spec.code is not None and job.spec.code.is_url:
            # Here, in the member's own request, never in the sync loop that starts every
            # team's jobs; then the job runs the fetched blob as it would an upload.
            db.commit()  # no transaction held while the URL answers
            fetched = fetch_code(job, code_field, self.blobs, self.fetch_policy, team.name)
        if artifact is not None or fetched is not None:
            sha = artifact.sha256 if artifact is not None else str(fetched)
            code_url = f"{self.settings.replica_url}/api/v1/code/{sha}"
        elif job.spec.code is not None:
            code_url, sha = job.spec.code.source, job.spec.code.sha256 or ""
        else:
            code_url, sha = "", ""
        out = self.output_dir(team, job_id, job.name)
        served = artifact is not None or fetched is not None
        placed = place_job(
            job,
            code_url=code_url if served else None,
            code_sha256=sha if served else None,
            data_dir=str(self.data_dir(team, job_id)) if local else None,
            log_dir=str(out) if local else None,
            logs_claim=self.settings.outputs_claim if not local else None,
        )
        need = admission.job_request(placed)
        now = time.time()
        row = Job(
            id=job_id,
            team_id=team.id,
            name=job.name,
            description=description,
            created_by=user_id,
            created_at=now,
            spec=dump_job(placed),
            artifact_id=artifact.id if artifact else None,
            code_sha256=sha or None,
            data_artifact_id=data_set.id if data_set else None,
            data_sha256=data_set.sha256 if data_set else None,
            state=QUEUED,
            request={"cpu": need.cpu, "memory": need.memory, "gpu": need.gpu},
            phase=JobPhase.PENDING.value,
            reason="Queued",
            message="queued: waiting for the scheduler",
            restarts=0,
            replicas=pending_replicas(placed, "queued"),
            output_dir=str(out),
            updated_at=now,
        )
        db.add(row)
        db.add(JobEvent(job_id=job_id, time=now, message="job submitted to the server"))
        db.commit()
        if not local:
            self.start(db, row, team)
        self.poke.set()
        return row

    def claim(self, job: Job, sha256: str) -> str:
        return sign_claim(self.key, CodeClaim(job.id, sha256, time.time() + CODE_CLAIM_SECONDS))

    def start(self, db: Session, row: Job, team: Team) -> None:
        """Hand a job to its team's engine (the queue admitted it). A refusal that passes
        (the cluster's quota is full or not computed yet, the API server is busy) leaves
        the job queued with the reason as its message; the sync loop tries again."""
        if not self._claim_start(db, row):
            return
        job = load_job_text(row.spec, f"job {row.name!r}")
        backend = self.engines.backend(team.name, team.namespace)
        # An uploaded artifact, or code this server fetched at submit (local engine; never a
        # URL a member wrote): its replicas fetch it from here with a job-scoped claim.
        here, code = f"{self.settings.replica_url}/api/v1/code/{row.code_sha256}", job.spec.code
        served = row.artifact_id is not None or (
            self.engines.kind == "local" and code is not None and code.source == here
        )
        token = self.claim(row, row.code_sha256) if row.code_sha256 and served else None
        now = time.time()
        try:
            if row.output_dir and self.engines.kind == "local":
                Path(row.output_dir).mkdir(parents=True, exist_ok=True)
            if row.data_sha256:
                self.unpack_data(row, team)
            view = backend.submit(job, self.engines.team_root(team.name), code_token=token)
        except (SpecError, JobExists) as exc:
            self._end(row, JobPhase.FAILED.value, "SubmitFailed", str(exc), now)
            db.add(JobEvent(job_id=row.id, time=now, message=f"the engine refused it: {exc}"))
        except Exception as exc:
            wait = passing_refusal(exc)
            if wait is not None:
                self._retry_at[row.id] = time.monotonic() + RETRY_SECONDS
                row.reason = "Queued"  # the lease ends: queued again
                if row.message != wait:
                    log.info("job %s waits: %s", row.id, wait)
                    row.message = wait
                    row.replicas = [{**r, "message": wait} for r in row.replicas]
                    row.updated_at = now
                db.commit()
                return
            log.exception("starting job %s failed", row.id)
            self._end(
                row, JobPhase.FAILED.value, "SubmitFailed", f"{type(exc).__name__}: {exc}", now
            )
        else:
            self._retry_at.pop(row.id, None)
            row.state = LIVE
            self._apply_view(row, view)
            db.add(JobEvent(job_id=row.id, time=now, message="started on the engine"))
        db.commit()
        self.on_change(row)

    def unpack_data(self, row: Job, team: Team) -> None:
        """The job's data set, unpacked (checked as replicas check code) into its data
        folder before it starts; kept for restarts, removed with the job."""
        dest = self.data_dir(team, row.id)
        if dest.is_dir() and any(dest.iterdir()):
            return
        staging = dest.with_name(f".{dest.name}.unpacking")
        shutil.rmtree(staging, ignore_errors=True)
        try:
            unpack(self.blobs.path(row.data_sha256 or ""), staging)
        except FetchError as exc:
            message = str(exc).replace("the code", "the data set")
            raise SpecError([FieldError("data", message)]) from None
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.exists():
            dest.rmdir()
        staging.rename(dest)

    @staticmethod
    def _claim_start(db: Session, row: Job) -> bool:
        """Whether this caller may hand the job to the engine: it is still queued and no
        one else (the request that submitted it, the sync loop, another server process on
        the same database) is starting it. A conditional update takes a lease: the reason
        becomes Starting until the start ends (live, failed, or queued again). A claim
        that only compared versions let a second caller that read the row after the first
        claim win too, and the engine refused the second submit as "already exists"."""
        if row.state != QUEUED:
            return False
        db.commit()  # the update runs in a fresh transaction, on what others committed
        now = time.time()
        result = db.execute(
            update(Job)
            .where(
                Job.id == row.id,
                Job.state == QUEUED,
                or_(
                    Job.reason.is_(None),
                    Job.reason != STARTING,
                    Job.updated_at < now - START_LEASE_SECONDS,
                ),
            )
            .values(reason=STARTING, updated_at=now)
        )
        claimed = cast(CursorResult[Any], result).rowcount
        db.commit()
        db.refresh(row)
        return bool(claimed)

    @staticmethod
    def _end(row: Job, phase: str, reason: str, message: str, now: float) -> None:
        row.state = ENDED
        row.phase = phase
        row.reason = reason
        row.message = message
        row.finished_at = row.finished_at or now
        row.updated_at = now
        row.replicas = [
            {
                **r,
                "message": "",
                "state": "Stopped" if r["state"] in {"Pending", "Running"} else r["state"],
            }
            for r in row.replicas
        ]

    @staticmethod
    def _apply_view(row: Job, view: JobView) -> None:
        row.phase = view.phase.value
        row.reason = view.reason
        row.message = view.message
        row.restarts = view.restarts
        row.started_at = view.started_at
        row.finished_at = view.finished_at
        row.replicas = replica_dicts(view)
        row.updated_at = time.time()
        if view.done:
            row.state = ENDED

    # -- stop, delete, copy ----------------------------------------------------------------

    def stop(self, db: Session, row: Job, team: Team) -> None:
        now = time.time()
        if row.state == QUEUED:
            self._retry_at.pop(row.id, None)
            self._end(row, JobPhase.FAILED.value, "Stopped", "stopped while queued", now)
        elif row.state == LIVE:
            backend = self.engines.backend(team.name, team.namespace)
            try:
                self._apply_view(row, backend.stop(row.name))
            except JobNotFound:
                self._end(row, row.phase, row.reason or "", row.message or "", now)
        db.add(JobEvent(job_id=row.id, time=now, message="stop requested through the server"))
        db.commit()
        self.on_change(row)
        self.poke.set()

    def delete(self, db: Session, row: Job, team: Team) -> None:
        """Stop the job, remove it from the engine, its outputs, and its record."""
        if row.state != QUEUED:
            backend = self.engines.backend(team.name, team.namespace)
            try:
                # Only if the engine's job is this one (a later job may reuse the name).
                other_live = db.scalars(
                    select(Job).where(
                        Job.team_id == team.id,
                        Job.name == row.name,
                        Job.id != row.id,
                        Job.state != ENDED,
                    )
                ).first()
                if other_live is None:
                    backend.delete(row.name)
            except JobNotFound:
                pass
        kept_here = self.engines.kind == "local" or self.settings.outputs_claim is not None
        for folder in (row.output_dir, str(self.data_dir(team, row.id))):
            if folder and kept_here:  # in a cluster: the outputs claim the server mounts
                shutil.rmtree(folder, ignore_errors=True)
        if self.engines.kind == "local":
            release_fetched(db, self.blobs, row)
        db.execute(delete(JobEvent).where(JobEvent.job_id == row.id))
        db.delete(row)
        db.commit()
        self.poke.set()

    # -- the sync loop -----------------------------------------------------------------------

    def tick(self) -> None:
        with self.sessions() as db:
            try:
                self._sync(db)
                if self.engines.kind == "local":
                    self._admit(db)
                else:
                    self._retry(db)
            except StaleDataError:
                # A request deleted a job this pass was writing: nothing is lost, the next
                # pass reads the rows again.
                db.rollback()
                log.info("a job was deleted during the sync; syncing again")

    def _retry(self, db: Session) -> None:
        """Kubernetes: submit again the jobs the cluster turned away for a while."""
        queued = db.scalars(select(Job).where(Job.state == QUEUED).order_by(Job.created_at)).all()
        now = time.monotonic()
        teams: dict[int, Team | None] = {}
        for row in queued:
            if self._retry_at.get(row.id, 0.0) > now:
                continue
            team = teams.setdefault(row.team_id, db.get(Team, row.team_id))
            if team is not None:
                self.start(db, row, team)

    def _sync(self, db: Session) -> None:
        live = db.scalars(select(Job).where(Job.state == LIVE)).all()
        if not live:
            return
        teams = {t.id: t for t in db.scalars(select(Team)).all()}
        by_team: dict[int, list[Job]] = {}
        for row in live:
            by_team.setdefault(row.team_id, []).append(row)
        now = time.time()
        for team_id, rows in by_team.items():
            team = teams[team_id]
            backend = self.engines.backend(team.name, team.namespace)
            try:
                views = {v.name: v for v in backend.list()}
            except Exception:
                log.exception("reading the jobs of team %s failed", team.name)
                continue
            for row in rows:
                view = views.get(row.name)
                before = (row.phase, row.restarts, row.replicas, row.state)
                if view is None:
                    if JobPhase(row.phase).terminal:
                        row.state = ENDED
                        db.add(
                            JobEvent(
                                job_id=row.id, time=now, message="removed from the engine (TTL)"
                            )
                        )
                    else:
                        self._end(
                            row,
                            JobPhase.FAILED.value,
                            "Lost",
                            "the engine no longer has this job (deleted outside the server)",
                            now,
                        )
                else:
                    self._apply_view(row, view)
                    self._copy_events(db, row, backend)
                if (row.phase, row.restarts, row.replicas, row.state) != before:
                    self.on_change(row)
        db.commit()

    @staticmethod
    def _copy_events(db: Session, row: Job, backend: Any) -> None:
        try:
            events = backend.events(row.name)
        except (JobNotFound, OSError, ValueError):
            return
        known = {
            (round(t, 3), m)
            for t, m in db.execute(
                select(JobEvent.time, JobEvent.message).where(JobEvent.job_id == row.id)
            ).all()
        }
        for e in events:
            if (round(e.time, 3), e.message) not in known:
                db.add(JobEvent(job_id=row.id, time=e.time, replica=e.replica, message=e.message))

    def capacity(self) -> admission.Amount:
        import psutil

        from tfkube.engines.local._gpus import available_gpus

        cpus = self.settings.cpus or float(os.cpu_count() or 1)
        memory = self.settings.memory or psutil.virtual_memory().total
        return admission.machine_capacity(cpus, memory, len(available_gpus()))

    def _admit(self, db: Session) -> None:
        queued = db.scalars(select(Job).where(Job.state == QUEUED).order_by(Job.created_at)).all()
        if not queued:
            return
        live = db.scalars(select(Job).where(Job.state == LIVE)).all()
        teams = {t.id: t for t in db.scalars(select(Team)).all()}

        def amount(r: Job) -> admission.Amount:
            return admission.Amount(
                float(r.request.get("cpu", 0)),
                int(r.request.get("memory", 0)),
                int(r.request.get("gpu", 0)),
            )

        decision = admission.admit(
            self.capacity(),
            [admission.Running(r.team_id, amount(r)) for r in live],
            [admission.Waiting(r.id, r.team_id, amount(r)) for r in queued],
            {t.id: admission.Quota(**t.quota) for t in teams.values()},
        )
        by_id = {r.id: r for r in queued}
        for job_id, message in decision.messages.items():
            row = by_id[job_id]
            if row.message != message:
                row.message = message
                row.replicas = [{**r, "message": message} for r in row.replicas]
                row.updated_at = time.time()
        db.commit()
        for job_id in decision.start:
            row = by_id[job_id]
            self.start(db, row, teams[row.team_id])

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:
                log.exception("job sync failed")
            self.poke.wait(self.settings.sync_seconds)
            self.poke.clear()

    def start_loop(self) -> None:
        self._thread = threading.Thread(target=self.run, name="tfkube-job-sync", daemon=True)
        self._thread.start()

    def stop_loop(self) -> None:
        self._stop.set()
        self.poke.set()
        if self._thread is not None:
            self._thread.join(30)
