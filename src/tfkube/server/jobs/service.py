"""Jobs on the server: submit (pin, queue or start), the sync loop, stop, delete, copy.

    POST /jobs ─> submit: resolve the code artifact, pin the job to the server
                  (`_forms.place_job`), insert a row
                    local engine: state `queued` (phase Pending, reason Queued)
                    kubernetes:   started at once (the cluster queues and enforces quota)
    sync loop (a thread, every `sync_seconds` or when poked; paced by `sync_wait` so that
    its passes take at most a third of the server's CPU):
      1. every `live` job: the team's backend -> phase, replicas, events into the row;
         a finished job becomes `ended` (its final status kept); a job the engine forgot
         (TTL) is `ended` too and stays listed with its logs and outputs
      2. an engine with a capacity (this machine): `admission.admit` picks the queued jobs
         that fit; they start (backend.submit with a job-scoped code token); the others get
         their place in the queue as their message. An engine without one (a cluster,
         which queues and enforces quotas itself) gets every job at once, and again a
         little later when it deferred one (`SubmitDeferred`: its quota full, busy).
Handlers read the database only, so a status poll never waits for an engine.
"""

from __future__ import annotations

import logging
import shutil
import tarfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

from sqlalchemy import CursorResult, delete, or_, select, update
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.orm.exc import StaleDataError

from tfkube.engines import (
    STAGING,
    Capacity,
    Credentials,
    DataFrom,
    DataSourceError,
    Engine,
    JobExists,
    JobNotFound,
    JobStorage,
    JobView,
    NotAvailable,
    ShipTo,
    Stager,
    StageRequest,
    StoreRef,
    SubmitDeferred,
    check_source,
    credentials_problem,
    forget_served,
    read_state,
    served_cache_limit,
)
from tfkube.netguard import refused
from tfkube.planner import (
    JobPhase,
    Replica,
    ReplicaState,
    StepJudgement,
    scale_problems,
    scaled_job,
)
from tfkube.server import team_secrets
from tfkube.server.artifacts import BlobStore
from tfkube.server.core.config import ServerSettings
from tfkube.server.core.fetch import FetchPolicy
from tfkube.server.core.forwarded import parse_networks
from tfkube.server.core.security import DATA_CLAIM, SHIP_CLAIM, CodeClaim, sign_claim
from tfkube.server.core.tables import Artifact, Job, JobEvent, JobMetric, Team
from tfkube.server.jobs import admission, allowances
from tfkube.server.jobs.fetched import fetch_code, release_fetched
from tfkube.server.jobs.forms import ArtifactRef, parse_ref, place_job, server_problems
from tfkube.server.notifications import job_events
from tfkube.server.outputs.logs import JobPaths, job_paths
from tfkube.server.outputs.results import read_result
from tfkube.server.outputs.steps import StepWatcher
from tfkube.server.outputs.usage import UsagePoller
from tfkube.server.team_secrets import SecretBox
from tfkube.server.tenants import tenant_of
from tfkube.spec import FieldError, HdfsSource, Role, SpecError, TFJob, dump_job, load_job_text
from tfkube.wire import replicas_json, replicas_of

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


def new_job_id() -> str:
    return uuid.uuid4().hex[:16]


def _entrypoint_in(archive: Path, entrypoint: str) -> bool:
    try:
        with tarfile.open(archive, "r:*") as tar:
            return any(m.name.removeprefix("./") == entrypoint for m in tar)
    except (tarfile.TarError, OSError, EOFError):
        return False


def pending_replicas(job: TFJob, message: str) -> list[Replica]:
    """A job's replicas before its engine has them: each Pending, saying why."""
    return [Replica(role=role.value, index=i, message=message) for role, i in job.replica_keys()]


def _counts(row: Job) -> tuple[object, ...]:
    """What of a job, changed by a sync, is news (`on_change`)."""
    return (row.phase, row.restarts, row.preemptions, row.disruptions, row.replicas, row.state)


def _stalled(row: Job) -> bool:
    """Whether any of the job's replicas stalls, as last recorded."""
    return any(isinstance(r, dict) and r.get("stalled") for r in row.replicas or [])


@dataclass(frozen=True)
class _Before:
    """A job's row as it was before the server recorded a change of it (`JobService.
    _news`): what is news, and what its owner's notifications compare with."""

    counts: tuple[object, ...]
    phase: str
    stalled: bool

    @classmethod
    def of(cls, row: Job) -> _Before:
        return cls(_counts(row), row.phase, _stalled(row))


def _with_message(row: Job, message: str) -> None:
    """Every replica of a job that waits says why (the message of the whole job)."""
    row.replicas = replicas_json(
        r.model_copy(update={"message": message}) for r in replicas_of(row.replicas)
    )


class JobService:
    def __init__(
        self,
        settings: ServerSettings,
        engine: Engine,
        sessions: sessionmaker[Session],
        blobs: BlobStore,
        key: bytes,
        on_change: Callable[[Job], None] = lambda _job: None,
    ) -> None:
        self.settings = settings
        self.engine = engine
        self.sessions = sessions
        self.blobs = blobs
        self.key = key
        self.on_change = on_change
        self.on_event: Callable[[Session, Job, str], None] | None = None
        """Told each event of a job its owner may be notified of (`notifications.
        job_events`), in the sync's transaction: `Notifier.enqueue`."""
        self.on_ended: Callable[[Job, Team], None] | None = None
        """Told once per job (per server process) when the sync first sees it in a
        terminal phase: the outputs' archiver with `--store s3://`."""
        self._ended_seen: set[str] = set()
        self.on_deleted: Callable[[Job, Team], None] | None = None
        """Told when a job is deleted, before its row goes: the archiver drops its
        archive."""
        self.poke = threading.Event()
        self._retry_at: dict[str, float] = {}
        self.steps = StepWatcher()
        """Step rates from kept logs, for an engine that does not report them."""
        self._step_view: dict[str, StepJudgement] = {}
        """Job id -> when to submit again a job the engine deferred."""
        self.usage = UsagePoller(time.time)
        """Replicas' usage from the engine, for one that does not keep it (Kubernetes)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.fetch_policy = FetchPolicy(allowed=parse_networks(settings.allow_fetch_from))
        self.secret_box = SecretBox.open(settings.data_dir)
        """The teams' secrets' key (`team_secrets`): a data source's credentials."""
        self.stager = Stager(on_done=self._staged)
        """Stages data sources for engines whose replicas fetch their data from here
        (`JobStorage.served_data`: a cluster), one thread per job."""

    # -- submit -------------------------------------------------------------------------

    def storage(self, team: Team, job_id: str, name: str) -> JobStorage:
        """Where the job keeps its outputs and data: the engine's decision."""
        return self.engine.job_storage(tenant_of(team), job_id, name)

    def paths(self, team: Team, job: Job, replica: str | None = None) -> JobPaths:
        """Names the server's folders in a replica's (or the job's) text as the job knows
        them (`outputs.logs.job_paths`): what the dashboard shows instead."""
        data_dir = self.settings.data_dir
        storage = self.storage(team, job.id, job.name)
        return job_paths(storage, {data_dir, data_dir.resolve()}, replica)

    def resolve_data(self, db: Session, team: Team, reference: str) -> Artifact:
        """The team's data artifact a job names (`data`: NAME, NAME:VERSION, sha256:HEX)."""
        if not self.engine.features.data_sets:
            raise SpecError([FieldError("data", self.engine.features.data_sets_hint)], "data")
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
        problems = server_problems(job, self.engine.features.data_sources)
        problems += allowances.refusals(db, team, user_id, job)
        if problems:
            raise SpecError(problems, f"job {job.name!r}")
        same_name = select(Job).where(Job.team_id == team.id, Job.name == job.name)
        active = db.scalars(same_name.where(Job.state != ENDED)).first()
        if active is not None:
            raise JobExists(
                f"team {team.name} already has a job named {job.name!r} ({active.phase}); "
                "stop or delete it, or choose another name"
            )
        job_id = new_job_id()
        storage = self.storage(team, job_id, job.name)
        if storage.kept:
            # An engine that keeps outputs by the job's name (a cluster's claim): a second
            # job of that name would resume from the first one's checkpoint.
            kept = db.scalars(same_name.where(Job.output_dir == str(storage.output_dir))).first()
            if kept is not None:
                raise JobExists(
                    f"team {team.name} keeps the logs and outputs of an earlier job named "
                    f"{job.name!r} under that name; delete it first, or choose another name"
                )
        artifact, _ = self.resolve_code(db, team, job, code_field)
        data_set = self.resolve_data(db, team, data) if data else None
        self.check_data_source(db, team, job)
        fetched = None
        if artifact is None and job.spec.code is not None and job.spec.code.is_url:
            # Here, in the member's own request, never in the sync loop that starts every
            # team's jobs; then the job runs the fetched blob as it would an upload.
            db.commit()  # no transaction held while the URL answers
            fetched = fetch_code(job, code_field, self.blobs, self.fetch_policy, team.name)
        sha = artifact.sha256 if artifact is not None else (fetched or "")
        placed = place_job(
            job,
            code_url=f"{self.settings.replica_url}/api/v1/code/{sha}" if sha else None,
            code_sha256=sha or None,
            data_dir=storage.data_path,
            log_dir=storage.log_path,
            logs_claim=storage.logs_claim,
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
            replicas=replicas_json(pending_replicas(placed, "queued")),
            output_dir=str(storage.output_dir),
            updated_at=now,
        )
        db.add(row)
        db.add(JobEvent(job_id=job_id, time=now, message="job submitted to the server"))
        db.commit()
        if self.engine.capacity() is None:  # the engine queues: hand it over now
            self.start(db, row, team)
        self.poke.set()
        return row

    def check_data_source(self, db: Session, team: Team, job: TFJob) -> None:
        """A job's data source, asked of its store now with the team's secret (in the
        member's own request, no transaction held): a missing secret, an endpoint the
        server may not reach for a member, a missing bucket or prefix, refused
        credentials or an unreachable store is a SpecError naming the field; nothing is
        queued."""
        data = job.spec.storage.data
        source = data.parsed_source
        if source is None or data.credentials is None:
            return
        where = f"job {job.name!r}"
        credentials = self.data_credentials(db, team, job)
        assert credentials is not None  # a source that names a secret
        mismatch = credentials_problem(source, credentials)
        if mismatch:
            message = f"the team's secret {data.credentials!r}: {mismatch}"
            raise SpecError([FieldError("spec.storage.data.credentials", message)], where)
        # An HDFS without an endpoint is asked at its NameNode's port 9870: judged too.
        endpoint = data.endpoint
        if endpoint is None and isinstance(source, HdfsSource):
            endpoint = source.webhdfs_url(None).removesuffix("/webhdfs/v1")
        if endpoint is not None:
            problem = endpoint_problem(endpoint, self.fetch_policy)
            if problem:
                field = (
                    "spec.storage.data.endpoint" if data.endpoint else "spec.storage.data.source"
                )
                raise SpecError([FieldError(field, problem)], where)
        db.commit()  # no transaction held while the store answers
        store = StoreRef(source, data.endpoint, data.region)
        try:
            check_source(
                store,
                credentials,
                f"the team's secret {data.credentials!r}",
                self.fetch_policy.allowed,
            )
        except DataSourceError as exc:
            raise SpecError(
                [FieldError("spec.storage.data.source", f"{exc}; nothing was queued")], where
            ) from None

    def data_credentials(self, db: Session, team: Team, job: TFJob) -> Credentials | None:
        """The job's team's secret its data source names, decrypted (None: no source).
        SpecError on `spec.storage.data.credentials` when the team has none of that name
        (another team's secret is never looked at)."""
        name = job.spec.storage.data.credentials
        if job.spec.storage.data.source is None or name is None:
            return None
        try:
            return team_secrets.credentials_for(db, self.secret_box, team, name)
        except LookupError as exc:
            raise SpecError(
                [FieldError("spec.storage.data.credentials", str(exc))], f"job {job.name!r}"
            ) from None

    def claim(self, job: Job, sha256: str) -> str:
        return sign_claim(self.key, CodeClaim(job.id, sha256, time.time() + CODE_CLAIM_SECONDS))

    def ship_to(self, row: Job, team: Team) -> ShipTo | None:
        """Where the job's replicas ship their logs, event files and result, with the
        job-scoped claim that opens it (`routes/ship.py`), when its engine keeps no folder
        the server reads."""
        if not self.storage(team, row.id, row.name).ship:
            return None
        token = sign_claim(
            self.key, CodeClaim(row.id, SHIP_CLAIM, time.time() + CODE_CLAIM_SECONDS)
        )
        return ShipTo(f"{self.settings.replica_url}/api/v1/ship/{row.id}", token)

    def data_from(self, db: Session, row: Job, team: Team, job: TFJob) -> DataFrom | None:
        """Where the job's replicas fetch their data, with the job-scoped claim that opens
        it (`routes/data.py`), when its engine's replicas cannot see the server's folders
        and the job has a data set or a source (whose staging starts now)."""
        storage = self.storage(team, row.id, row.name)
        if storage.served_data is None:
            return None
        if job.spec.storage.data.source is not None:
            self.stage_served(db, row, team, job)
        elif not row.data_sha256:
            return None
        token = sign_claim(
            self.key, CodeClaim(row.id, DATA_CLAIM, time.time() + CODE_CLAIM_SECONDS)
        )
        return DataFrom(f"{self.settings.replica_url}/api/v1/data/{row.id}", token)

    def stage_served(self, db: Session, row: Job, team: Team, job: TFJob) -> bool:
        """Stage the job's data source here (in a thread) unless it is staged, failed or
        staging in this process: at start, and again when a replica asks after a server
        restart cut a staging short. True when it started now."""
        storage = self.storage(team, row.id, row.name)
        data = job.spec.storage.data
        source = data.parsed_source
        if storage.served_data is None or storage.data_cache is None or source is None:
            return False
        try:
            limit = served_cache_limit(storage.data_cache)
        except ValueError as exc:
            raise SpecError(
                [FieldError("TFKUBE_DATA_CACHE_LIMIT", str(exc))], "the server"
            ) from None
        replicas = [
            (role.value, index) for role in Role for index in range(job.spec.replicas.count(role))
        ]
        return self.stager.start(
            StageRequest(
                served=storage.served_data,
                cache=storage.data_cache,
                store=StoreRef(source, data.endpoint, data.region),
                credentials=self.data_credentials(db, team, job),
                allowed=self.fetch_policy.allowed,
                shard=data.shard,
                replicas=replicas,
                workers=job.spec.replicas.count(Role.WORKER),
                limit=limit,
                meta={"job": row.id},
            )
        )

    def _staged(self, request: StageRequest, state: dict[str, Any]) -> None:
        """A staging ended: its outcome (and each shard's) in the job's events."""
        job_id = str(request.meta.get("job", ""))
        now = time.time()
        with self.sessions() as db:
            if db.get(Job, job_id) is None:
                return
            db.add(JobEvent(job_id=job_id, time=now, message=str(state.get("text", ""))))
            for key, share in sorted((state.get("shares") or {}).items()):
                if key:
                    db.add(
                        JobEvent(
                            job_id=job_id,
                            time=now,
                            message=(
                                f"{key}'s shard ({request.shard}): {share['files']} files, "
                                f"{share['bytes'] / 2**20:.1f} MiB "
                                f"({share['fetched_bytes'] / 2**20:.1f} MiB read from the store)"
                            ),
                        )
                    )
            db.commit()

    def start(self, db: Session, row: Job, team: Team) -> None:
        """Hand a job to its team's engine (the queue admitted it). A refusal that passes
        (`SubmitDeferred`: a cluster's quota full or not computed yet, its API server busy)
        leaves the job queued with the reason as its message; the sync loop tries again."""
        if not self._claim_start(db, row):
            return
        before = _Before.of(row)
        job = load_job_text(row.spec, f"job {row.name!r}")
        backend = self.engine.jobs(tenant_of(team))
        # An uploaded artifact, or code this server fetched at submit (never a URL a member
        # wrote): its replicas fetch it from here with a job-scoped claim.
        here, code = f"{self.settings.replica_url}/api/v1/code/{row.code_sha256}", job.spec.code
        served = row.artifact_id is not None or (code is not None and code.source == here)
        token = self.claim(row, row.code_sha256) if row.code_sha256 and served else None
        now = time.time()
        try:
            if row.data_sha256:
                self.unpack_data(row, team)
            base = Path(row.output_dir or self.settings.data_dir).parent
            credentials = self.data_credentials(db, team, job)
            data_from = self.data_from(db, row, team, job)
            view = backend.submit(
                job,
                base,
                code_token=token,
                # A source the server stages is never the engine's to read.
                data_credentials=None if data_from is not None else credentials,
                ship=self.ship_to(row, team),
                **({"data_from": data_from} if data_from is not None else {}),
            )
        except (SpecError, JobExists) as exc:
            self._end(row, JobPhase.FAILED.value, "SubmitFailed", str(exc), now)
            db.add(JobEvent(job_id=row.id, time=now, message=f"the engine refused it: {exc}"))
        except SubmitDeferred as deferred:
            wait = str(deferred)
            self._retry_at[row.id] = time.monotonic() + RETRY_SECONDS
            row.reason = "Queued"  # the lease ends: queued again
            if row.message != wait:
                log.info("job %s waits: %s", row.id, wait)
                row.message = wait
                _with_message(row, wait)
                row.updated_at = now
            db.commit()
            return
        except Exception as exc:
            log.exception("starting job %s failed", row.id)
            self._end(
                row, JobPhase.FAILED.value, "SubmitFailed", f"{type(exc).__name__}: {exc}", now
            )
        else:
            self._retry_at.pop(row.id, None)
            row.state = LIVE
            self._apply_view(row, view)
            db.add(JobEvent(job_id=row.id, time=now, message="started on the engine"))
        self._changed(db, row)
        # The engine's first view may already be the end (a short job, a slow server).
        self._news(db, row, team, before)
        db.commit()
        self.on_change(row)

    def unpack_data(self, row: Job, team: Team) -> None:
        """The job's data set, staged by its engine into its data folder before it starts
        (checked as replicas check code); kept for restarts, removed with the job."""
        storage = self.storage(team, row.id, row.name)
        try:
            self.engine.stage_data(tenant_of(team), storage, self.blobs.path(row.data_sha256 or ""))
        except NotAvailable as exc:
            raise SpecError([FieldError("data", str(exc))], "data") from None

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

    def _changed(self, db: Session, row: Job) -> None:
        """After a row took what its engine said (or the server ended it): a job that
        ended keeps its result."""
        if row.state == ENDED and row.result is None:
            self.keep_result(db, row)

    @staticmethod
    def keep_result(db: Session, row: Job) -> None:
        """The job's result file as it is now, kept with the row (its numbers also as
        `JobMetric` rows, which lists sort by)."""
        found = read_result(row.output_dir).values
        if found is None:
            return
        row.result = found
        db.execute(delete(JobMetric).where(JobMetric.job_id == row.id))
        for name, value in found.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                db.add(JobMetric(job_id=row.id, name=name, value=float(value)))

    @staticmethod
    def _end(row: Job, phase: str, reason: str, message: str, now: float) -> None:
        row.state = ENDED
        row.phase = phase
        row.reason = reason
        row.message = message
        row.finished_at = row.finished_at or now
        row.updated_at = now
        # The job ended here, not on its engine: what of it was live or waiting was
        # stopped (the planner's rule), and no longer waits for anything.
        row.replicas = replicas_json(
            r.model_copy(update={"state": r.state.after_stop, "message": ""})
            for r in replicas_of(row.replicas)
        )

    @staticmethod
    def _apply_view(row: Job, view: JobView) -> None:
        row.phase = view.phase.value
        row.reason = view.reason
        row.message = view.message
        row.restarts = view.restarts
        # The engine's count (the Kubernetes operator's) or the server's own (its queue's
        # preemptions of local jobs, whose engine job starts anew): never lower.
        row.preemptions = max(row.preemptions or 0, view.preemptions)
        row.disruptions = max(row.disruptions or 0, view.disruptions)
        row.started_at = view.started_at
        row.finished_at = view.finished_at
        row.replicas = replicas_json(view.replicas)
        row.updated_at = time.time()
        if view.done:
            row.state = ENDED

    # -- stop, delete, copy ----------------------------------------------------------------

    def stop(self, db: Session, row: Job, team: Team) -> None:
        now = time.time()
        before = _Before.of(row)
        served = self.storage(team, row.id, row.name).served_data
        if served is not None and self.stager.cancel(served):
            # Nothing will ask for it now; what it fetched stays in the team's cache.
            db.add(JobEvent(job_id=row.id, time=now, message="data staging stopped"))
        if row.state == QUEUED:
            self._retry_at.pop(row.id, None)
            self._end(row, JobPhase.FAILED.value, "Stopped", "stopped while queued", now)
        elif row.state == LIVE:
            backend = self.engine.jobs(tenant_of(team))
            try:
                self._apply_view(row, backend.stop(row.name))
            except JobNotFound:
                self._end(row, row.phase, row.reason or "", row.message or "", now)
        db.add(JobEvent(job_id=row.id, time=now, message="stop requested through the server"))
        self._changed(db, row)
        self._news(db, row, team, before)
        db.commit()
        self.on_change(row)
        self.poke.set()

    def scale(self, db: Session, row: Job, team: Team, workers: int, who: str) -> None:
        """Run a running job with `workers` workers from now on (`tfkube scale`): the
        engine's rules (`tfkube.planner.scale_problems`), then, when it grows, the team's
        quota and the machine's free room (`admission.resize_refusal`); the engine resizes
        it; the stored spec and request follow. Raises SpecError naming the field."""
        job = load_job_text(row.spec, "the job's spec")
        problems = scale_problems(job, JobPhase(row.phase), workers)
        if row.state == QUEUED:
            problems = [
                FieldError(
                    "status",
                    "the job is queued, not running yet: stop it and submit it again with "
                    "the size you want",
                )
            ]
        if problems:
            raise SpecError(problems, "scale")
        scaled = scaled_job(job, workers)
        need = admission.job_request(scaled)
        held = db.scalars(select(Job).where(Job.state == LIVE)).all()

        def amount(r: Job) -> admission.Amount:
            return admission.Amount(
                float(r.request.get("cpu", 0)),
                int(r.request.get("memory", 0)),
                int(r.request.get("gpu", 0)),
            )

        extra = need - amount(row)
        team_holds = sum((amount(r) for r in held if r.team_id == team.id), admission.Amount())
        capacity = self.engine.capacity()
        free = None
        if capacity is not None:
            machine = admission.machine_capacity(capacity.cpus, capacity.memory, capacity.gpus)
            free = machine - sum((amount(r) for r in held), admission.Amount())
        quota = admission.Quota(**team.quota)
        if (why := admission.resize_refusal(quota, team_holds, extra, free)) is not None:
            raise SpecError([FieldError("workers", why)], "scale")
        was = _Before.of(row)
        before = job.spec.replicas.count(Role.WORKER)
        view = self.engine.jobs(tenant_of(team)).scale(row.name, workers)
        row.spec = dump_job(scaled)
        row.request = {"cpu": need.cpu, "memory": need.memory, "gpu": need.gpu}
        self._apply_view(row, view)
        db.add(
            JobEvent(
                job_id=row.id,
                time=time.time(),
                message=f"{who} scaled the job from {before} to {workers} workers "
                "through the server",
            )
        )
        self._changed(db, row)
        self._news(db, row, team, was)
        db.commit()
        self.on_change(row)
        self.poke.set()

    def delete(self, db: Session, row: Job, team: Team) -> None:
        """Stop the job, remove it from the engine, its outputs, and its record."""
        if row.state != QUEUED:
            backend = self.engine.jobs(tenant_of(team))
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
        storage = self.storage(team, row.id, row.name)
        if storage.kept:  # what the server can reach (in a cluster: the claim it mounts)
            for folder in (row.output_dir, storage.data_path):
                if folder:
                    shutil.rmtree(folder, ignore_errors=True)
        if storage.served_data is not None:
            self.stager.cancel(storage.served_data)
            forget_served(storage.served_data)
        release_fetched(db, self.blobs, row)
        if self.on_deleted is not None:
            self.on_deleted(row, team)
        db.execute(delete(JobEvent).where(JobEvent.job_id == row.id))
        db.execute(delete(JobMetric).where(JobMetric.job_id == row.id))
        db.delete(row)
        db.commit()
        self.poke.set()

    # -- the sync loop -----------------------------------------------------------------------

    def tick(self) -> None:
        with self.sessions() as db:
            try:
                self._sync(db)
                capacity = self.engine.capacity()
                if capacity is not None:
                    self._admit(db, capacity)
                else:
                    self._retry(db)
            except StaleDataError:
                # A request deleted a job this pass was writing: nothing is lost, the next
                # pass reads the rows again.
                db.rollback()
                log.info("a job was deleted during the sync; syncing again")

    def _retry(self, db: Session) -> None:
        """An engine that queues itself: submit again the jobs it deferred for a while."""
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
            backend = self.engine.jobs(tenant_of(team))
            try:
                views = {v.name: v for v in backend.list()}
            except Exception:
                log.exception("reading the jobs of team %s failed", team.name)
                continue
            for row in rows:
                view = views.get(row.name)
                before = _Before.of(row)
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
                    self._show_staging(row, team)
                    self._copy_events(db, row, backend)
                    if not self.engine.features.step_rates:
                        self._watch_steps(db, row, team, view, now)
                    if self.engine.features.polled_usage:
                        self._poll_usage(row, team, view, backend)
                self._changed(db, row)
                if self._news(db, row, team, before):
                    self.on_change(row)
        db.commit()

    def _news(self, db: Session, row: Job, team: Team, before: _Before) -> bool:
        """What a change the server recorded of a job tells the others, in its
        transaction (the caller commits), wherever it was recorded (the sync loop, a
        start whose engine already saw the job end, a stop, a resize): the archiver,
        once it ended (`on_ended`); its owner's notifications (`on_event`). -> whether
        anything of it changed (news for `on_change`)."""
        if (
            self.on_ended is not None
            and JobPhase(row.phase).terminal
            and row.id not in self._ended_seen
        ):
            self._ended_seen.add(row.id)
            self.on_ended(row, team)
        if _counts(row) == before.counts:
            return False
        if self.on_event is not None:
            for event in job_events(
                before.phase, before.stalled, row.phase, row.reason, _stalled(row)
            ):
                self.on_event(db, row, event)
        return True

    def _show_staging(self, row: Job, team: Team) -> None:
        """While the server stages a pending job's source for its replicas (`data_from`),
        the job's status line is the staging's progress, as the local supervisor's is:
        "StagingData: staging data: 3.1 of 8.0 MiB, 2.1 MiB/s, 2 s left"."""
        if row.phase != JobPhase.PENDING.value:
            return
        served = self.storage(team, row.id, row.name).served_data
        state = read_state(served) if served is not None else None
        if state is not None and state.get("phase") == STAGING:
            row.reason = "StagingData"
            row.message = str(state.get("text") or "staging data")

    def _watch_steps(self, db: Session, row: Job, team: Team, view: JobView, now: float) -> None:
        """Step rates and stragglers from the replicas' kept logs, for an engine that does
        not watch them (`server/outputs/steps.py`); an event when one becomes or stops
        being a straggler, as the local supervisor posts."""
        if view.phase.terminal or not row.output_dir:
            self.steps.forget(row.id)
            self._step_view.pop(row.id, None)
            return
        if not self.storage(team, row.id, row.name).kept:
            return
        window = float(load_job_text(row.spec, "job").spec.run_policy.straggler_seconds)
        judged = self.steps.look(row.id, row.output_dir, view.replicas, window, now)
        if judged is None:
            if row.id in self._step_view:  # between looks: the last judgement stands
                row.replicas = replicas_json(self._judged(view.replicas, self._step_view[row.id]))
            return
        self._step_view[row.id] = judged
        row.replicas = replicas_json(self._judged(view.replicas, judged))
        for key, message in judged.events:
            db.add(JobEvent(job_id=row.id, time=now, replica=key, message=message))

    def _poll_usage(self, row: Job, team: Team, view: JobView, backend: Any) -> None:
        """Keep the replicas' newest samples with the job's logs (`UsagePoller`), where the
        server keeps its folder (its claim or what the replicas ship)."""
        if view.phase is not JobPhase.RUNNING or not row.output_dir:
            self.usage.forget(row.id)
            return
        if not self.storage(team, row.id, row.name).kept:
            return
        name = row.name
        try:
            self.usage.poll(row.id, row.output_dir, lambda: backend.usage(name))
        except Exception:
            log.warning("keeping the usage of job %s failed", row.id, exc_info=True)

    @staticmethod
    def _judged(replicas: Sequence[Replica], judged: StepJudgement) -> list[Replica]:
        return [
            r.model_copy(
                update={"step_rate": judged.rates.get(r.key), "straggler": r.key in judged.slow}
            )
            for r in replicas
        ]

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

    def _admit(self, db: Session, capacity: Capacity) -> None:
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

        def priority(r: Job) -> int:
            team = teams.get(r.team_id)
            return team.priority or 0 if team is not None else 0

        machine = admission.machine_capacity(capacity.cpus, capacity.memory, capacity.gpus)
        running = [
            admission.Running(r.team_id, amount(r), r.id, priority(r), r.started_at or 0.0)
            for r in live
        ]
        waiting = [admission.Waiting(r.id, r.team_id, amount(r), priority(r)) for r in queued]
        decision = admission.admit(
            machine, running, waiting, {t.id: admission.Quota(**t.quota) for t in teams.values()}
        )
        by_id = {r.id: r for r in queued}
        for job_id, message in decision.messages.items():
            row = by_id[job_id]
            if row.message != message:
                row.message = message
                _with_message(row, message)
                row.updated_at = time.time()
        db.commit()
        for job_id in decision.start:
            row = by_id[job_id]
            self.start(db, row, teams[row.team_id])
        if decision.start or decision.head is None:
            return
        head = next(w for w in waiting if w.job == decision.head)
        live_by_id = {r.id: r for r in live}
        for job_id in admission.preemptions(machine, running, head):
            victim = live_by_id[job_id]
            self.preempt(db, victim, teams[victim.team_id], by_id[head.job], teams[head.team])
        self.poke.set()  # the room it made: the waiting job starts on the next pass

    def preempt(self, db: Session, row: Job, team: Team, by: Job, by_team: Team) -> None:
        """Stop a running job for one of higher priority and queue it again: it starts
        anew later, from its checkpoints (same output folder). Counted as a preemption,
        never as a restart or a failure."""
        backend = self.engine.jobs(tenant_of(team))
        now = time.time()
        why = (
            f"preempted by job {by.name} of team {by_team.name} (priority "
            f"{by_team.priority or 0} over {team.priority or 0}); it waits to resume from "
            "its last checkpoint"
        )
        try:
            self._copy_events(db, row, backend)
            backend.delete(row.name)  # stops it (its grace period), then forgets it
        except JobNotFound:
            pass
        row.state = QUEUED
        row.phase = JobPhase.PENDING.value
        row.reason = "Preempted"
        row.message = why
        row.preemptions = (row.preemptions or 0) + 1
        row.replicas = replicas_json(
            r.model_copy(update={"state": ReplicaState.PENDING, "message": "preempted"})
            for r in replicas_of(row.replicas)
        )
        row.updated_at = now
        db.add(JobEvent(job_id=row.id, time=now, message=why))
        db.commit()
        self.on_change(row)

    def run(self) -> None:
        while not self._stop.is_set():
            started = time.thread_time()
            try:
                self.tick()
            except Exception:
                log.exception("job sync failed")
            self.poke.wait(sync_wait(self.settings.sync_seconds, time.thread_time() - started))
            self.poke.clear()

    def start_loop(self) -> None:
        self._thread = threading.Thread(target=self.run, name="tfkube-job-sync", daemon=True)
        self._thread.start()

    def stop_loop(self) -> None:
        self._stop.set()
        self.poke.set()
        if self._thread is not None:
            self._thread.join(30)
        self.stager.close()


SYNC_SHARE = 1 / 3
"""The most of the server's time (one core's CPU) the sync loop's passes take."""


def sync_wait(every: float, took: float, share: float = SYNC_SHARE) -> float:
    """How long the sync loop waits after a pass that took `took` seconds of CPU: `every`
    (the settings' `sync_seconds`), or longer after a costly pass, so that passes take at
    most `share` of the time. A 1,000-pod job costs the server about a second of CPU per
    pass (its pods listed and decoded); back to back, passes left the pages' requests
    waiting on the same core (benchmarks/dashboard). A poke (a submission, a stop) still
    starts one at once."""
    return max(every, took * (1 - share) / share)


def endpoint_problem(endpoint: str, policy: FetchPolicy) -> str | None:
    """Why the server will not connect to a data source's endpoint for a member, or None:
    as for code it fetches (`core.fetch`), every address the host resolves to must be a
    public one, or in a range a site admin allowed (`--allow-fetch-from`); a member must
    not reach the server's own loopback services or private network through it."""
    url = urlsplit(endpoint)
    host = url.hostname or ""
    port = url.port or (443 if url.scheme == "https" else 80)
    addresses = policy.resolver(host, port)
    if not addresses:
        return f"{host!r} does not resolve to an address; check the endpoint"
    for address in addresses:
        if refused(address, policy.allowed):
            return (
                f"the server does not connect to {host} ({address}) for a team: a loopback, "
                "private or link-local address; a site admin can allow its range with "
                "`tfkube server --allow-fetch-from`"
            )
    return None
