"""Rendering job views for a terminal (rich). No engine calls here."""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Group
from rich.table import Table
from rich.text import Text

from tfkube import contract
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


def job_panel(view: JobView, now: float | None = None, width: int = 120) -> Group:
    """The job's header and a row per replica; pid and address only on wide terminals."""
    now = time.time() if now is None else now
    head = Text.assemble(
        ("job ", "bold"),
        (view.name, "bold"),
        "  ",
        (view.phase.value, _PHASE_STYLE[view.phase]),
        f"  restarts {view.restarts}  elapsed {_age(view, now)}",
    )
    table = Table(show_edge=False, pad_edge=False, expand=False)
    wide = width >= 110
    columns = ["replica", "state", *(["pid", "address"] if wide else []), "restarts", "exit"]
    for col in columns:
        table.add_column(col, no_wrap=True)
    table.add_column("message / last log line", no_wrap=True)
    room = max(12, width - (82 if wide else 52))  # what the other columns leave
    cut: dict[str, list[str]] = {}  # a reason too long for its cell -> the replicas it is
    for r in view.replicas:
        state = (
            Text("Stalled", "bold red") if r.stalled else Text(r.state.value, _STATE_STYLE[r.state])
        )
        cells: list[str | Text] = [r.key, state]
        if wide:
            cells += [str(view.pids.get(r.key) or "-"), r.address or "-"]
        cells += [str(r.restarts), "-" if r.exit_code is None else str(r.exit_code)]
        note = r.message or r.last_line  # why it is where it is, else what it last said
        line = note if len(note) <= room else note[: room - 1] + "…"
        if r.message and len(r.message) > room:
            cut.setdefault(r.message, []).append(r.key)
        table.add_row(*cells, Text(line))
    parts: list[Text | Table] = [head, table]
    # Why a replica waits or failed is the point of `status`: said in full under the table
    # (once per distinct reason) when its cell had to cut it.
    parts += [Text(f"{', '.join(keys)}: {message}") for message, keys in cut.items()]
    if view.reason:
        parts.append(Text(f"{view.reason}: {view.message or ''}"))
    return Group(*parts)


def jobs_table(views: list[JobView], now: float | None = None) -> Table:
    now = time.time() if now is None else now
    table = Table(show_edge=False, pad_edge=False)
    for col in ("name", "phase", "replicas", "running", "restarts", "age", "reason"):
        table.add_column(col)
    for v in views:
        running = sum(r.state is ReplicaState.RUNNING for r in v.replicas)
        table.add_row(
            v.name,
            Text(v.phase.value, _PHASE_STYLE[v.phase]),
            str(len(v.replicas)),
            str(running),
            str(v.restarts),
            _age(v, now),
            v.reason or "",
        )
    return table


def summary(view: JobView) -> list[str]:
    """What the job achieved: its result file, last checkpoint and TensorBoard logs."""
    lines = [
        f"job {view.name}: {view.phase.value}" + (f" ({view.message})" if view.message else "")
    ]
    if view.extra.get("exports"):  # a job on a tfkube server
        lines.append(
            f"exported models: versions {view.extra['exports']}  (serve: tfkube serve {view.name})"
        )
    if not view.log_dir:
        return lines
    log_dir = Path(view.log_dir)
    result = log_dir / "result.json"
    if result.is_file():
        try:
            data = json.loads(result.read_text())
            lines.append("result: " + ", ".join(f"{k}={v}" for k, v in data.items()))
        except (OSError, ValueError):
            pass
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
