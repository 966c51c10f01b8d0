"""`tfkube status`'s panel: a reason too long for its cell is said in full under the table."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rich.console import Console

from tfkube.cli._display import job_panel
from tfkube.engines import JobView
from tfkube.planner import JobPhase, Replica, ReplicaState

UNBOUND = (
    "waiting for its PersistentVolumeClaims to be bound: 0/5 nodes are available: pod has "
    "unbound immediate PersistentVolumeClaims. preemption: 0/5 nodes are available"
)


def _render(view: JobView, width: int) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(job_panel(view, now=10.0, width=width))
    return console.export_text()


def _view(*replicas: Replica) -> JobView:
    return JobView(name="j", phase=JobPhase.PENDING, restarts=0, created_at=0.0, replicas=replicas)


def test_a_cut_reason_is_said_once_in_full_for_the_replicas_it_is() -> None:
    view = _view(
        Replica(role="ps", index=0, state=ReplicaState.PENDING, message=UNBOUND),
        Replica(role="worker", index=0, state=ReplicaState.PENDING, message=UNBOUND),
        Replica(role="worker", index=1, state=ReplicaState.RUNNING, last_line="step 3 " * 30),
    )
    text = " ".join(_render(view, 80).split())
    assert f"ps-0, worker-0: {UNBOUND}" in text
    assert text.count("preemption") == 1
    assert "worker-1:" not in text  # a log line is not a reason: cut in its cell only


def test_a_reason_that_fits_is_not_repeated() -> None:
    view = _view(Replica(role="worker", index=0, state=ReplicaState.PENDING, message="scheduled"))
    assert _render(view, 120).count("scheduled") == 1


def _table(views: list[JobView], width: int = 160) -> str:
    from tfkube.cli._display import jobs_table

    console = Console(width=width, record=True, color_system=None)
    console.print(jobs_table(views, now=10.0))
    return console.export_text()


def test_a_job_s_result_is_in_its_panel_and_its_list_row(tmp_path: Path) -> None:
    """`tfkube status` shows the result file of a local job (its log folder); `tfkube
    list` gives each of the names the jobs report most a column of its own."""
    logs = tmp_path / "out"
    logs.mkdir()
    (logs / "result.json").write_text('{"test_accuracy": 0.97123, "global_step": 1000}')
    done = replace(_view(), name="scored", phase=JobPhase.SUCCEEDED, log_dir=str(logs))
    panel = " ".join(_render(done, 120).split())
    assert "result test_accuracy=0.97123 global_step=1000" in panel
    lines = _table([done, _view()]).splitlines()
    assert "test_accuracy" in lines[0]
    assert "global_step" in lines[0]
    row = next(line for line in lines if line.startswith("scored"))
    assert "0.97123" in row
    assert "1000" in row


def test_a_result_file_that_breaks_the_rules_is_no_result(tmp_path: Path) -> None:
    logs = tmp_path / "out"
    logs.mkdir()
    (logs / "result.json").write_text('{"test_accuracy": "high", "<b>": 1}')
    view = replace(_view(), log_dir=str(logs))
    assert "result" not in _render(view, 120)
    assert "test_accuracy" not in _table([view])
    (logs / "result.json").unlink()
    (logs / "result.json").symlink_to(tmp_path / "elsewhere.json")
    (tmp_path / "elsewhere.json").write_text('{"secret": 1}')
    assert "secret" not in _render(view, 120)


def test_a_narrow_terminal_keeps_a_jobs_name_and_phase_whole(tmp_path: Path) -> None:
    """At 80 columns, with result columns, the other columns give way (`tfkube list` in
    a pipe, where rich assumes 80)."""
    logs = tmp_path / "out"
    logs.mkdir()
    (logs / "result.json").write_text('{"test_accuracy": 0.93, "global_step": 3}')
    done = replace(_view(), name="cli-job", phase=JobPhase.SUCCEEDED, log_dir=str(logs))
    lines = _table([done], width=80).splitlines()
    row = next(line for line in lines if line.startswith("cli-job"))
    assert "Succeeded" in row


def test_a_straggler_shows_with_its_rate() -> None:
    view = _view(
        Replica(role="worker", index=0, state=ReplicaState.RUNNING, step_rate=120.44),
        Replica(role="worker", index=1, state=ReplicaState.RUNNING, step_rate=7.25, straggler=True),
        Replica(role="ps", index=0, state=ReplicaState.RUNNING),
    )
    lines = _render(view, 80).splitlines()
    worker_1 = next(line for line in lines if line.startswith("worker-1"))
    assert "Straggler" in worker_1
    assert "7.2" in worker_1
    assert "120.4" in next(line for line in lines if line.startswith("worker-0"))
