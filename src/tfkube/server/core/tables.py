"""The server's database: SQLAlchemy 2 tables. The schema is created and changed only by
the Alembic migrations in `migrations/` (applied at start-up); these classes must match
them (a test compares the two).

Times are seconds since the epoch (floats): the same in SQLite and PostgreSQL, and what
the rest of tfkube uses.
"""

from __future__ import annotations

import secrets
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


def new_public_id() -> str:
    """A random public id (64 bits, hex): what URLs name a row by, where the integer key
    would tell how many rows there are and let anyone walk them."""
    return secrets.token_hex(8)


class SiteState(Base):
    """Key/value settings of the site: the secret key, the one-time set-up token hash."""

    __tablename__ = "site_state"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class User(Base):
    __tablename__ = "users"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    """The login name: lower-case letters, digits, '-', '_', '.'."""
    password_hash: Mapped[str] = mapped_column(String(255))
    site_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float] = mapped_column(Float)


class Team(Base):
    __tablename__ = "teams"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(40), unique=True)
    """A DNS label: it names the team's folder (local) or namespace (Kubernetes)."""
    namespace: Mapped[str] = mapped_column(String(63))
    quota: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    """cpu (cores), memory (bytes), gpu, jobs: each optional."""
    allowances: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    """What members' jobs may use on Kubernetes beyond their own (`tfkube.engines.
    Allowances`: Secrets, ConfigMaps, claims, service accounts, TensorBoard images) and
    the namespace's Pod Security level; {} is none of it, and `restricted`."""
    priority: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Local engine: the queue offers a higher priority's jobs first and stops jobs of a
    lower one to make room for them (a site admin's; 0 by default). Kubernetes: the
    PriorityClass of the team's job pods (`tfkube.kube.names.team_priority_class`)."""
    created_at: Mapped[float] = mapped_column(Float)


class Membership(Base):
    __tablename__ = "memberships"
    user_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True
    )
    team_id: Mapped[int] = mapped_column(
        ForeignKey("teams.id", ondelete="CASCADE"), primary_key=True
    )
    role: Mapped[str] = mapped_column(String(16))


class LoginSession(Base):
    __tablename__ = "login_sessions"
    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    """SHA-256 of the cookie's random value: the value itself is never stored."""
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float)


class ApiToken(Base):
    __tablename__ = "api_tokens"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    public_id: Mapped[str] = mapped_column(
        String(32), unique=True, index=True, default=new_public_id
    )
    """What URLs and answers call it (random: ids cannot be enumerated)."""
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    """The first characters, to recognise a token in a list (not enough to use it)."""
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    last_used_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    team_id: Mapped[int | None] = mapped_column(
        ForeignKey("teams.id", name="fk_api_tokens_team", ondelete="CASCADE"), nullable=True
    )
    """The one team the token acts in, with the user's role there and no site-wide power
    (a notebook's, for its `tfkube.Client()`); None: wherever the user may act."""


class Blob(Base):
    """Stored bytes, once per sha256 (files under `<data-dir>/blobs/`)."""

    __tablename__ = "blobs"
    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    size: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[float] = mapped_column(Float)


class Artifact(Base):
    """One version of a named code or data artifact of a team."""

    __tablename__ = "artifacts"
    __table_args__ = (UniqueConstraint("team_id", "name", "version"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    public_id: Mapped[str] = mapped_column(
        String(32), unique=True, index=True, default=new_public_id
    )
    """What URLs and answers call it (random: ids cannot be enumerated)."""
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    version: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(8))
    """code | data"""
    sha256: Mapped[str] = mapped_column(ForeignKey("blobs.sha256"))
    size: Mapped[int] = mapped_column(Integer)
    files: Mapped[int] = mapped_column(Integer)
    created_by: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), nullable=True
    )
    created_at: Mapped[float] = mapped_column(Float)
    unpacked_size: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    """Bytes of its files once unpacked (what a job sees); `size` is the archive's. None
    for uploads made before it was recorded."""


class Job(Base):
    """A job as the server knows it: the request, and its last known status. Kept after
    the engine forgot the job (TTL), until a user deletes it."""

    __tablename__ = "jobs"
    __table_args__ = (
        Index("ix_jobs_team_created", "team_id", "created_at"),
        Index("ix_jobs_state", "state"),
    )
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    """Public id (random): URLs use it, so names can be reused."""
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(40))
    description: Mapped[str] = mapped_column(Text, default="", server_default="")
    """Free text from the person who submitted it (shown escaped, never interpreted)."""
    created_by: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), nullable=True
    )
    created_at: Mapped[float] = mapped_column(Float)
    spec: Mapped[str] = mapped_column(Text)
    """The TFJob as it runs (YAML, code pinned to the artifact)."""
    artifact_id: Mapped[int | None] = mapped_column(
        ForeignKey("artifacts.id", ondelete="SET NULL"), nullable=True
    )
    code_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    data_artifact_id: Mapped[int | None] = mapped_column(
        ForeignKey("artifacts.id", ondelete="SET NULL"), nullable=True
    )
    """The data set (a `data` artifact) unpacked into the job's data folder, if any."""
    data_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    state: Mapped[str] = mapped_column(String(16))
    """queued (waiting for resources) | live (on the engine) | ended (final status kept)."""
    request: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    """cpu, memory, gpu its replicas request together (the queue's input)."""
    phase: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(String(64), nullable=True)
    message: Mapped[str | None] = mapped_column(Text, nullable=True)
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    preemptions: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Times the queue stopped it for a job of higher priority (never counted as restarts
    or failures: it resumes from its checkpoint)."""
    disruptions: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Times it restarted from its checkpoint because a PS was evicted (the engine's count,
    `JobView.disruptions`; not restarts)."""
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    replicas: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    """The replicas as last observed (role, index, state, restarts, exit code, ...)."""
    output_dir: Mapped[str | None] = mapped_column(Text, nullable=True)
    """Where the server reads the job's logs, scalars and outputs."""
    updated_at: Mapped[float] = mapped_column(Float)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    """The final metrics the job reported (`tfkube.contract.RESULT_FILE`), kept when it
    ended; None before, or when it reported none."""
    outputs_at: Mapped[str] = mapped_column(String(16), default="local", server_default="local")
    """Where its logs and outputs live now (`outputs/archive.py`): local, local+archive,
    archive (read back from the store), none (removed by retention)."""
    archive_key: Mapped[str | None] = mapped_column(Text, nullable=True)
    """Its archive's key in the store (`--store s3://`), once archived."""
    archived_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    """When it was archived: retention's ages count from it."""


class JobMetric(Base):
    """One number of a job's result (`Job.result`), as a row: what the jobs list sorts
    and picks its columns by, the same way on SQLite and PostgreSQL."""

    __tablename__ = "job_metrics"
    __table_args__ = (Index("ix_job_metrics_name_value", "name", "value"),)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[float] = mapped_column(Float)


class NotificationPrefs(Base):
    """A user's choices of what to be told about their own jobs, and where."""

    __tablename__ = "notification_prefs"
    user_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True
    )
    events: Mapped[list[str]] = mapped_column(JSON, default=list)
    """Of succeeded, failed, stalled."""
    webhook_url: Mapped[str | None] = mapped_column(String(2048), nullable=True)
    webhook_format: Mapped[str] = mapped_column(String(16), default="json")
    """json (tfkube's own body) or slack (Slack's incoming-webhook `{"text": ...}`)."""
    email: Mapped[str | None] = mapped_column(String(254), nullable=True)
    secret_generation: Mapped[int] = mapped_column(Integer, default=0)
    """The user's signing secret is derived from the server's key and this number
    (`notifications.user_secret`): a new secret is a new number; none is stored."""
    updated_at: Mapped[float] = mapped_column(Float)


class Notification(Base):
    """One message to one channel of a user about one job's event: its delivery, retried
    with backoff until sent or given up."""

    __tablename__ = "notifications"
    __table_args__ = (
        UniqueConstraint("user_id", "job_id", "event", "channel", name="uq_notification_once"),
        Index("ix_notifications_due", "state", "next_at"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    job_id: Mapped[str] = mapped_column(String(32))
    """No foreign key: what was told stays listed after the job is deleted."""
    event: Mapped[str] = mapped_column(String(16))
    channel: Mapped[str] = mapped_column(String(16))
    """webhook or email."""
    state: Mapped[str] = mapped_column(String(16), default="pending")
    """pending, sent or failed (given up)."""
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_at: Mapped[float] = mapped_column(Float)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    body: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    """What the message says (the job's facts when the event happened)."""
    created_at: Mapped[float] = mapped_column(Float)
    sent_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class JobEvent(Base):
    __tablename__ = "job_events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    time: Mapped[float] = mapped_column(Float)
    replica: Mapped[str | None] = mapped_column(String(64), nullable=True)
    message: Mapped[str] = mapped_column(Text)


class ModelServer(Base):
    """A model server of a team: serves a job's exported SavedModel (TensorFlow Serving's
    REST API), reached through the server's proxy at `/proxy/model/<id>/v1/models/<name>`.
    `state` is what the team asked for; whether it answers is observed, not stored."""

    __tablename__ = "model_servers"
    __table_args__ = (Index("ix_model_servers_team", "team_id"),)
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    """Public id (random): the proxy URL uses it."""
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"))
    job_id: Mapped[str | None] = mapped_column(
        ForeignKey("jobs.id", ondelete="SET NULL"), nullable=True
    )
    job_name: Mapped[str] = mapped_column(String(40))
    name: Mapped[str] = mapped_column(String(40))
    """The model's name in `/v1/models/<name>` (a DNS label: it names cluster objects)."""
    model_base_path: Mapped[str] = mapped_column(Text)
    """The job's export folder as the server sees it (`<output>/export`)."""
    version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    """The version asked for; None: the latest, and newer exports as they appear."""
    resources: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    """cpu, memory (Kubernetes quantities): the Deployment's requests and limits."""
    runtime: Mapped[str | None] = mapped_column(String(32), nullable=True)
    """Which model server runs (tensorflow-serving | tfkube), as its engine chose."""
    autoscale: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    """`tfkube.spec.Autoscale` as JSON (camelCase); None: one replica."""
    state: Mapped[str] = mapped_column(String(16))
    """running (wanted up: restarted after a crash or a server restart) | stopped."""
    handle: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True, default=dict)
    """What its engine needs to find it again (`tfkube.engines.Handle`); opaque here."""
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    requests: Mapped[int] = mapped_column(Integer, default=0)
    """Requests answered through the proxy (all statuses)."""
    errors: Mapped[int] = mapped_column(Integer, default=0)
    """Of those, answered with an error status (>= 400)."""
    last_request_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_by: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), nullable=True
    )
    created_at: Mapped[float] = mapped_column(Float)
    stopped_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class Notebook(Base):
    """A user's JupyterLab server in one of their teams; opened through the server's
    proxy at `/proxy/notebook/<id>/lab`, for its owner only."""

    __tablename__ = "notebooks"
    __table_args__ = (UniqueConstraint("user_id", "team_id"),)
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"))
    state: Mapped[str] = mapped_column(String(16))
    """running | stopped (stopped when idle; opening it starts it again)."""
    handle: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True, default=dict)
    """What its engine needs to find it again (`tfkube.engines.Handle`); opaque here."""
    token_id: Mapped[int | None] = mapped_column(
        ForeignKey("api_tokens.id", ondelete="SET NULL"), nullable=True
    )
    """The API token the notebook's client signs in with (revoked when it stops)."""
    created_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    stopped_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    message: Mapped[str | None] = mapped_column(Text, nullable=True)


class TeamSecret(Base):
    """A team's named secret (a data source's credentials): its value encrypted by the
    server (`team_secrets.SecretBox`, the key kept beside the database, not in it), given
    only to that team's jobs that name it, never in an answer."""

    __tablename__ = "team_secrets"
    __table_args__ = (UniqueConstraint("team_id", "name", name="uq_team_secret_name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(16))
    """What the value holds: `s3` (an access key id and a secret access key)."""
    value: Mapped[str] = mapped_column(Text)
    """The Fernet token of the value's JSON (never the value itself)."""
    created_by: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), nullable=True
    )
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
