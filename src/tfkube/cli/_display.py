"""Rendering job views for a terminal (rich). No engine calls here."""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Group
from rich.table import Table
from rich.text import Text

from tfkube import contract, safefs
from tfkube.engines import JobView
from tfkube.planner import JobPhase, ReplicaState
from tfkube.serving import exported_versions

_PHASE_STYLE = {
    JobPhase.PENDING: "yellow",
    JobPhase.RUNNING: "cyan",
    JobPhase.RESTARTING: "magenta",
    JobPhase.SUCCEEDED: "green",
    JobPhase.FAILED: "red",
}
_STATE_STYLE = {
    ReplicaState.PENDING: "yellow",
    ReplicaState.RUNNING: "cyan",
    ReplicaState.SUCCEEDED: "green",
    ReplicaState.FAILED: "red",
    ReplicaState.BACKOFF: "magenta",
    ReplicaState.STOPPED: "dim",
}


def _age(view: JobView, now: float) -> str:
    start = view.started_at or view.created_at
    end = view.finished_at or now
    seconds = max(0, int(end - start))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def result_of(view: JobView) -> dict[str, contract.ResultValue] | None:
    """What the job reported (its result file): from the engine's view (a server read it),
    else read from its log folder on this machine, without following what the job made
    and at most `contract.RESULT_MAX_BYTES` (a file that breaks the rules is no result)."""
    if view.result is not None:
        return view.result
    if not view.log_dir:
        return None
    try:
        with safefs.closing(safefs.open_root(view.log_dir)) as root:
            data = safefs.read_bytes(root, [contract.RESULT_FILE], contract.RESULT_MAX_BYTES + 1)
        return contract.parse_result(data)
    except (OSError, ValueError):
        return None


def result_text(result: dict[str, contract.ResultValue] | None, width: int | None = None) -> str:
    """`test_accuracy=0.9712  global_step=1000` (cut to `width`)."""
    if not result:
        return ""
    text = "  ".join(f"{k}={_value(v)}" for k, v in result.items())
    return text if width is None or len(text) <= width else text[: max(1, width - 1)] + "…"


def _value(v: contract.ResultValue) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def job_panel(view: JobView, now: float | None = None, width: int = 120) -> Group:
    """The job's header and a row per replica; pid and address only on wide terminals."""
    now = time.time() if now is None else now
    head = Text.assemble(
        ("job ", "bold"),
        (view.name, "bold"),
        "  ",
        (view.phase.value, _PHASE_STYLE[view.phase]),
        f"  restarts {view.restarts}",
        f"  preempted {view.preemptions}x" if view.preemptions else "",
        f"  disrupted {view.disruptions}x" if view.disruptions else "",
        f"  elapsed {_age(view, now)}",
    )
    table = Table(show_edge=False, pad_edge=False, expand=False)
    wide = width >= 110
    columns = [
        "replica",
        "state",
        *(["pid", "address"] if wide else []),
        "restarts",
        "exit",
        "steps/s",
    ]
    for col in columns:
        table.add_column(col, no_wrap=True)
    table.add_column("message / last log line", no_wrap=True)
    room = max(12, width - (90 if wide else 60))  # what the other columns leave
    cut: dict[str, list[str]] = {}  # a reason too long for its cell -> the replicas it is
    for r in view.replicas:
        state = Text(r.state.value, _STATE_STYLE[r.state])
        if r.stalled:
            state = Text("Stalled", "bold red")
        elif r.straggler:
            state = Text("Straggler", "bold yellow")
        cells: list[str | Text] = [r.key, state]
        if wide:
            cells += [str(view.pids.get(r.key) or "-"), r.address or "-"]
        cells += [str(r.restarts), "-" if r.exit_code is None else str(r.exit_code)]
        cells.append("-" if r.step_rate is None else f"{r.step_rate:.1f}")
        note = r.message or r.last_line  # why it is where it is, else what it last said
        line = note if len(note) <= room else note[: room - 1] + "…"
        if r.message and len(r.message) > room:
            cut.setdefault(r.message, []).append(r.key)
        table.add_row(*cells, Text(line))
    parts: list[Text | Table] = [head]
    if result := result_of(view):
        parts.append(Text.assemble(("result ", "bold"), (result_text(result), "green")))
    parts.append(table)
    # Why a replica waits or failed is the point of `status`: said in full under the table
    # (once per distinct reason) when its cell had to cut it.
    parts += [Text(f"{', '.join(keys)}: {message}") for message, keys in cut.items()]
    if view.reason:
        parts.append(Text(f"{view.reason}: {view.message or ''}"))
    return Group(*parts)


LIST_RESULTS = 3
"""The most result names `tfkube list` gives a column each (the most common first)."""


def result_columns(results: list[dict[str, contract.ResultValue] | None]) -> list[str]:
    """The result names the listed jobs report most, at most LIST_RESULTS (ties by the
    order they first appear in)."""
    counts: dict[str, int] = {}
    for result in results:
        for name in result or {}:
            counts[name] = counts.get(name, 0) + 1
    return sorted(counts, key=lambda n: -counts[n])[:LIST_RESULTS]


NAME_WIDTH = 40
"""The widest a job's name is kept whole in `tfkube list` (a longer one is cut)."""


def jobs_table(views: list[JobView], now: float | None = None) -> Table:
    """A row per job; a column for each of the results the jobs report most."""
    now = time.time() if now is None else now
    table = Table(show_edge=False, pad_edge=False)
    results = [result_of(v) for v in views]
    shown = result_columns(results)
    # The name and phase whole, whatever the terminal: the other columns give way.
    longest = max((len(v.name) for v in views), default=4)
    table.add_column("name", no_wrap=True, min_width=min(max(longest, 4), NAME_WIDTH))
    table.add_column("phase", no_wrap=True, min_width=9)
    for col in ("replicas", "running", "restarts", "age", "reason"):
        table.add_column(col)
    for name in shown:
        table.add_column(name, justify="right", no_wrap=True)
    for v, result in zip(views, results, strict=True):
        running = sum(r.state is ReplicaState.RUNNING for r in v.replicas)
        table.add_row(
            v.name,
            Text(v.phase.value, _PHASE_STYLE[v.phase]),
            str(len(v.replicas)),
            str(running),
            str(v.restarts),
            _age(v, now),
            v.reason or "",
            *(_value(result[n]) if result and n in result else "" for n in shown),
        )
    return table


def summary(view: JobView, with_result: bool = True) -> list[str]:
    """What the job achieved: its result (unless its panel shows it already), the
    exported models, the last checkpoint and TensorBoard logs."""
    lines = [
        f"job {view.name}: {view.phase.value}" + (f" ({view.message})" if view.message else "")
    ]
    if with_result and (result := result_of(view)):
        lines.append("result: " + ", ".join(f"{k}={_value(v)}" for k, v in result.items()))
    if view.extra.get("exports"):  # a job on a tfkube server
        lines.append(
            f"exported models: versions {view.extra['exports']}  (serve: tfkube serve {view.name})"
        )
    if not view.log_dir:
        return lines
    log_dir = Path(view.log_dir)
    checkpoint = latest_checkpoint(log_dir)
    if checkpoint:
        lines.append(f"checkpoints: {log_dir} (latest {checkpoint})")
    export_dir = log_dir / contract.EXPORT_SUBDIR
    exports = exported_versions(export_dir)
    if exports:
        listed = ", ".join(str(v) for v in exports)
        lines.append(
            f"exported models: {export_dir} (versions {listed}; serve: tfkube serve {view.name})"
        )
    if any(log_dir.rglob("events.out.tfevents.*")):
        lines.append(f"TensorBoard logs: {log_dir}  (view: tensorboard --logdir {log_dir})")
    if view.job_dir:
        lines.append(f"replica logs: {view.job_dir}/logs  (or: tfkube logs {view.name})")
    return lines


def latest_checkpoint(log_dir: Path) -> str | None:
    """The latest checkpoint named in TensorFlow's `checkpoint` index file, if any."""
    index = log_dir / "checkpoint"
    if not index.is_file():
        return None
    for line in index.read_text().splitlines():
        if line.startswith("model_checkpoint_path:"):
            return line.split(":", 1)[1].strip().strip('"')
    return None
