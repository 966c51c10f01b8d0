"""The server's JSON shapes, shared by the server (response models and error bodies) and
the client (which parses them), so the two cannot drift. Plain pydantic models, no
behaviour. A job's replicas are `tfkube.planner.Replica` itself: the domain's one record
is the wire's."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter

from tfkube.planner import Replica


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True)


class FieldProblem(_Wire):
    field: str
    """Dotted path into the request (e.g. `spec.replicas.worker.replicas`, or `workers`)."""
    message: str


class ErrorBody(_Wire):
    """Every error answer: `detail` for people; `errors` per field for a 422. The server's
    exception handlers write it, the client reads it (`tfkube.client.ServerError`)."""

    detail: str
    errors: list[FieldProblem] = []

    @classmethod
    def of(cls, detail: str, errors: Iterable[tuple[str, str]] = ()) -> ErrorBody:
        return cls(detail=detail, errors=[FieldProblem(field=f, message=m) for f, m in errors])


_REPLICAS: TypeAdapter[list[Replica]] = TypeAdapter(list[Replica])


def replicas_json(replicas: Iterable[Replica]) -> list[dict[str, Any]]:
    """Replicas as JSON data: what the server's database keeps and its API answers."""
    data: list[dict[str, Any]] = _REPLICAS.dump_python(list(replicas), mode="json")
    return data


def replicas_of(data: Any) -> list[Replica]:
    """`replicas_json`'s data (a database row's) -> the replicas."""
    return _REPLICAS.validate_python(data)


class UserOut(_Wire):
    id: int
    name: str
    site_admin: bool
    disabled: bool = False
    created_at: float
    teams: dict[str, str] = {}
    """team name -> role."""


class TeamOut(_Wire):
    id: int
    name: str
    namespace: str
    quota: dict[str, Any] = {}
    priority: int = 0
    """Local engine: a higher priority's jobs are queued first and may preempt lower ones.
    Kubernetes: the PriorityClass `tfkube-priority-<n>` of the team's job pods."""
    created_at: float
    role: str | None = None
    """The caller's role in the team (None for a site admin who is not a member)."""


class MemberOut(_Wire):
    user: str
    role: str


class SecretOut(_Wire):
    """A team secret as anyone is told of it: its name, kind and times, never its value."""

    name: str
    kind: str
    created_at: float
    updated_at: float


class TokenOut(_Wire):
    id: str
    """Random: ids cannot be enumerated."""
    name: str
    prefix: str
    created_at: float
    expires_at: float | None = None
    revoked_at: float | None = None
    last_used_at: float | None = None
    team: str | None = None
    """The one team it acts in (a notebook's token: the user's role there, nothing
    site-wide, nothing of the account); None: everything its user may do."""


class NewToken(TokenOut):
    token: str
    """The token itself: shown this once, stored only as a hash."""


class ArtifactOut(_Wire):
    id: str
    """Random: ids cannot be enumerated (`GET /api/v1/artifacts/{id}`)."""
    team: str
    name: str
    version: int
    kind: str
    sha256: str
    size: int
    files: int
    created_by: str | None = None
    created_at: float
    in_use: bool = False
    """A job that is not finished runs this version."""
    unpacked_size: int | None = None
    """Bytes of its files once unpacked (what a job gets); `size` is the stored archive's
    (compressed). None for uploads older than this field."""


class JobOut(_Wire):
    id: str
    team: str
    name: str
    description: str = ""
    owner: str | None = None
    phase: str
    reason: str | None = None
    message: str | None = None
    restarts: int = 0
    preemptions: int = 0
    """Times it was stopped for a job of higher priority and queued again (not restarts)."""
    disruptions: int = 0
    """Times it restarted from its checkpoint because a PS was evicted (a node drained):
    not restarts (Kubernetes)."""
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    code: str | None = None
    """`NAME:VERSION` of the code artifact, or its URL."""
    code_sha256: str | None = None
    data: str | None = None
    """`NAME:VERSION` of the data set unpacked into the job's data folder, if any."""
    on_engine: bool = True
    """False once the engine forgot the job (TTL): status, logs and outputs stay here."""
    queued: bool = False
    counts: dict[str, int] = {}
    """Replicas per state, e.g. {"Running": 3}."""
    replicas: list[Replica] | None = None
    """Every replica (detail only; lists leave it out): the planner's `Replica`, the one
    record of a replica in every layer (the server keeps these in its database)."""
    spec: str | None = None
    """The TFJob YAML as it runs (detail only)."""
    exports: list[int] | None = None
    """The model versions the job exported to `$TFKUBE_EXPORT_DIR/<version>`, oldest
    first (detail only)."""
    result: dict[str, float | int] | None = None
    """The final metrics the job reported in `$TFKUBE_LOG_DIR/result.json`
    (`tfkube.contract.RESULT_FILE`), e.g. `{"test_accuracy": 0.9712}`: kept when the job
    ends; while it runs, a job's detail reads the file as it is now. None: none reported."""
    outputs_at: str = "local"
    """Where its logs and outputs live now: `local` (its output folder), `local+archive`
    (also archived in the server's store, `--store s3://`), `archive` (the local copy was
    removed by `--keep-local`: they are read back from the archive), `none` (both removed
    by retention)."""
    result_problem: str | None = None
    """Detail only: why a result file that is there was not used (too big, not an object
    of names to numbers, a link...)."""


class JobList(_Wire):
    items: list[JobOut]
    total: int
    phases: dict[str, int] = {}
    """Jobs per phase over the whole filter (for counts above a list)."""
    result_keys: list[str] = []
    """The result names the filter's jobs report most (at most 6, the most common first):
    the columns a list shows and may be sorted by (`sort=result.<name>`)."""


class EventOut(_Wire):
    id: int = 0
    """Increasing; SSE streams use it as the event id."""
    time: float
    replica: str | None = None
    message: str


class LogFile(_Wire):
    replica: str
    attempt: int
    size: int
    modified: float


class OutputFile(_Wire):
    path: str
    size: int
    modified: float
    is_dir: bool = False


class CheckpointOut(_Wire):
    """A job's newest checkpoint (the trained model)."""

    prefix: str
    """Its name, e.g. `model.ckpt-1001`."""
    folder: str
    """Its folder relative to the job's outputs ('' for the top)."""
    files: list[str]
    """Its files, relative to the outputs."""


class ScalarPoint(_Wire):
    step: int
    value: float
    wall_time: float


class ScalarSeries(_Wire):
    tag: str
    run: str
    """The folder below the job's output holding the event file ('.' for the top)."""
    points: list[ScalarPoint]


class Progress(_Wire):
    step: int | None = None
    total: int | None = None
    fraction: float | None = None
    steps_per_second: float | None = None
    eta_seconds: float | None = None


class ScalarsOut(_Wire):
    series: list[ScalarSeries]
    progress: Progress


class UsageSeries(_Wire):
    replica: str
    """`<role>-<index>`."""
    points: list[list[float]]
    """`[time, cpu cores, memory bytes]`, oldest first; cores are the CPU time used since
    the sample before over the time between them."""


class UsageOut(_Wire):
    available: bool
    """Whether the job's engine records what replicas use (the local engine does)."""
    reason: str = ""
    """Why not, when not available."""
    replicas: list[UsageSeries] = []


class LogHit(_Wire):
    """One line of a job's kept logs that holds the searched text."""

    replica: str
    attempt: int
    line: int
    """Its line number in that log, from 1."""
    offset: int
    """The byte offset where the line starts: `GET .../logs/{replica}?attempt=&offset=`
    reads the log from it."""
    text: str
    """The line (at most 500 characters of it, around the match)."""


class LogSearchOut(_Wire):
    """A page of hits across every replica's and every restart's log, in replica order
    (chief, PS, workers, evaluator; each replica's starts oldest first)."""

    hits: list[LogHit]
    next: str | None = None
    """Pass as `cursor` for the next page; None when every log was searched."""
    searched_files: int
    """Logs searched to their end so far (this page and the pages before it)."""
    total_files: int
    searched_bytes: int
    """Bytes read for this page (bounded per request)."""


class NotificationPrefsIn(_Wire):
    """`PUT /api/v1/users/me/notifications`: what to be told about one's own jobs, where."""

    events: list[str] = []
    """Of succeeded, failed (not when someone stopped it), stalled (a replica made no
    progress lately)."""
    webhook_url: str | None = None
    """POSTed to, signed (`X-Tfkube-Signature`); None: no webhook."""
    webhook_format: str = "json"
    """json (tfkube's body) or slack (Slack's incoming-webhook `{"text": ...}`)."""
    email: str | None = None
    """Sent through the server's SMTP server when it has one; None: no e-mail."""


class NotificationPrefsOut(NotificationPrefsIn):
    email_available: bool
    """Whether this server sends e-mail (`tfkube server --smtp-server`)."""
    secret_made: bool
    """Whether a signing secret was made (`POST .../notifications/secret`); webhooks are
    signed with the first one until then, so make one to check signatures."""


class NotificationSecretOut(_Wire):
    secret: str
    """The new signing secret, shown this once (the previous one stops signing)."""


class NotificationOut(_Wire):
    """One message about a job's event to one channel, and how its delivery went."""

    id: int
    job_id: str
    job: str
    """The job's name when it happened."""
    event: str
    channel: str
    """webhook or email."""
    state: str
    """pending (being tried, or waiting to be tried again), sent, failed (given up)."""
    attempts: int
    last_error: str | None = None
    created_at: float
    sent_at: float | None = None


class ResultRow(_Wire):
    """One result name across compared jobs."""

    name: str
    values: list[float | int | None]
    """One per job, in the order compared (None: that job does not report it)."""
    best: int | None = None
    """The index of the best value (None: fewer than two report it, or all the same)."""
    lower_is_better: bool = False
    """Judged from the name (loss, error, time, ...): otherwise higher is better."""


class DiffRow(_Wire):
    """One setting across compared jobs."""

    name: str
    """`worker --learning_rate` for an argument, a dotted path for the rest of the TFJob."""
    values: list[str | None]
    """One per job (None: that job does not set it)."""
    differs: bool


class CompareOut(_Wire):
    """2 to 10 jobs side by side (`GET /api/v1/compare?jobs=ID1,ID2,...`)."""

    jobs: list[JobOut]
    """In the order asked, each with its result (no replicas, no spec)."""
    results: list[ResultRow]
    arguments: list[DiffRow]
    """Each role's arguments, flag by flag (`--lr=0.1` and `--lr 0.1` are one setting)."""
    settings: list[DiffRow]
    """The rest of each TFJob as dotted paths (its name and the server's folders left out)."""
    scalars: list[ScalarsOut] | None = None
    """With `scalars=true`: each job's training curves, in the jobs' order."""


class SessionOut(_Wire):
    user: UserOut
    csrf_token: str
    """Send it as the X-CSRF-Token header on every state-changing request made with the
    session cookie."""


class ModelServerOut(_Wire):
    """A model server: TensorFlow Serving's REST API for a job's exported model."""

    id: str
    team: str
    name: str
    """The model's name in `/v1/models/<name>`."""
    job: str
    """The job whose exports it serves."""
    job_id: str | None = None
    version: int | None = None
    """The version asked for; None: the latest, and newer exports as they appear."""
    serving_version: int | None = None
    """The version it answers with now (None while loading)."""
    status: str
    """Starting | Ready | Failed | Stopped."""
    message: str = ""
    runtime: str | None = None
    """Which model server runs it: `tfkube` (tfkube's own) or `tensorflow-serving` (the
    stock image, Kubernetes only); None for one made before runtimes were recorded."""
    url: str
    """The REST base `.../v1/models/<name>`: GET it for the status, POST `<url>:predict`;
    send the team's API token (Authorization: Bearer) or the session cookie."""
    requests: int = 0
    """Requests answered through the server's proxy."""
    errors: int = 0
    """Of those, answered with an error status."""
    last_request_at: float | None = None
    restarts: int = 0
    resources: dict[str, Any] = {}
    autoscale: dict[str, Any] | None = None
    """`{minReplicas, maxReplicas, targetCPUUtilization, scaleDownStabilizationSeconds}`
    as asked (Kubernetes); None: one replica."""
    replicas: int | None = None
    """Its replicas ready now (Kubernetes; None where the engine does not count them)."""
    desired_replicas: int | None = None
    """The replicas it should have: its autoscaler's choice when autoscaled."""
    created_by: str | None = None
    created_at: float
    stopped_at: float | None = None


class NotebookOut(_Wire):
    """A user's JupyterLab server in one team."""

    id: str
    team: str
    user: str
    state: str
    """running | stopped (stopped when idle; opening `url` starts it again)."""
    url: str
    """JupyterLab, behind the server's login (its owner only)."""
    started_at: float | None = None
    stopped_at: float | None = None
    message: str | None = None
