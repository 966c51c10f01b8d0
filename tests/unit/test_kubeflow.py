"""Kubeflow `kubeflow.org/v1` TFJob import: what maps, and what is rejected and why."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tfkube.api import (
    CleanPodPolicy,
    RestartPolicy,
    Role,
    SpecError,
    SuccessPolicy,
    from_kubeflow,
    load_job_text,
    parse_job,
)

DELETE = object()


def container(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "tensorflow",
        "image": "tensorflow/tensorflow:2.21.0",
        "command": ["python", "train.py", "--epochs=2"],
    }
    base.update(changes)
    return base


def replica(n: int = 1, restart: str | None = "OnFailure", **changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "replicas": n,
        "template": {"spec": {"containers": [container()]}},
    }
    if restart is not None:
        spec["restartPolicy"] = restart
    spec.update(changes)
    return spec


def manifest(**changes: Any) -> dict[str, Any]:
    """A Kubeflow TFJob (1 PS, 2 workers) with `changes` at dotted ('__') paths."""
    data: dict[str, Any] = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "dist-mnist"},
        "spec": {"tfReplicaSpecs": {"PS": replica(1), "Worker": replica(2)}},
    }
    data = copy.deepcopy(data)
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        if value is DELETE:
            node.pop(last, None)
        else:
            node[last] = value
    return data


def errors(data: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(SpecError) as info:
        from_kubeflow(data)
    return {e.field: e.message for e in info.value.errors}


# -- what maps ----------------------------------------------------------------------------


def test_minimal_manifest_converts():
    job = from_kubeflow(manifest())
    assert job.name == "dist-mnist"
    assert job.spec.replicas.counts() == {"chief": 0, "ps": 1, "worker": 2, "evaluator": 0}
    assert job.spec.code.source == "."
    assert job.spec.code.entrypoint == "train.py"
    worker = job.spec.replicas.worker
    assert worker is not None
    assert worker.args == ["--epochs=2"]
    assert worker.image == "tensorflow/tensorflow:2.21.0"
    assert job.spec.run_policy.restart_policy is RestartPolicy.ON_FAILURE


def test_parse_job_and_load_text_convert_kubeflow_too():
    assert parse_job(manifest()) == from_kubeflow(manifest())
    text = """
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: kf}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 3
      template:
        spec:
          containers: [{name: tensorflow, image: tf, command: [python3, main.py]}]
"""
    job = load_job_text(text)
    assert job.spec.replicas.count(Role.WORKER) == 3
    assert job.spec.run_policy.restart_policy is RestartPolicy.NEVER  # Kubeflow's default


@pytest.mark.parametrize(
    ("kind", "role"),
    [
        pytest.param("Chief", "chief", id="chief"),
        pytest.param("Master", "chief", id="master-is-chief"),
        pytest.param("Evaluator", "evaluator", id="evaluator"),
        pytest.param("PS", "ps", id="ps"),
    ],
)
def test_replica_types(kind: str, role: str):
    job = from_kubeflow(manifest(spec__tfReplicaSpecs={"Worker": replica(2), kind: replica(1)}))
    assert job.spec.replicas.counts()[role] == 1


@pytest.mark.parametrize(
    ("changes", "check"),
    [
        pytest.param(
            {"spec__runPolicy": {"backoffLimit": 7}},
            lambda j: j.spec.run_policy.backoff_limit == 7,
            id="backoffLimit",
        ),
        pytest.param(
            {"spec__runPolicy": {"activeDeadlineSeconds": 60}},
            lambda j: j.spec.run_policy.active_deadline_seconds == 60,
            id="activeDeadlineSeconds",
        ),
        pytest.param(
            {"spec__runPolicy": {"ttlSecondsAfterFinished": 0}},
            lambda j: j.spec.run_policy.ttl_seconds_after_finished == 0,
            id="ttl",
        ),
        pytest.param(
            {"spec__runPolicy": {"cleanPodPolicy": "All"}},
            lambda j: j.spec.run_policy.clean_pod_policy is CleanPodPolicy.ALL,
            id="cleanPodPolicy-all",
        ),
        pytest.param(
            {"spec__runPolicy": {"cleanPodPolicy": "None"}},
            lambda j: j.spec.run_policy.clean_pod_policy is CleanPodPolicy.NONE,
            id="cleanPodPolicy-none",
        ),
        pytest.param(
            {"spec__runPolicy": {"suspend": True}},
            lambda j: j.spec.run_policy.suspend,
            id="suspend",
        ),
        pytest.param(
            {"spec__successPolicy": "AllWorkers"},
            lambda j: j.spec.run_policy.success_policy is SuccessPolicy.ALL_WORKERS,
            id="successPolicy-all-workers",
        ),
        pytest.param(
            {"spec__successPolicy": ""},
            lambda j: j.spec.run_policy.success_policy is SuccessPolicy.DEFAULT,
            id="successPolicy-empty",
        ),
        pytest.param(
            {
                "spec__tfReplicaSpecs": {
                    "Worker": replica(1, "ExitCode"),
                    "PS": replica(1, "ExitCode"),
                }
            },
            lambda j: j.spec.run_policy.restart_policy is RestartPolicy.EXIT_CODE,
            id="restartPolicy-exit-code",
        ),
        pytest.param(
            {"metadata": {"name": "x", "namespace": "team-a", "labels": {"team": "a"}}},
            lambda j: j.metadata.namespace == "team-a" and j.metadata.labels == {"team": "a"},
            id="metadata",
        ),
        pytest.param(
            {
                "metadata__annotations": {
                    "tfkube.io/code-source": "https://example.com/code.tar.gz",
                    "tfkube.io/code-sha256": "ab" * 32,
                }
            },
            lambda j: j.spec.code.is_url and j.spec.code.sha256 == "ab" * 32,
            id="code-annotations",
        ),
    ],
)
def test_fields_that_map(changes: dict[str, Any], check: Any):
    assert check(from_kubeflow(manifest(**changes)))


def test_container_details_map():
    c = container(
        command=["bash", "bin/run.sh"],
        args=["--lr=0.1"],
        env=[{"name": "MODE", "value": "fast"}],
        resources={
            "limits": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": 1},
            "requests": {"cpu": "1"},
        },
        ports=[{"name": "tfjob-port", "containerPort": 2345}],
        imagePullPolicy="Always",
    )
    spec = replica(
        2,
        template={"metadata": {"annotations": {"a": "b"}}, "spec": {"containers": [c]}},
    )
    job = from_kubeflow(manifest(spec__tfReplicaSpecs={"Worker": spec}))
    worker = job.spec.replicas.worker
    assert worker is not None
    assert job.spec.code.entrypoint == "bin/run.sh"
    assert worker.args == ["--lr=0.1"]
    assert worker.env == {"MODE": "fast"}
    assert (worker.resources.cpu, worker.resources.memory, worker.resources.gpu) == ("2", "4Gi", 1)
    assert worker.annotations == {"a": "b"}
    assert job.spec.run_policy.port == 2345


def test_script_in_args_when_no_command():
    c = container(args=["train.py", "--x"])
    del c["command"]
    spec = replica(1, template={"spec": {"containers": [c]}})
    job = from_kubeflow(manifest(spec__tfReplicaSpecs={"Worker": spec}))
    assert job.spec.code.entrypoint == "train.py"
    assert job.spec.replicas.worker is not None
    assert job.spec.replicas.worker.args == ["--x"]


# -- what is rejected ------------------------------------------------------------------------

W = "spec.tfReplicaSpecs.Worker"
C = f"{W}.template.spec.containers[0]"


def _worker_with(pod: dict[str, Any] | None = None, **container_changes: Any) -> dict[str, Any]:
    c = container(**container_changes)
    return replica(2, template={"spec": {"containers": [c], **(pod or {})}})


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        pytest.param(
            {"spec__tfReplicaSpecs__Worker__restartPolicy": "Always"},
            f"{W}.restartPolicy",
            "could never end",
            id="restart-always",
        ),
        pytest.param(
            {"spec__tfReplicaSpecs__Worker__restartPolicy": "Sometimes"},
            f"{W}.restartPolicy",
            "must be Never, OnFailure or ExitCode",
            id="restart-unknown",
        ),
        pytest.param(
            {"spec__tfReplicaSpecs__PS__restartPolicy": "Never"},
            "spec.tfReplicaSpecs",
            "one restartPolicy per job",
            id="restart-differs",
        ),
        pytest.param(
            {
                "spec__tfReplicaSpecs__Worker": replica(
                    2,
                    template={"spec": {"containers": [container(), {"name": "sidecar"}]}},
                )
            },
            f"{W}.template.spec.containers",
            "sidecars are not supported",
            id="sidecar",
        ),
        pytest.param(
            {"spec__tfReplicaSpecs__Worker": _worker_with({"volumes": [{"name": "v"}]})},
            f"{W}.template.spec.volumes",
            "cannot express this pod setting",
            id="volumes",
        ),
        pytest.param(
            {"spec__tfReplicaSpecs__Worker": _worker_with(volumeMounts=[{"name": "v"}])},
            f"{C}.volumeMounts",
            "cannot express this container setting",
            id="volume-mounts",
        ),
        pytest.param(
            {
                "spec__tfReplicaSpecs__Worker": _worker_with(
                    command=["python", "/var/tf_mnist/mnist.py"]
                )
            },
            f"{C}.command",
            "lives in the image",
            id="script-in-image",
        ),
        pytest.param(
            {"spec__tfReplicaSpecs__Worker": _worker_with(command=["python", "-m", "trainer"])},
            f"{C}.command",
            "not an interpreter option",
            id="python-m",
        ),
        pytest.param(
            {"spec__tfReplicaSpecs__Worker": _worker_with(command=["python", "other.py"])},
            "spec.tfReplicaSpecs",
            "one entrypoint for every role",
            id="entrypoints-differ",
        ),
        pytest.param(
            {
                "spec__tfReplicaSpecs__Worker": _worker_with(
                    env=[{"name": "P", "valueFrom": {"secretKeyRef": {"name": "s"}}}]
                )
            },
            f"{C}.env[0].valueFrom",
            "give a value",
            id="env-value-from",
        ),
        pytest.param(
            {
                "spec__tfReplicaSpecs__Worker": _worker_with(
                    resources={"limits": {"example.com/fpga": 1}}
                )
            },
            f"{C}.resources.limits.example.com/fpga",
            "only cpu, memory and nvidia.com/gpu",
            id="other-resource",
        ),
        pytest.param(
            {"spec__tfReplicaSpecs__Worker": _worker_with(ports=[{"containerPort": 80}])},
            f"{C}.ports[0]",
            "tfjob-port",
            id="other-port",
        ),
        pytest.param(
            {"spec__tfReplicaSpecs__Launcher": replica(1)},
            "spec.tfReplicaSpecs.Launcher",
            "unknown replica type",
            id="unknown-role",
        ),
        pytest.param(
            {
                "spec__tfReplicaSpecs": {
                    "Worker": replica(1),
                    "Chief": replica(1),
                    "Master": replica(1),
                }
            },
            "spec.tfReplicaSpecs.Master",
            "either a Chief or a Master",
            id="chief-and-master",
        ),
        pytest.param(
            {"spec__tfReplicaSpecs": {}},
            "spec.tfReplicaSpecs",
            "at least a Worker",
            id="no-replicas",
        ),
        pytest.param(
            {"spec__runPolicy": {"schedulingPolicy": {"minAvailable": 3}}},
            "spec.runPolicy.schedulingPolicy",
            "gang scheduling",
            id="scheduling-policy",
        ),
        pytest.param(
            {"spec__runPolicy": {"cleanPodPolicy": "Sometimes"}},
            "spec.runPolicy.cleanPodPolicy",
            "must be None, Running or All",
            id="clean-pod-policy",
        ),
        pytest.param(
            {"spec__successPolicy": "ChiefOnly"},
            "spec.successPolicy",
            "AllWorkers",
            id="success-policy",
        ),
        pytest.param(
            {"spec__enableDynamicWorker": True},
            "spec.enableDynamicWorker",
            "fixed set of workers",
            id="dynamic-worker",
        ),
        pytest.param(
            {"spec__tfReplicaSpecs__Worker__template__metadata": {"labels": {"a": "b"}}},
            f"{W}.template.metadata.labels",
            "only annotations carry over",
            id="pod-labels",
        ),
    ],
)
def test_what_does_not_map_is_rejected(changes: dict[str, Any], field: str, words: str):
    found = errors(manifest(**changes))
    assert field in found, found
    assert words in found[field]


def test_errors_after_conversion_name_tfkube_fields():
    with pytest.raises(SpecError) as info:
        from_kubeflow(manifest(metadata={"name": "Not_A_Dns_Label"}))
    assert [e.field for e in info.value.errors] == ["metadata.name"]
    assert "converted from Kubeflow" in str(info.value)


def test_every_problem_is_reported_at_once():
    found = errors(
        manifest(
            spec__tfReplicaSpecs__Worker__restartPolicy="Always",
            spec__enableDynamicWorker=True,
        )
    )
    assert len(found) >= 2
