"""Every object `render_job` produces is accepted by the real API server (server-side dry
run, strict field validation, so a misspelt or misplaced field fails too): for both
examples (code at an http URL), a packed local code folder, an operator-managed job, and a
spec that uses every option. The TFJobs themselves are dry-run against the installed CRD.

Volcano and scheduler-plugins are not installed here: the module installs minimal
PodGroup CRDs of their own (the fields tfkube emits, typed, no unknown fields), so the
PodGroups are checked for shape against those, not against the projects' full schemas.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from tfkube.engines._artifact import prepare_artifact
from tfkube.kube.names import CRD_NAME, GROUP, PLURAL, VERSION
from tfkube.render import (
    RenderOptions,
    ServerInstall,
    crd,
    dump_yaml,
    postgres_secret,
    render_job,
    server_manifests,
)
from tfkube.spec import TFJob, load_job_text, parse_job

from ._support import POD_GROUP_CRDS, REPO, KubeCluster, wait_for

EXAMPLES = REPO / "examples"
URL = "http://code.example/job.tar.gz"
SHA = "ab" * 32

REGISTRY_SECRET: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {"name": "tfkube-registry", "namespace": "tfkube-system", "uid": "x"},
    "type": "kubernetes.io/dockerconfigjson",
    "data": {
        ".dockerconfigjson": base64.b64encode(
            json.dumps({"auths": {"registry.corp.example": {"auth": "dTpw"}}}).encode()
        ).decode()
    },
}

EVERY_OPTION: dict[str, Any] = {
    "apiVersion": "tfkube.io/v1alpha1",
    "kind": "TFJob",
    "metadata": {"name": "every-option", "labels": {"team": "vision"}},
    "spec": {
        "replicas": {
            "chief": {"replicas": 1, "resources": {"cpu": "2", "memory": "4Gi"}},
            "ps": {
                "replicas": 2,
                "resources": {"cpu": "4", "memory": "16Gi"},
                "nodeSelector": {"tfkube.io/pool": "cpu"},
                "tolerations": [{"key": "dedicated", "value": "ps", "effect": "NoSchedule"}],
                "env": {"PS_FLAG": "1"},
                "annotations": {"sidecar.istio.io/inject": "false"},
            },
            "worker": {
                "replicas": 4,
                "resources": {"cpu": "8", "memory": "32Gi", "gpu": 2},
                "nodeSelector": {"tfkube.io/gpu": "true"},
                "tolerations": [
                    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                    {
                        "key": "node.kubernetes.io/unreachable",
                        "operator": "Exists",
                        "effect": "NoExecute",
                        "tolerationSeconds": 30,
                    },
                ],
                "env": {"CLASSPATH": {"command": "hadoop classpath --glob"}},
                "args": ["--train_steps=1000"],
                "image": "registry.corp.example/ml/tf-gpu:2.21",
            },
            "evaluator": {"replicas": 1, "resources": {"cpu": "1500m", "memory": "2Gi"}},
        },
        "code": {"source": "https://code.example/every.tar.gz", "sha256": SHA},
        "storage": {
            "data": {"claimName": "imagenet", "mountPath": "/data"},
            "logs": {"storageClassName": "cephfs", "size": "100Gi", "mountPath": "/logs"},
        },
        "runPolicy": {
            "restartPolicy": "ExitCode",
            "backoffLimit": 6,
            "backoff": {"baseSeconds": 2, "capSeconds": 120},
            "activeDeadlineSeconds": 86400,
            "ttlSecondsAfterFinished": 3600,
            "cleanPodPolicy": "All",
            "successPolicy": "AllWorkers",
            "terminationGraceSeconds": 30,
            "port": 3333,
            "suspend": False,
        },
        "image": "tensorflow/tensorflow:2.21.0",
        "imagePullPolicy": "IfNotPresent",
        "imagePullSecrets": ["team-pull"],
        "tensorboard": {
            "serviceType": "NodePort",
            "nodePort": 31006,
            "resources": {"cpu": "200m", "memory": "1Gi"},
        },
        "scheduling": {
            "gang": "Volcano",
            "queue": "research",
            "priorityClassName": "training",
        },
        "tenant": {
            "quota": {"requests.cpu": "256", "requests.nvidia.com/gpu": "16", "pods": "500"},
            "limitRange": {
                "default": {"cpu": "1", "memory": "2Gi"},
                "defaultRequest": {"cpu": "500m", "memory": "1Gi"},
                "max": {"memory": "128Gi"},
                "min": {"cpu": "10m"},
            },
        },
    },
}


def _with(base: dict[str, Any], **spec: Any) -> dict[str, Any]:
    job = json.loads(json.dumps(base))
    job["spec"].update(spec)
    return job


def _example(name: str) -> TFJob:
    text = (EXAMPLES / name / "job.yaml").read_text()
    data = yaml.safe_load(text)
    data["spec"]["code"] = {**data["spec"]["code"], "source": URL, "sha256": SHA}
    return parse_job(data, name)


@pytest.fixture(scope="module")
def dynamic(kube_cluster: KubeCluster) -> DynamicClient:
    """The TFJob CRD and the stand-in PodGroup CRDs, then a client whose
    discovery knows them."""
    first = DynamicClient(kube_cluster.api_client)
    crds = first.resources.get(
        api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition"
    )
    for obj in (crd(), *POD_GROUP_CRDS):
        crds.server_side_apply(body=obj, field_manager="tfkube-test", force_conflicts=True)

    def established() -> bool:
        for name in (CRD_NAME, *(o["metadata"]["name"] for o in POD_GROUP_CRDS)):
            conditions = crds.get(name=name).to_dict().get("status", {}).get("conditions") or []
            if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return False
        return True

    wait_for("the CRDs to be established", established, timeout=30)

    def discovered() -> DynamicClient | None:
        """A client whose discovery lists every kind (it follows establishment)."""
        client = DynamicClient(kube_cluster.api_client)
        try:
            for obj in (crd(), *POD_GROUP_CRDS):
                spec = obj["spec"]
                api_version = f"{spec['group']}/{spec['versions'][0]['name']}"
                client.resources.get(api_version=api_version, kind=spec["names"]["kind"])
        except ResourceNotFoundError:
            return None
        return client

    return wait_for("the CRDs in the discovery documents", discovered, timeout=60)


def dry_run_create(dynamic: DynamicClient, obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    try:
        created = resource.create(
            body=obj,
            namespace=namespace if resource.namespaced else None,
            dry_run="All",
            query_params=[("fieldValidation", "Strict")],
        )
    except ApiException as exc:
        pytest.fail(f"{obj['kind']} {obj['metadata']['name']} refused: {exc.status} {exc.body}")
    result: dict[str, Any] = created.to_dict()
    return result


def _check_all(dynamic: DynamicClient, objects: list[dict[str, Any]], namespace: str) -> None:
    # What `kubectl apply -f` reads: the YAML text, not the dicts.
    parsed = list(yaml.safe_load_all(dump_yaml(objects)))
    assert parsed == objects
    for obj in parsed:
        created = dry_run_create(dynamic, obj, namespace)
        assert created["metadata"]["name"] == obj["metadata"]["name"]
        if obj["kind"] == "Job":
            # The API server kept our policy as written (nothing was dropped or defaulted
            # away): the whole contract is in these fields.
            for key in ("completionMode", "completions", "parallelism", "backoffLimit"):
                assert created["spec"][key] == obj["spec"][key]
            assert created["spec"]["podFailurePolicy"] == obj["spec"]["podFailurePolicy"]


CASES = {
    "mnist-between-graph": lambda: (_example("mnist-between-graph"), {}),
    "ps-strategy": lambda: (_example("ps-strategy"), {}),
    "ps-strategy-managed": lambda: (_example("ps-strategy"), {"managed": True}),
    "every-option": lambda: (
        parse_job(EVERY_OPTION),
        {"registry_secret": REGISTRY_SECRET, "pod_annotations": {"tfkube.io/fake-duration": "5s"}},
    ),
    "scheduler-plugins": lambda: (
        parse_job(
            _with(
                EVERY_OPTION,
                scheduling={"gang": "SchedulerPlugins", "scheduleTimeoutSeconds": 60},
                tensorboard={},
            )
        ),
        {},
    ),
    "kueue": lambda: (
        parse_job(_with(EVERY_OPTION, scheduling={"gang": "Kueue", "queue": "team-a"})),
        {"managed": True},
    ),
    "never-restart": lambda: (
        parse_job(
            _with(EVERY_OPTION, runPolicy={"restartPolicy": "Never", "suspend": True}, tenant=None)
        ),
        {},
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendered_objects_pass_server_side_dry_run(
    dynamic: DynamicClient, kube_namespace: str, case: str
) -> None:
    job, options = CASES[case]()
    objects = render_job(job, RenderOptions(namespace=kube_namespace, **options))
    _check_all(dynamic, objects, kube_namespace)


def test_packed_local_code_passes_dry_run(
    dynamic: DynamicClient, kube_namespace: str, tmp_path: Path
) -> None:
    job = load_job_text((EXAMPLES / "ps-strategy" / "job.yaml").read_text())
    archive = prepare_artifact(job, EXAMPLES / "ps-strategy", tmp_path)
    objects = render_job(
        job, RenderOptions(namespace=kube_namespace, code_archive=archive.path.read_bytes())
    )
    assert "ConfigMap" in [o["kind"] for o in objects]
    _check_all(dynamic, objects, kube_namespace)


def test_namespace_object_passes_dry_run(dynamic: DynamicClient) -> None:
    objects = render_job(
        _example("ps-strategy"), RenderOptions(namespace="tenant-new", include_namespace=True)
    )
    assert objects[0]["kind"] == "Namespace"
    dry_run_create(dynamic, objects[0], "tenant-new")


@pytest.mark.parametrize("case", ["every-option", "mnist-between-graph", "ps-strategy"])
def test_tfjob_itself_passes_dry_run_against_the_crd(
    dynamic: DynamicClient, kube_namespace: str, case: str
) -> None:
    job, _ = CASES[case]()
    body = job.model_dump(mode="json", by_alias=True, exclude_none=True)
    created = dry_run_create(dynamic, body, kube_namespace)
    assert created["apiVersion"] == f"{GROUP}/{VERSION}"
    assert created["spec"] == body["spec"]  # nothing pruned: the schema knows every field
    resource = dynamic.resources.get(api_version=f"{GROUP}/{VERSION}", kind="TFJob")
    assert resource.name == PLURAL


def test_crd_from_deploy_matches_the_installed_one(dynamic: DynamicClient) -> None:
    crds = dynamic.resources.get(
        api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition"
    )
    stored = crds.get(name=CRD_NAME).to_dict()
    assert stored["spec"]["versions"][0]["schema"] == crd()["spec"]["versions"][0]["schema"]


def test_cli_render_output_is_accepted_by_kubectl_apply(
    dynamic: DynamicClient, kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    """`tfkube render --pack-code ... | kubectl apply --dry-run=server -f -`, as a user runs it."""
    rendered = subprocess.run(
        [
            sys.executable,
            "-m",
            "tfkube",
            "render",
            str(EXAMPLES / "mnist-between-graph" / "job.yaml"),
            "--namespace",
            kube_namespace,
            "--pack-code",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert rendered.returncode == 0, rendered.stderr
    assert "packed" in rendered.stderr
    applied = subprocess.run(
        [
            str(kube_cluster.kubectl),
            "--kubeconfig",
            str(kube_cluster.kubeconfig),
            "apply",
            "--dry-run=server",
            "-f",
            "-",
        ],
        input=rendered.stdout,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert applied.returncode == 0, applied.stderr
    assert "job.batch/mnist-between-graph-worker created (server dry run)" in applied.stdout
    for role in ("ps", "worker"):  # each Job's headless Service
        assert f"service/mnist-between-graph-{role} created (server dry run)" in applied.stdout


def test_cli_render_refuses_a_local_folder_without_pack_code() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tfkube", "render", str(EXAMPLES / "ps-strategy" / "job.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "spec.code.source" in proc.stderr
    assert "pods in a cluster cannot" in proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize(
    "options",
    [
        ServerInstall(),
        ServerInstall(
            storage_class="cephfs", outputs_claim="team-outputs", public_url="https://tf.example"
        ),
        ServerInstall(database="postgres", storage_class="cephfs"),
        ServerInstall(database="postgres", database_claim="pg-data", data_claim="data"),
        ServerInstall(database="external"),
    ],
    ids=["defaults", "every-option", "postgres", "postgres-claim", "external"],
)
def test_server_install_objects_pass_dry_run(
    dynamic: DynamicClient, kube_namespace: str, options: ServerInstall
) -> None:
    """`tfkube install --server`'s objects. The cluster-scoped RBAC objects get a name of
    this namespace so that a real install elsewhere in the session does not collide."""
    objects = server_manifests(kube_namespace, "ghcr.io/tfkube/operator:test", options)
    if options.database == "postgres":  # the Secret install creates (never rendered)
        objects.insert(0, postgres_secret(kube_namespace, "not-a-real-password"))
    for obj in objects:
        if obj["kind"] in {"ClusterRole", "ClusterRoleBinding"}:
            obj["metadata"]["name"] = f"{obj['metadata']['name']}-{kube_namespace}"
        if obj["kind"] == "ClusterRoleBinding":
            obj["roleRef"]["name"] = f"{obj['roleRef']['name']}-{kube_namespace}"
    _check_all(dynamic, objects, kube_namespace)
