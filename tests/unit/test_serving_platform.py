"""The platform's pure decisions about model servers and notebooks: names, what a status
answer or a Deployment means, idleness, who may do what; and the Kubernetes objects they
render (tests/cluster/test_serving_dry_run.py has the API server check them)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tfkube.engines import Health, WorkloadStatus
from tfkube.engines.kubernetes._services import observe_deployment
from tfkube.engines.local._services import observe_model_server, service_env
from tfkube.render import ModelServerSpec, NotebookSpec, render_model_server, render_notebook
from tfkube.render._serving import job_export_volume, model_config
from tfkube.server.core.scopes import Actor, Role, Scope, allowed
from tfkube.server.workloads.model_servers import name_problem
from tfkube.server.workloads.notebooks import idle_for
from tfkube.spec import Resources, load_job_text

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


# -- Kubernetes objects ------------------------------------------------------------------


def _by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objects}


@pytest.mark.parametrize(
    ("storage", "claim", "sub_path"),
    [
        (None, "mnist-logs", "export"),
        ({"logs": {"claimName": "outputs"}}, "outputs", "mnist/export"),
    ],
)
def test_export_volume(storage: dict[str, Any] | None, claim: str, sub_path: str) -> None:
    assert job_export_volume(_job(storage)) == (claim, sub_path)


def test_model_config_policies() -> None:
    assert "latest { num_versions: 1 }" in model_config("digits", None)
    assert "specific { versions: 301 }" in model_config("digits", 301)
    assert 'base_path: "/models/digits"' in model_config("digits", None)


def test_model_server_objects() -> None:
    spec = ModelServerSpec(
        "digits",
        "team-a",
        _job({"logs": {"claimName": "outputs"}}),
        version=301,
        resources=Resources(cpu="2", memory="1Gi"),
    )
    objects = render_model_server(spec)
    assert [o["kind"] for o in objects] == ["ConfigMap", "Deployment", "Service"]
    assert {o["metadata"]["name"] for o in objects} == {"digits-serving"}
    assert {o["metadata"]["namespace"] for o in objects} == {"team-a"}
    kinds = _by_kind(objects)
    assert "specific { versions: 301 }" in kinds["ConfigMap"]["data"]["models.config"]
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"].startswith("tensorflow/serving:")
    assert container["command"] == ["tensorflow_model_server"]
    assert "--rest_api_port=8501" in container["args"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/v1/models/digits", "port": "http"}
    assert container["resources"] == {
        "requests": {"cpu": "2", "memory": "1Gi"},
        "limits": {"cpu": "2", "memory": "1Gi"},
    }
    model = next(m for m in container["volumeMounts"] if m["name"] == "model")
    assert model == {
        "name": "model",
        "mountPath": "/models/digits",
        "subPath": "mnist/export",
        "readOnly": True,
    }
    volume = next(v for v in pod["volumes"] if v["name"] == "model")
    assert volume["persistentVolumeClaim"] == {"claimName": "outputs", "readOnly": True}
    selector = kinds["Deployment"]["spec"]["selector"]["matchLabels"]
    labels = kinds["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= labels.items()
    assert kinds["Service"]["spec"]["selector"] == selector
    assert "tfkube.io/job-name" not in labels  # the operator watches pods with that label
    assert {p["name"] for p in kinds["Service"]["spec"]["ports"]} == {"http", "grpc"}
    assert "&id" not in yaml.safe_dump_all(objects)  # nothing shared between objects


def test_notebook_objects() -> None:
    spec = NotebookSpec(
        notebook_id="abc123",
        namespace="team-a",
        user="ann",
        team="team-a",
        base_url="/proxy/notebook/abc123/",
        server_url="http://tfkube-server.tfkube.svc:8470",
        jupyter_token="jupyter-secret-value",
        client_token="client-secret-value",
        storage_class="fast",
    )
    objects = render_notebook(spec)
    assert [o["kind"] for o in objects] == ["Secret", "Service", "StatefulSet"]
    assert {o["metadata"]["name"] for o in objects} == {"notebook-abc123"}
    kinds = _by_kind(objects)
    assert kinds["Secret"]["stringData"] == {
        "JUPYTER_TOKEN": "jupyter-secret-value",
        "TFKUBE_TOKEN": "client-secret-value",
    }
    assert kinds["Service"]["spec"]["clusterIP"] == "None"
    sts = kinds["StatefulSet"]["spec"]
    assert sts["serviceName"] == "notebook-abc123"
    (container,) = sts["template"]["spec"]["containers"]
    assert "--ServerApp.base_url=/proxy/notebook/abc123/" in container["command"]
    env = {e["name"]: e for e in container["env"]}
    assert env["TFKUBE_URL"]["value"] == "http://tfkube-server.tfkube.svc:8470"
    assert env["TFKUBE_TEAM"]["value"] == "team-a"
    # The tokens come from the Secret: never in the pod spec itself.
    assert env["TFKUBE_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "notebook-abc123",
        "key": "TFKUBE_TOKEN",
    }
    assert "secret-value" not in yaml.safe_dump([kinds["StatefulSet"], kinds["Service"]])
    assert container["readinessProbe"]["httpGet"]["path"] == "/proxy/notebook/abc123/api"
    (claim,) = sts["volumeClaimTemplates"]
    assert claim["spec"]["storageClassName"] == "fast"
    assert sts["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Retain"
    assert sts["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
