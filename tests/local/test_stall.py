"""Stall detection on the local engine: a replica alive but silent (no log line, nothing
written in the job's log/checkpoint folder) for runPolicy.stallSeconds is shown Stalled,
an event is recorded, and stallAction decides what else happens."""

from __future__ import annotations

from pathlib import Path

from tfkube.engines.local import LocalBackend
from tfkube.engines.local._store import JobDir
from tfkube.planner import JobPhase, ReplicaState

from .conftest import MakeJob
from .test_cli import tfkube
from .test_engine import WAIT, wait_for

# worker-0 keeps talking; worker-1 says one line and then hangs, like a lost session.
CHATTY_AND_SILENT = """
echo "worker $TFKUBE_INDEX starts"
if [ "$TFKUBE_INDEX" = 0 ]; then
  while true; do echo tick; sleep 0.3; done
fi
exec sleep 600
"""


def events(home: Path, name: str) -> list[str]:
    return [str(e["message"]) for e in JobDir(home / "jobs" / name).read_events()]


def test_a_silent_replica_is_reported_stalled(
    backend: LocalBackend, make_job: MakeJob, tfkube_home: Path
) -> None:
    job, base = make_job("quiet", CHATTY_AND_SILENT, workers=2, policy={"stallSeconds": 2})
    backend.submit(job, base)

    def stalled() -> bool:
        return any(r.stalled for r in backend.get(job.name).replicas)

    wait_for(stalled, WAIT, "worker-1 to be stalled")
    view = backend.get(job.name)
    flags = {r.key: r.stalled for r in view.replicas}
    assert flags == {"worker-0": False, "worker-1": True}
    worker_1 = view.replicas[1]
    assert worker_1.state is ReplicaState.RUNNING
    assert (worker_1.message or "").startswith("no progress for ")
    assert view.phase is JobPhase.RUNNING, "Report only reports"
    assert any(e.startswith("worker-1 is stalled") for e in events(tfkube_home, job.name))
    shown = tfkube("status", job.name)
    assert "Stalled" in shown.stdout
    backend.delete(job.name)


def test_stall_action_fail_ends_the_job(backend: LocalBackend, make_job: MakeJob) -> None:
    job, base = make_job(
        "hung", CHATTY_AND_SILENT, workers=2, policy={"stallSeconds": 2, "stallAction": "Fail"}
    )
    backend.submit(job, base)
    final = backend.wait(job.name, timeout=WAIT)
    assert final.phase is JobPhase.FAILED
    assert final.reason == "Stalled"
    assert (final.message or "").startswith("worker-1 made no progress for ")


def test_writes_in_the_log_folder_count_as_progress(
    backend: LocalBackend, make_job: MakeJob, tfkube_home: Path
) -> None:
    # worker-1 is silent but checkpoints: never stalled. worker-0 talks until the first
    # checkpoint, then goes silent for twice stallSeconds: only the checkpoints (in the
    # shared folder) show that the job progresses, and they are enough.
    script = """
    if [ "$TFKUBE_INDEX" = 1 ]; then
      while true; do date > "$TFKUBE_CHECKPOINT_DIR/ckpt"; sleep 0.3; done
    fi
    until [ -e "$TFKUBE_CHECKPOINT_DIR/ckpt" ]; do echo waiting; sleep 0.2; done
    sleep 6
    """
    job, base = make_job(
        "checkpoints", script, workers=2, policy={"stallSeconds": 3, "stallAction": "Fail"}
    )
    backend.submit(job, base)
    final = backend.wait(job.name, timeout=WAIT)
    assert final.phase is JobPhase.SUCCEEDED, final.message
    assert not any("stalled" in e for e in events(tfkube_home, job.name))
