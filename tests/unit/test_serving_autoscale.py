"""An autoscaled model server (issue 20 point 5), pure: the `autoscale` field's
validation, the HorizontalPodAutoscaler and Deployment rendered for it, what it reads back
as replicas, and how many replicas a team may ask for (the server's cap and the team's
quota). The API server accepts the objects and the controller scales them in
tests/cluster/test_serving_autoscale.py (real CPU load scaling real pods is not tested
yet: README)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from tfkube.engines import Health
from tfkube.engines.kubernetes._services import observe_deployment
from tfkube.render import (
    ModelServerSpec,
    ServingRuntime,
    render_autoscaler,
    render_model_server,
    replica_request,
)
from tfkube.server.workloads.model_servers import autoscale_problems
from tfkube.spec import Autoscale, Resources, errors_from, load_job_text

GI = 2**30


def _job() -> Any:
    raw = {
        "apiVersion": "tfkube.io/v1alpha1",
        "kind": "TFJob",
        "metadata": {"name": "mnist"},
        "spec": {
            "replicas": {"worker": {"replicas": 1}},
            "code": {"source": "https://example.invalid/code.tar.gz"},
            "storage": {"logs": {"size": "1Gi"}},
        },
    }
    return load_job_text(yaml.safe_dump(raw), "job")


def _spec(autoscale: Autoscale | None, **kw: Any) -> ModelServerSpec:
    return ModelServerSpec(
        "digits", "team-a", _job(), runtime=ServingRuntime.TFKUBE, autoscale=autoscale, **kw
    )


def _deployment(spec: ModelServerSpec) -> dict[str, Any]:
    (found,) = [o for o in render_model_server(spec) if o["kind"] == "Deployment"]
    return found


# -- the field ----------------------------------------------------------------------------


def test_defaults_and_camel_case_names() -> None:
    asked = Autoscale.model_validate({"maxReplicas": 3})
    assert (asked.min_replicas, asked.max_replicas, asked.target_cpu_utilization) == (1, 3, 70)
    assert asked.scale_down_stabilization_seconds is None
    assert asked.model_dump(by_alias=True) == {
        "minReplicas": 1,
        "maxReplicas": 3,
        "targetCPUUtilization": 70,
        "scaleDownStabilizationSeconds": None,
    }
    again = Autoscale.model_validate(asked.model_dump(by_alias=True))  # the row's JSON
    assert again == asked


@pytest.mark.parametrize(
    ("asked", "field", "words"),
    [
        ({}, "maxReplicas", "required"),
        ({"maxReplicas": 0}, "maxReplicas", "at least 1"),
        ({"maxReplicas": 101}, "maxReplicas", "at most 100"),
        ({"minReplicas": 0, "maxReplicas": 2}, "minReplicas", "at least 1"),
        ({"minReplicas": 3, "maxReplicas": 2}, "maxReplicas", "less than minReplicas (3)"),
        ({"maxReplicas": 2, "targetCPUUtilization": 0}, "targetCPUUtilization", "at least 1"),
        ({"maxReplicas": 2, "targetCPUUtilization": 101}, "targetCPUUtilization", "at most"),
        ({"maxReplicas": 2, "scaleDownStabilizationSeconds": -1}, "scaleDown", "at least 0"),
        ({"maxReplicas": 2, "scaleDownStabilizationSeconds": 3601}, "scaleDown", "at most"),
        ({"maxReplicas": 2, "targetCpuUtilization": 50}, "targetCpuUtilization", "unknown"),
        ({"maxReplicas": "two"}, "maxReplicas", "integer"),
    ],
)
def test_a_bad_field_is_named(asked: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Autoscale.model_validate(asked)
    errors = errors_from(caught.value)
    assert any(e.field.startswith(field) and words in e.message for e in errors), errors


# -- the objects ----------------------------------------------------------------------------


def test_the_autoscaler_scales_the_deployment_on_cpu_and_is_owned_by_it() -> None:
    spec = _spec(
        Autoscale(
            min_replicas=1,
            max_replicas=2,
            target_cpu_utilization=20,
            scale_down_stabilization_seconds=15,
        )
    )
    hpa = render_autoscaler(spec, "uid-1")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["kind"] == "HorizontalPodAutoscaler"
    assert hpa["metadata"]["name"] == "digits-serving"
    assert hpa["metadata"]["namespace"] == "team-a"
    assert hpa["metadata"]["labels"]["tfkube.io/model-server"] == "digits"
    (owner,) = hpa["metadata"]["ownerReferences"]
    assert owner == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "digits-serving",
        "uid": "uid-1",
    }  # no blockOwnerDeletion: the server needs no right on the Deployment's finalizers
    assert hpa["spec"] == {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "digits-serving"},
        "minReplicas": 1,
        "maxReplicas": 2,
        "metrics": [
            {
                "type": "Resource",
                "resource": {
                    "name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 20},
                },
            }
        ],
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 15}},
    }
    assert _deployment(spec)["metadata"]["name"] == hpa["spec"]["scaleTargetRef"]["name"]


def test_kubernetes_default_scale_down_unless_asked() -> None:
    hpa = render_autoscaler(_spec(Autoscale(max_replicas=3)))
    assert "behavior" not in hpa["spec"]
    assert "ownerReferences" not in hpa["metadata"]  # no uid given: none


def test_no_autoscaler_without_autoscale() -> None:
    with pytest.raises(ValueError, match="no autoscaling"):
        render_autoscaler(_spec(None))


def test_an_autoscaled_deployment_leaves_its_replica_count_to_the_autoscaler() -> None:
    fixed = _deployment(_spec(None))
    scaled = _deployment(_spec(Autoscale(max_replicas=3)))
    assert fixed["spec"]["replicas"] == 1
    # Applied again on a version roll: a count here would reset the autoscaler's choice.
    assert "replicas" not in scaled["spec"]
    # Everything else is the same Deployment (rolling update with surge, probes, ...).
    del fixed["spec"]["replicas"]
    assert scaled == fixed


@pytest.mark.parametrize(
    ("resources", "cpu"),
    [
        (None, "1"),  # the default: 1 CPU, 2Gi
        (Resources(cpu="250m", memory="1Gi"), "250m"),
        (Resources(memory="1Gi"), "1"),  # CPU filled in: utilization needs a request
    ],
)
def test_an_autoscaled_replica_always_requests_cpu(resources: Resources | None, cpu: str) -> None:
    more = {} if resources is None else {"resources": resources}
    spec = _spec(Autoscale(max_replicas=2), **more)
    (container,) = _deployment(spec)["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["requests"]["cpu"] == cpu
    assert container["resources"]["limits"]["cpu"] == cpu


def test_a_fixed_model_server_keeps_what_it_asked() -> None:
    spec = _spec(None, resources=Resources(memory="1Gi"))
    (container,) = _deployment(spec)["spec"]["template"]["spec"]["containers"]
    assert container["resources"] == {"requests": {"memory": "1Gi"}, "limits": {"memory": "1Gi"}}


# -- what it reads back ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("deployment", "hpa", "health", "ready", "desired"),
    [
        ({"spec": {"replicas": 1}, "status": {"readyReplicas": 1}}, None, Health.READY, 1, 1),
        (
            {"spec": {"replicas": 1}, "status": {"readyReplicas": 1}},
            {"status": {"currentReplicas": 1, "desiredReplicas": 2}},
            Health.READY,
            1,
            2,
        ),
        (
            {"spec": {"replicas": 2}, "status": {"readyReplicas": 2}},
            {"status": {}},  # the autoscaler has not decided yet
            Health.READY,
            2,
            2,
        ),
        ({"spec": {"replicas": 1}, "status": {}}, None, Health.STARTING, 0, 1),
    ],
)
def test_replicas_read_back(
    deployment: dict[str, Any], hpa: dict[str, Any] | None, health: Health, ready: int, desired: int
) -> None:
    seen = observe_deployment(deployment, hpa)
    assert (seen.health, seen.replicas, seen.desired_replicas) == (health, ready, desired)


# -- what a team may ask for -------------------------------------------------------------------


def _problems(
    max_replicas: int,
    resources: Resources | None = None,
    quota: dict[str, object] | None = None,
    cap: int = 4,
    engine_scales: bool = True,
) -> list[str]:
    found = autoscale_problems(
        Autoscale(max_replicas=max_replicas),
        replica_request(
            resources if resources is not None and resources.model_fields_set else None
        ),
        engine_scales=engine_scales,
        max_replicas=cap,
        quota=quota or {},
        team="vision",
    )
    return [f"{e.field}: {e.message}" for e in found]


def test_within_the_cap_and_no_quota() -> None:
    assert _problems(4) == []


def test_the_servers_cap() -> None:
    (problem,) = _problems(5, cap=4)
    assert problem.startswith("autoscale.maxReplicas: 5 is more than this server allows (4")
    assert "--serving-max-replicas" in problem


def test_an_engine_that_cannot_scale_refuses() -> None:
    (problem,) = _problems(2, engine_scales=False)
    assert problem.startswith("autoscale: ")
    assert "Kubernetes engine" in problem


@pytest.mark.parametrize(
    ("most", "resources", "quota", "fits"),
    [
        (3, Resources(cpu="1"), {"cpu": 2}, 2),
        (4, None, {"cpu": 3.5}, 3),  # the default: 1 CPU each
        (4, Resources(cpu="500m"), {"cpu": 1.5}, 3),
        (3, Resources(cpu="100m", memory="1Gi"), {"memory": 2 * GI}, 2),
        (2, None, {"memory": 3 * GI}, 1),  # the default: 2Gi each
        (4, Resources(cpu="100m"), {"memory": GI}, 2),  # no memory asked: the LimitRange's
        (4, Resources(cpu="100m", memory="1Mi"), {"cpu": 0.3}, 3),  # 3 x 0.1 fits 0.3
    ],
)
def test_the_teams_quota_bounds_the_most_replicas(
    most: int, resources: Resources | None, quota: dict[str, object], fits: int
) -> None:
    (problem,) = _problems(most, resources, quota)
    assert problem.startswith("autoscale.maxReplicas: ")
    assert "team vision's quota" in problem
    assert f"(at most {fits})" in problem
    assert _problems(fits, resources, quota) == []


def test_replica_request_is_what_is_rendered() -> None:
    assert replica_request(None) == (1.0, 2 * GI)
    assert replica_request(Resources(cpu="250m")) == (0.25, 512 * 2**20)
    assert replica_request(Resources(memory="1Gi")) == (1.0, GI)


# -- how the CLI shows it ------------------------------------------------------------------------


def _out(**kw: Any) -> Any:
    from tfkube.wire import ModelServerOut

    base = {"id": "a", "team": "t", "name": "digits", "job": "mnist", "status": "Ready",
            "url": "http://x/v1/models/digits", "created_at": 0.0}  # fmt: skip
    return ModelServerOut.model_validate({**base, **kw})


def test_the_cli_shows_replicas_and_the_autoscaling() -> None:
    from tfkube.cli._workloads import replicas_text, servers_lines

    scaled = _out(
        replicas=1,
        desired_replicas=2,
        autoscale={"minReplicas": 1, "maxReplicas": 3, "targetCPUUtilization": 20},
    )
    assert replicas_text(scaled) == "1 of 2 replicas ready (autoscaled 1-3 at 20% CPU)"
    assert replicas_text(_out()) == ""  # the local engine does not count them
    header, row, _url = servers_lines([scaled])
    assert "REPLICAS" in header.split()
    assert "1->2 (auto 1-3)" in row
    _, fixed, _ = servers_lines([_out(replicas=1, desired_replicas=1)])
    assert " 1 " in fixed
    assert "auto" not in fixed


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--engine", "server", "--min-replicas", "2"], "--min-replicas: autoscaling needs"),
        (["--engine", "server", "--target-cpu", "20"], "--target-cpu: autoscaling needs"),
        (["--max-replicas", "2"], "--engine local runs one model server here"),
        (["--engine", "server", "--max-replicas", "0"], "--max-replicas"),
        (["--engine", "server", "--max-replicas", "2", "--target-cpu", "101"], "--target-cpu"),
    ],
)
def test_serve_refuses_autoscaling_flags_by_name(argv: list[str], words: str) -> None:
    from typer.testing import CliRunner

    from tfkube.cli import app

    result = CliRunner().invoke(app, ["serve", "mnist", *argv])
    assert result.exit_code == 2, result.output
    assert words in " ".join(result.output.split()), result.output
