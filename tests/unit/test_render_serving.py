"""A model server's and a notebook's Kubernetes objects (pure; tests/cluster/
test_serving_dry_run.py has the API server check them): the stock TensorFlow Serving image
or tfkube's own model server, the same port, probe and volume either way, placed like the
job's exporting replica; which runtime a request gets on each engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tfkube import contract, modelserver
from tfkube.engines.kubernetes import KubernetesEngine
from tfkube.engines.local import LocalEngine
from tfkube.render import (
    OPERATOR_IMAGE,
    ModelServerSpec,
    NotebookSpec,
    Placement,
    ServingRuntime,
    parse_node_selector,
    parse_runtime,
    parse_toleration,
    render_model_server,
    render_notebook,
)

# render's own unit tests: its private module's rules too.
from tfkube.render._workloads import (
    TF_SERVING_IMAGE,
    TFKUBE_SERVING_IMAGE,
    job_export_volume,
    model_config,
    serving_placement,
)
from tfkube.spec import Resources, SpecError, load_job_text

from ._cli import usage_error

SELECTOR = {"tfkube.io/real-node": "true"}
TOLERATION = {"key": "tfkube.io/real-node", "operator": "Equal", "value": "true",
              "effect": "NoSchedule"}  # fmt: skip


KEPT = {"logs": {"size": "1Gi"}}
"""A job whose logs (and exports) are on a claim of its own, `mnist-logs`."""


def _job(roles: dict[str, Any] | None = None, storage: dict[str, Any] | None = None) -> Any:
    raw: dict[str, Any] = {
        "apiVersion": "tfkube.io/v1alpha1",
        "kind": "TFJob",
        "metadata": {"name": "mnist"},
        "spec": {
            "replicas": roles or {"worker": {"replicas": 2}, "ps": {"replicas": 1}},
            "code": {"source": "https://example.invalid/code.tar.gz"},
        },
    }
    if storage:
        raw["spec"]["storage"] = storage
    return load_job_text(yaml.safe_dump(raw), "job")


def _objects(runtime: ServingRuntime, **kw: Any) -> dict[str, dict[str, Any]]:
    job = kw.pop("job", None) or _job(storage=KEPT)
    spec = ModelServerSpec("digits", "team-a", job, runtime=runtime, **kw)
    return {o["kind"]: o for o in render_model_server(spec)}


def _container(objects: dict[str, dict[str, Any]]) -> dict[str, Any]:
    (container,) = objects["Deployment"]["spec"]["template"]["spec"]["containers"]
    return dict(container)


# -- choosing a runtime -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "default", "expected"),
    [
        (None, ServingRuntime.TENSORFLOW_SERVING, ServingRuntime.TENSORFLOW_SERVING),
        ("", ServingRuntime.TFKUBE, ServingRuntime.TFKUBE),
        ("tfkube", ServingRuntime.TENSORFLOW_SERVING, ServingRuntime.TFKUBE),
        ("tensorflow-serving", ServingRuntime.TFKUBE, ServingRuntime.TENSORFLOW_SERVING),
    ],
)
def test_parse_runtime(
    value: str | None, default: ServingRuntime, expected: ServingRuntime
) -> None:
    assert parse_runtime(value, default) is expected


@pytest.mark.parametrize("value", ["tensorflow_serving", "TFKUBE", "triton"])
def test_a_bad_runtime_names_the_choices(value: str) -> None:
    with pytest.raises(ValueError, match="choose tensorflow-serving or tfkube") as exc:
        parse_runtime(value, ServingRuntime.TENSORFLOW_SERVING)
    assert repr(value) in str(exc.value)


STOCK, OURS = ServingRuntime.TENSORFLOW_SERVING, ServingRuntime.TFKUBE


@pytest.mark.parametrize(
    ("engine", "asked", "default", "expected"),
    [
        ("kubernetes", None, STOCK, STOCK),
        ("kubernetes", None, OURS, OURS),
        ("kubernetes", "tfkube", STOCK, OURS),
        ("kubernetes", "tensorflow-serving", OURS, STOCK),
        ("local", None, STOCK, OURS),  # the server's default is for clusters
        ("local", "tfkube", STOCK, OURS),
        ("local", "tensorflow-serving", STOCK, "runs tfkube's model server only"),
        ("local", "triton", STOCK, "not a model server runtime"),
        ("kubernetes", "triton", STOCK, "not a model server runtime"),
    ],
)
def test_model_server_runtime(
    engine: str,
    asked: str | None,
    default: ServingRuntime,
    expected: ServingRuntime | str,
    tmp_path: Path,
) -> None:
    chosen = (
        LocalEngine(tmp_path)
        if engine == "local"
        else KubernetesEngine(tmp_path, serving_runtime=default.value, api_client=object())
    )
    if isinstance(expected, ServingRuntime):
        assert chosen.model_server_runtime(asked) == expected.value
    else:
        with pytest.raises(ValueError, match=expected):
            chosen.model_server_runtime(asked)


# -- the objects --------------------------------------------------------------------------------


def test_tfkubes_image_is_the_operator_image() -> None:
    assert TFKUBE_SERVING_IMAGE == OPERATOR_IMAGE


def test_stock_runtime_keeps_its_objects() -> None:
    objects = _objects(STOCK, version=301)
    assert list(objects) == ["ConfigMap", "Deployment", "Service"]
    container = _container(objects)
    assert container["image"] == TF_SERVING_IMAGE
    assert container["command"] == ["tensorflow_model_server"]
    # Restricted like every workload: TensorFlow Serving's image runs as root by default.
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    ports = {p["name"] for p in objects["Service"]["spec"]["ports"]}
    assert ports == {"http", "grpc"}


@pytest.mark.parametrize(("version", "pinned"), [(None, []), (301, ["--model_version=301"])])
def test_tfkube_runtime_objects(version: int | None, pinned: list[str]) -> None:
    objects = _objects(
        OURS,
        version=version,
        job=_job(storage={"logs": {"claimName": "outputs"}}),
        resources=Resources(cpu="500m", memory="1Gi"),
    )
    assert list(objects) == ["Deployment", "Service"], "no models.config: flags say it all"
    container = _container(objects)
    assert container["image"] == OPERATOR_IMAGE
    assert container["imagePullPolicy"] == "IfNotPresent"
    # The native server the local engine runs, as tfkube's image carries it.
    assert container["command"] == [modelserver.BINARY]
    assert container["args"] == [
        "--rest_api_host=0.0.0.0",
        "--rest_api_port=8501",
        "--port=8500",
        "--model_name=digits",
        "--model_base_path=/models/digits",
        "--file_system_poll_wait_seconds=5",
        *pinned,
    ]
    assert container["ports"] == [
        {"name": "http", "containerPort": 8501, "protocol": "TCP"},
        {"name": "grpc", "containerPort": 8500, "protocol": "TCP"},
    ]
    # One probe for both doors: the model server asks its own gRPC health check first.
    assert container["readinessProbe"]["httpGet"] == {"path": "/tfkube/ready", "port": "http"}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    pod_security = objects["Deployment"]["spec"]["template"]["spec"]["securityContext"]
    assert pod_security["runAsNonRoot"] is True
    assert pod_security["runAsUser"] == 65532
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["model"] == {
        "name": "model",
        "mountPath": "/models/digits",
        "subPath": "mnist/export",
        "readOnly": True,
    }
    assert mounts["tmp"]["mountPath"] == "/tmp"
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["model"]["persistentVolumeClaim"] == {"claimName": "outputs", "readOnly": True}
    assert volumes["tmp"] == {"name": "tmp", "emptyDir": {}}
    service = objects["Service"]["spec"]
    assert service["ports"] == [
        {"name": "http", "port": 8501, "targetPort": "http", "protocol": "TCP"},
        {"name": "grpc", "port": 8500, "targetPort": "grpc", "protocol": "TCP"},
    ]
    assert (
        service["selector"].items()
        <= objects["Deployment"]["spec"]["template"]["metadata"]["labels"].items()
    )


@pytest.mark.parametrize(
    ("runtime", "ready"),
    [(STOCK, "/v1/models/digits"), (OURS, "/tfkube/ready")],
)
def test_same_ports_and_volume_for_both(runtime: ServingRuntime, ready: str) -> None:
    """Both runtimes: REST `http` 8501 and gRPC `grpc` 8500 in the pod and the Service, the
    probe on the REST port (tfkube's covers its gRPC door too), the same volume."""
    objects = _objects(runtime)
    container = _container(objects)
    stock = _container(_objects(STOCK))
    probe = container["readinessProbe"]
    assert probe["httpGet"] == {"path": ready, "port": "http"}
    assert {k: v for k, v in probe.items() if k != "httpGet"} == {
        k: v for k, v in stock["readinessProbe"].items() if k != "httpGet"
    }
    assert probe["timeoutSeconds"] >= 10
    assert container["ports"] == stock["ports"]
    assert {(p["name"], p["containerPort"]) for p in container["ports"]} == {
        ("http", 8501),
        ("grpc", 8500),
    }
    service = {(p["name"], p["port"], p["targetPort"]) for p in objects["Service"]["spec"]["ports"]}
    assert service == {("http", 8501, "http"), ("grpc", 8500, "grpc")}
    model = next(m for m in container["volumeMounts"] if m["name"] == "model")
    assert model == next(m for m in stock["volumeMounts"] if m["name"] == "model")


def test_an_image_given_wins() -> None:
    assert _container(_objects(OURS, image="registry.example/tfkube:1"))["image"] == (
        "registry.example/tfkube:1"
    )


# -- placement --------------------------------------------------------------------------------


PLACED = {"nodeSelector": SELECTOR, "tolerations": [TOLERATION]}


@pytest.mark.parametrize(
    ("roles", "expected"),
    [
        ({"worker": {"replicas": 2}}, {}),
        ({"worker": {"replicas": 2, **PLACED}, "ps": {"replicas": 1}}, PLACED),
        # the chief exports when there is one: its placement, not the workers'
        (
            {
                "chief": {"replicas": 1, **PLACED},
                "worker": {"replicas": 1, "nodeSelector": {"pool": "gpu"}},
            },
            PLACED,
        ),
        ({"chief": {"replicas": 1}, "worker": {"replicas": 1, **PLACED}}, {}),
        ({"worker": {"replicas": 1, "nodeSelector": SELECTOR}}, {"nodeSelector": SELECTOR}),
    ],
)
def test_serving_placement(roles: dict[str, Any], expected: dict[str, Any]) -> None:
    job = _job(roles, storage=KEPT)
    assert serving_placement(job) == expected
    for runtime in ServingRuntime:
        pod = _objects(runtime, job=job)["Deployment"]["spec"]["template"]["spec"]
        assert {k: pod[k] for k in ("nodeSelector", "tolerations") if k in pod} == expected


# -- the image built here is the one the renderer names -----------------------------------------


def _images_script() -> Any:
    from cluster._support import load_cluster_module  # tests/cluster (stdlib tools loader)

    return load_cluster_module()._sibling("images")


def test_the_image_built_here_is_the_one_the_renderer_and_dockerfile_name() -> None:
    """tools/kube/images.py builds tfkube's image for the real node (no Docker): under the
    name rendered manifests use, with deploy/Dockerfile's extras."""
    import re
    from pathlib import Path

    images = _images_script()
    assert images.tfkube_name() == OPERATOR_IMAGE
    dockerfile = (Path(__file__).resolve().parents[2] / "deploy" / "Dockerfile").read_text()
    (installed,) = re.findall(r'"tfkube\[([a-z,]+)\]"', dockerfile)
    assert set(images.TFKUBE_EXTRAS) == set(installed.split(","))
    wanted = images.tfkube_requirements()
    assert any(r.startswith("uvicorn") for r in wanted)
    assert any(r.startswith("tensorflow-cpu") for r in wanted)
    # The `tfkube` runtime's command: the native server both images carry.
    assert images.NATIVE_BINARY == modelserver.BINARY == contract.MODEL_SERVER_BINARY
    assert f"/usr/local/bin/{modelserver.BINARY}" in dockerfile
    # ... built against the TensorFlow the serving extra installs.
    (pin,) = re.findall(r'"(tensorflow-cpu==[0-9.]+)"', dockerfile)
    assert pin in wanted


def test_another_tree_of_tfkube_is_an_image_of_its_own(tmp_path: Path) -> None:
    """A release's source (the upgrade test's) gets its own name and cache folder; neither
    image's clean-up of older recipes (`<key>-<16 hex>`) can reach the other's folder."""
    images = _images_script()
    tree = tmp_path / "release"
    (tree / "src" / "tfkube").mkdir(parents=True)
    (tree / "src" / "tfkube" / "__init__.py").write_text('__version__ = "0.1.0"\n')
    (tree / "pyproject.toml").write_text("[project]\nname = 'tfkube'\n")
    (tree / "README.md").write_text("the release\n")
    tensorflow = images.tensorflow_image(tmp_path)
    today = images.tfkube_image(tensorflow)
    other = images.tfkube_image(tensorflow, source=tree, tag="0.1.0-3b451d0")
    assert other.name == "ghcr.io/tfkube/operator:0.1.0-3b451d0" != today.name
    assert other.layout.parent == today.layout.parent
    assert not today.layout.match(f"{other.key}-{'?' * 16}")
    assert not other.layout.match(f"{today.key}-{'?' * 16}")
    assert not other.layout.name.startswith("tfkube-")  # an older images.py's `tfkube-*`
    (tree / "src" / "tfkube" / "wire.py").write_text("")
    changed = images.tfkube_image(tensorflow, source=tree, tag="0.1.0-3b451d0")
    assert changed.recipe_hash != other.recipe_hash  # keyed by the tree's source
    with pytest.raises(images.ImageError):
        images.tfkube_image(tensorflow, source=tree)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["serve", "mnist", "--runtime", "triton"], "--runtime: 'triton' is not a model server"),
        (
            ["serve", "mnist", "--engine", "local", "--runtime", "tensorflow-serving"],
            "--runtime: --engine local runs tfkube's model server only",
        ),
        (["server", "--serving-runtime", "tf-serving"], "--serving-runtime: 'tf-serving' is not"),
        (
            ["serve", "mnist", "--engine", "server", "--grpc-port", "8500"],
            "--grpc-port is for --engine local",
        ),
    ],
)
def test_cli_refuses_a_bad_runtime_before_doing_anything(
    argv: list[str], words: str, tmp_path: Path
) -> None:
    said = usage_error(argv, tmp_path)
    assert words in said, said
    assert "choose tensorflow-serving or tfkube" in said or "local" in words


# -- Kubernetes objects ------------------------------------------------------------------


def _by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objects}


@pytest.mark.parametrize(
    ("storage", "claim", "sub_path"),
    [
        ({"logs": {"size": "1Gi"}}, "mnist-logs", "export"),
        ({"logs": {"claimName": "outputs"}}, "outputs", "mnist/export"),
    ],
)
def test_export_volume(storage: dict[str, Any] | None, claim: str, sub_path: str) -> None:
    assert job_export_volume(_job(storage=storage)) == (claim, sub_path)


def test_a_job_without_a_logs_claim_kept_nothing_to_serve() -> None:
    with pytest.raises(SpecError, match=r"spec\.storage\.logs"):
        job_export_volume(_job(storage=None))


def test_model_config_policies() -> None:
    assert "latest { num_versions: 1 }" in model_config("digits", None)
    assert "specific { versions: 301 }" in model_config("digits", 301)
    assert 'base_path: "/models/digits"' in model_config("digits", None)


def test_model_server_objects() -> None:
    spec = ModelServerSpec(
        "digits",
        "team-a",
        _job(storage={"logs": {"claimName": "outputs"}}),
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


def _notebook(**more: Any) -> NotebookSpec:
    return NotebookSpec(
        notebook_id="abc123",
        namespace="team-a",
        user="ann",
        team="team-a",
        base_url="/proxy/notebook/abc123/",
        server_url="http://tfkube-server.tfkube.svc:8470",
        jupyter_token="jupyter-secret-value",
        client_token="client-secret-value",
        **more,
    )


def test_notebook_objects() -> None:
    spec = _notebook(storage_class="fast")
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
    assert "nodeSelector" not in sts["template"]["spec"]  # any node unless the site says
    assert "tolerations" not in sts["template"]["spec"]
    assert "--LabApp.news_url=None" in container["command"]  # no calls to the internet


def test_a_notebook_runs_where_the_site_puts_notebooks() -> None:
    """`tfkube server --notebook-node-selector --notebook-toleration`: the notebook's pod
    goes to those nodes (e.g. a pool kept for notebooks by a taint)."""
    placement = Placement(
        node_selector=parse_node_selector(["pool=notebooks"], "--notebook-node-selector"),
        tolerations=(parse_toleration("pool:NoSchedule", "--notebook-toleration"),),
    )
    sts = _by_kind(render_notebook(_notebook(placement=placement)))["StatefulSet"]
    pod = sts["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "notebooks"}
    assert pod["tolerations"] == [{"key": "pool", "operator": "Exists", "effect": "NoSchedule"}]
    with pytest.raises(ValueError, match="--notebook-toleration 'pool:Always'"):
        parse_toleration("pool:Always", "--notebook-toleration")


# -- rolling to another version ---------------------------------------------------------------


@pytest.mark.parametrize("runtime", list(ServingRuntime))
def test_a_new_version_rolls_with_no_gap(runtime: ServingRuntime) -> None:
    """The old pod answers until the new one is ready, then leaves the Service's endpoints
    before its SIGTERM: surge one, never one unavailable, a preStop wait inside the grace
    period; the version is in the pod template, so changing it rolls either runtime."""
    objects = _objects(runtime, version=3)
    spec = objects["Deployment"]["spec"]
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    assert spec["minReadySeconds"] > 0
    pod = spec["template"]["spec"]
    container = _container(objects)
    pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert 0 < pre_stop < pod["terminationGracePeriodSeconds"]
    # Ready only when the version is loaded: tfkube's readiness needs an available version
    # (and it loads only the pinned one); the stock one's asks for the model's status.
    probe = container["readinessProbe"]["httpGet"]["path"]
    assert probe in ("/tfkube/ready", "/v1/models/digits")
    assert spec["template"]["metadata"]["annotations"] == {"tfkube.io/model-version": "3"}

    latest = _objects(runtime)["Deployment"]["spec"]["template"]
    assert latest["metadata"]["annotations"] == {"tfkube.io/model-version": "latest"}
    assert latest != spec["template"]  # applying the other version changes the template
