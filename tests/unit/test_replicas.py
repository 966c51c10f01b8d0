"""One replica key (`tfkube.tfcluster.replica_key`), one replica record (`tfkube.planner.
Replica`) and its conversions, each in one place: from the planner's state, to and from
the server's database and API (the same JSON), into the client's view; and the one rule
for what a stop makes of a replica's state (`ReplicaState.after_stop`)."""

from __future__ import annotations

from typing import Any

import pytest

from tfkube.client._backend import job_view
from tfkube.engines.local._store import ReplicaRecord
from tfkube.planner import JobPhase, Replica, ReplicaState, ReplicaStatus, settled
from tfkube.server.core.tables import Job
from tfkube.server.jobs.service import JobService, pending_replicas
from tfkube.spec import parse_job
from tfkube.tfcluster import ROLES, parse_replica_key, replica_key, replica_order
from tfkube.wire import JobOut, replicas_json, replicas_of

# -- the key ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "index", "key"),
    [
        ("chief", 0, "chief-0"),
        ("ps", 3, "ps-3"),
        ("worker", 10, "worker-10"),
        ("evaluator", 0, "evaluator-0"),
        ("worker", 999_999, "worker-999999"),
    ],
)
def test_a_key_and_back(role: str, index: int, key: str) -> None:
    assert replica_key(role, index) == key
    assert parse_replica_key(key) == (role, index)


@pytest.mark.parametrize(
    "text",
    [
        "worker",
        "worker-",
        "-0",
        "worker-01",  # no leading zero: one name per replica
        "worker--1",
        "worker-+1",
        "worker-1000000",
        "master-0",
        "Worker-0",
        "worker-0/../x",
        "worker-0\n",
        "worker-0 ",
        "",
    ],
)
def test_what_is_no_replicas_name(text: str) -> None:
    with pytest.raises(ValueError, match="not a replica name"):
        parse_replica_key(text)


def test_replicas_sort_by_role_then_index() -> None:
    keys = ["worker-10", "ps-1", "worker-2", "evaluator-0", "chief-0", "ps-0"]
    ordered = sorted(keys, key=lambda k: replica_order(*parse_replica_key(k)))
    assert ordered == ["chief-0", "ps-0", "ps-1", "worker-2", "worker-10", "evaluator-0"]
    assert list(ROLES) == ["chief", "ps", "worker", "evaluator"]
    assert replica_order("other", 0) > replica_order("evaluator", 99), "unknown roles last"


def test_the_keys_of_a_job_are_the_planners_and_the_records() -> None:
    job = parse_job(
        {
            "metadata": {"name": "j"},
            "spec": {
                "replicas": {"ps": {"replicas": 1}, "worker": {"replicas": 2}},
                "code": {"source": "c"},
            },
        }
    )
    keys = [replica_key(role, i) for role, i in job.replica_keys()]
    assert keys == ["ps-0", "worker-0", "worker-1"]
    assert [r.key for r in pending_replicas(job, "queued")] == keys
    assert ReplicaRecord(role="worker", index=1, port=0).key == "worker-1"
    assert ReplicaStatus("worker", 1).key == "worker-1"


# -- the one record ----------------------------------------------------------------------------


def test_a_replica_from_the_planners_state() -> None:
    status = ReplicaStatus(
        "worker", 2, ReplicaState.FAILED, exit_code=3, restarts=1, message="launcher's own"
    )
    replica = Replica.of(status, message="worker-2 failed", address="127.0.0.1:5", node="n1")
    assert replica == Replica(
        role="worker",
        index=2,
        state=ReplicaState.FAILED,
        exit_code=3,
        restarts=1,
        message="worker-2 failed",
        address="127.0.0.1:5",
        node="n1",
    )
    assert replica.key == "worker-2"


def test_the_local_record_gives_the_planners_state() -> None:
    record = ReplicaRecord(
        role="ps",
        index=0,
        port=2222,
        state=ReplicaState.BACKOFF,
        restarts=2,
        next_start_at=5.0,
        held="waiting for GPUs",
        stalled=True,
        progress_at=1.0,
        message="m",
        exit_code=137,
    )
    assert record.status() == ReplicaStatus(
        "ps", 0, ReplicaState.BACKOFF, 137, 2, 5.0, "m", 1.0, True, "waiting for GPUs"
    )


BEFORE = {
    "key": "worker-0",
    "role": "worker",
    "index": 0,
    "state": "Running",
    "restarts": 1,
    "exit_code": None,
    "address": "127.0.0.1:4000",
    "node": None,
    "message": "",
    "last_line": "step 10",
}
"""A replica as the server stored and answered it before the one record (no `stalled`)."""


def test_the_database_and_the_api_hold_the_records_json() -> None:
    replica = Replica(
        role="worker",
        index=0,
        state=ReplicaState.RUNNING,
        restarts=1,
        address="127.0.0.1:4000",
        last_line="step 10",
    )
    stored = replicas_json([replica])
    assert stored == [{**BEFORE, "stalled": False, "step_rate": None, "straggler": False}]
    assert replicas_of(stored) == [replica]
    assert replicas_of([BEFORE]) == [replica], "rows written before read the same"
    answered = JobOut.model_validate(
        {
            "id": "1",
            "team": "t",
            "name": "j",
            "phase": "Running",
            "created_at": 0.0,
            "replicas": stored,
        }
    )
    assert answered.model_dump(mode="json")["replicas"] == stored
    assert job_view(answered).replicas == (replica,), "the client's view: the same records"


def test_a_key_sent_is_never_believed() -> None:
    assert replicas_of([{**BEFORE, "key": "ps-9"}])[0].key == "worker-0"


# -- the stop rule -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "after"),
    [
        (ReplicaState.PENDING, ReplicaState.STOPPED),
        (ReplicaState.RUNNING, ReplicaState.STOPPED),
        (ReplicaState.BACKOFF, ReplicaState.STOPPED),
        (ReplicaState.SUCCEEDED, ReplicaState.SUCCEEDED),
        (ReplicaState.FAILED, ReplicaState.FAILED),
        (ReplicaState.STOPPED, ReplicaState.STOPPED),
    ],
)
def test_what_a_stop_makes_of_a_replica(state: ReplicaState, after: ReplicaState) -> None:
    assert state.after_stop is after
    assert state.stoppable is (after is not state)


def test_a_job_the_server_ends_stops_its_replicas_by_the_planners_rule() -> None:
    states = list(ReplicaState)
    row: Any = Job(
        replicas=replicas_json(
            Replica(role="worker", index=i, state=s, message="queued") for i, s in enumerate(states)
        )
    )
    JobService._end(row, "Failed", "Lost", "gone", now=1.0)
    ended = replicas_of(row.replicas)
    assert [r.state for r in ended] == [s.after_stop for s in states]
    assert all(r.message == "" for r in ended)
    assert (row.state, row.phase, row.reason, row.finished_at) == ("ended", "Failed", "Lost", 1.0)


@pytest.mark.parametrize(
    ("phase", "states", "over"),
    [
        ("Succeeded", [ReplicaState.SUCCEEDED, ReplicaState.STOPPED], True),
        ("Failed", [ReplicaState.FAILED, ReplicaState.BACKOFF], True),
        ("Failed", [ReplicaState.FAILED, ReplicaState.RUNNING], False),
        ("Succeeded", [ReplicaState.PENDING], False),
        ("Running", [ReplicaState.SUCCEEDED], False),
        ("Restarting", [], False),
        ("Succeeded", [], True),
    ],
)
def test_when_a_job_is_over(phase: str, states: list[ReplicaState], over: bool) -> None:
    """One rule for `JobView.done`, the client's wait and the server's watch stream."""
    replicas = [Replica(role="worker", index=i, state=s) for i, s in enumerate(states)]
    assert settled(phase, replicas) is over
    assert settled(JobPhase(phase), replicas) is over
