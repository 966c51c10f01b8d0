"""What the pages show, decided in pure functions (table-tested in
tests/unit/test_web_present.py): wording of times, sizes and phases, the replica table's
filter, grouping and paging, pager windows, and which replica's log a job page opens.

Nothing here touches the database, the request or the clock (times are arguments)."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from tfkube.planner import JobPhase, Replica, ReplicaState
from tfkube.tfcluster import replica_key, replica_order

PHASES = tuple(p.value for p in JobPhase)
"""In the order a job goes through them (the order of the filter chips)."""
ACTIVE_PHASES = frozenset(p.value for p in JobPhase if not p.terminal)
ROLE_NAMES = {
    "chief": ("Chief", "coordinates training and writes checkpoints"),
    "ps": ("Parameter servers", "hold the model's variables; the workers read and update them"),
    "worker": ("Workers", "compute the training steps, each on its own shard of the data"),
    "evaluator": ("Evaluator", "evaluates the checkpoints while training goes on"),
}
"""How each role is introduced to someone who has never heard of a parameter server."""
PHASE_HELP = {
    "Pending": "waiting to start",
    "Running": "training",
    "Restarting": "replacing replicas that failed",
    "Succeeded": "finished successfully",
    "Failed": "ended with an error",
}


def is_active(phase: str, queued: bool = False) -> bool:
    """Whether a job may still change (pages keep refreshing it)."""
    return queued or phase in ACTIVE_PHASES


def ago(seconds: float) -> str:
    """How long ago, in words ('just now', '12 s ago', '3 min ago', '2 h ago', '5 days ago')."""
    if seconds < 5:
        return "just now"
    if seconds < 60:
        return f"{int(seconds)} s ago"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    if seconds < 86400:
        return f"{int(seconds // 3600)} h ago"
    days = int(seconds // 86400)
    return f"{days} day{'s' if days != 1 else ''} ago"


def duration(seconds: float | None) -> str:
    """A span of time for people: '45 s', '3 min 20 s', '1 h 05 min', '2 days 3 h'."""
    if seconds is None or seconds < 0 or math.isnan(seconds):
        return ""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    days = s // 86400
    return f"{days} day{'s' if days != 1 else ''} {s % 86400 // 3600} h"


def eta(seconds: float | None) -> str:
    """Time left, rounded the way people say it."""
    if seconds is None or math.isnan(seconds):
        return ""
    if seconds <= 0:
        return "done"
    if seconds < 60:
        return "less than a minute left"
    return f"about {duration(60 * round(seconds / 60)).replace(' 00 s', '')} left"


def size(n: int | None) -> str:
    """Bytes in decimal units ('512 B', '1.2 kB', '34 MB', '2.1 GB')."""
    if n is None:
        return ""
    if n < 1000:
        return f"{n} B"
    value = float(n)
    for unit in ("kB", "MB", "GB", "TB"):
        value /= 1000
        if value < 1000 or unit == "TB":
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    raise AssertionError("unreachable")


def number(n: int) -> str:
    """1234567 -> '1,234,567'."""
    return f"{n:,}"


def cpu(cores: float | None) -> str:
    return "" if cores is None else f"{cores:g} CPU"


def query_url(path: str, params: Mapping[str, Any], **changes: Any) -> str:
    """`path` with `params` updated by `changes`; empty values (None, '', 0 for page 1)
    are left out, so URLs stay short and canonical."""
    merged = {**params, **changes}
    kept = {
        k: v
        for k, v in merged.items()
        if v not in (None, "", False) and not (k == "page" and v in (1, "1"))
    }
    return f"{path}?{urlencode(kept)}" if kept else path


def safe_next(target: str, default: str = "/jobs") -> str:
    """Where to go after signing in: a path on this server only. Anything that a browser
    could read as another host (`//evil`, `/\\evil`, a scheme, control characters) gives
    the default, so a crafted sign-in link cannot send someone elsewhere."""
    if (
        not target.startswith("/")
        or target.startswith("//")
        or "\\" in target
        or any(ord(c) < 0x20 or c == "\x7f" for c in target)
    ):
        return default
    return target


def pages_of(total: int, per_page: int) -> int:
    return max(1, math.ceil(total / per_page))


def clamp_page(page: int, total: int, per_page: int) -> int:
    return min(max(page, 1), pages_of(total, per_page))


def pager_window(page: int, pages: int, width: int = 2) -> list[int | None]:
    """Page numbers to link around `page`: the first, the last, `width` on each side,
    None where numbers are skipped. [1, None, 4, 5, 6, 7, 8, None, 20]."""
    wanted = {1, pages, *range(page - width, page + width + 1)}
    shown = sorted(p for p in wanted if 1 <= p <= pages)
    out: list[int | None] = []
    for p in shown:
        if out and out[-1] is not None and p - out[-1] > 1:
            out.append(None)
        out.append(p)
    return out


def role_key(replica: Replica) -> tuple[int, int]:
    return replica_order(replica.role, replica.index)


@dataclass(frozen=True)
class ReplicaFilter:
    """The replica table's filter (from the query string)."""

    role: str = ""
    state: str = ""
    q: str = ""
    """Text in the replica's name, message, node or last line."""
    problems: bool = False
    """Only replicas that failed, restarted or have something to say."""

    def matches(self, r: Replica) -> bool:
        if self.role and r.role != self.role:
            return False
        if self.state and r.state != self.state:
            return False
        if self.problems and not has_problem(r):
            return False
        if self.q:
            text = self.q.lower()
            haystack = (r.key, r.message, r.node or "", r.last_line, r.address or "")
            return any(text in h.lower() for h in haystack)
        return True


def has_problem(r: Replica) -> bool:
    """Whether a replica needs someone's attention: it failed, restarted, stalls, lags
    behind the others (a straggler), or says
    something while it runs. A pending replica saying why it waits (queued, scheduling,
    pulling its image) is not a problem: every replica of a starting job says that."""
    if r.state is ReplicaState.PENDING:
        return r.restarts > 0
    return (
        r.state is ReplicaState.FAILED
        or r.restarts > 0
        or r.stalled
        or r.straggler
        or bool(r.message)
    )


@dataclass(frozen=True)
class RoleGroup:
    role: str
    title: str
    help: str
    total: int
    """Replicas of this role in the whole job."""
    states: dict[str, int]
    rows: list[Replica]
    """This page's rows of the role (may be empty)."""


@dataclass(frozen=True)
class ReplicaPage:
    groups: list[RoleGroup]
    """Roles in order; those with rows on this page."""
    matched: int
    """Replicas matching the filter."""
    total: int
    page: int
    pages: int
    by_role: dict[str, int] = field(default_factory=dict)
    """The whole job's replicas per role."""
    by_state: dict[str, int] = field(default_factory=dict)
    """Per state, under the role filter (the chips show what a click would give)."""
    problems: int = 0


def replica_page(
    replicas: Sequence[Replica], flt: ReplicaFilter, page: int, per_page: int = 50
) -> ReplicaPage:
    """Filter, order (role, then index) and cut one page out of a job's replicas; group
    the page's rows by role with the role's counts over the whole job."""
    ordered = sorted(replicas, key=role_key)
    by_role = Counter(r.role for r in ordered)
    role_states: dict[str, Counter[str]] = {}
    for r in ordered:
        role_states.setdefault(r.role, Counter())[r.state.value] += 1
    under_role = [r for r in ordered if not flt.role or r.role == flt.role]
    by_state = Counter(r.state.value for r in under_role)
    matched = [r for r in ordered if flt.matches(r)]
    page = clamp_page(page, len(matched), per_page)
    rows = matched[(page - 1) * per_page : page * per_page]
    groups = []
    for role in sorted({r.role for r in rows}, key=lambda x: replica_order(x, 0)):
        title, help_text = ROLE_NAMES.get(role, (role, ""))
        groups.append(
            RoleGroup(
                role=role,
                title=title,
                help=help_text,
                total=by_role[role],
                states=dict(role_states[role]),
                rows=[r for r in rows if r.role == role],
            )
        )
    return ReplicaPage(
        groups=groups,
        matched=len(matched),
        total=len(ordered),
        page=page,
        pages=pages_of(len(matched), per_page),
        by_role=dict(sorted(by_role.items(), key=lambda kv: replica_order(kv[0], 0))),
        by_state=dict(by_state),
        problems=sum(1 for r in under_role if has_problem(r)),
    )


def log_replica(replicas: Iterable[Replica], with_logs: Iterable[str]) -> str | None:
    """The replica whose log a job page opens first: the first that failed (that is what
    the user wants to read), else the chief, else worker 0, else any replica with a log."""
    have = set(with_logs)
    ordered = sorted(replicas, key=role_key)
    for r in ordered:
        if r.state is ReplicaState.FAILED and (r.key in have or not have):
            return r.key
    known = have or {r.key for r in ordered}  # before any log exists: the one that will
    for key in (replica_key("chief", 0), replica_key("worker", 0)):
        if key in known:
            return key
    for r in ordered:
        if r.key in have:
            return r.key
    return sorted(have)[0] if have else None


def log_position(
    replica: str | None, attempt: int | None, at: int | None, line: int | None
) -> dict[str, int] | None:
    """Where a job page opens its log panel from a search hit's link (`?replica=&attempt=
    &at=&line=`): the start, the byte offset and the line number, or None when the link
    does not say all of them sensibly (the page then opens as usual)."""
    if replica is None or attempt is None or at is None or line is None:
        return None
    if attempt < 0 or at < 0 or line < 1:
        return None
    return {"attempt": attempt, "at": at, "line": line}


def common_wait(replicas: Iterable[Replica]) -> tuple[str, int] | None:
    """Why most waiting replicas wait: (the most common message of the pending replicas,
    how many say it), so a job page can say it once instead of 451 times."""
    messages = Counter(r.message for r in replicas if r.state is ReplicaState.PENDING and r.message)
    if not messages:
        return None
    message, count = messages.most_common(1)[0]
    return message, count


def log_choices(
    keys: Sequence[str], with_logs: Iterable[str], chosen: str | None, small: int = 50
) -> list[str]:
    """The replicas the log panel offers at first: all of a small job; of a big one those
    with a log (and the chosen one), so a 1,000-replica page does not carry 1,000 options
    (a replica's "Log" link adds it when asked)."""
    if len(keys) <= small:
        return list(keys)
    have = set(with_logs) | ({chosen} if chosen else set())
    return [k for k in keys if k in have]


def state_summary(counts: Mapping[str, int]) -> str:
    """{'Running': 3, 'Pending': 1} -> '3 running, 1 pending' (most first)."""
    parts = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{n:,} {state.lower()}" for state, n in parts if n)


def running_of(counts: Mapping[str, int]) -> tuple[int, int]:
    """-> (running replicas, all replicas)."""
    return counts.get(ReplicaState.RUNNING, 0), sum(counts.values())


# -- a job's state in one calm sentence ---------------------------------------------------------


@dataclass(frozen=True)
class JobState:
    """How a job page and the jobs list word a job's state: one label, one tone, one
    sentence, and at most one line of detail (never three phrases for one state)."""

    label: str
    tone: str
    """CSS: wait (starting or queued: calm), run, warn, ok, bad."""
    sentence: str
    detail: str = ""


STRAGGLERS_NAMED = 3


def job_state(
    phase: str, queued: bool, reason: str | None, message: str | None, replicas: Sequence[Replica]
) -> JobState:
    """A job's state for people (pure). A job that waits or starts is calm: nothing about
    it is an error yet, and a replica waiting for its turn is not a problem."""
    text = (message or "").strip()
    if queued:
        why = text.removeprefix("queued:").strip() or "waiting for room on the engine"
        return JobState("Queued", "wait", "Waiting for room to start", why)
    stalled = sum(1 for r in replicas if r.stalled)
    wait = common_wait(replicas)
    waiting = (
        f"{wait[1]:,} of {len(replicas):,} replica{'s' if len(replicas) != 1 else ''} "
        f"waiting: {wait[0]}"
        if wait
        else ""
    )
    if phase == JobPhase.PENDING:
        return JobState("Starting", "wait", "Starting its replicas", waiting)
    if phase == JobPhase.RUNNING:
        if stalled:
            plural = "s" if stalled != 1 else ""
            return JobState(
                "Running",
                "warn",
                f"Training, but {stalled:,} replica{plural} made no progress lately",
                text or waiting,
            )
        slow = [r for r in replicas if r.straggler]
        if slow:
            named = ", ".join(
                f"{r.key} at {r.step_rate or 0:.1f} steps/s" for r in slow[:STRAGGLERS_NAMED]
            )
            more = (
                f" and {len(slow) - STRAGGLERS_NAMED:,} more"
                if len(slow) > STRAGGLERS_NAMED
                else ""
            )
            return JobState(
                "Running",
                "warn",
                "Training, with a straggler" + ("s" if len(slow) > 1 else ""),
                f"below half the median step rate: {named}{more}",
            )
        return JobState("Running", "run", "Training", waiting)
    if phase == JobPhase.RESTARTING:
        return JobState("Restarting", "warn", "Replacing replicas that failed", text or waiting)
    if phase == JobPhase.SUCCEEDED:
        return JobState("Succeeded", "ok", "Finished successfully", "")
    if reason == "Stopped":
        return JobState("Stopped", "idle", "Stopped on request", "")
    sentence = f"Failed: {reason}" if reason and reason != phase else "Failed"
    return JobState("Failed", "bad", sentence, text)


# -- results ------------------------------------------------------------------------------------


def metric(value: float | int | None) -> str:
    """A result's number for people, at a sensible precision: 0.9712, 1,000, 1.23e-05."""
    if value is None:
        return ""
    if isinstance(value, int):
        return f"{value:,}"
    if value != 0 and (abs(value) >= 1e7 or abs(value) < 1e-4):
        return f"{value:.3g}"
    if value.is_integer() and abs(value) >= 1:
        return f"{int(value):,}"
    return f"{value:.4g}" if abs(value) < 1 else f"{value:,.4g}"


# -- sortable lists -----------------------------------------------------------------------------


@dataclass(frozen=True)
class SortLink:
    key: str
    """What the column sorts by (`name`, `result.test_accuracy`)."""
    href_params: dict[str, Any]
    aria_sort: str
    """ascending | descending | none (ARIA)."""
    arrow: str


def sort_link(params: Mapping[str, Any], current: str, key: str, first: str = "desc") -> SortLink:
    """A column header's link: a click sorts by `key` (descending first for numbers and
    times), a second click reverses it."""
    descending = current.startswith("-")
    active = current.removeprefix("-") == key
    flip = not descending if active else first == "desc"
    target = f"-{key}" if flip else key
    aria = ("descending" if descending else "ascending") if active else "none"
    arrow = ("▼" if descending else "▲") if active else ""
    return SortLink(key, {**params, "sort": target, "page": 1}, aria, arrow)


# -- outputs, grouped ----------------------------------------------------------------------------

_CHECKPOINT_PIECE = re.compile(r"^(?P<prefix>.+?)\.(index|meta|data-\d{5}-of-\d{5})$")


@dataclass
class OutputItem:
    label: str
    """What it is ('model.ckpt-1000', 'version 1000', 'train/', a file's name)."""
    path: str
    """Its path in the outputs (a folder's, or the one file's)."""
    size: int
    files: int
    modified: float
    is_dir: bool = False
    parts: list[str] = field(default_factory=list)
    """A checkpoint's files (paths), newest first for the group."""


@dataclass
class OutputGroup:
    key: str
    title: str
    help: str
    items: list[OutputItem]

    @property
    def size(self) -> int:
        return sum(i.size for i in self.items)

    @property
    def files(self) -> int:
        return sum(i.files for i in self.items)


OUTPUT_GROUPS = {
    "exports": ("Exported models", "SavedModels the job exported, one folder per version"),
    "checkpoints": ("Checkpoints", "the model's variables as training saved them"),
    "summaries": ("Summaries", "TensorBoard event files: the charts' data"),
    "other": ("Other files", "everything else the job wrote"),
}


def group_outputs(files: Iterable[Any], export_dir: str = "export") -> list[OutputGroup]:
    """A job's output files (paths relative to its outputs, files only) in four groups:
    exported models (one item per version folder), checkpoints (one item per checkpoint,
    with its index, data and meta pieces; TensorFlow's `checkpoint` index file with them),
    summaries (one item per folder of event files) and the rest. Newest first within a
    group; empty groups left out."""
    exports: dict[str, OutputItem] = {}
    checkpoints: dict[str, OutputItem] = {}
    summaries: dict[str, OutputItem] = {}
    other: list[OutputItem] = []

    def add(bucket: dict[str, OutputItem], key: str, label: str, path: str, f: Any) -> None:
        item = bucket.get(key)
        if item is None:
            item = bucket[key] = OutputItem(label, path, 0, 0, 0.0, is_dir=path != f.path)
        item.size += f.size
        item.files += 1
        item.modified = max(item.modified, f.modified)
        item.parts.append(f.path)

    for f in files:
        if getattr(f, "is_dir", False):
            continue
        parts = f.path.split("/")
        name = parts[-1]
        folder = "/".join(parts[:-1])
        if parts[0] == export_dir and len(parts) > 2:
            version = parts[1]
            label = f"version {version}" if version.isdigit() else version
            add(exports, version, label, f"{export_dir}/{version}", f)
        elif m := _CHECKPOINT_PIECE.match(name):
            prefix = f"{folder}/{m['prefix']}" if folder else m["prefix"]
            add(checkpoints, prefix, prefix, prefix, f)
        elif name == "checkpoint":
            key = f"{folder}/checkpoint" if folder else "checkpoint"
            add(checkpoints, key, f"{key} (the index of the newest)", f.path, f)
        elif name.startswith("events.out.tfevents."):
            run = folder or "."
            add(summaries, run, f"{run}/" if folder else "the outputs' top folder", folder, f)
        else:
            other.append(OutputItem(f.path, f.path, f.size, 1, f.modified))
    for bucket in (exports, checkpoints, summaries):
        for item in bucket.values():
            item.is_dir = item.is_dir or item.files > 1
    groups = []
    for key, items in (
        ("exports", list(exports.values())),
        ("checkpoints", list(checkpoints.values())),
        ("summaries", list(summaries.values())),
        ("other", other),
    ):
        if items:
            title, help_text = OUTPUT_GROUPS[key]
            ordered = sorted(items, key=lambda i: (-i.modified, i.label))
            groups.append(OutputGroup(key, title, help_text, ordered))
    return groups
