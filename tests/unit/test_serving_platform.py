"""The platform's pure decisions about model servers and notebooks: names, what a status
answer or a Deployment means, idleness, who may do what. The Kubernetes objects they
render are render's (tests/unit/test_render_serving.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tfkube.engines import Health, WorkloadStatus
from tfkube.engines.kubernetes._services import observe_deployment
from tfkube.engines.local._services import (
    RELAYS,
    ApiRoute,
    api_route,
    observe_model_server,
    relays_for,
    service_env,
)
from tfkube.server.core.scopes import Actor, Role, Scope, allowed
from tfkube.server.workloads.model_servers import name_problem
from tfkube.server.workloads.notebooks import idle_for
from tfkube.spec import load_job_text

JOB = """
apiVersion: tfkube.io/v1alpha1
kind: TFJob
metadata: {name: mnist}
spec:
  replicas: {worker: {replicas: 2}, ps: {replicas: 1}}
  code: {source: "https://example.invalid/code.tar.gz", sha256: null}
"""


def _job(storage: dict[str, Any] | None = None):
    raw = yaml.safe_load(JOB)
    if storage:
        raw["spec"]["storage"] = storage
    return load_job_text(yaml.safe_dump(raw), "job")


# -- names, status, idleness --------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("digits", True),
        ("d-1", True),
        ("a" * 40, True),
        ("a" * 41, False),
        ("Digits", False),
        ("1digit", False),
        ("a_b", False),
        ("a-", False),
        ("", False),
    ],
)
def test_name_problem(name: str, ok: bool) -> None:
    assert (name_problem(name) is None) is ok


def _status(*versions: tuple[str, str, str]) -> dict[str, Any]:
    return {
        "model_version_status": [
            {"version": v, "state": s, "status": {"error_code": c, "error_message": "bad"}}
            for v, s, c in versions
        ]
    }


@pytest.mark.parametrize(
    ("is_alive", "answer", "observed"),
    [
        (
            False,
            None,
            WorkloadStatus(
                Health.FAILED, "the model server process exited; restarting it", exited=True
            ),
        ),
        (True, None, WorkloadStatus(Health.STARTING, "loading TensorFlow")),
        (True, {"model_version_status": []}, WorkloadStatus(Health.STARTING, "loading the model")),
        (
            True,
            _status(("5", "LOADING", "OK")),
            WorkloadStatus(Health.STARTING, "loading the model"),
        ),
        (True, _status(("5", "AVAILABLE", "OK")), WorkloadStatus(Health.READY, version=5)),
        (
            True,
            _status(("5", "END", "OK"), ("7", "AVAILABLE", "OK")),
            WorkloadStatus(Health.READY, version=7),
        ),
        (True, _status(("7", "END", "UNKNOWN")), WorkloadStatus(Health.FAILED, "version 7: bad")),
        (
            True,
            _status(("7", "END", "UNKNOWN"), ("8", "LOADING", "OK")),
            WorkloadStatus(Health.STARTING, "loading the model"),
        ),
    ],
)
def test_observe_model_server(
    is_alive: bool, answer: dict[str, Any] | None, observed: WorkloadStatus
) -> None:
    assert observe_model_server(is_alive, answer) == observed


@pytest.mark.parametrize(
    ("deployment", "status"),
    [
        (None, "Failed"),
        ({"status": {}}, "Starting"),
        ({"status": {"readyReplicas": 1}}, "Ready"),
        (
            {
                "status": {
                    "conditions": [{"type": "Progressing", "status": "False", "message": "x"}]
                }
            },
            "Failed",
        ),
    ],
)
def test_observe_deployment(deployment: dict[str, Any] | None, status: str) -> None:
    assert observe_deployment(deployment).health.value == status


def test_idle_for() -> None:
    assert idle_for(100.0, 40.0, None) == 60.0
    assert idle_for(100.0, 40.0, 90.0) == 10.0  # a busy kernel counts
    assert idle_for(100.0, 95.0, 90.0) == 5.0


def test_workloads_get_an_allow_list_of_the_servers_environment() -> None:
    server = {
        "TFKUBE_DATABASE_URL": "postgresql://u:secret@h/db",
        "PGPASSWORD": "secret",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
    }
    env = service_env(server, {"TFKUBE_TOKEN": "t"})
    assert not {"TFKUBE_DATABASE_URL", "PGPASSWORD", "AWS_SECRET_ACCESS_KEY"} & set(env)
    assert env["TFKUBE_TOKEN"] == "t"
    assert env["LANG"] == env["LC_ALL"] == "C.UTF-8"
    assert env["PATH"].endswith(":/usr/bin")  # tfkube's own Python first


@pytest.mark.parametrize(
    ("role", "scope", "granted"),
    [
        (Role.VIEWER, Scope.SERVING_READ, True),  # viewers may ask for predictions
        (Role.VIEWER, Scope.SERVING_WRITE, False),
        (Role.VIEWER, Scope.NOTEBOOKS, False),  # a notebook runs code, as a job does
        (Role.MEMBER, Scope.SERVING_WRITE, True),
        (Role.MEMBER, Scope.NOTEBOOKS, True),
        (Role.ADMIN, Scope.SERVING_WRITE, True),
        (Role.ADMIN, Scope.NOTEBOOKS, True),
    ],
)
def test_scopes(role: Role, scope: Scope, granted: bool) -> None:
    assert allowed(Actor(user_id=1, roles={7: role}), scope, 7) is granted
    assert not allowed(Actor(user_id=1, roles={8: role}), scope, 7)


@pytest.mark.parametrize(
    ("url", "route"),
    [
        ("http://127.0.0.1:8080", ApiRoute("http://127.0.0.1:8080", 8080, "127.0.0.1")),
        ("http://localhost:9000/", ApiRoute("http://localhost:9000/", 9000, "localhost")),
        ("http://10.1.2.3", ApiRoute("http://127.0.0.1:80", 80, "10.1.2.3")),
        (
            "https://tfkube.example.org/base",
            ApiRoute("https://127.0.0.1:443/base", 443, "tfkube.example.org"),
        ),
    ],
)
def test_a_notebook_in_its_own_namespace_finds_the_api_on_its_loopback(
    url: str, route: ApiRoute
) -> None:
    assert api_route(url) == route


def test_a_server_url_that_is_not_http_is_refused() -> None:
    with pytest.raises(ValueError, match="not an http"):
        api_route("ftp://127.0.0.1:21")


def test_each_server_has_a_relay_folder_of_its_own(tmp_path: Path) -> None:
    # Two servers on one machine both number their workloads from 1: "notebook-1" of one
    # must not take the other's socket.
    one, two = relays_for(tmp_path / "a"), relays_for(tmp_path / "b")
    assert one != two
    assert one.parent == two.parent == RELAYS
    assert relays_for(tmp_path / "a") == one
    assert len(os.fsencode(one / "notebook-123456.http.sock")) < 100
