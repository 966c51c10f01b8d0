"""Kubeflow `kubeflow.org/v1` TFJob import: what maps, and what is rejected and why."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tfkube.render import RenderOptions, render_job
from tfkube.spec import (
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
    assert job.spec.code is None  # the image carries the code: the command runs as given
    worker = job.spec.replicas.worker
    assert worker is not None
    assert worker.command == ["python", "train.py", "--epochs=2"]
    assert worker.args == []
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
        ports=[{"name": "tfjob-port", "containerPort": 2345}, {"containerPort": 6006}],
        imagePullPolicy="Always",
        workingDir="/app",
    )
    spec = replica(
        2,
        template={
            "metadata": {"annotations": {"a": "b"}, "labels": {"team": "vision"}},
            "spec": {"containers": [c], "serviceAccountName": "trainer"},
        },
    )
    job = from_kubeflow(manifest(spec__tfReplicaSpecs={"Worker": spec}))
    worker = job.spec.replicas.worker
    assert worker is not None
    assert (worker.command, worker.args) == (["bash", "bin/run.sh"], ["--lr=0.1"])
    assert worker.env == {"MODE": "fast"}
    assert (worker.resources.cpu, worker.resources.memory, worker.resources.gpu) == ("2", "4Gi", 1)
    assert worker.annotations == {"a": "b"}
    assert worker.labels == {"team": "vision"}
    assert worker.working_dir == "/app"
    assert worker.service_account_name == "trainer"
    assert job.spec.run_policy.port == 2345  # other ports are informational: dropped
    assert job.spec.image_pull_policy is not None
    assert job.spec.image_pull_policy.value == "Always"


@pytest.mark.parametrize(
    ("words", "command"),
    [
        pytest.param(["train.py", "--x"], ["train.py", "--x"], id="script"),
        pytest.param(["python", "/opt/t.py"], ["python", "/opt/t.py"], id="interpreter"),
    ],
)
def test_args_alone_are_the_command_line(words: list[str], command: list[str]):
    c = container(args=words)
    del c["command"]
    spec = replica(1, template={"spec": {"containers": [c]}})
    job = from_kubeflow(manifest(spec__tfReplicaSpecs={"Worker": spec}))
    assert job.spec.replicas.worker is not None
    assert job.spec.replicas.worker.command == command


def test_per_role_restart_policies():
    job = from_kubeflow(
        manifest(
            spec__tfReplicaSpecs={
                "PS": replica(1, "Always"),
                "Worker": replica(2, "ExitCode"),
                "Evaluator": replica(1, None),
            }
        )
    )
    assert job.spec.restart_policy(Role.PS) is RestartPolicy.ON_FAILURE  # tfkube ends the PS
    assert job.spec.restart_policy(Role.WORKER) is RestartPolicy.EXIT_CODE
    assert job.spec.restart_policy(Role.EVALUATOR) is RestartPolicy.NEVER  # Kubeflow's default


def test_volumes_mounts_and_helpers_map():
    pod = {
        "initContainers": [
            {
                "name": "fetch",
                "image": "busybox",
                "command": ["sh", "-c", "wget x"],
                "volumeMounts": [{"name": "scratch", "mountPath": "/in"}],
            }
        ],
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "ds", "readOnly": True}},
            {"name": "scratch", "emptyDir": {"medium": "Memory"}},
            {"name": "cfg", "configMap": {"name": "settings"}},
            {"name": "creds", "secret": {"secretName": "s3"}},
        ],
    }
    main = container(
        volumeMounts=[
            {"name": "data", "mountPath": "/datasets", "readOnly": True},
            {"name": "cfg", "mountPath": "/etc/cfg", "subPath": "train"},
            {"name": "creds", "mountPath": "/creds"},
        ],
        env=[
            {"name": "K", "valueFrom": {"secretKeyRef": {"name": "s3", "key": "k"}}},
            {
                "name": "IP",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}},
            },
        ],
    )
    shipper = {"name": "shipper", "image": "fluent-bit", "args": ["-i", "tail"]}
    spec = replica(2, template={"spec": {"containers": [shipper, main], **pod}})
    worker = from_kubeflow(manifest(spec__tfReplicaSpecs={"Worker": spec})).spec.replicas.worker
    assert worker is not None
    volumes = {v.name: v for v in worker.volumes}
    assert set(volumes) == {"kf-data", "scratch", "cfg", "creds"}  # `data` is tfkube's own
    assert (volumes["kf-data"].claim_name, volumes["kf-data"].mount_path) == ("ds", "/datasets")
    assert volumes["kf-data"].read_only
    assert volumes["scratch"].mount_path is None  # only the init container mounts it
    assert volumes["scratch"].empty_dir is not None
    assert volumes["cfg"].sub_path == "train"
    assert volumes["creds"].secret == "s3"
    assert [c.name for c in worker.init_containers] == ["fetch"]
    assert worker.init_containers[0].volume_mounts[0].name == "scratch"
    assert [c.name for c in worker.sidecars] == ["shipper"]
    assert set(worker.env) == {"K", "IP"}
    assert worker.cluster_only() == ["volumes", "initContainers", "sidecars", "env.K", "env.IP"]


def test_placement_and_scheduling_map():
    pod = {
        "nodeSelector": {"pool": "gpu"},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                    ]
                }
            }
        },
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "schedulerName": "volcano",
        "priorityClassName": "high",
        "terminationGracePeriodSeconds": 45,
        "imagePullSecrets": [{"name": "regcred"}],
    }
    spec = replica(2, template={"spec": {"containers": [container()], **pod}})
    job = from_kubeflow(
        manifest(
            spec__tfReplicaSpecs={"Worker": spec},
            spec__runPolicy={"schedulingPolicy": {"minAvailable": 2, "queue": "research"}},
        )
    )
    worker = job.spec.replicas.worker
    assert worker is not None
    assert worker.node_selector == {"pool": "gpu", "zone": "a"}
    assert worker.tolerations is not None
    assert worker.tolerations[0].key == "gpu"
    scheduling = job.spec.scheduling
    assert scheduling is not None
    assert (scheduling.gang.value, scheduling.queue, scheduling.min_available) == (
        "Volcano",
        "research",
        2,
    )
    assert scheduling.priority_class_name == "high"
    assert job.spec.run_policy.termination_grace_seconds == 45
    assert job.spec.image_pull_secrets == ["regcred"]


def test_kueue_queue_label_is_kueue_scheduling():
    job = from_kubeflow(
        manifest(
            metadata={"name": "q", "labels": {"kueue.x-k8s.io/queue-name": "team-a"}},
            spec__runPolicy={"suspend": True},  # Kueue's own switch: it admits the Jobs
        )
    )
    assert job.spec.scheduling is not None
    assert (job.spec.scheduling.gang.value, job.spec.scheduling.queue) == ("Kueue", "team-a")
    assert not job.spec.run_policy.suspend
    assert job.metadata.labels == {}


def test_old_top_level_run_policy_fields():
    job = from_kubeflow(manifest(spec__cleanPodPolicy="None", spec__ttlSecondsAfterFinished=60))
    assert job.spec.run_policy.clean_pod_policy is CleanPodPolicy.NONE
    assert job.spec.run_policy.ttl_seconds_after_finished == 60


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
            {
                "spec__tfReplicaSpecs__Worker": replica(
                    2,
                    template={"spec": {"containers": [container(name="main"), {"name": "side"}]}},
                )
            },
            f"{W}.template.spec.containers",
            "none named 'tensorflow'",
            id="two-containers-no-tensorflow",
        ),
        pytest.param(
            {
                "spec__tfReplicaSpecs__Worker": _worker_with(
                    {"volumes": [{"name": "v", "hostPath": {"path": "/x"}}]}
                )
            },
            f"{W}.template.spec.volumes[0].hostPath",
            "use a claim for this storage",
            id="host-path-volume",
        ),
        pytest.param(
            {
                "spec__tfReplicaSpecs__Worker": _worker_with(
                    volumeMounts=[{"name": "v", "mountPath": "/v"}]
                )
            },
            f"{C}.volumeMounts[0].name",
            "is not one of the pod's volumes",
            id="mount-of-no-volume",
        ),
        pytest.param(
            {"spec__tfReplicaSpecs__Worker": _worker_with(command=None, args=["--epochs=3"])},
            f"{C}.command",
            "the image's own ENTRYPOINT would run with",
            id="flags-for-the-image-entrypoint",
        ),
        pytest.param(
            {
                "spec__tfReplicaSpecs__Worker": _worker_with(
                    env=[{"name": "P", "valueFrom": {"resourceFieldRef": {"resource": "cpu"}}}]
                )
            },
            f"{C}.env[0].valueFrom.resourceFieldRef",
            "give a value instead",
            id="env-resource-field-ref",
        ),
        pytest.param(
            {
                "spec__tfReplicaSpecs__Worker": _worker_with(
                    envFrom=[{"configMapRef": {"name": "c"}}]
                )
            },
            f"{C}.envFrom",
            "cannot express this container setting",
            id="env-from",
        ),
        pytest.param(
            {"spec__tfReplicaSpecs__Worker": _worker_with({"hostNetwork": True})},
            f"{W}.template.spec.hostNetwork",
            "cannot express this pod setting",
            id="host-network",
        ),
        pytest.param(
            {
                "spec__tfReplicaSpecs__Worker": _worker_with(
                    {
                        "affinity": {
                            "podAntiAffinity": {
                                "requiredDuringSchedulingIgnoredDuringExecution": []
                            }
                        }
                    }
                )
            },
            f"{W}.template.spec.affinity.podAntiAffinity",
            "nodeSelector and tolerations",
            id="pod-anti-affinity",
        ),
        pytest.param(
            {
                "spec__tfReplicaSpecs__Worker": _worker_with(
                    {
                        "affinity": {
                            "nodeAffinity": {
                                "requiredDuringSchedulingIgnoredDuringExecution": {
                                    "nodeSelectorTerms": [
                                        {
                                            "matchExpressions": [
                                                {"key": "z", "operator": "In", "values": ["a", "b"]}
                                            ]
                                        }
                                    ]
                                }
                            }
                        }
                    }
                )
            },
            f"{W}.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0].matchExpressions[0]",
            "`In` with one value",
            id="node-affinity-two-values",
        ),
        pytest.param(
            {
                "spec__tfReplicaSpecs": {
                    name: replica(
                        1,
                        template={"spec": {"containers": [container()], "schedulerName": sched}},
                    )
                    for name, sched in (("PS", "volcano"), ("Worker", "my-scheduler"))
                }
            },
            "spec.tfReplicaSpecs",
            "one schedulerName per job",
            id="scheduler-differs",
        ),
        pytest.param(
            {"spec__runPolicy": {"schedulingPolicy": {"minResources": {"cpu": "4"}}}},
            "spec.runPolicy.schedulingPolicy.minResources",
            "minResources",
            id="min-resources",
        ),
        pytest.param(
            {"metadata": {"generateName": "job-"}},
            "metadata.generateName",
            "fixed name",
            id="generate-name",
        ),
        pytest.param(
            {"spec__tfReplicaSpecs__Worker__restartPolicy": "Sometimes"},
            f"{W}.restartPolicy",
            "must be Never, OnFailure or ExitCode",
            id="restart-unknown",
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


# -- storage: what it means under Kubeflow --------------------------------------------------

CORPUS = Path(__file__).resolve().parents[1] / "data" / "kubeflow"
ACCEPTED = sorted(
    name
    for name, what in yaml.safe_load((CORPUS / "expected.yaml").read_text()).items()
    if "phase" in what
)


def _claims_in_pods(objects: list[dict[str, Any]]) -> set[str]:
    return {
        v["persistentVolumeClaim"]["claimName"]
        for o in objects
        if o["kind"] == "Job"
        for v in o["spec"]["template"]["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    }


@pytest.mark.parametrize("name", ACCEPTED, ids=lambda n: n.removesuffix(".yaml"))
def test_a_manifest_gets_no_claim_it_did_not_name(name: str) -> None:
    """No volumes in, no claims out: a converted manifest makes no PersistentVolumeClaim,
    and its pods mount no claim but those the manifest itself names (under Kubeflow a
    replica's files are its pod's own, too)."""
    raw = yaml.safe_load((CORPUS / name).read_text())
    job = parse_job(raw, name)
    assert not job.spec.storage.data.asks_for_claim
    assert not job.spec.storage.logs.asks_for_claim
    objects = render_job(job, RenderOptions(namespace="ns", code_archive=b"code"))
    assert not [o for o in objects if o["kind"] == "PersistentVolumeClaim"]
    named = {
        v["persistentVolumeClaim"]["claimName"]
        for spec in raw["spec"]["tfReplicaSpecs"].values()
        for v in spec["template"]["spec"].get("volumes") or []
        if "persistentVolumeClaim" in v
    }
    assert _claims_in_pods(objects) == named
