"""`ObserveMemo` never changes an observation: over random histories of one job (pods made,
changed, failed, preempted, deleted and left; Jobs completing, failing, dying and replaced by
a new generation; the status's handled failures, phase, restart backoff and stall detection
moving), `observe` with the memo the operator keeps equals `observe` without, step by step.
And it does save the work: a pod that did not change is not read again."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tfkube.kube import _observe
from tfkube.kube._observe import ObserveMemo, Prior, format_time, observe
from tfkube.planner import JobPhase

from ._kube_objects import NOW, T0, job_model, pod, role_job

ROLES = {"ps": 2, "worker": 6, "chief": 1}
PHASES = ["Pending", "Running", "Succeeded", "Failed"]


def _random_pod(rng: random.Random, role: str, index: int, generation: int) -> dict[str, Any]:
    phase = rng.choice(PHASES)
    extra: dict[str, Any] = {}
    if phase == "Pending" and rng.random() < 0.5:
        extra["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "x"}
        ]
    if rng.random() < 0.1:
        extra.setdefault("conditions", []).append(
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
        )
    created = T0 + rng.randrange(50)
    return pod(
        role,
        index,
        phase,
        code=rng.choice([None, 0, 1, 137]) if phase == "Failed" else None,
        name=f"j-{role}-{index}-{rng.randrange(10**6):06d}",
        created=created,
        generation=generation if rng.random() < 0.9 else generation - 1,
        dying=rng.random() < 0.1,
        **extra,
    )


def _history(seed: int, steps: int) -> list[tuple[Any, Prior, list[Any], list[Any], Any, float]]:
    """(job, prior, jobs, pods, events, now) for each step of one job's random history. Pods are
    replaced, never changed in place (as the operator's informer does)."""
    rng = random.Random(seed)
    stall = rng.choice([None, None, 15])
    job = job_model(ps=ROLES["ps"], workers=ROLES["worker"], chief=ROLES["chief"])
    if stall is not None:
        job = job_model(ps=2, workers=6, chief=1, stallSeconds=stall)
    generation = 0
    pods: list[Any] = []
    out = []
    for step in range(steps):
        for _ in range(rng.randrange(4)):  # new pods
            role = rng.choice(list(ROLES))
            pods.append(_random_pod(rng, role, rng.randrange(ROLES[role]), generation))
        for i in rng.sample(range(len(pods)), min(len(pods), rng.randrange(4))):  # changed
            role = pods[i]["metadata"]["labels"]["tfkube.io/replica-type"]
            index = int(pods[i]["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"])
            pods[i] = _random_pod(rng, role, index, generation)
        for _ in range(rng.randrange(3)):  # gone
            if pods:
                pods.pop(rng.randrange(len(pods)))
        if rng.random() < 0.05:  # a whole-job restart: a new generation
            generation += 1
        jobs = [
            role_job(
                role,
                generation=generation,
                completed=rng.choice(["", "0", "0-1"]),
                failed=rng.choice(["", "", "1"]),
                condition=rng.choice([None, None, None, "BackoffLimitExceeded"]),
                dying=rng.random() < 0.15,
                suspend=rng.random() < 0.2,
            )
            for role in ROLES
            if rng.random() < 0.9  # a role's Job missing now and then
        ]
        names = [p["metadata"]["name"] for p in pods]
        prior = Prior(
            phase=rng.choice([JobPhase.RUNNING] * 4 + [JobPhase.FAILED, JobPhase.PENDING]),
            handled=frozenset(rng.sample(names, min(len(names), rng.randrange(3)))),
            generations=dict.fromkeys(ROLES, generation),
            restart_at=rng.choice([None, NOW + 5]),
            stalled=frozenset(rng.sample(["worker-0", "worker-1", "ps-0"], rng.randrange(2))),
            storage=rng.choice([{}, {"logs": "emptyDir"}]),
        )
        events = [
            {
                "reason": "FailedCreate",
                "involvedObject": {"kind": "Job", "name": f"j-{role}"},
                "message": f"exceeded quota {rng.randrange(3)}",
                "lastTimestamp": format_time(T0),
            }
            for role in ROLES
            if rng.random() < 0.2
        ]
        out.append((job, prior, jobs, list(pods), events, NOW + step))
    return out


@pytest.mark.parametrize("seed", range(100))
def test_observe_with_the_memo_equals_observe_without(seed: int) -> None:
    memo = ObserveMemo()
    for step, (job, prior, jobs, pods, events, now) in enumerate(_history(seed, 50)):
        assert observe(job, prior, jobs, pods, now, events, memo) == observe(
            job, prior, jobs, pods, now, events
        ), f"seed {seed}, step {step}"


def test_a_pod_that_did_not_change_is_not_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    job = job_model(ps=1, workers=3)
    jobs = [role_job("ps"), role_job("worker")]
    pods = [pod("ps", 0)] + [pod("worker", i, name=f"w{i}") for i in range(3)]
    reads: list[str] = []
    read_replica = _observe.read_replica

    def counting(role: str, index: int, *args: Any, **kwargs: Any) -> Any:
        reads.append(f"{role}-{index}")
        return read_replica(role, index, *args, **kwargs)

    monkeypatch.setattr(_observe, "read_replica", counting)
    memo = ObserveMemo()
    first = observe(job, Prior(), jobs, pods, NOW, memo=memo)
    assert sorted(reads) == ["ps-0", "worker-0", "worker-1", "worker-2"]
    reads.clear()
    pods[2] = pod("worker", 1, "Failed", 1, name="w1")  # one pod changed: a new object
    second = observe(job, Prior(), jobs, pods, NOW + 1, memo=memo)
    assert reads == ["worker-1"]
    assert second.replicas["worker-1"].status.state.value == "Failed"
    assert second.replicas["worker-0"] == first.replicas["worker-0"]
    reads.clear()
    handled = Prior(handled=frozenset({"w1"}))  # the status moved: every replica read again
    observe(job, handled, jobs, pods, NOW + 2, memo=memo)
    assert sorted(reads) == ["ps-0", "worker-0", "worker-1", "worker-2"]
