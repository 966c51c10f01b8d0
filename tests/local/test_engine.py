"""The local engine with real processes (small shell entrypoints, no TensorFlow): the
lifecycle, restarts and backoff, deadlines, TTL, and that nothing is ever left behind."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from tfkube.engines import JobExists, JobNotFound
from tfkube.engines.local import LocalBackend
from tfkube.planner import JobPhase, ReplicaState
from tfkube.spec import SpecError, parse_job

from .conftest import MakeJob

# A PS that serves forever, like TensorFlow's `server.join()`, with a child of its own.
PS_FOREVER = """
if [ "$TFKUBE_ROLE" = ps ]; then sleep 600 & exec sleep 600; fi
"""


WAIT = 120.0
"""Deadline for anything a job should do in a second or two: generous, so that a loaded
machine (make test-stress) slows the test down instead of failing it."""


def wait_for(check: Callable[[], bool], timeout: float = WAIT, what: str = "condition") -> None:
    """Poll `check` until it holds (the rule for waits: docs/testing.md)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def events(home: Path, name: str) -> list[dict[str, object]]:
    path = home / "jobs" / name / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def event_time(evs: list[dict[str, object]], text: str) -> float:
    for e in evs:
        if text in str(e["message"]):
            return float(e["time"])  # type: ignore[arg-type]
    raise AssertionError(f"no event {text!r} in {[e['message'] for e in evs]}")


def start_times(evs: list[dict[str, object]], key: str) -> list[float]:
    prefix = f"started {key} "
    return [float(str(e["time"])) for e in evs if str(e["message"]).startswith(prefix)]


def test_success_wires_replicas_and_ends_ps_within_seconds(
    backend: LocalBackend, make_job: MakeJob, tfkube_home: Path
) -> None:
    job, base = make_job(
        "wired",
        PS_FOREVER
        + """
        out="$TFKUBE_LOG_DIR/$TFKUBE_ROLE-$TFKUBE_INDEX.txt"
        { echo "ARGS $*"; env | grep -E '^(TFKUBE_|TF_CONFIG)' ; } > "$out"
        sleep 0.5
        """,
        workers=2,
        ps=1,
        policy={"successPolicy": "AllWorkers"},  # worker-1 must get to write its file
    )
    view = backend.submit(job, base)
    assert view.phase in (JobPhase.PENDING, JobPhase.RUNNING)
    final = backend.wait(job.name, timeout=WAIT)

    evs = [e["message"] for e in events(tfkube_home, "wired")]
    assert final.phase is JobPhase.SUCCEEDED, (final.reason, final.message, evs)
    assert final.reason == "Succeeded"
    assert final.restarts == 0
    states = {r.key: r.state for r in final.replicas}
    assert states["worker-0"] is ReplicaState.SUCCEEDED
    assert states["ps-0"] is ReplicaState.STOPPED

    evs = events(tfkube_home, job.name)
    ended = max(event_time(evs, f"worker-{i} exited with code 0") for i in (0, 1))
    gone = event_time(evs, "supervisor exits")
    # The promise is "within seconds" (it takes milliseconds on an idle machine).
    assert gone - ended < 5.0, f"PS took {gone - ended:.2f}s to be ended"

    ports = {r.key: r.address for r in final.replicas}
    seen = (Path(final.log_dir or "") / "worker-1.txt").read_text()
    assert f"--ps_hosts={ports['ps-0']}" in seen
    assert f"--worker_hosts={ports['worker-0']},{ports['worker-1']}" in seen
    assert "--job_name=worker --task_index=1" in seen
    assert "TFKUBE_SHARD_INDEX=1" in seen
    assert "TFKUBE_NUM_SHARDS=2" in seen
    tf_config = json.loads(
        next(line.split("=", 1)[1] for line in seen.splitlines() if line.startswith("TF_CONFIG="))
    )
    assert tf_config["task"] == {"type": "worker", "index": 1}
    assert tf_config["cluster"]["ps"] == [ports["ps-0"]]


def test_always_failing_entrypoint_fails_after_exactly_backoff_limit_with_growing_delays(
    backend: LocalBackend, make_job: MakeJob, tfkube_home: Path
) -> None:
    job, base = make_job(
        "crashloop",
        "echo failing; exit 3\n",
        policy={"backoffLimit": 3, "backoff": {"baseSeconds": 0.3, "capSeconds": 10}},
    )
    backend.submit(job, base)
    final = backend.wait(job.name, timeout=WAIT)

    assert final.phase is JobPhase.FAILED
    assert final.reason == "BackoffLimitExceeded"
    assert final.restarts == 3
    evs = events(tfkube_home, job.name)
    starts = start_times(evs, "worker-0")
    exits = [float(e["time"]) for e in evs if "worker-0 exited with code 3" in str(e["message"])]  # type: ignore[arg-type]
    assert len(starts) == 4, "one start plus exactly backoffLimit restarts"
    assert len(exits) == 4
    # The backoff is the time from an exit to the next start: at least 0.3, 0.6, 1.2 s
    # (never earlier; later only by what a loaded machine adds).
    delays = [start - exit_ for exit_, start in zip(exits, starts[1:], strict=False)]
    for delay, expected in zip(delays, (0.3, 0.6, 1.2), strict=True):
        assert expected <= delay < expected + 5


def test_exit_code_policy_fails_fast_on_user_errors(
    backend: LocalBackend, make_job: MakeJob
) -> None:
    job, base = make_job("usererror", "exit 3\n", policy={"restartPolicy": "ExitCode"})
    backend.submit(job, base)
    final = backend.wait(job.name, timeout=WAIT)
    assert final.phase is JobPhase.FAILED
    assert final.reason == "ReplicaFailed"
    assert final.restarts == 0
    assert "exit code 3" in (final.message or "")


def test_exit_code_policy_retries_a_replica_killed_by_a_signal(
    backend: LocalBackend, make_job: MakeJob
) -> None:
    job, base = make_job(
        "killed",
        """
        marker="$TFKUBE_LOG_DIR/killed-once"
        if [ ! -e "$marker" ]; then touch "$marker"; kill -KILL $$; fi
        exit 0
        """,
        policy={"restartPolicy": "ExitCode", "backoff": {"baseSeconds": 0.2}},
    )
    backend.submit(job, base)
    final = backend.wait(job.name, timeout=WAIT)
    assert final.phase is JobPhase.SUCCEEDED
    assert final.restarts == 1


def test_never_policy_fails_on_first_failure(backend: LocalBackend, make_job: MakeJob) -> None:
    job, base = make_job("never", "exit 137\n", policy={"restartPolicy": "Never"})
    backend.submit(job, base)
    final = backend.wait(job.name, timeout=WAIT)
    assert final.phase is JobPhase.FAILED
    assert final.reason == "ReplicaFailed"


def test_ps_failure_restarts_the_replicas_that_use_it(
    backend: LocalBackend, make_job: MakeJob
) -> None:
    job, base = make_job(
        "psfail",
        """
        marker="$TFKUBE_LOG_DIR/ps-died-once"
        if [ "$TFKUBE_ROLE" = ps ]; then
          if [ ! -e "$marker" ]; then
            # Die once, after both workers are up (and so past their own check below).
            until [ -e "$TFKUBE_LOG_DIR/up-0" ] && [ -e "$TFKUBE_LOG_DIR/up-1" ]; do
              sleep 0.05
            done
            touch "$marker"; kill -KILL $$
          fi
          exec sleep 600
        fi
        # A worker finishes only if it started after the PS came back.
        [ -e "$marker" ] && exit 0
        touch "$TFKUBE_LOG_DIR/up-$TFKUBE_INDEX"
        exec sleep 600
        """,
        workers=2,
        ps=1,
        policy={"backoff": {"baseSeconds": 0.2}},
    )
    backend.submit(job, base)
    final = backend.wait(job.name, timeout=WAIT)
    assert final.phase is JobPhase.SUCCEEDED
    restarts = {r.key: r.restarts for r in final.replicas}
    assert restarts == {"ps-0": 1, "worker-0": 1, "worker-1": 1}
    assert final.restarts == 1, "a PS failure counts once against backoffLimit"


def test_active_deadline_ends_the_job(backend: LocalBackend, make_job: MakeJob) -> None:
    job, base = make_job(
        "deadline", PS_FOREVER + "sleep 600\n", ps=1, policy={"activeDeadlineSeconds": 2}
    )
    started = time.monotonic()
    backend.submit(job, base)
    final = backend.wait(job.name, timeout=WAIT)
    assert final.phase is JobPhase.FAILED
    assert final.reason == "DeadlineExceeded"
    assert time.monotonic() - started < 2 + 30  # the deadline, plus a loaded machine's delay
    assert all(r.state is ReplicaState.STOPPED for r in final.replicas)


def test_ttl_removes_the_finished_job(backend: LocalBackend, make_job: MakeJob) -> None:
    job, base = make_job("ttl", "exit 0\n", policy={"ttlSecondsAfterFinished": 1})
    backend.submit(job, base)
    final = backend.wait(job.name, timeout=WAIT)
    assert final.phase is JobPhase.SUCCEEDED
    wait_for(lambda: not (backend.home / "jobs" / job.name).exists(), WAIT, "TTL deletion")
    with pytest.raises(JobNotFound):
        backend.get(job.name)


def _descendants_of_replicas(backend: LocalBackend, name: str) -> list[psutil.Process]:
    procs = []
    for pid in backend.get(name).pids.values():
        parent = psutil.Process(pid)
        procs += [parent, *parent.children(recursive=True)]
    return procs


BACKGROUND_CHILDREN = """
sleep 600 &
setsid sleep 600 &
echo ready
wait
"""


@pytest.mark.faults
def test_delete_stops_every_process_tree(backend: LocalBackend, make_job: MakeJob) -> None:
    job, base = make_job("deleteme", PS_FOREVER + BACKGROUND_CHILDREN, workers=2, ps=1)
    backend.submit(job, base)
    wait_for(
        lambda: all(
            r.last_line == "ready" for r in backend.get(job.name).replicas if r.role == "worker"
        ),
        what="workers to start their children",
    )
    # 3 launchers, 3 run.sh, the PS's 2 sleeps and each worker's 2: wait until every one
    # has started (a `setsid` child needs a moment to become its `sleep`).
    wait_for(
        lambda: sum(p.name() == "sleep" for p in _descendants_of_replicas(backend, job.name)) >= 6,
        what="every sleep to start",
    )
    procs = _descendants_of_replicas(backend, job.name)
    backend.delete(job.name)
    _, alive = psutil.wait_procs(procs, timeout=WAIT)
    assert not alive
    assert not (backend.home / "jobs" / job.name).exists()


@pytest.mark.faults
def test_a_killed_supervisor_takes_its_replicas_with_it(
    backend: LocalBackend, make_job: MakeJob
) -> None:
    job, base = make_job("orphans", PS_FOREVER + BACKGROUND_CHILDREN, ps=1)
    backend.submit(job, base)
    wait_for(lambda: backend.get(job.name).replicas[-1].last_line == "ready", what="worker")
    procs = _descendants_of_replicas(backend, job.name)
    supervisor = backend._dir(job.name).read().supervisor
    assert supervisor is not None
    os.kill(supervisor.pid, signal.SIGKILL)
    _, alive = psutil.wait_procs(procs, timeout=WAIT)
    assert not alive, "replicas must not outlive their supervisor"
    view = backend.wait(job.name, timeout=WAIT)
    assert view.phase is JobPhase.FAILED
    assert view.reason == "SupervisorLost"
    # What ran went with the supervisor: stopped (the planner's rule for a stop).
    assert [r.state for r in view.replicas] == [ReplicaState.STOPPED] * 2


def test_same_name_is_refused_until_deleted_or_replaced(
    backend: LocalBackend, make_job: MakeJob
) -> None:
    job, base = make_job("twice", "sleep 600\n")
    backend.submit(job, base)
    with pytest.raises(JobExists, match="already exists"):
        backend.submit(job, base)
    with pytest.raises(JobExists, match=r"is still (Pending|Running)"):
        backend.submit(job, base, replace=True)
    backend.stop(job.name)
    assert backend.get(job.name).reason == "Stopped"
    view = backend.submit(job, base, replace=True)
    assert view.phase in (JobPhase.PENDING, JobPhase.RUNNING)
    backend.delete(job.name)


def test_env_from_command_and_args(
    backend: LocalBackend, make_job: MakeJob, tmp_path: Path
) -> None:
    job, base = make_job("envcmd", 'echo "GREETING=$GREETING PLAIN=$PLAIN ARGS=$*"\n')
    raw = job.model_dump(by_alias=True)
    raw["spec"]["replicas"]["worker"]["env"] = {
        "GREETING": {"command": "echo hello-$PLAIN"},
        "PLAIN": "x",
    }
    raw["spec"]["replicas"]["worker"]["args"] = ["--extra=1"]
    from tfkube.spec import parse_job

    backend.submit(parse_job(raw), base)
    final = backend.wait(job.name, timeout=WAIT)
    assert final.phase is JobPhase.SUCCEEDED
    log = "\n".join(backend.logs(job.name, "worker-0"))
    assert "GREETING=hello-x PLAIN=x" in log
    assert "--task_index=0 --extra=1" in log


def test_missing_entrypoint_and_folders_fail_before_anything_starts(
    backend: LocalBackend, make_job: MakeJob, tfkube_home: Path
) -> None:
    job, base = make_job("noentry", "exit 0\n")
    raw = job.model_dump(by_alias=True)
    raw["spec"]["code"]["entrypoint"] = "train.sh"
    from tfkube.spec import parse_job

    with pytest.raises(SpecError) as err:
        backend.submit(parse_job(raw), base)
    assert err.value.errors[0].field == "spec.code.entrypoint"
    assert "train.sh" in str(err.value)
    raw["spec"]["code"] = {"source": "no-such-folder"}
    with pytest.raises(SpecError) as err:
        backend.submit(parse_job(raw), base)
    assert err.value.errors[0].field == "spec.code.source"
    assert not any((tfkube_home / "jobs").iterdir()), "nothing half-created"


def test_logs_of_one_replica_all_replicas_and_follow(
    backend: LocalBackend, make_job: MakeJob
) -> None:
    job, base = make_job(
        "logs",
        'for i in 1 2 3; do echo "line $i of $TFKUBE_INDEX"; sleep 0.3; done\n',
        workers=2,
        policy={"successPolicy": "AllWorkers"},  # worker-1 must get to write every line
    )
    backend.submit(job, base)
    followed = list(backend.logs(job.name, "worker-1", follow=True))
    assert "line 3 of 1" in followed
    everything = list(backend.logs(job.name))
    assert "[worker-0] line 3 of 0" in everything
    assert "[worker-1] line 1 of 1" in everything
    with pytest.raises(ValueError, match="its replicas are worker-0, worker-1"):
        list(backend.logs(job.name, "worker-7"))


def test_gpus_are_pinned_per_replica_and_never_oversubscribed(
    backend: LocalBackend, make_job: MakeJob, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TFKUBE_GPUS", "0,1,2")
    job, base = make_job(
        "gpus",
        PS_FOREVER + 'echo "GPUS=[$CUDA_VISIBLE_DEVICES]"\n',
        workers=2,
        ps=1,
        policy={"successPolicy": "AllWorkers"},
    )
    raw = job.model_dump(by_alias=True)
    raw["spec"]["replicas"]["worker"]["resources"]["gpu"] = 1
    from tfkube.spec import parse_job

    backend.submit(parse_job(raw), base)
    backend.wait(job.name, timeout=WAIT)
    assert "GPUS=[0]" in list(backend.logs(job.name, "worker-0"))
    assert "GPUS=[1]" in list(backend.logs(job.name, "worker-1"))

    raw["metadata"]["name"] = "greedy"
    raw["spec"]["replicas"]["worker"]["resources"]["gpu"] = 2
    with pytest.raises(SpecError) as err:
        backend.submit(parse_job(raw), base)
    assert err.value.errors[0].field == "spec.replicas.worker.resources.gpu"
    assert "asks for 4 GPUs; this machine has 3" in str(err.value)


def test_a_job_waits_for_gpus_other_jobs_hold_and_says_so(
    backend: LocalBackend, make_job: MakeJob, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TFKUBE_GPUS", "0,1,2")
    holder, base = make_job("holder", 'echo "GPUS=[$CUDA_VISIBLE_DEVICES]"; sleep 600\n')
    raw = holder.model_dump(by_alias=True)
    raw["spec"]["replicas"]["worker"]["resources"]["gpu"] = 2
    backend.submit(parse_job(raw), base)
    wait_for(lambda: "GPUS=[0,1]" in list(backend.logs("holder", "worker-0")), what="holder")

    raw["metadata"]["name"] = "waiter"
    backend.submit(parse_job(raw), base)
    wait_for(
        lambda: "waiting for GPUs" in (backend.get("waiter").replicas[0].message or ""),
        what="the reason to show",
    )
    view = backend.get("waiter")
    assert view.phase is JobPhase.PENDING
    assert view.replicas[0].state is ReplicaState.PENDING
    assert "1 of this machine's 3 are free (in use by holder)" in (view.replicas[0].message or "")

    backend.delete("holder")
    wait_for(lambda: "GPUS=[0,1]" in list(backend.logs("waiter", "worker-0")), what="the GPUs")
    assert backend.get("waiter").replicas[0].state is ReplicaState.RUNNING
    backend.delete("waiter")


def test_chief_decides_and_the_evaluator_sits_outside_the_cluster(
    backend: LocalBackend, make_job: MakeJob
) -> None:
    job, base = make_job(
        "roles",
        PS_FOREVER
        + """
        echo "TF_CONFIG=$TF_CONFIG"
        touch "$TFKUBE_LOG_DIR/seen-$TFKUBE_ROLE-$TFKUBE_INDEX"
        case "$TFKUBE_ROLE" in
          chief)                       # the chief decides success, once all have printed
            until [ "$(ls "$TFKUBE_LOG_DIR" | grep -c '^seen-')" -ge 4 ]; do sleep 0.05; done
            ;;
          *) exec sleep 600 ;;         # workers and the evaluator would run on
        esac
        """,
        workers=2,
        ps=1,
        chief=1,
        evaluator=1,
    )
    backend.submit(job, base)
    final = backend.wait(job.name, timeout=WAIT)
    assert final.phase is JobPhase.SUCCEEDED
    assert final.message == "chief-0 succeeded"
    states = {r.key: r.state for r in final.replicas}
    assert states.pop("chief-0") is ReplicaState.SUCCEEDED
    assert set(states.values()) == {ReplicaState.STOPPED}
    assert next(r.address for r in final.replicas if r.key == "evaluator-0") is None

    def tf_config(key: str) -> dict[str, Any]:
        line = next(x for x in backend.logs(job.name, key) if x.startswith("TF_CONFIG="))
        config: dict[str, Any] = json.loads(line.split("=", 1)[1])
        return config

    evaluator = tf_config("evaluator-0")
    assert evaluator["task"] == {"type": "evaluator", "index": 0}
    assert set(evaluator["cluster"]) == {"chief", "ps", "worker"}
    assert tf_config("chief-0")["task"] == {"type": "chief", "index": 0}
