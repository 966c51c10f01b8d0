"""`tfkube status`'s panel: a reason too long for its cell is said in full under the table."""

from __future__ import annotations

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
