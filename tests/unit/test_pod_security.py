"""Pod Security: the pure check (`tfkube.kube.pod_security`), row by row, and every
workload tfkube renders held to it: job replicas (tfkube jobs using every option, the
examples, the Kubeflow corpus), TensorBoard, both model server runtimes, notebooks, the
operator and the server. The cluster tests check Kubernetes' own admission agrees
(tests/security/test_kube_admission.py)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tfkube.kube.pod_security import template_violations, violations
from tfkube.render import (
    DATACACHE_NAME,
    OPERATOR_IMAGE,
    DataCacheInstall,
    ModelServerSpec,
    NotebookSpec,
    RenderOptions,
    ServerInstall,
    ServingRuntime,
    install_manifests,
    render_job,
    render_model_server,
    render_notebook,
    server_manifests,
)
from tfkube.render._security import WORKLOAD_USER
from tfkube.spec import PodSecurity, TFJob, parse_job

REPO = Path(__file__).resolve().parents[2]
KUBEFLOW = REPO / "tests" / "data" / "kubeflow"
RESTRICTED, BASELINE = PodSecurity.RESTRICTED, PodSecurity.BASELINE

GOOD: dict[str, Any] = {
    "securityContext": {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    },
    "containers": [
        {
            "name": "c",
            "image": "x",
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
            },
        }
    ],
    "volumes": [
        {"name": "e", "emptyDir": {}},
        {"name": "p", "persistentVolumeClaim": {"claimName": "x"}},
    ],
}


def changed(path: str, value: Any) -> dict[str, Any]:
    """GOOD with one value set (`a.b.0.c`; None removes it)."""
    pod = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    node: Any = pod
    for part in parents:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    if value is None:
        del node[last]
    elif isinstance(node, list):
        node.append(value)
    else:
        node[last] = value
    return pod


C = "containers.0.securityContext"


@pytest.mark.parametrize(
    ("pod", "level", "found"),
    [
        pytest.param(GOOD, RESTRICTED, [], id="restricted pod"),
        pytest.param(GOOD, BASELINE, [], id="restricted pod meets baseline"),
        pytest.param(
            changed("hostNetwork", True), BASELINE, ["spec.hostNetwork"], id="hostNetwork"
        ),
        pytest.param(changed("hostPID", True), BASELINE, ["spec.hostPID"], id="hostPID"),
        pytest.param(changed("hostIPC", True), BASELINE, ["spec.hostIPC"], id="hostIPC"),
        pytest.param(
            changed(f"{C}.privileged", True),
            BASELINE,
            ["spec.containers[0].securityContext.privileged"],
            id="privileged",
        ),
        pytest.param(
            changed(f"{C}.capabilities.add", ["SYS_ADMIN"]),
            BASELINE,
            ["spec.containers[0].securityContext.capabilities.add"],
            id="SYS_ADMIN",
        ),
        pytest.param(
            changed(f"{C}.capabilities.add", ["CHOWN"]), BASELINE, [], id="CHOWN in baseline"
        ),
        pytest.param(
            changed(f"{C}.capabilities.add", ["CHOWN"]),
            RESTRICTED,
            ["spec.containers[0].securityContext.capabilities.add"],
            id="CHOWN not in restricted",
        ),
        pytest.param(
            changed(f"{C}.capabilities.add", ["NET_BIND_SERVICE"]),
            RESTRICTED,
            [],
            id="NET_BIND_SERVICE",
        ),
        pytest.param(
            changed("volumes.2", {"name": "h", "hostPath": {"path": "/"}}),
            BASELINE,
            ["spec.volumes[2].hostPath"],
            id="hostPath",
        ),
        pytest.param(
            changed("volumes.2", {"name": "n", "nfs": {"server": "s", "path": "/"}}),
            RESTRICTED,
            ["spec.volumes[2]"],
            id="nfs volume in restricted",
        ),
        pytest.param(
            changed("volumes.2", {"name": "n", "nfs": {"server": "s", "path": "/"}}),
            BASELINE,
            [],
            id="nfs in baseline",
        ),
        pytest.param(
            changed("containers.0.ports", [{"containerPort": 80, "hostPort": 80}]),
            BASELINE,
            ["spec.containers[0].ports[0].hostPort"],
            id="hostPort",
        ),
        pytest.param(
            changed("securityContext.seccompProfile", {"type": "Unconfined"}),
            BASELINE,
            ["spec.securityContext.seccompProfile.type"],
            id="seccomp unconfined",
        ),
        pytest.param(
            changed("securityContext.seccompProfile", None),
            RESTRICTED,
            ["spec.containers[0].securityContext.seccompProfile.type"],
            id="no seccomp profile",
        ),
        pytest.param(
            changed(f"{C}.seccompProfile", {"type": "Localhost", "localhostProfile": "p"}),
            RESTRICTED,
            [],
            id="container's localhost profile",
        ),
        pytest.param(
            changed("securityContext.runAsNonRoot", None),
            RESTRICTED,
            ["spec.containers[0].securityContext.runAsNonRoot"],
            id="runAsNonRoot unset",
        ),
        pytest.param(
            changed(f"{C}.runAsNonRoot", True)
            | {"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}},
            RESTRICTED,
            [],
            id="runAsNonRoot per container",
        ),
        pytest.param(
            changed("securityContext.runAsUser", 0),
            RESTRICTED,
            ["spec.securityContext.runAsUser"],
            id="root user",
        ),
        pytest.param(changed("securityContext.runAsUser", 0), BASELINE, [], id="root in baseline"),
        pytest.param(
            changed(f"{C}.allowPrivilegeEscalation", None),
            RESTRICTED,
            ["spec.containers[0].securityContext.allowPrivilegeEscalation"],
            id="privilege escalation unset",
        ),
        pytest.param(
            changed(f"{C}.capabilities", None),
            RESTRICTED,
            ["spec.containers[0].securityContext.capabilities.drop"],
            id="capabilities kept",
        ),
        pytest.param(
            changed(f"{C}.procMount", "Unmasked"),
            BASELINE,
            ["spec.containers[0].securityContext.procMount"],
            id="procMount",
        ),
        pytest.param(
            changed("securityContext.sysctls", [{"name": "kernel.msgmax", "value": "1"}]),
            BASELINE,
            ["spec.securityContext.sysctls"],
            id="unsafe sysctl",
        ),
        pytest.param(
            changed("securityContext.sysctls", [{"name": "net.ipv4.tcp_syncookies", "value": "1"}]),
            BASELINE,
            [],
            id="safe sysctl",
        ),
        pytest.param(
            changed(f"{C}.seLinuxOptions", {"type": "spc_t"}),
            BASELINE,
            ["spec.containers[0].securityContext.seLinuxOptions.type"],
            id="selinux type",
        ),
        pytest.param(
            changed(f"{C}.appArmorProfile", {"type": "Unconfined"}),
            BASELINE,
            ["spec.containers[0].securityContext.appArmorProfile.type"],
            id="apparmor unconfined",
        ),
        pytest.param(
            changed(f"{C}.windowsOptions", {"hostProcess": True}),
            BASELINE,
            ["spec.containers[0].securityContext.windowsOptions.hostProcess"],
            id="windows host process",
        ),
        pytest.param(
            {**GOOD, "initContainers": [{"name": "i", "image": "x"}]},
            RESTRICTED,
            [
                "spec.initContainers[0].securityContext.allowPrivilegeEscalation",
                "spec.initContainers[0].securityContext.capabilities.drop",
            ],
            id="an init container counts",
        ),
    ],
)
def test_violations(pod: dict[str, Any], level: PodSecurity, found: list[str]) -> None:
    assert [v.split(":")[0] for v in violations(pod, level)] == found


def test_apparmor_annotations() -> None:
    key = "container.apparmor.security.beta.kubernetes.io/c"
    assert violations(GOOD, BASELINE, {key: "runtime/default"}) == []
    assert violations(GOOD, BASELINE, {key: "localhost/mine"}) == []
    assert violations(GOOD, BASELINE, {key: "unconfined"})


# -- what tfkube renders ---------------------------------------------------------------------


def _job(**spec: Any) -> TFJob:
    worker: dict[str, Any] = {
        "replicas": 2,
        "env": {"DB": {"secretKeyRef": {"name": "db", "key": "url"}}, "HOME": "/home/me"},
        "volumes": [
            {"name": "scratch", "emptyDir": {"medium": "Memory"}},
            {"name": "ds", "mountPath": "/ds", "claimName": "datasets", "readOnly": True},
            {"name": "cfg", "mountPath": "/cfg", "configMap": "settings"},
            {"name": "sec", "mountPath": "/sec", "secret": "creds"},
        ],
        "initContainers": [
            {
                "name": "fetch",
                "image": "busybox",
                "volumeMounts": [{"name": "scratch", "mountPath": "/s"}],
            }
        ],
        "sidecars": [{"name": "ship", "image": "busybox", "env": {"A": "b"}}],
        "serviceAccountName": "uploader",
    }
    return parse_job(
        {
            "apiVersion": "tfkube.io/v1alpha1",
            "kind": "TFJob",
            "metadata": {"name": "every"},
            "spec": {
                "replicas": {"chief": {}, "ps": {}, "worker": worker, "evaluator": {}},
                "code": {"source": "https://code.example/c.tar.gz"},
                "runPolicy": {"stallSeconds": 30},
                "tensorboard": {"serviceType": "NodePort"},
                "imagePullSecrets": ["regcred"],
                "scheduling": {"gang": "Volcano"},
                **spec,
            },
        }
    )


def _rendered(job: TFJob, **options: Any) -> list[dict[str, Any]]:
    return render_job(job, RenderOptions(namespace="t", launcher_zipapp=b"z", **options))


def _workloads(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if "template" in (o.get("spec") or {})]


def _examples() -> list[Any]:
    out = []
    for path in sorted((REPO / "examples").glob("*/job.yaml")):
        raw = yaml.safe_load(path.read_text())
        raw["spec"]["code"] = {"source": "https://code.example/c.tar.gz"}
        out.append(pytest.param(parse_job(raw), id=path.parent.name))
    expected = yaml.safe_load((KUBEFLOW / "expected.yaml").read_text())
    for path in sorted(KUBEFLOW.glob("*.yaml")):
        if path.name == "expected.yaml" or "refused" in expected.get(path.name, {}):
            continue
        raw = yaml.safe_load(path.read_text())
        job = parse_job(raw, path.name)
        if job.spec.code is not None and not job.spec.code.is_url:
            continue  # a local folder (packed on submit): the same pods
        out.append(pytest.param(job, id=f"kubeflow-{path.stem}"))
    return out


@pytest.mark.parametrize("job", [pytest.param(_job(), id="every option"), *_examples()])
@pytest.mark.parametrize("managed", [True, False])
def test_every_job_pod_is_restricted(job: TFJob, managed: bool) -> None:
    workloads = _workloads(_rendered(job, managed=managed))
    assert workloads
    for workload in workloads:
        assert template_violations(workload) == [], workload["metadata"]["name"]


def test_replica_pods_run_as_the_workload_user_with_a_home() -> None:
    objects = _rendered(_job())
    worker = next(
        o for o in objects if o["kind"] == "Job" and o["metadata"]["name"] == "every-worker"
    )
    pod = worker["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == WORKLOAD_USER
    assert pod["securityContext"]["fsGroup"] == WORKLOAD_USER
    # the role named a service account (an allowed one): its token is its business
    assert "automountServiceAccountToken" not in pod
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["HOME"] == "/home/me"  # the role's own
    fetch, _ship = pod["initContainers"]
    assert {"name": "HOME", "value": "/tmp"} in fetch["env"]
    ps = next(o for o in objects if o["kind"] == "Job" and o["metadata"]["name"] == "every-ps")
    ps = ps["spec"]["template"]
    assert ps["spec"]["automountServiceAccountToken"] is False  # no API credentials
    assert {"name": "HOME", "value": "/tmp"} in ps["spec"]["containers"][0]["env"]
    board = next(o for o in objects if o["metadata"]["name"] == "every-tensorboard")
    assert board["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_baseline_jobs_run_as_their_images_user() -> None:
    objects = _rendered(_job(podSecurity="baseline"))
    for workload in _workloads(objects):
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
        assert template_violations(workload, BASELINE) == []
        assert template_violations(workload, RESTRICTED)  # what the level allows more
        for container in pod["containers"]:
            assert "securityContext" not in container
            assert {"name": "HOME", "value": "/tmp"} not in container.get("env", [])


def test_a_venv_cache_on_the_node_is_for_privileged_namespaces_only() -> None:
    objects = _rendered(_job(), venv_cache_host_path="/var/cache/tfkube")
    found = template_violations(_workloads(objects)[0], BASELINE)
    assert any("hostPath" in v for v in found), found


def test_model_servers_notebooks_operator_and_server_are_restricted() -> None:
    job = _job()
    objects = [
        *render_model_server(ModelServerSpec("m", "t", job)),
        *render_model_server(ModelServerSpec("n", "t", job, runtime=ServingRuntime.TFKUBE)),
        *render_notebook(NotebookSpec("abc", "t", "u", "team", "/p/", "http://s", "j", "c")),
        *install_manifests(),
        *server_manifests("tfkube-system", OPERATOR_IMAGE, ServerInstall()),
    ]
    workloads = _workloads(objects)
    assert len(workloads) == 5
    for workload in workloads:
        assert template_violations(workload) == [], workload["metadata"]["name"]
    notebook = next(o for o in objects if o["kind"] == "Secret")
    assert notebook["metadata"]["labels"]["tfkube.io/credential"] == "notebook"


def test_the_node_data_cache_is_the_one_pod_with_a_host_folder() -> None:
    """The DaemonSet breaks `restricted` (and `baseline`) by its hostPath and the init
    container that gives that folder to the cache's user: nothing else (docs/security.md)."""
    options = ServerInstall(data_cache=DataCacheInstall())
    objects = server_manifests("tfkube-system", OPERATOR_IMAGE, options)
    cache = next(o for o in objects if o["metadata"]["name"] == DATACACHE_NAME)
    found = " | ".join(template_violations(cache))
    assert "hostPath" in found, found
    pod = cache["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    (main,) = pod["containers"]
    assert main["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert "runAsUser" not in main["securityContext"]  # the pod's: 65532
    assert main["resources"]["limits"] == {"cpu": "1", "memory": "256Mi"}
    (init,) = pod["initContainers"]
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN", "FOWNER"]}
    assert [v["name"] for v in pod["volumes"]] == ["cache"]
    # Without the cache: no hostPath anywhere.
    bare = server_manifests("tfkube-system", OPERATOR_IMAGE, ServerInstall())
    assert all(template_violations(w) == [] for w in _workloads(bare))


def test_the_registry_copy_is_labelled_a_credential() -> None:
    secret = {"type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": "e30="}}
    objects = _rendered(_job(), registry_secret=secret)
    copy_ = next(o for o in objects if o["kind"] == "Secret")
    assert copy_["metadata"]["name"] == "every-registry"
    assert copy_["metadata"]["labels"]["tfkube.io/credential"] == "registry"
