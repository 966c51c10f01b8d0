"""The runtime contract between an engine and the launcher, in one place: the `TFKUBE_*`
variables, the launcher's exit codes (and 128+N for a signal, which the `tfkube` command
shares) and its termination message; and every other name tfkube shares across its parts:
the variables that configure tfkube itself, the folders it keeps in a job's output, the
defaults two engines must agree on (Kubernetes-only names are in `tfkube.kube.names`).

    writers: tfkube.spec.replica_environment (both engines), tfkube.render (pod specs),
             the local supervisor (tfkube.engines.local)
    reader:  tfkube.launcher, inside every replica
    judges:  tfkube.planner (which exits are retried), tfkube.render (podFailurePolicy)

Standard library only and importing nothing of tfkube (an import-linter contract keeps it
so): the launcher carries this file into stock TensorFlow images where tfkube is not
installed (`render/_launcher.py` zips it with the launcher).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Final

# -- Variables an engine sets for every replica (both engines set the same ones) ---------

JOB: Final = "TFKUBE_JOB"
"""The job's name."""
JOB_UID: Final = "TFKUBE_JOB_UID"
"""Local engine: the job's unique id (tells two jobs of one name apart)."""
ROLE: Final = "TFKUBE_ROLE"
"""chief, ps, worker or evaluator."""
INDEX: Final = "TFKUBE_INDEX"
"""The replica's index within its role (local engine)."""
K8S_INDEX: Final = "JOB_COMPLETION_INDEX"
"""Kubernetes: an Indexed Job's pods share one template, so the index comes from here."""
INDEX_OFFSET: Final = "TFKUBE_INDEX_OFFSET"
"""Kubernetes: the first replica index of a role's Indexed Job when the role is split into
several (`tfkube.tfcluster.shard_of`); the replica's index is JOB_COMPLETION_INDEX plus
this. Unset (0) in a role's first Job."""
CLUSTER: Final = "TFKUBE_CLUSTER"
"""JSON object role -> list of host:port (the TensorFlow cluster): the local engine."""
ADDRESS: Final = "TFKUBE_ADDRESS"
"""Kubernetes, instead of TFKUBE_CLUSTER: one rule for every address,
`<job>-{role}-{index}.<job>:<port>`, expanded with the counts below (listing 11,000
addresses made every pod 330 KB)."""
NUM_PS: Final = "TFKUBE_NUM_PS"
NUM_WORKERS: Final = "TFKUBE_NUM_WORKERS"
HAS_CHIEF: Final = "TFKUBE_HAS_CHIEF"
"""'1' when the job has a chief, else '0'."""
DATA_DIR: Final = "TFKUBE_DATA_DIR"
"""Training data, shared; a worker reads shard TFKUBE_SHARD_INDEX of TFKUBE_NUM_SHARDS."""
LOG_DIR: Final = "TFKUBE_LOG_DIR"
"""Logs, checkpoints, summaries: shared by every replica (restarts resume from here)."""
CODE_URL: Final = "TFKUBE_CODE_URL"
"""The code archive (.tar.gz) as a file:// or http(s):// URL; absent when the job has no
code (every role runs its own command, e.g. code baked into its image)."""
CODE_SHA256: Final = "TFKUBE_CODE_SHA256"
"""Optional: the archive's expected SHA-256; a mismatch is a permanent failure."""
CODE_TOKEN: Final = "TFKUBE_CODE_TOKEN"
"""Optional: a bearer token for fetching TFKUBE_CODE_URL (the tfkube server's job-scoped
claim); the launcher removes it from the entrypoint's environment."""
SHIP_URL: Final = "TFKUBE_SHIP_URL"
"""Optional: where the launcher sends what a tfkube server keeps of its replica, for a
server that cannot read the job's log folder (a cluster job without an outputs claim):
`<server>/api/v1/ship/<job id>`. See "Shipping" below."""
SHIP_TOKEN: Final = "TFKUBE_SHIP_TOKEN"
"""The bearer token for SHIP_URL (the server's job-scoped claim). The launcher removes both
from the entrypoint's environment."""
DATA_URL: Final = "TFKUBE_DATA_URL"
"""Optional: where the launcher fetches its replica's data into TFKUBE_DATA_DIR before the
entrypoint starts, for a server whose data folder the replica cannot see (a cluster job
with an uploaded data set or a data source): `<server>/api/v1/data/<job id>`. See "Data"
below."""
DATA_TOKEN: Final = "TFKUBE_DATA_TOKEN"
"""The bearer token for DATA_URL (the server's job-scoped claim). The launcher removes both
from the entrypoint's environment."""
ENTRYPOINT: Final = "TFKUBE_ENTRYPOINT"
"""The script inside the code to run (default DEFAULT_ENTRYPOINT)."""
DEFAULT_ENTRYPOINT: Final = "run.sh"
"""The script a code folder runs when the job names none (`spec.code.entrypoint`, the
forms' `entrypoint`, an upload's check, the launcher)."""
COMMAND: Final = "TFKUBE_COMMAND"
"""Optional JSON list: the role's own program and its arguments, run as given instead of
the entrypoint (no classic flags), followed by TFKUBE_ARGS; in the code folder when there
is code, else in the launcher's working directory."""
WORK_DIR: Final = "TFKUBE_WORK_DIR"
"""Where the launcher unpacks its copy of the code."""
GRACE_SECONDS: Final = "TFKUBE_GRACE_SECONDS"
"""How long the entrypoint gets between SIGTERM and SIGKILL."""
ARGS: Final = "TFKUBE_ARGS"
"""Optional JSON list of arguments appended after the classic flags."""
ENV_COMMANDS: Final = "TFKUBE_ENV_COMMANDS"
"""Optional JSON object name -> shell command, computed at start-up (images do not
expand `$(...)`)."""
PARENT_PID: Final = "TFKUBE_PARENT_PID"
"""Local engine: the supervisor's PID; the launcher ends its replica when it is gone."""
TERMINATION_LOG: Final = "TFKUBE_TERMINATION_LOG"
"""Where the launcher writes why it failed (its own failures only): /dev/termination-log
in a pod, so the reason shows in the pod's status; a file the supervisor reads locally."""
VENV: Final = "TFKUBE_VENV"
"""Local engine: a virtual environment made at submit from the code's requirements.txt;
the launcher puts its bin/ first on PATH."""
VENV_CACHE: Final = "TFKUBE_VENV_CACHE"
"""Kubernetes: a folder (a volume) where the launcher installs the code's
requirements.txt, one environment per requirements hash, shared by the pods that mount it."""
PREPARE_ONLY: Final = "TFKUBE_PREPARE_ONLY"
"""Local engine, confined jobs: "1" makes the launcher fetch the code and install its
requirements.txt into TFKUBE_VENV_CACHE, then exit 0 without running anything (a step
on the host's network before the replicas start in the job's own network namespace)."""

HEARTBEAT_FILE: Final = "TFKUBE_HEARTBEAT_FILE"
"""Kubernetes with runPolicy.stallSeconds: a file the launcher touches whenever its replica
shows progress (a chunk of output, a newer write in TFKUBE_LOG_DIR; always while it sets
up). The pod's readiness probe fails once it is stallSeconds old, and the operator reads
that not-ready as a stall (`tfkube.kube.observe`): the launcher has no API access."""

OWN_SUBDIR: Final = ".tfkube"
"""tfkube's own folder inside TFKUBE_LOG_DIR (the kept logs below): not one of the job's
outputs, so the server lists and serves it as logs only."""
KEPT_LOGS_SUBDIR: Final = (OWN_SUBDIR, "logs")
"""Where the launcher keeps each replica's output inside TFKUBE_LOG_DIR:
`<log dir>/.tfkube/logs/<role>-<index>/<attempt>.log`, one file per start. The platform
server reads them there after the replicas are gone."""
USAGE_SUBDIR: Final = (OWN_SUBDIR, "usage")
"""Local engine: each replica's CPU and memory over time, sampled by the job's supervisor,
`<role>-<index>.jsonl` below it, one `[time, cpu cores, memory bytes]` per line."""
STEP_LINE: Final = "tfkube-steps:"
"""A line of a replica's output `tfkube-steps: N` says it has taken N training steps of
its own since it started (not the global step): the local supervisor turns these into the
replica's step rate and flags stragglers (runPolicy.stragglerSeconds)."""
LOG_MAX_BYTES: Final = "TFKUBE_LOG_MAX_BYTES"
"""Optional: the size at which the launcher's copy of a replica's output in the shared
log folder stops growing (default 64 MiB)."""

RESULT_FILE: Final = "result.json"
"""A job's final metrics, written by one of its replicas (usually the chief, or worker 0)
as `$TFKUBE_LOG_DIR/result.json` once it has them: one JSON object of names to numbers,
e.g. `{"test_accuracy": 0.9712, "global_step": 1000}` (`parse_result` says the rules).
Write it whole (to another name, then rename it), as both examples do. `tfkube status`,
`list` and `run --summary` show it (local engine, and any engine through a server); the
server keeps it with the job when the job ends (the jobs list sorts by it; the job page
shows it first) and reads it while the job runs."""
RESULT_MAX_BYTES: Final = 16 * 1024
"""The most of a result file anyone reads: a larger one is refused, not cut."""
RESULT_MAX_ENTRIES: Final = 32
"""The most names a result may hold."""
RESULT_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.:/%-]{0,63}")
"""What a result's name may be (whole): a letter or `_`, then up to 63 letters, digits
and `_ . : / % -` (`test_accuracy`, `eval/top-5`): no spaces, markup or control
characters, and short enough for a column header and a `sort=result.<name>`."""

ResultValue = float | int
"""A result's value: a finite number (what the jobs list sorts by)."""


def parse_result(data: bytes) -> dict[str, ResultValue]:
    """A result file's bytes -> its metrics, in the file's order (pure). The whole file
    is refused, with a ValueError saying which rule it broke, unless it is at most
    RESULT_MAX_BYTES of UTF-8 JSON holding one object of at most RESULT_MAX_ENTRIES
    names, each matching RESULT_NAME and given once, each value a finite number (not
    true/false, text, null, a list or an object). A refused file is no result: nothing
    of it is shown but the reason."""
    if len(data) > RESULT_MAX_BYTES:
        raise ValueError(f"it is larger than {RESULT_MAX_BYTES:,} bytes")
    try:
        loaded = json.loads(
            data.decode("utf-8"), parse_constant=_no_constant, object_pairs_hook=_pairs
        )
    except RecursionError:
        raise ValueError("it is not JSON (nested too deeply)") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"it is not JSON ({str(exc)[:120]})") from None
    if not isinstance(loaded, list) or loaded[:1] != [_OBJECT]:
        raise ValueError('it must be one JSON object of names to numbers, e.g. {"accuracy": 0.97}')
    pairs = loaded[1:]
    if len(pairs) > RESULT_MAX_ENTRIES:
        raise ValueError(f"it has more than {RESULT_MAX_ENTRIES} names")
    out: dict[str, ResultValue] = {}
    for name, value in pairs:
        if not RESULT_NAME.fullmatch(name):
            raise ValueError(
                f"{name[:64]!r} is not a result name (a letter or _, then up to 63 letters, "
                "digits or _ . : / % -)"
            )
        if name in out:
            raise ValueError(f"{name} is given twice")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{name}: give a number")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{name}: {value} is not a finite number")
        if isinstance(value, int) and abs(value) > 2**53:
            raise ValueError(f"{name}: {value} is too large a whole number")
        out[name] = value
    return out


_OBJECT: Final = object()
"""Marks a JSON object that `parse_result`'s loader turned into [_OBJECT, *pairs]: the
names' order and repeats kept, and a nested object never becomes a dict (so it is
refused as a value, whatever it holds)."""


def _pairs(pairs: list[tuple[str, object]]) -> list[object]:
    return [_OBJECT, *pairs]


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a finite number")


# -- Shipping: a replica's kept output sent to the server (SHIP_URL) --------------------
#
#   POST <SHIP_URL>/log/<replica>/<start>?offset=N   bytes of this start's output at N
#   POST <SHIP_URL>/file/<path>?offset=N             bytes of a TensorBoard event file at N
#   POST <SHIP_URL>/file/result.json?whole=1         the whole result file, replaced
#
# Each answer is `{"size": S}`, the server's length of that file: 200 when the bytes
# were taken (a repeat of bytes it has is no error), 409 when N is past S (send from S).
# `<start>` is a random id per start of the launcher: the server numbers the starts of
# a replica (`<attempt>.log`, as the launcher does in a shared folder), whichever pod
# or node they ran on.

SHIP_CHUNK_BYTES: Final = 1024 * 1024
"""The most bytes one shipping request carries."""
SHIP_START: Final = re.compile(r"[0-9a-f]{16,64}")
"""A start's id (whole): lower-case hex."""
SHIP_REPLICA: Final = re.compile(r"(?:chief|ps|worker|evaluator)-\d{1,6}")
"""A replica's key (whole), as `replica_key` writes it."""
SHIP_EVENTS: Final = re.compile(r"events\.out\.tfevents\.[A-Za-z0-9._-]{1,200}")
"""A TensorBoard event file's name (whole)."""
SHIP_PART: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
"""A folder name on the way to a shipped file: no leading dot (so never `..`, nor
tfkube's own `.tfkube`), no separators."""
SHIP_MAX_DEPTH: Final = 6
"""How deep below the log folder a shipped event file may be (`train/events...`)."""
SHIP_EVENTS_MAX_BYTES: Final = 512 * 1024 * 1024
"""The most of one event file the server keeps."""


def shipped_file(path: str) -> tuple[str, ...] | None:
    """The parts of `path` (relative to the log folder, `/`-separated) when it is a file
    that is shipped: a TensorBoard event file at most SHIP_MAX_DEPTH deep through
    SHIP_PART folders, or RESULT_FILE at the top; else None. Pure: the launcher chooses
    what to send by it, the server what to take."""
    parts = tuple(path.split("/"))
    if parts == (RESULT_FILE,):
        return parts
    if not 1 <= len(parts) <= SHIP_MAX_DEPTH or not all(SHIP_PART.fullmatch(p) for p in parts):
        return None
    return parts if SHIP_EVENTS.fullmatch(parts[-1]) else None


# -- Data: a replica's data fetched from the server (DATA_URL) ---------------------------
#
#   GET <DATA_URL>/<replica>   200: a tar (gzip or plain) of what the replica's data folder
#                              shows: the job's uploaded data set, or its data source as
#                              the server staged it (with a shard rule the replica's shard
#                              only), unpacked with the code's checks
#                              503: the server is still staging; the body's `detail` says
#                              how far ("staging data: 3.1 of 8.0 MiB, ..."): ask again
#                              after its Retry-After
#                              404 / 410: never (another job's claim, the job ended, its
#                              staging failed: `detail` says why); a permanent failure
#
# The launcher marks a fetched data folder in its work folder (DATA_READY_FILE): a
# restarted container of the same pod does not fetch again.
#
#   GET <DATA_URL>/<replica>/key   what a node cache (`tfkube.datacache`) asks with the
#                              replica's own token before it serves anything: 200
#                              {"key": ..., "size": ..., "sha256": ...}, the name the
#                              server gives that tar for the job's team (never the same
#                              for two teams, even for the same bytes), its length and
#                              sha256; else the data route's 503/404/410, same detail
#
# With a node cache (DATA_CACHE_URL set), the launcher asks it first, the same way: it
# answers as the server would, from its disk when it holds the key; when it cannot be
# reached (or answers 502: it cannot reach the server) the launcher asks DATA_URL.

DATA_KEY_PATH: Final = "key"
"""The last part of the key request's path: `<DATA_URL>/<replica>/key`."""
DATA_CACHE_URL: Final = "TFKUBE_DATA_CACHE_URL"
"""Optional: the node cache's address for this job, `<cache>/api/v1/data/<job id>` (the
same path as DATA_URL's); asked first, DATA_URL when it cannot be reached."""
DATA_KEY_PATTERN: Final = re.compile(r"[0-9a-f]{64}")
"""What a node cache accepts as a key (its file name on the node's disk)."""

DATA_READY_FILE: Final = "data-ready"
"""In TFKUBE_WORK_DIR: written once the data folder holds the replica's data."""
DATA_WAIT_SECONDS: Final = "TFKUBE_DATA_WAIT_SECONDS"
"""How long the launcher waits for the server's staging (503s) and through its
unreachability before it gives up (EX_TEMPFAIL); default DEFAULT_DATA_WAIT_SECONDS."""
DEFAULT_DATA_WAIT_SECONDS: Final = 3600.0


# -- What the launcher adds for the entrypoint ------------------------------------------

TF_CONFIG: Final = "TF_CONFIG"
CHECKPOINT_DIR: Final = "TFKUBE_CHECKPOINT_DIR"
EXPORT_DIR: Final = "TFKUBE_EXPORT_DIR"
"""The export convention: the chief (or worker 0) writes a SavedModel to
`$TFKUBE_EXPORT_DIR/<version>` (a whole number, e.g. the global step; in a hidden folder
first, renamed when complete). It is `<the job's shared output folder>/export`, where
model servers (the local one and TensorFlow Serving in a cluster) look for versions."""
EXPORT_SUBDIR: Final = "export"
"""The export folder's name inside the job's output folder."""
SHARD_INDEX: Final = "TFKUBE_SHARD_INDEX"
NUM_SHARDS: Final = "TFKUBE_NUM_SHARDS"

RESERVED_PREFIX: Final = "TFKUBE_"
"""Users may not set variables with this prefix (nor TF_CONFIG): tfkube owns them."""

REQUIREMENTS_FILE: Final = "requirements.txt"
"""A code folder holding this file gets its packages installed before any replica runs."""

# -- What the platform gives its other workloads (notebooks, model servers) -------------

CLIENT_URL: Final = "TFKUBE_URL"
"""The tfkube server's URL for `tfkube.Client()` (in a notebook, or set by a user)."""
CLIENT_TOKEN: Final = "TFKUBE_TOKEN"
"""The API token `tfkube.Client()` signs in with."""
CLIENT_TEAM: Final = "TFKUBE_TEAM"
"""The team `tfkube.Client()` works in by default."""
SERVING_TOKEN: Final = "TFKUBE_SERVING_TOKEN"
"""A model server's secret: it answers only requests that carry it (the server's proxy
does); the model server removes it from its environment at start."""
MODEL_SERVER_BINARY: Final = "tfkube-modelserver"
"""tfkube's native model server's program (native/modelserver): in the venv's bin for the
local engine (`tfkube.modelserver`), in /usr/local/bin of tfkube's image for the `tfkube`
runtime in a cluster (`tfkube.render`)."""
SERVING_READY_PATH: Final = "/tfkube/ready"
"""tfkube's model server's readiness, on its REST port and without its secret: 200 when a
version is available and its gRPC door (when it has one) answers its own health check
through the network, else 503 with TensorFlow Serving's `{"error": ...}` (a Kubernetes
readiness probe of both doors in one)."""
JUPYTER_TOKEN: Final = "JUPYTER_TOKEN"
"""Jupyter's own variable: a notebook's token, which the server's proxy adds for its user
(both engines set it)."""

# -- What configures tfkube itself (the CLI, the server, the local engine) ---------------

HOME: Final = "TFKUBE_HOME"
"""Where the local engine keeps its jobs (`<home>/jobs`) and the server its data by default
(`<home>/server`)."""
DEFAULT_HOME: Final = ".tfkube"
"""HOME's default: this folder in the user's home."""


def home_dir(environ: Mapping[str, str] | None = None) -> Path:
    """$TFKUBE_HOME, else ~/.tfkube."""
    configured = (os.environ if environ is None else environ).get(HOME)
    return Path(configured) if configured else Path.home() / DEFAULT_HOME


CACHE: Final = "TFKUBE_CACHE"
"""What outlives jobs and may be rebuilt (the jobs' Python environments); default
$XDG_CACHE_HOME/tfkube, else ~/.cache/tfkube."""
GPUS: Final = "TFKUBE_GPUS"
"""The local engine's GPUs (comma-separated ids), when it should not look for them."""
ENGINE: Final = "TFKUBE_ENGINE"
"""The CLI's engine (`--engine`): local, kubernetes or server."""
DATABASE_URL: Final = "TFKUBE_DATABASE_URL"
"""The server's database (SQLAlchemy URL); default SQLite in its data folder."""

# -- Defaults both engines (and the server's queue) must agree on --------------------------

DEFAULT_CPU_REQUEST: Final = "500m"
"""What a replica that asks for no CPU counts as: by the server's queue on this machine,
and in a team's namespace with a quota (its LimitRange's default request). Half a core:
most of the time a PS idles and a worker computes."""
KUEUE_QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
"""Kueue's label naming a job's LocalQueue: read from an imported Kubeflow TFJob, put on
the role Jobs by rendering, read back when a Job waits for admission."""

# -- The launcher's exit codes (sysexits.h where one fits, the shell's 126/127) ----------

EX_DATAERR: Final = 65
"""The code is bad: checksum mismatch, or an archive that is unsafe or unreadable."""
EX_NOINPUT: Final = 66
"""The entrypoint is not in the code."""
EX_TEMPFAIL: Final = 75
"""The code could not be fetched (network, server): an infrastructure fault, retried."""
EX_CONFIG: Final = 78
"""The set-up is broken: a missing or malformed variable, a failing env command, a
requirements.txt that does not install."""
EX_NOEXEC: Final = 126
"""The entrypoint could not be executed (permissions, not a program)."""
EX_NOTFOUND: Final = 127
"""The entrypoint's interpreter was not found."""

SIGNAL_EXIT_BASE: Final = 128
"""A process stopped by signal N exits 128+N, as shells report it: the launcher for its
entrypoint, the local supervisor for a replica, the `tfkube` command when a signal stops
it (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP)."""


def signal_exit_code(signum: int) -> int:
    """The exit code for "stopped by signal `signum`": 128+N."""
    return SIGNAL_EXIT_BASE + signum


def exit_status(returncode: int) -> int:
    """A child's exit as a shell reports it: its exit code, or 128+N when signal N killed it
    (`subprocess` gives that as -N)."""
    return returncode if returncode >= 0 else signal_exit_code(-returncode)


LAUNCHER_PERMANENT_EXITS: Final = frozenset(
    {EX_DATAERR, EX_NOINPUT, EX_CONFIG, EX_NOEXEC, EX_NOTFOUND}
)
"""The launcher's own failures that no retry can fix. They count as the launcher's only
when its termination message says so: training code may exit with these codes too."""
RETRYABLE_EXITS: Final = frozenset({EX_TEMPFAIL})
"""Exit codes below 128 that mean an infrastructure fault rather than the user's error."""

# -- The termination message -------------------------------------------------------------

MESSAGE_PREFIX: Final = "tfkube-launcher: "
"""How the launcher's own termination message starts (a user's never does)."""
MAX_MESSAGE_BYTES: Final = 4096
"""Kubernetes keeps at most 4096 bytes of a termination message."""


def launcher_message(reason: str) -> str:
    """The termination message the launcher writes for one of its own failures."""
    text = MESSAGE_PREFIX + " ".join(reason.split())
    data = text.encode()
    if len(data) > MAX_MESSAGE_BYTES:
        text = data[: MAX_MESSAGE_BYTES - 3].decode(errors="ignore") + "..."
    return text


def launcher_failure(exit_code: int | None, message: str | None) -> str | None:
    """The reason, when an exit is one of the launcher's permanent failures (never retried);
    None for everything else: the training code's own exits, signals, transient faults."""
    if exit_code not in LAUNCHER_PERMANENT_EXITS or not message:
        return None
    if not message.startswith(MESSAGE_PREFIX):
        return None
    return message[len(MESSAGE_PREFIX) :].strip() or None
