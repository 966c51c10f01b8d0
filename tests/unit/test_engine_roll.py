"""`Engine.roll` (RunnersByKind, pure dispatch): a runner that can roll in place does (a
Kubernetes Deployment's rolling update); any other is stopped with the old description
and started with the new (the local engine's process)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tfkube.engines import Handle, ModelServerWorkload, Tenant
from tfkube.engines._workloads import RunnersByKind
from tfkube.spec import load_job_text

TENANT = Tenant("team-a", "tfkube-team-a")


JOB = load_job_text(
    "apiVersion: tfkube.io/v1alpha1\nkind: TFJob\nmetadata: {name: mnist}\n"
    "spec: {replicas: {worker: {replicas: 1}}, code: {source: 'https://example.invalid/c.tgz'}}\n",
    "job",
)


def _workload(version: int | None) -> ModelServerWorkload:
    return ModelServerWorkload("id1", "digits", JOB, Path("/x/export"), version=version)


class Restarting:
    """A runner with no `roll`: what it was asked, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int | None]] = []

    def start(self, tenant: Tenant, workload: Any) -> Handle:
        self.calls.append(("start", workload.version))
        return Handle({"pid": 2})

    def stop(self, tenant: Tenant, workload: Any, handle: Handle) -> None:
        self.calls.append(("stop", workload.version))

    def status(self, tenant: Tenant, workload: Any, handle: Handle) -> Any:
        raise NotImplementedError

    def upstream(self, tenant: Tenant, workload: Any, handle: Handle) -> Any:
        raise NotImplementedError


class InPlace(Restarting):
    def roll(self, tenant: Tenant, old: Any, new: Any, handle: Handle) -> Handle:
        self.calls.append(("roll", new.version))
        return Handle({"same": True})


class Engine(RunnersByKind):
    keeps_running = True

    def __init__(self, runner: Restarting) -> None:
        self.runner = runner

    def runners(self) -> Mapping[type, Any]:
        return {ModelServerWorkload: self.runner}


def test_a_runner_that_rolls_in_place_is_asked_to() -> None:
    runner = InPlace()
    handle = Engine(runner).roll(TENANT, _workload(1), _workload(2), Handle({"pid": 1}))
    assert runner.calls == [("roll", 2)]  # never stopped: the old version answers meanwhile
    assert handle.data == {"same": True}


def test_any_other_runner_is_stopped_then_started_with_the_new_version() -> None:
    runner = Restarting()
    handle = Engine(runner).roll(TENANT, _workload(1), _workload(None), Handle({"pid": 1}))
    assert runner.calls == [("stop", 1), ("start", None)]
    assert handle.data == {"pid": 2}
