"""`tfkube install` against the real API server, and the TFJob CRD's schema at work:
valid TFJobs are stored and shown with the printer columns, invalid ones are rejected by
the API server itself with a message naming the field."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tfkube.engines.kubernetes import install
from tfkube.kube.names import CRD_NAME, GROUP, PLURAL, VERSION
from tfkube.render import OPERATOR_NAME, OPERATOR_NAMESPACE

from ._support import REPO, KubeCluster

EXAMPLE = REPO / "examples" / "ps-strategy" / "job.yaml"


def _tfjob(name: str = "demo", **spec_changes: Any) -> dict[str, Any]:
    job = yaml.safe_load(EXAMPLE.read_text())
    job["metadata"] = {"name": name}
    job["spec"]["code"] = {"source": "http://code.example/ps.tar.gz", "entrypoint": "run.sh"}
    job["spec"].update(spec_changes)
    return job


@pytest.fixture(scope="module")
def installed(kube_cluster: KubeCluster) -> Iterator[KubeCluster]:
    """`tfkube install` through the CLI (a subprocess, as a user runs it). The operator's
    Deployment is removed afterwards: no operator runs in these tests (its pod would only be
    a KWOK fake), and other modules install their own."""
    proc = subprocess.run(
        [sys.executable, "-m", "tfkube", "install", "--kubeconfig", str(kube_cluster.kubeconfig)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert f"CustomResourceDefinition {CRD_NAME}: applied" in proc.stdout
    yield kube_cluster
    client.AppsV1Api(kube_cluster.api_client).delete_namespaced_deployment(
        OPERATOR_NAME, OPERATOR_NAMESPACE
    )


def _kubectl(
    kube: KubeCluster, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(kube.kubectl), "--kubeconfig", str(kube.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_install_makes_the_crd_and_operator_objects(installed: KubeCluster) -> None:
    got = _kubectl(installed, "get", "crd", CRD_NAME, "-o", "json")
    assert got.returncode == 0, got.stderr
    crd = json.loads(got.stdout)
    assert crd["spec"]["names"]["shortNames"] == ["tfj"]
    assert {c["type"]: c["status"] for c in crd["status"]["conditions"]}["Established"] == "True"
    rbac = client.RbacAuthorizationV1Api(installed.api_client)
    assert rbac.read_cluster_role(OPERATOR_NAME).rules
    assert rbac.read_cluster_role_binding(OPERATOR_NAME).subjects[0].name == OPERATOR_NAME
    deployment = client.AppsV1Api(installed.api_client).read_namespaced_deployment(
        OPERATOR_NAME, OPERATOR_NAMESPACE
    )
    assert deployment.spec.template.spec.containers[0].command == ["tfkube", "operator"]
    assert deployment.spec.template.spec.service_account_name == OPERATOR_NAME


def test_install_again_and_dry_run_are_fine(installed: KubeCluster) -> None:
    again = install(installed.api_client)
    assert {a.outcome for a in again} == {"applied"}
    dry = install(installed.api_client, dry_run=True)
    assert {a.outcome for a in dry} == {"validated"}


def test_kubectl_explain_shows_the_models_docstrings(installed: KubeCluster) -> None:
    # The API server publishes a new CRD's OpenAPI document a moment after the CRD is
    # Established; `kubectl explain` reads that document, so give it a few seconds.
    deadline = time.monotonic() + 30
    got = _kubectl(installed, "explain", "tfjobs.spec.runPolicy.backoffLimit")
    while got.returncode != 0 and time.monotonic() < deadline:
        time.sleep(0.5)
        got = _kubectl(installed, "explain", "tfjobs.spec.runPolicy.backoffLimit")
    assert got.returncode == 0, got.stderr
    assert "Restarts the whole job may take" in got.stdout


def test_valid_tfjob_is_stored_and_printed_with_columns(
    installed: KubeCluster, kube_namespace: str
) -> None:
    created = _kubectl(
        installed, "apply", "-n", kube_namespace, "-f", "-", stdin=yaml.safe_dump(_tfjob())
    )
    assert created.returncode == 0, created.stderr
    custom = client.CustomObjectsApi(installed.api_client)
    custom.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        kube_namespace,
        PLURAL,
        "demo",
        {
            "status": {
                "phase": "Running",
                "replicas": 4,
                "readyReplicas": 3,
                "succeededReplicas": 1,
                "restarts": 2,
                "replicaStatuses": {"worker": {"active": 2, "ready": 2}},
                "kopf": {"progress": {}},
            }
        },
    )
    got = _kubectl(installed, "get", "tfj", "-n", kube_namespace)
    assert got.returncode == 0, got.stderr
    header, row = got.stdout.splitlines()
    assert header.split() == ["NAME", "PHASE", "READY", "SUCCEEDED", "RESTARTS", "AGE"]
    assert row.split()[:5] == ["demo", "Running", "3", "1", "2"]
    stored = custom.get_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "demo")
    assert stored["status"]["kopf"] == {"progress": {}}  # kopf's bookkeeping survives
    assert stored["spec"]["replicas"]["worker"] == {"replicas": 2}  # no defaults injected


def _set(path: str, value: Any) -> dict[str, Any]:
    job = _tfjob()
    node = job
    *parents, last = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return job


@pytest.mark.parametrize(
    ("job", "message"),
    [
        pytest.param(
            _set("spec.replicas.worker.replicass", 2),
            'unknown field "spec.replicas.worker.replicass"',
            id="unknown-field",
        ),
        pytest.param(
            _set("spec.runPolicy.restartPolicy", "Sometimes"),
            'spec.runPolicy.restartPolicy: Unsupported value: "Sometimes"',
            id="bad-enum",
        ),
        pytest.param(
            _set("spec.replicas.worker.replicas", -1),
            "spec.replicas.worker.replicas: Invalid value: -1: "
            "spec.replicas.worker.replicas in body should be greater than or equal to 0",
            id="negative-replicas",
        ),
        pytest.param(
            _set("spec.runPolicy.activeDeadlineSeconds", 0),
            "spec.runPolicy.activeDeadlineSeconds in body should be greater than 0",
            id="exclusive-minimum",
        ),
        pytest.param(
            _set("spec.replicas", {"ps": {"replicas": 1}}),
            "spec.replicas.worker: Required value",
            id="no-workers",
        ),
        pytest.param(
            _set("spec.code", {"entrypoint": "run.sh"}),
            "spec.code.source: Required value",
            id="no-code-source",
        ),
        pytest.param(
            _set("spec.replicas.worker.resources", {"gpu": "many"}),
            'spec.replicas.worker.resources.gpu: Invalid value: "string": '
            "spec.replicas.worker.resources.gpu in body must be of type integer",
            id="wrong-type",
        ),
        pytest.param(
            _set("metadata.name", "a" * 41),
            "metadata.name must be at most 40 characters",
            id="long-name",
        ),
        pytest.param(
            _set("spec.tensorboard", {"serviceType": "LoadBalancer"}),
            'spec.tensorboard.serviceType: Unsupported value: "LoadBalancer"',
            id="tensorboard-service-type",
        ),
    ],
)
def test_invalid_tfjob_is_rejected_by_the_api_server(
    installed: KubeCluster, kube_namespace: str, job: dict[str, Any], message: str
) -> None:
    custom = client.CustomObjectsApi(installed.api_client)
    with pytest.raises(ApiException) as info:
        custom.create_namespaced_custom_object(
            GROUP, VERSION, kube_namespace, PLURAL, job, field_validation="Strict"
        )
    assert info.value.status in (400, 422)
    assert message in json.loads(info.value.body)["message"]
    # kubectl (strict by default) says the same to a user.
    got = _kubectl(installed, "apply", "-n", kube_namespace, "-f", "-", stdin=yaml.safe_dump(job))
    assert got.returncode != 0
    assert message in got.stderr


def test_install_dry_run_on_a_cluster_without_the_namespace(kube_cluster: KubeCluster) -> None:
    results = install(kube_cluster.api_client, namespace="tfkube-never-made", dry_run=True)
    outcomes = {(a.kind, a.outcome.split(":")[0]) for a in results}
    assert ("CustomResourceDefinition", "validated") in outcomes
    assert ("Deployment", "skipped") in outcomes
    core = kube_cluster.core
    with pytest.raises(ApiException) as info:
        core.read_namespace("tfkube-never-made")
    assert info.value.status == 404


def test_cli_install_dry_run_prints_what_it_checked(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tfkube",
            "install",
            "--kubeconfig",
            str(kube_cluster.kubeconfig),
            "--dry-run",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"CustomResourceDefinition {CRD_NAME}: validated" in proc.stdout
