"""Which pods have a log to read (pure; the Kubernetes backend's `logs` asks first)."""

from __future__ import annotations

from typing import Any

import pytest

from tfkube.engines.kubernetes._backend import not_started


def pod(phase: str | None, state: dict[str, Any] | None = None, **status: Any) -> dict:
    out: dict[str, Any] = {"status": {**status}}
    if phase is not None:
        out["status"]["phase"] = phase
    if state is not None:
        out["status"]["containerStatuses"] = [{"name": "tensorflow", "state": state}]
    return out


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        pytest.param(pod("Running", {"running": {}}), None, id="running"),
        pytest.param(pod("Succeeded", {"terminated": {"exitCode": 0}}), None, id="succeeded"),
        pytest.param(pod("Failed", {"terminated": {"exitCode": 1}}), None, id="failed"),
        pytest.param(
            pod("Pending", {"waiting": {"reason": "ContainerCreating"}}),
            "ContainerCreating",
            id="container-creating",
        ),
        pytest.param(pod("Pending", {"waiting": {}}), "Waiting", id="waiting-no-reason"),
        pytest.param(
            pod(
                "Pending",
                conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
            ),
            "Unschedulable",
            id="unschedulable",
        ),
        pytest.param(pod("Pending"), "Pending", id="pending-no-status-yet"),
        pytest.param(pod(None), "Pending", id="no-phase"),
        pytest.param(pod("Pending", {"running": {}}), None, id="started-phase-lagging"),
    ],
)
def test_not_started(given: dict, expected: str | None) -> None:
    assert not_started(given) == expected
