"""The local engine's on-disk state: one folder per job under TFKUBE_HOME/jobs/<name>.

    job.yaml         the spec as it runs (defaults filled in, paths absolute): the one
                     file that says how many replicas there are
    state.json       job and replica status; written atomically by the supervisor only
                     (its replicas are made from job.yaml when the supervisor starts)
    events.jsonl     what happened and why, one JSON object per line
    logs/<r>.log     each replica's output, across restarts
    artifacts/       the code archive every replica fetches and verifies
    work/<r>/        each replica's unpacked copy of the code, and its launcher's
                     termination message (why the launcher itself failed); confined,
                     also its HOME, owned by the team's uid (0700)
    data/, output/   the default data and log/checkpoint folders (shared by replicas)
    stop             present once a stop was asked for (the supervisor polls it, so a
                     stop cannot be missed while the supervisor is still starting)
    data-source.json a data source's objects as listed at submit (no credentials); the
                     supervisor stages them into data/ before any replica starts
    data-credentials the store's credentials when the user gave some (0600), read and
                     removed by the supervisor as it starts

Any shell can read these; only the job's supervisor writes `state.json` once it runs.
A confined job's folder is root's alone (0700): its replicas never see it, only their
own `work/<r>` and the data and log folders (see `_sandbox.py`).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from tfkube import contract
from tfkube.planner import JobPhase, ReplicaState, ReplicaStatus
from tfkube.safefs import closing, open_last, pread_all
from tfkube.tfcluster import replica_key


def tfkube_home() -> Path:
    """Where local jobs live: $TFKUBE_HOME, else ~/.tfkube."""
    return contract.home_dir()


def tfkube_cache() -> Path:
    """What outlives jobs and may be rebuilt (the jobs' Python environments):
    $TFKUBE_CACHE, else $XDG_CACHE_HOME/tfkube, else ~/.cache/tfkube."""
    if configured := os.environ.get(contract.CACHE):
        return Path(configured)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "tfkube"


class ProcessRef(BaseModel):
    """A PID plus its start time, so a recycled PID is never mistaken for ours."""

    model_config = ConfigDict(frozen=True)
    pid: int
    create_time: float
    """When it started, on the wall clock (shown; and the check for a reference written
    before `since_boot`)."""
    since_boot: float | None = None
    """When it started, in seconds after the machine booted: the kernel's own count, which
    no clock change moves. The wall-clock start is the kernel's boot time in whole seconds
    plus this, and that boot time moves by a second when the clock is slewed or stepped, so
    two processes reading it can disagree about the same process (a live supervisor once
    read as dead that way)."""


class ReplicaRecord(BaseModel):
    role: str
    index: int
    port: int
    gpus: list[str] = []
    """GPU ids given to this replica (its CUDA_VISIBLE_DEVICES), once the supervisor has
    claimed them."""
    gpu_request: int = 0
    """How many GPUs it needs; until `gpus` holds that many, it waits (see `held`)."""
    held: str | None = None
    """Why it cannot start yet (its GPUs are in use by other jobs)."""
    state: ReplicaState = ReplicaState.PENDING
    exit_code: int | None = None
    restarts: int = 0
    next_start_at: float | None = None
    process: ProcessRef | None = None
    started_at: float | None = None
    ended_at: float | None = None
    message: str | None = None
    """Why it is in its state, when that is not obvious: its launcher's termination
    message after an exit, what made it stall."""
    progress_at: float | None = None
    """When it last showed progress (observed only with runPolicy.stallSeconds)."""
    stalled: bool = False
    step_rate: float | None = None
    """Its own steps per second over runPolicy.stragglerSeconds (`tfkube.planner.step_rate`)."""
    straggler: bool = False

    @property
    def key(self) -> str:
        return replica_key(self.role, self.index)

    def status(self) -> ReplicaStatus:
        """What the planner sees of it (the supervisor plans with it, `status` shows it)."""
        return ReplicaStatus(
            role=self.role,
            index=self.index,
            state=self.state,
            exit_code=self.exit_code,
            restarts=self.restarts,
            next_start_at=self.next_start_at,
            message=self.message,
            progress_at=self.progress_at,
            stalled=self.stalled,
            held=self.held,
        )


class TenantRecord(BaseModel):
    """Set when the job runs confined (a tfkube server's team, `TenantIsolation`): as
    whom its replicas run and what their sandbox never shows."""

    user: str
    uid: int
    gid: int
    hidden: list[str] = []
    """Folders never visible in the sandbox (the server's data dir)."""
    data_read_only: bool = True
    """The data folder held files at submit (a data set the server unpacked): it stays
    as it came, read-only; an empty one is the job's to fill (its replicas stage data
    there, as on a Kubernetes claim)."""
    passed_env: list[str] = []
    """Variables of the supervisor's (the server's) environment the replicas keep."""
    venv_cache: str | None = None
    """The team's own folder where launchers install a fetched code's requirements.txt
    (never the machine-wide cache, which other teams' jobs read)."""
    package_indexes: list[str] = []
    """The package indexes the prepare step may reach through its proxy (`_egress`; the
    server's `--package-index`, the first one uv's index); empty: PyPI."""
    fetch_allowed: list[str] = []
    """Ranges (`--allow-fetch-from`) a package index's addresses may lie in."""


class ShareRecord(BaseModel):
    """What one replica's folder shows (a sharded source; "" the whole job's otherwise)."""

    files: int = 0
    bytes: int = 0
    fetched_bytes: int = 0
    """Of its files' bytes, those its staging read from the store (not the cache)."""


class DataRecord(BaseModel):
    """A data source being staged (or staged) into the job's data folder."""

    source: str
    """`s3://bucket/prefix` or `hdfs://namenode:port/path` as the job gives it (no
    credentials in it)."""
    shard: str | None = None
    """The shard rule (`byWorker`): each replica its own folder below the data folder."""
    shares: dict[str, ShareRecord] = {}
    """Once staged: by replica key when sharded, else "" for the data folder."""
    objects: int
    total_bytes: int
    done_bytes: int = 0
    """In the data folder so far: reused from the cache or fetched."""
    fetched_bytes: int = 0
    """Read from the store (0 for a job whose data was all in the cache)."""
    fetched_objects: int = 0
    started_at: float | None = None
    finished_at: float | None = None

    @property
    def staging(self) -> bool:
        return self.finished_at is None


class JobRecord(BaseModel):
    name: str
    uid: str
    phase: JobPhase = JobPhase.PENDING
    reason: str | None = None
    message: str | None = None
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    restarts: int = 0
    supervisor: ProcessRef | None = None
    replicas: list[ReplicaRecord] = []
    """Empty until the supervisor starts and makes them from job.yaml (their ports and
    GPU requests), so the count of replicas is written once (in job.yaml) and nothing
    has to agree with it."""
    data_dir: str
    log_dir: str
    artifact: str
    """The code archive replicas fetch: a file on this machine, or an http(s) URL (then
    with the bearer token in `code-token`)."""
    artifact_sha256: str
    venv: str | None = None
    """The environment made at submit from the code's requirements.txt, if it has one."""
    tenant: TenantRecord | None = None
    """Confined: the team whose identity its replicas take (None: plain processes)."""
    data: DataRecord | None = None
    """The job's data source (`spec.storage.data.source`), staged before any replica."""

    def replica(self, key: str) -> ReplicaRecord:
        for r in self.replicas:
            if r.key == key:
                return r
        raise KeyError(key)


class JobDir:
    """Paths of one job's folder."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @classmethod
    def named(cls, name: str) -> JobDir:
        return cls(tfkube_home() / "jobs" / name)

    @property
    def spec(self) -> Path:
        return self.root / "job.yaml"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def events(self) -> Path:
        return self.root / "events.jsonl"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def code_token(self) -> Path:
        """The bearer token replicas fetch the code with (the server's claim), 0600."""
        return self.root / "code-token"

    def write_code_token(self, token: str) -> None:
        fd = os.open(self.code_token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token)

    def read_code_token(self) -> str | None:
        try:
            return self.code_token.read_text().strip() or None
        except FileNotFoundError:
            return None

    @property
    def data_source(self) -> Path:
        return self.root / "data-source.json"

    @property
    def data_credentials(self) -> Path:
        return self.root / "data-credentials"

    def write_data_credentials(self, credentials: dict[str, str]) -> None:
        fd = os.open(self.data_credentials, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(credentials, f)

    def take_data_credentials(self) -> dict[str, str] | None:
        """The credentials, removed from the disk as they are read (None: none given)."""
        try:
            text = self.data_credentials.read_text()
        except FileNotFoundError:
            return None
        self.data_credentials.unlink(missing_ok=True)
        loaded = json.loads(text)
        return {str(k): str(v) for k, v in loaded.items()}

    @property
    def supervisor_log(self) -> Path:
        return self.root / "supervisor.log"

    @property
    def stop_requested(self) -> Path:
        return self.root / "stop"

    @property
    def scale_requested(self) -> Path:
        """`{"workers": N}`, written whole by `tfkube scale`; the supervisor reads it,
        removes it and resizes the job (`Supervisor._resize`)."""
        return self.root / "scale"

    def log(self, key: str) -> Path:
        return self.logs / f"{key}.log"

    def termination_log(self, key: str) -> Path:
        return self.work / key / "termination-log"

    def exists(self) -> bool:
        return self.state.exists()

    def read(self) -> JobRecord:
        return JobRecord.model_validate_json(self.state.read_text())

    def write(self, record: JobRecord) -> None:
        tmp = self.state.with_name(f".state.{os.getpid()}.tmp")
        tmp.write_text(record.model_dump_json(indent=1))
        tmp.replace(self.state)

    def event(self, message: str, replica: str | None = None, **extra: object) -> None:
        line = {"time": time.time(), "replica": replica, "message": message, **extra}
        with self.events.open("a") as f:
            f.write(json.dumps(line) + "\n")

    def read_events(self) -> list[dict[str, object]]:
        if not self.events.exists():
            return []
        return [json.loads(line) for line in self.events.read_text().splitlines() if line]


LAUNCHER_PREFIX = "[tfkube-launcher]"


def last_line(path: Path, limit: int = 4096) -> str:
    """The last non-empty line the replica itself wrote (the launcher's own lines are
    skipped unless there is nothing else), read from the file's tail only."""
    try:
        with closing(open_last(path)) as fd:  # never a link the replica made
            size = os.fstat(fd).st_size
            tail = pread_all(fd, max(0, size - limit), limit).decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    own = [line for line in lines if not line.startswith(LAUNCHER_PREFIX)]
    return (own or lines or [""])[-1]
