"""Rendering a TFJob into Kubernetes objects (pure): names, labels, DNS wiring, the launcher
contract, resources, pull policy, failure policies, gang scheduling, quota, storage,
determinism; the CRD schema generated from the models; deploy/ never drifting."""

from __future__ import annotations

import base64
import copy
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import time
import zipfile
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
import yaml

from tfkube import contract
from tfkube.kube.names import REPLICA_CONTAINER, job_labels, replica_pod_labels, role_job_name
from tfkube.kube.resources import resource_for
from tfkube.launcher._settings import contract_from_env
from tfkube.planner import JobPhase, should_retry
from tfkube.render import (
    MAX_CODE_CONFIGMAP_BYTES,
    RenderOptions,
    StorageDefaults,
    crd,
    deploy_file_texts,
    dump_yaml,
    render_job,
    rendered_storage,
)

# render's own unit tests: its private modules' rules too.
from tfkube.render._crd import PHASES
from tfkube.render._deploy import OPERATOR_RULES
from tfkube.render._launcher import build_launcher_zipapp
from tfkube.render._render import (
    HEARTBEAT_PATH,
    LAUNCHER_COMMAND,
    USER_ERROR_EXIT_CODES,
    image_registry,
    stall_probe,
)
from tfkube.spec import MAX_NAME_LENGTH, SpecError, TFJob, dump_job, parse_job
from tfkube.tfcluster import cluster_spec, service_address

REPO = Path(__file__).resolve().parents[2]
URL = "https://code.example/job.tar.gz"
SHA = "cd" * 32
LAUNCHER = b"zipapp"


def job_of(**spec: Any) -> TFJob:
    data: dict[str, Any] = {
        "apiVersion": "tfkube.io/v1alpha1",
        "kind": "TFJob",
        "metadata": {"name": "mnist"},
        "spec": {
            "replicas": {"ps": {"replicas": 2}, "worker": {"replicas": 3}},
            "code": {"source": URL, "sha256": SHA},
        },
    }
    for path, value in spec.items():
        node = data["spec"]
        *parents, last = path.split("__")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return parse_job(data)


def render(job: TFJob | None = None, **options: Any) -> list[dict[str, Any]]:
    options.setdefault("launcher_zipapp", LAUNCHER)
    return render_job(job or job_of(), RenderOptions(namespace="team-a", **options))


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, (
        f"{kind} {name} in {[(o['kind'], o['metadata']['name']) for o in objects]}"
    )
    return found[0]


def pod(objects: list[dict[str, Any]], role: str) -> dict[str, Any]:
    spec: dict[str, Any] = one(objects, "Job", f"mnist-{role}")["spec"]["template"]["spec"]
    return spec


def env_of(objects: list[dict[str, Any]], role: str, job: str | None = None) -> dict[str, str]:
    """The container's environment as its pod gets it: a rendered ConfigMap's key
    resolved (as the kubelet does), another reference as `from <json>`. `job`: of that
    Job (a shard's), not the role's first."""
    template = one(objects, "Job", job)["spec"]["template"]["spec"] if job else pod(objects, role)
    container = template["containers"][0]
    out = {}
    for e in container["env"]:
        ref = e.get("valueFrom", {}).get("configMapKeyRef")
        if "value" in e:
            out[e["name"]] = e["value"]
        elif ref and any(
            o["metadata"]["name"] == ref["name"] for o in by_kind(objects, "ConfigMap")
        ):
            out[e["name"]] = one(objects, "ConfigMap", ref["name"])["data"][ref["key"]]
        else:
            out[e["name"]] = "from " + json.dumps(e["valueFrom"])
    return out


# -- objects, names, labels ---------------------------------------------------------------


def test_objects_and_order():
    kinds = [(o["kind"], o["metadata"]["name"]) for o in render()]
    assert kinds == [
        ("ConfigMap", "mnist-launcher"),
        ("ConfigMap", "mnist-size"),  # PS and no chief: it may be resized
        ("Service", "mnist-ps"),  # a headless Service per Job, before the Jobs
        ("Service", "mnist-worker"),
        ("Job", "mnist-ps"),
        ("Job", "mnist-worker"),
    ]


def test_every_object_is_in_the_namespace_with_the_contract_labels():
    for obj in render(job_of(replicas__chief={"replicas": 1}, tensorboard={})):
        assert obj["metadata"]["namespace"] == "team-a"
        labels = obj["metadata"]["labels"]
        assert labels["tfkube.io/job-name"] == "mnist"
        assert labels["app.kubernetes.io/managed-by"] == "tfkube"
        assert "ownerReferences" not in obj["metadata"]


@pytest.mark.parametrize("role", ["chief", "ps", "worker", "evaluator"])
def test_role_job_and_pod_labels(role):
    job = job_of(replicas__chief={"replicas": 1}, replicas__evaluator={"replicas": 1})
    rendered = one(render(job), "Job", f"mnist-{role}")
    expected = {**job_labels("mnist", role), "tfkube.io/component": "replica"}
    assert rendered["metadata"]["labels"] == expected
    # The pods: three of ours beside the Job controller's five, eight in all (Go's
    # small-map path in the scheduler's label matching): no managed-by.
    pod = {k: v for k, v in expected.items() if k != "app.kubernetes.io/managed-by"}
    assert rendered["spec"]["template"]["metadata"]["labels"] == pod
    assert replica_pod_labels("mnist", role) == pod


def test_job_labels():
    assert job_labels("a") == {"app.kubernetes.io/managed-by": "tfkube", "tfkube.io/job-name": "a"}
    assert job_labels("a", "ps")["tfkube.io/replica-type"] == "ps"


def test_user_labels_are_kept_but_never_override_ours():
    data = job_of().model_dump(by_alias=True, mode="json")
    data["metadata"]["labels"] = {"team": "vision", "tfkube.io/job-name": "evil"}
    objects = render(parse_job(data))
    for obj in objects:
        assert obj["metadata"]["labels"]["team"] == "vision"
        assert obj["metadata"]["labels"]["tfkube.io/job-name"] == "mnist"


def test_job_metadata_namespace_is_not_used():
    data = job_of().model_dump(by_alias=True, mode="json")
    data["metadata"]["namespace"] = "elsewhere"
    assert {o["metadata"]["namespace"] for o in render(parse_job(data))} == {"team-a"}


def test_zero_replica_role_has_no_job():
    objects = render(job_of(replicas__ps={"replicas": 0}))
    assert [o["metadata"]["name"] for o in by_kind(objects, "Job")] == ["mnist-worker"]


# -- DNS wiring -----------------------------------------------------------------------------


def test_headless_service():
    svc = one(render(job_of(runPolicy__port=3333)), "Service", "mnist-worker")
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["ports"] == [
        {"name": "tf", "port": 3333, "targetPort": 3333, "protocol": "TCP"}
    ]
    # the Job controller's label: this Job's pods, no other's (not another shard's)
    assert svc["spec"]["selector"] == {"batch.kubernetes.io/job-name": "mnist-worker"}
    assert svc["metadata"]["labels"] == {
        **job_labels("mnist", "worker"),
        "tfkube.io/component": "replica",
    }


def test_a_service_per_job_and_no_cluster_ips():
    objects = render(job_of(tensorboard={}, replicas__chief={"replicas": 1}))
    services = by_kind(objects, "Service")
    assert [s["metadata"]["name"] for s in services] == [
        "mnist-chief",
        "mnist-ps",
        "mnist-worker",
        "mnist-tensorboard",
    ]
    assert all("clusterIP" not in s["spec"] or s["spec"]["clusterIP"] == "None" for s in services)
    for job in by_kind(objects, "Job"):
        assert job["spec"]["template"]["spec"]["subdomain"] == job["metadata"]["name"]


def test_one_service_renders_the_job_s_one_service_as_before():
    """A job made before 2026-12-04 keeps its one Service and its addresses."""
    objects = render(job_of(runPolicy__port=3333), one_service=True)
    services = by_kind(objects, "Service")
    assert [s["metadata"]["name"] for s in services] == ["mnist"]
    assert services[0]["spec"]["selector"] == {
        "tfkube.io/job-name": "mnist",
        "tfkube.io/component": "replica",
    }
    assert services[0]["metadata"]["labels"] == {
        **job_labels("mnist"),
        "tfkube.io/component": "replica",
    }
    for job in by_kind(objects, "Job"):
        assert job["spec"]["template"]["spec"]["subdomain"] == "mnist"
    assert env_of(objects, "ps")["TFKUBE_ADDRESS"] == "mnist-{role}-{index}.mnist:3333"


@pytest.mark.parametrize(("role", "count"), [("ps", 2), ("worker", 3)])
def test_indexed_job_gives_stable_hostnames(role, count):
    rendered = one(render(), "Job", f"mnist-{role}")
    spec = rendered["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == count
    # Kubernetes names an Indexed Job's pods' hostnames <job name>-<index>.
    assert rendered["metadata"]["name"] == f"mnist-{role}"
    assert spec["template"]["spec"]["subdomain"] == f"mnist-{role}"
    assert spec["template"]["spec"]["restartPolicy"] == "Never"


def test_tf_config_addresses_are_the_headless_dns_names():
    env = env_of(render(job_of(runPolicy__port=2345)), "worker")
    assert "TFKUBE_CLUSTER" not in env
    assert env["TFKUBE_ADDRESS"] == "mnist-{role}-{index}.mnist-{role}:2345"
    # What the launcher makes of it in the pod of index 1:
    cluster = contract_from_env({**env, "JOB_COMPLETION_INDEX": "1"}).cluster
    assert cluster == {
        "ps": ["mnist-ps-0.mnist-ps:2345", "mnist-ps-1.mnist-ps:2345"],
        "worker": [
            "mnist-worker-0.mnist-worker:2345",
            "mnist-worker-1.mnist-worker:2345",
            "mnist-worker-2.mnist-worker:2345",
        ],
    }
    assert cluster == cluster_spec({"ps": 2, "worker": 3}, service_address("mnist", 2345))


@pytest.mark.parametrize(
    ("ps", "workers"),
    [
        pytest.param(1, 2, id="small"),
        pytest.param(100, 1000, id="1100"),
        pytest.param(1000, 10000, id="11000"),
    ],
)
def test_pod_templates_do_not_grow_with_the_job(ps: int, workers: int):
    """Every pod the Job controller makes copies its template: 11,000 listed addresses
    made each pod 330 KB (3.6 GB through etcd and every watch)."""
    small = render(job_of())
    big = render(job_of(replicas={"ps": {"replicas": ps}, "worker": {"replicas": workers}}))
    for role in ("ps", "worker"):
        size = len(json.dumps(pod(big, role)))
        # digits of the counts, and past 500 replicas the rule's two `{shard:500}`
        assert size - len(json.dumps(pod(small, role))) < (10 if ps + workers < 500 else 40)
    # every shard's template: + its offset (an env var and a label, a few digits each)
    largest = [max(len(json.dumps(j["spec"]["template"])) for j in by_kind(objects, "Job"))
               for objects in (big, small)]  # fmt: skip
    assert largest[0] - largest[1] < 150


# -- roles split into several Indexed Jobs (shards) ---------------------------------------------


def _jobs(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in by_kind(objects, "Job")}


def test_roles_within_the_shard_size_render_exactly_as_one_job_each():
    """S only matters above it: the same objects for any S at least the largest role."""
    assert render(max_pods_per_job=3) == render() == render(max_pods_per_job=10_000)
    assert list(_jobs(render(max_pods_per_job=3))) == ["mnist-ps", "mnist-worker"]


def test_a_role_above_the_shard_size_is_several_indexed_jobs():
    """1 PS + 5 workers with S=2: the PS Job, and the workers in Jobs of 2, 2 and 1; shard
    k is `<job>-worker-s<k>` with its first replica index as env var and label, and every
    pod carries the one sharded rule."""
    job = job_of(replicas={"ps": {"replicas": 1}, "worker": {"replicas": 5}})
    objects = render(job, max_pods_per_job=2)
    jobs = _jobs(objects)
    assert list(jobs) == ["mnist-ps", "mnist-worker", "mnist-worker-s1", "mnist-worker-s2"]
    counts = {n: (j["spec"]["completions"], j["spec"]["parallelism"]) for n, j in jobs.items()}
    assert counts == {
        "mnist-ps": (1, 1),
        "mnist-worker": (2, 2),
        "mnist-worker-s1": (2, 2),
        "mnist-worker-s2": (1, 1),
    }
    offsets = {n: env_of(objects, "", n).get("TFKUBE_INDEX_OFFSET") for n in jobs}
    assert offsets == {
        "mnist-ps": None,
        "mnist-worker": None,
        "mnist-worker-s1": "2",
        "mnist-worker-s2": "4",
    }
    for name, j in jobs.items():
        labels = j["metadata"]["labels"]
        assert labels["tfkube.io/replica-type"] == name.split("-")[1]
        template = j["spec"]["template"]["metadata"]
        assert labels.get("tfkube.io/index-offset") == offsets[name]
        assert "tfkube.io/index-offset" not in template["labels"]  # an annotation on pods
        assert (template.get("annotations") or {}).get("tfkube.io/index-offset") == offsets[name]
        env = env_of(objects, "", name)
        rule = "mnist-{role}{shard:2}-{index}.mnist-{role}{shard:2}:2222"
        assert env["TFKUBE_ADDRESS"] == rule
        assert env["TFKUBE_NUM_WORKERS"] == "5"
        assert j["spec"]["completionMode"] == "Indexed"
        assert j["spec"]["template"]["spec"]["subdomain"] == name  # its own Service
        service = one(objects, "Service", name)
        assert service["spec"]["selector"] == {"batch.kubernetes.io/job-name": name}


def test_the_launcher_reads_every_shard_pod_as_its_global_replica():
    """What each pod's launcher makes of its env (the Job controller adds
    JOB_COMPLETION_INDEX, and names the pod's hostname `<job name>-<index>`): replica
    k*S+i, and that replica's hostname is its own address in every pod's cluster."""
    job = job_of(replicas={"ps": {"replicas": 1}, "worker": {"replicas": 5}})
    seen = {}
    objects = render(job, max_pods_per_job=2)
    for name, j in _jobs(objects).items():
        for i in range(j["spec"]["completions"]):
            env = {**env_of(objects, "", name), "JOB_COMPLETION_INDEX": str(i)}
            c = contract_from_env(env)
            hostname = f"{name}-{i}"
            assert c.cluster[c.role][c.index] == f"{hostname}.{name}:2222"
            seen[f"{c.role}-{c.index}"] = hostname
    assert seen == {
        "ps-0": "mnist-ps-0",
        "worker-0": "mnist-worker-0",
        "worker-1": "mnist-worker-1",
        "worker-2": "mnist-worker-s1-0",
        "worker-3": "mnist-worker-s1-1",
        "worker-4": "mnist-worker-s2-0",
    }


def test_shard_names_fit_the_longest_job_name():
    """The longest job name, the longest role and the most digits S and the count allow:
    every Job name fits a label value and every hostname a DNS label (63)."""
    name = "j" * MAX_NAME_LENGTH
    for size, count in ((1, 100_000), (317, 100_000), (500, 100_000), (10_000, 100_000)):
        last_shard, last_local = divmod(count - 1, size)
        job_name = role_job_name(name, "evaluator", last_shard)
        assert len(job_name) <= 63
        assert len(f"{job_name}-{min(size, count) - 1}") <= 63, (size, count)
        assert last_local < size


# -- the launcher contract -------------------------------------------------------------------


def test_same_launcher_command_and_contract_as_locally():
    objects = render()
    env = env_of(objects, "worker")
    container = pod(objects, "worker")["containers"][0]
    assert container["name"] == REPLICA_CONTAINER
    assert container["command"] == list(LAUNCHER_COMMAND) == ["python3", "/opt/tfkube/launcher.pyz"]
    assert "TFKUBE_INDEX" not in env  # pods read JOB_COMPLETION_INDEX
    assert env["TFKUBE_ROLE"] == "worker"
    assert env["TFKUBE_JOB"] == "mnist"
    assert env["TFKUBE_CODE_URL"] == URL
    assert env["TFKUBE_CODE_SHA256"] == SHA
    assert env["TFKUBE_DATA_DIR"] == "/tfkube/data"
    assert env["TFKUBE_LOG_DIR"] == "/tfkube/logs"
    assert env["TFKUBE_WORK_DIR"] == "/tfkube/work"
    assert env["TFKUBE_NUM_PS"] == "2"
    assert env["TFKUBE_NUM_WORKERS"] == "3"  # from the size ConfigMap (resizable job)
    names = [e["name"] for e in container["env"]]
    assert names == sorted(names)


def test_env_commands_and_args_go_through_the_contract():
    job = job_of(
        replicas__worker={
            "replicas": 1,
            "env": {"A": "1", "CLASSPATH": {"command": "hadoop classpath"}},
            "args": ["--steps=5"],
        }
    )
    env = env_of(render(job), "worker")
    assert env["A"] == "1"
    assert json.loads(env["TFKUBE_ENV_COMMANDS"]) == {"CLASSPATH": "hadoop classpath"}
    assert json.loads(env["TFKUBE_ARGS"]) == ["--steps=5"]


def test_launcher_configmap_holds_the_zipapp_and_is_mounted():
    objects = render()
    cm = one(objects, "ConfigMap", "mnist-launcher")
    assert base64.b64decode(cm["binaryData"]["launcher.pyz"]) == LAUNCHER
    spec = pod(objects, "ps")
    volume = next(v for v in spec["volumes"] if v["name"] == "launcher")
    assert volume["configMap"]["name"] == "mnist-launcher"
    mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "launcher")
    assert mount == {"name": "launcher", "mountPath": "/opt/tfkube", "readOnly": True}


def test_launcher_zipapp_is_deterministic_and_stdlib_only():
    first = build_launcher_zipapp()
    assert first == build_launcher_zipapp()
    names = zipfile.ZipFile(BytesIO(first)).namelist()
    assert names[0] == "__main__.py"
    assert "tfkube/__init__.py" in names
    assert "tfkube/launcher/_run.py" in names
    assert "tfkube/tfcluster/_wiring.py" in names
    assert not [n for n in names if n.startswith(("tfkube/api", "tfkube/render", "tfkube/cli"))]
    assert all(
        i.date_time == (1980, 1, 1, 0, 0, 0) for i in zipfile.ZipFile(BytesIO(first)).infolist()
    )


def test_launcher_zipapp_is_built_when_not_given():
    cm = one(render_job(job_of(), RenderOptions(namespace="n")), "ConfigMap", "mnist-launcher")
    assert base64.b64decode(cm["binaryData"]["launcher.pyz"]) == build_launcher_zipapp()


def test_local_code_needs_a_url_or_a_packed_archive():
    job = job_of(code={"source": "./code"})
    with pytest.raises(SpecError) as info:
        render(job)
    assert info.value.errors[0].field == "spec.code.source"
    assert "http(s) URL" in info.value.errors[0].message
    assert "--pack-code" in info.value.errors[0].message


def test_packed_code_ships_in_a_configmap_with_its_checksum():
    archive = b"tar.gz bytes"
    objects = render(job_of(code={"source": "./code"}), code_archive=archive)
    cm = one(objects, "ConfigMap", "mnist-code")
    assert base64.b64decode(cm["binaryData"]["code.tar.gz"]) == archive
    env = env_of(objects, "worker")
    assert env["TFKUBE_CODE_URL"] == "file:///opt/tfkube-code/code.tar.gz"
    assert env["TFKUBE_CODE_SHA256"] == hashlib.sha256(archive).hexdigest()
    mounts = pod(objects, "worker")["containers"][0]["volumeMounts"]
    assert {"name": "code", "mountPath": "/opt/tfkube-code", "readOnly": True} in mounts


def test_packed_code_too_big_for_a_configmap():
    with pytest.raises(SpecError, match="more than a ConfigMap"):
        render(
            job_of(code={"source": "./code"}),
            code_archive=b"x" * (MAX_CODE_CONFIGMAP_BYTES + 1),
        )


def test_url_code_ignores_a_packed_archive():
    objects = render(code_archive=b"unused")
    assert not [o for o in objects if o["metadata"]["name"] == "mnist-code"]


def test_termination_grace_covers_the_launchers():
    spec = pod(render(job_of(runPolicy__terminationGraceSeconds=7.5)), "worker")
    assert spec["terminationGracePeriodSeconds"] == 8 + 5
    assert spec["enableServiceLinks"] is False


# -- resources ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        pytest.param({}, {}, id="none"),
        pytest.param(
            {"cpu": "2", "memory": "4Gi"},
            {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}},
            id="cpu-memory",
        ),
        pytest.param({"gpu": 2}, {"limits": {"nvidia.com/gpu": "2"}}, id="gpu-only"),
        pytest.param(
            {"cpu": "500m", "gpu": 1},
            {"requests": {"cpu": "500m"}, "limits": {"cpu": "500m", "nvidia.com/gpu": "1"}},
            id="cpu-gpu",
        ),
    ],
)
def test_requests_and_limits(resources, expected):
    job = job_of(replicas__worker={"replicas": 1, "resources": resources})
    assert pod(render(job), "worker")["containers"][0]["resources"] == expected


def test_node_selector_and_tolerations_per_role():
    job = job_of(
        replicas__worker={
            "replicas": 1,
            "nodeSelector": {"tfkube.io/gpu": "true"},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "dedicated", "value": "ml"},
            ],
        }
    )
    objects = render(job)
    worker = pod(objects, "worker")
    assert worker["nodeSelector"] == {"tfkube.io/gpu": "true"}
    assert worker["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "dedicated", "operator": "Equal", "value": "ml"},
        *NODE_LOST_30,
    ]
    assert "nodeSelector" not in pod(objects, "ps")
    assert pod(objects, "ps")["tolerations"] == NODE_LOST_30


def _lost(key: str, seconds: int) -> dict[str, Any]:
    return {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}


NOT_READY, UNREACHABLE = "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"
NODE_LOST_30 = [_lost(NOT_READY, 30), _lost(UNREACHABLE, 30)]


@pytest.mark.parametrize(
    ("run_policy", "own", "expected"),
    [
        pytest.param({}, [], NODE_LOST_30, id="default-30s"),
        pytest.param(
            {"nodeLostSeconds": 5}, [], [_lost(NOT_READY, 5), _lost(UNREACHABLE, 5)], id="5s"
        ),
        pytest.param(
            {"nodeLostSeconds": 0}, [], [_lost(NOT_READY, 0), _lost(UNREACHABLE, 0)], id="at-once"
        ),
        pytest.param(
            {},
            [
                {
                    "key": UNREACHABLE,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 600,
                }
            ],
            [_lost(UNREACHABLE, 600), _lost(NOT_READY, 30)],
            id="theirs-win-for-their-key",
        ),
        pytest.param(
            {},
            [{"key": NOT_READY, "operator": "Exists"}],
            [{"key": NOT_READY, "operator": "Exists"}, _lost(UNREACHABLE, 30)],
            id="theirs-any-effect-forever",
        ),
        pytest.param(
            {},
            [{"key": NOT_READY, "operator": "Exists", "effect": "NoSchedule"}],
            [
                {"key": NOT_READY, "operator": "Exists", "effect": "NoSchedule"},
                *NODE_LOST_30,
            ],
            id="theirs-other-effect-does-not-count",
        ),
        pytest.param(
            {}, [{"operator": "Exists"}], [{"operator": "Exists"}], id="theirs-tolerate-everything"
        ),
    ],
)
def test_node_lost_tolerations(run_policy, own, expected):
    """A replica on a node that stopped answering is evicted after runPolicy.nodeLostSeconds
    (not Kubernetes' 300 s); a replica's own toleration of the same taint wins."""
    spec: dict[str, Any] = {"replicas": 1}
    if own:
        spec["tolerations"] = own
    objects = render(job_of(runPolicy=run_policy, replicas__worker=spec))
    assert pod(objects, "worker")["tolerations"] == expected
    tensorboard = render(job_of(runPolicy=run_policy, tensorboard={}))
    # TensorBoard's Deployment replaces its pod at once anyway: Kubernetes' default stays.
    assert (
        "tolerations"
        not in one(tensorboard, "Deployment", "mnist-tensorboard")["spec"]["template"]["spec"]
    )


@pytest.mark.parametrize("seconds", [-1, 3601, "soon"])
def test_node_lost_seconds_errors_name_the_field(seconds):
    with pytest.raises(SpecError) as info:
        job_of(runPolicy={"nodeLostSeconds": seconds})
    assert info.value.errors[0].field == "spec.runPolicy.nodeLostSeconds"


@pytest.mark.parametrize(
    ("toleration", "message"),
    [
        ({"operator": "Exists", "key": "a", "value": "b"}, "operator Exists takes no value"),
        ({"value": "b"}, "operator Equal needs a key"),
        ({"key": "a", "tolerationSeconds": 5}, "tolerationSeconds applies to effect NoExecute"),
    ],
)
def test_toleration_errors(toleration, message):
    with pytest.raises(SpecError, match=message) as info:
        job_of(replicas__worker={"tolerations": [toleration]})
    assert info.value.errors[0].field == "spec.replicas.worker.tolerations[0]"


def test_node_selector_errors_name_the_field():
    with pytest.raises(SpecError, match="not a valid label value") as info:
        job_of(replicas__ps={"nodeSelector": {"pool": "not ok!"}})
    assert info.value.errors[0].field == "spec.replicas.ps.nodeSelector"


# -- images and pull secrets ----------------------------------------------------------------


def _dockerconfig(*hosts: str) -> dict[str, Any]:
    config = {"auths": {h: {"auth": "dTpw"} for h in hosts}}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "tfkube-registry", "namespace": "tfkube-system", "uid": "1"},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()},
    }


@pytest.mark.parametrize(
    ("image", "registry"),
    [
        ("tensorflow/tensorflow:2.21.0", "docker.io"),
        ("ubuntu", "docker.io"),
        ("docker.io/library/ubuntu", "docker.io"),
        ("index.docker.io/x/y", "docker.io"),
        ("registry.corp.example/ml/tf:1", "registry.corp.example"),
        ("localhost:5000/tf", "localhost:5000"),
        ("localhost/tf", "localhost"),
    ],
)
def test_image_registry(image, registry):
    assert image_registry(image) == registry


@pytest.mark.parametrize(
    ("spec", "secret", "worker_image", "expected_policy", "expected_secrets"),
    [
        pytest.param({}, None, None, "IfNotPresent", None, id="public-default"),
        pytest.param(
            {"imagePullPolicy": "Always"}, None, None, "Always", None, id="public-explicit"
        ),
        pytest.param(
            {},
            _dockerconfig("registry.corp.example"),
            "registry.corp.example/ml/tf:1",
            "Always",
            ["mnist-registry"],
            id="private-registry-always",
        ),
        pytest.param(
            {"imagePullPolicy": "IfNotPresent"},
            _dockerconfig("registry.corp.example"),
            "registry.corp.example/ml/tf:1",
            "Always",
            ["mnist-registry"],
            id="private-wins-over-spec",
        ),
        pytest.param(
            {},
            _dockerconfig("registry.corp.example"),
            None,
            "IfNotPresent",
            ["mnist-registry"],
            id="public-image-with-secret",
        ),
        pytest.param(
            {},
            _dockerconfig("https://index.docker.io/v1/"),
            None,
            "Always",
            ["mnist-registry"],
            id="docker-hub-credentials",
        ),
        pytest.param(
            {"imagePullSecrets": ["team-pull"]},
            None,
            None,
            "Always",
            ["team-pull"],
            id="user-secret-means-private",
        ),
        pytest.param(
            {},
            {"type": "Opaque", "data": {"x": "eA=="}},
            None,
            "Always",
            ["mnist-registry"],
            id="unreadable-secret-means-private",
        ),
    ],
)
def test_pull_policy_and_secrets(spec, secret, worker_image, expected_policy, expected_secrets):
    changes = {**spec}
    if worker_image:
        changes["replicas__worker"] = {"replicas": 1, "image": worker_image}
    objects = render(job_of(**changes), registry_secret=secret)
    worker = pod(objects, "worker")
    assert worker["containers"][0]["imagePullPolicy"] == expected_policy
    secrets = [s["name"] for s in worker.get("imagePullSecrets", [])] or None
    assert secrets == expected_secrets


def test_registry_secret_is_copied_into_the_namespace():
    source = _dockerconfig("registry.corp.example")
    copied = one(render(registry_secret=source), "Secret", "mnist-registry")
    assert copied["metadata"]["namespace"] == "team-a"
    assert "uid" not in copied["metadata"]
    assert copied["type"] == "kubernetes.io/dockerconfigjson"
    assert copied["data"] == source["data"]


def test_no_secret_without_a_registry_secret():
    assert not by_kind(render(), "Secret")


# -- failure policy: who retries what ---------------------------------------------------------


def _rules(objects: list[dict[str, Any]], role: str) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = one(objects, "Job", f"mnist-{role}")["spec"]["podFailurePolicy"][
        "rules"
    ]
    return rules


IGNORE_DISRUPTION = {
    "action": "Ignore",
    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
}
FAIL_ANY = {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}}
FAIL_DISRUPTED = {  # first: the Job's condition then names the disruption (a drain)
    "action": "FailJob",
    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
}
FAIL_USER = {
    "action": "FailJob",
    "onExitCodes": {"operator": "In", "values": list(USER_ERROR_EXIT_CODES)},
}


@pytest.mark.parametrize(
    ("policy", "managed", "role", "backoff", "rules"),
    [
        ("OnFailure", False, "worker", 4, [IGNORE_DISRUPTION]),
        ("OnFailure", False, "ps", 4, [IGNORE_DISRUPTION]),
        ("OnFailure", True, "worker", 4, [IGNORE_DISRUPTION]),
        ("OnFailure", True, "ps", 0, [FAIL_DISRUPTED, FAIL_ANY]),
        ("ExitCode", False, "worker", 4, [IGNORE_DISRUPTION, FAIL_USER]),
        ("ExitCode", False, "ps", 4, [IGNORE_DISRUPTION, FAIL_USER]),
        ("ExitCode", True, "worker", 4, [IGNORE_DISRUPTION, FAIL_USER]),
        ("ExitCode", True, "ps", 0, [FAIL_DISRUPTED, FAIL_ANY]),
        ("Never", False, "worker", 0, [IGNORE_DISRUPTION, FAIL_ANY]),
        ("Never", True, "worker", 0, [IGNORE_DISRUPTION, FAIL_ANY]),
        ("Never", True, "ps", 0, [FAIL_DISRUPTED, FAIL_ANY]),
    ],
)
def test_pod_failure_policy_and_backoff_limit(policy, managed, role, backoff, rules):
    job = job_of(runPolicy={"restartPolicy": policy, "backoffLimit": 4})
    objects = render(job, managed=managed)
    assert one(objects, "Job", f"mnist-{role}")["spec"]["backoffLimit"] == backoff
    assert _rules(objects, role) == rules


def test_exit_code_rule_agrees_with_the_planner():
    """The codes Kubernetes fails at once are exactly those the planner never retries."""
    from tfkube.spec import RestartPolicy

    for code in range(1, 256):
        fails_at_once = code in USER_ERROR_EXIT_CODES
        assert fails_at_once == (not should_retry(RestartPolicy.EXIT_CODE, code)), code
    assert 75 not in USER_ERROR_EXIT_CODES
    assert len(USER_ERROR_EXIT_CODES) <= 255  # the API's limit on onExitCodes values


@pytest.mark.parametrize(
    ("run_policy", "managed", "expected"),
    [
        ({}, False, {}),
        ({"activeDeadlineSeconds": 600}, False, {"activeDeadlineSeconds": 600}),
        ({"activeDeadlineSeconds": 600}, True, {"activeDeadlineSeconds": 600}),
        ({"ttlSecondsAfterFinished": 60}, False, {"ttlSecondsAfterFinished": 60}),
        ({"ttlSecondsAfterFinished": 60}, True, {}),
        ({"suspend": True}, False, {"suspend": True}),
    ],
)
def test_deadline_ttl_and_suspend(run_policy, managed, expected):
    spec = one(render(job_of(runPolicy=run_policy), managed=managed), "Job", "mnist-worker")["spec"]
    got = {
        k: spec[k]
        for k in ("activeDeadlineSeconds", "ttlSecondsAfterFinished", "suspend")
        if k in spec
    }
    assert got == expected


# -- pod annotations ---------------------------------------------------------------------------


def test_pod_annotations_from_options_and_spec():
    job = job_of(replicas__ps={"replicas": 1, "annotations": {"a": "spec", "b": "spec"}})
    objects = render(job, pod_annotations={"a": "option", "c": "option"})
    ps = one(objects, "Job", "mnist-ps")["spec"]["template"]["metadata"]["annotations"]
    assert ps == {"a": "spec", "b": "spec", "c": "option"}
    worker = one(objects, "Job", "mnist-worker")["spec"]["template"]["metadata"]
    assert worker["annotations"] == {"a": "option", "c": "option"}


# -- gang scheduling -----------------------------------------------------------------------------


def test_volcano_pod_group():
    job = job_of(
        replicas__chief={"replicas": 1},
        replicas__evaluator={"replicas": 1},
        scheduling={"gang": "Volcano", "queue": "research", "priorityClassName": "high"},
    )
    objects = render(job)
    group = one(objects, "PodGroup", "mnist")
    assert group["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    assert group["spec"] == {"minMember": 6, "queue": "research", "priorityClassName": "high"}
    for role in ("chief", "ps", "worker", "evaluator"):
        template = one(objects, "Job", f"mnist-{role}")["spec"]["template"]
        assert template["spec"]["schedulerName"] == "volcano"
        assert template["spec"]["priorityClassName"] == "high"
        assert template["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "mnist"


def test_scheduler_plugins_pod_group():
    job = job_of(scheduling={"gang": "SchedulerPlugins", "scheduleTimeoutSeconds": 30})
    objects = render(job)
    group = one(objects, "PodGroup", "mnist")
    assert group["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert group["spec"] == {"minMember": 5, "scheduleTimeoutSeconds": 30}
    template = one(objects, "Job", "mnist-worker")["spec"]["template"]
    assert template["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
    assert template["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "mnist"


def test_kueue_queue_label_and_suspended_jobs():
    objects = render(job_of(scheduling={"gang": "Kueue", "queue": "team-a"}))
    assert not by_kind(objects, "PodGroup")
    for job in by_kind(objects, "Job"):
        assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
        assert job["spec"]["suspend"] is True
        assert "schedulerName" not in job["spec"]["template"]["spec"]


def test_scheduler_name_override():
    objects = render(job_of(scheduling={"gang": "Volcano", "schedulerName": "vc"}))
    assert pod(objects, "worker")["schedulerName"] == "vc"


@pytest.mark.parametrize(
    ("scheduling", "message"),
    [
        ({"gang": "Kueue"}, "gang Kueue needs queue"),
        ({"gang": "Volcano", "scheduleTimeoutSeconds": 5}, "applies to gang SchedulerPlugins"),
        ({"gang": "Slurm"}, "must be 'None', 'Volcano', 'SchedulerPlugins' or 'Kueue'"),
    ],
)
def test_scheduling_errors(scheduling, message):
    with pytest.raises(SpecError, match=message) as info:
        job_of(scheduling=scheduling)
    assert info.value.errors[0].field.startswith("spec.scheduling")


# -- tenant quota ------------------------------------------------------------------------------


def test_quota_and_limit_range():
    objects = render(
        job_of(
            tenant={
                "quota": {"requests.nvidia.com/gpu": "8", "pods": "100"},
                "limitRange": {"default": {"cpu": "1"}, "max": {"memory": "64Gi"}},
            }
        )
    )
    quota = one(objects, "ResourceQuota", "tfkube-tenant")
    assert quota["spec"] == {"hard": {"pods": "100", "requests.nvidia.com/gpu": "8"}}
    limits = one(objects, "LimitRange", "tfkube-tenant")
    assert limits["spec"] == {
        "limits": [{"type": "Container", "default": {"cpu": "1"}, "max": {"memory": "64Gi"}}]
    }
    # The namespace's, not the job's: no job label, so the job's clean-up leaves them.
    assert "tfkube.io/job-name" not in quota["metadata"]["labels"]


def test_no_quota_objects_without_a_tenant_section():
    objects = render()
    assert not by_kind(objects, "ResourceQuota")
    assert not by_kind(objects, "LimitRange")


@pytest.mark.parametrize(
    ("tenant", "field", "message"),
    [
        ({"quota": {"cpu": "lots"}}, "spec.tenant.quota", "not a quantity"),
        ({"quota": {"Bad Name": "1"}}, "spec.tenant.quota", "not a resource name"),
        ({"limitRange": {"max": {"cpu": "x"}}}, "spec.tenant.limitRange.max", "not a quantity"),
    ],
)
def test_tenant_errors(tenant, field, message):
    with pytest.raises(SpecError, match=message) as info:
        job_of(tenant=tenant)
    assert info.value.errors[0].field == field


def test_namespace_object_first_when_asked():
    objects = render(include_namespace=True)
    assert objects[0] == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "team-a", "labels": {"app.kubernetes.io/managed-by": "tfkube"}},
    }


# -- storage -------------------------------------------------------------------------------------


def _mounts(objects: list[dict[str, Any]], role: str) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in pod(objects, role)["containers"][0]["volumeMounts"]}


def _claims(objects: list[dict[str, Any]], role: str) -> dict[str, str]:
    return {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in pod(objects, role)["volumes"]
        if "persistentVolumeClaim" in v
    }


def _volume_sources(objects: list[dict[str, Any]], role: str) -> dict[str, str]:
    """`data`/`logs` of a role's pods: `claim NAME` or `emptyDir`."""
    out = {}
    for v in pod(objects, role)["volumes"]:
        if v["name"] in ("data", "logs"):
            claim = v.get("persistentVolumeClaim", {}).get("claimName")
            out[v["name"]] = f"claim {claim}" if claim else ("emptyDir" if "emptyDir" in v else "?")
    return out


E = "emptyDir"


@pytest.mark.parametrize(
    ("spec", "defaults", "claims", "worker", "ps"),
    [
        pytest.param({}, None, [], {"data": E, "logs": E}, {"logs": E}, id="nothing-asked"),
        pytest.param(
            {"storage": {"logs": {"mountPath": "/ckpt"}, "data": {"mountPath": "/d"}}},
            None,
            [],
            {"data": E, "logs": E},
            {"logs": E},
            id="mount-paths-alone-ask-for-nothing",
        ),
        pytest.param(
            {"storage": {"data": {"claimName": "imagenet"}}},
            None,
            [],
            {"data": "claim imagenet", "logs": E},
            {"logs": E},
            id="a-dataset-claim",
        ),
        pytest.param(
            {"storage": {"logs": {"size": "1Gi"}}},
            None,
            ["mnist-logs"],
            {"data": E, "logs": "claim mnist-logs"},
            {"logs": "claim mnist-logs"},
            id="logs-size-makes-a-claim",
        ),
        pytest.param(
            {"storage": {"data": {"storageClassName": "nfs"}, "logs": {"storageClassName": "nfs"}}},
            None,
            ["mnist-data", "mnist-logs"],
            {"data": "claim mnist-data", "logs": "claim mnist-logs"},
            {"logs": "claim mnist-logs"},
            id="storage-classes-make-claims",
        ),
        pytest.param(
            {"storage": {"logs": {"claimName": "shared-logs"}}},
            None,
            [],
            {"data": E, "logs": "claim shared-logs"},
            {"logs": "claim shared-logs"},
            id="an-existing-logs-claim",
        ),
        pytest.param(
            {"tensorboard": {}},
            None,
            ["mnist-logs"],
            {"data": E, "logs": "claim mnist-logs"},
            {"logs": "claim mnist-logs"},
            id="tensorboard-reads-the-logs-from-a-claim",
        ),
        pytest.param(
            {"tensorboard": {"enabled": False}},
            None,
            [],
            {"data": E, "logs": E},
            {"logs": E},
            id="a-disabled-tensorboard-asks-nothing",
        ),
        pytest.param(
            {},
            StorageDefaults(logs_storage_class="cephfs"),
            ["mnist-logs"],
            {"data": E, "logs": "claim mnist-logs"},
            {"logs": "claim mnist-logs"},
            id="admin-storage-class",
        ),
        pytest.param(
            {},
            StorageDefaults(logs_claim="outputs"),
            [],
            {"data": E, "logs": "claim outputs"},
            {"logs": "claim outputs"},
            id="admin-claim-per-namespace",
        ),
        pytest.param(
            {"storage": {"logs": {"claimName": "mine"}}},
            StorageDefaults(logs_claim="outputs"),
            [],
            {"data": E, "logs": "claim mine"},
            {"logs": "claim mine"},
            id="the-jobs-own-claim-wins-over-the-admins",
        ),
        pytest.param(
            {"storage": {"logs": {"mountPath": "/ckpt"}}},
            StorageDefaults(logs_storage_class="cephfs"),
            ["mnist-logs"],
            {"data": E, "logs": "claim mnist-logs"},
            {"logs": "claim mnist-logs"},
            id="a-mount-path-alone-takes-the-admins-default",
        ),
    ],
)
def test_which_jobs_get_which_volumes(spec, defaults, claims, worker, ps):
    """A claim only when the job asks for one (or TensorBoard needs one, or the cluster's
    administrator gives every job one); otherwise scratch space in each pod. The PS
    reads no data: it has no data volume."""
    objects = render(job_of(**spec), storage=defaults)
    assert [c["metadata"]["name"] for c in by_kind(objects, "PersistentVolumeClaim")] == claims
    assert _volume_sources(objects, "worker") == worker
    assert _volume_sources(objects, "ps") == ps
    assert rendered_storage(objects) == worker


def test_scratch_volumes_are_mounted_where_claims_would_be():
    objects = render()
    assert _mounts(objects, "worker")["logs"] == {"name": "logs", "mountPath": "/tfkube/logs"}
    assert _mounts(objects, "worker")["data"] == {"name": "data", "mountPath": "/tfkube/data"}
    assert _mounts(objects, "worker")["work"] == {"name": "work", "mountPath": "/tfkube/work"}
    assert {"name": "logs", "emptyDir": {}} in pod(objects, "ps")["volumes"]
    env = env_of(objects, "worker")
    assert (env["TFKUBE_DATA_DIR"], env["TFKUBE_LOG_DIR"]) == ("/tfkube/data", "/tfkube/logs")


def test_a_new_claim_is_shared_and_sized():
    objects = render(job_of(storage={"logs": {"storageClassName": "cephfs"}}))
    assert one(objects, "PersistentVolumeClaim", "mnist-logs")["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "10Gi"}},
        "storageClassName": "cephfs",
    }
    # No class named: the cluster's default class (no storageClassName at all).
    sized = render(job_of(storage={"data": {"size": "1Ti"}}))
    assert one(sized, "PersistentVolumeClaim", "mnist-data")["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "1Ti"}},
    }
    admin = render(storage=StorageDefaults(logs_storage_class="fast", logs_size="50Gi"))
    assert one(admin, "PersistentVolumeClaim", "mnist-logs")["spec"]["resources"] == {
        "requests": {"storage": "50Gi"}
    }


def test_storage_class_size_and_mount_paths():
    objects = render(
        job_of(
            storage={
                "data": {"storageClassName": "glusterfs", "size": "1Ti", "mountPath": "/data"},
                "logs": {"storageClassName": "cephfs", "mountPath": "/ckpt"},
            }
        )
    )
    data = one(objects, "PersistentVolumeClaim", "mnist-data")["spec"]
    assert data["storageClassName"] == "glusterfs"
    assert data["resources"]["requests"]["storage"] == "1Ti"
    assert (
        one(objects, "PersistentVolumeClaim", "mnist-logs")["spec"]["storageClassName"] == "cephfs"
    )
    env = env_of(objects, "worker")
    assert (env["TFKUBE_DATA_DIR"], env["TFKUBE_LOG_DIR"]) == ("/data", "/ckpt")
    assert _mounts(objects, "worker")["data"]["mountPath"] == "/data"


@pytest.mark.parametrize(
    ("storage", "defaults"),
    [
        ({"data": {"claimName": "imagenet"}, "logs": {"claimName": "shared-logs"}}, None),
        ({"data": {"claimName": "imagenet"}}, StorageDefaults(logs_claim="shared-logs")),
    ],
)
def test_existing_claims_are_used_not_created(storage, defaults):
    objects = render(job_of(storage=storage), storage=defaults)
    assert not by_kind(objects, "PersistentVolumeClaim")
    assert _claims(objects, "worker") == {"logs": "shared-logs", "data": "imagenet"}
    # A shared logs claim gets one folder per job; a data claim is mounted whole.
    assert _mounts(objects, "worker")["logs"]["subPath"] == "mnist"
    assert "subPath" not in _mounts(objects, "worker")["data"]


def test_a_tensorboard_reads_the_jobs_folder_of_a_shared_logs_claim():
    objects = render(job_of(tensorboard={}), storage=StorageDefaults(logs_claim="outputs"))
    tb = one(objects, "Deployment", "mnist-tensorboard")["spec"]["template"]["spec"]
    assert tb["volumes"] == [{"name": "logs", "persistentVolumeClaim": {"claimName": "outputs"}}]
    assert tb["containers"][0]["volumeMounts"][0]["subPath"] == "mnist"


def test_admin_defaults_are_one_or_the_other():
    with pytest.raises(ValueError, match="not both"):
        StorageDefaults(logs_storage_class="a", logs_claim="b")


def test_a_round_trip_asks_for_no_claim():
    """A job dumped and read again (the TFJob the client creates, the server's placed
    spec) still asks for nothing: no default size is written out."""
    job = job_of()
    assert not job.spec.storage.logs.asks_for_claim
    again = parse_job(yaml.safe_load(dump_job(job)))
    assert again.spec.storage == job.spec.storage
    assert not by_kind(render(again), "PersistentVolumeClaim")


# -- TensorBoard -------------------------------------------------------------------------------


def test_no_tensorboard_by_default():
    assert not by_kind(render(), "Deployment")


@pytest.mark.parametrize(
    ("tensorboard", "service_type", "node_port"),
    [
        ({}, "ClusterIP", None),
        ({"serviceType": "NodePort"}, "NodePort", None),
        ({"serviceType": "NodePort", "nodePort": 30606}, "NodePort", 30606),
    ],
)
def test_tensorboard_deployment_and_service(tensorboard, service_type, node_port):
    objects = render(job_of(tensorboard=tensorboard))
    deployment = one(objects, "Deployment", "mnist-tensorboard")
    template = deployment["spec"]["template"]
    assert deployment["spec"]["selector"]["matchLabels"] == {
        "tfkube.io/job-name": "mnist",
        "tfkube.io/component": "tensorboard",
    }
    assert "tfkube.io/replica-type" not in template["metadata"]["labels"]
    container = template["spec"]["containers"][0]
    assert container["command"][:2] == ["tensorboard", "--logdir=/tfkube/logs"]
    assert container["volumeMounts"] == [
        {"name": "logs", "mountPath": "/tfkube/logs", "readOnly": True}
    ]
    service = one(objects, "Service", "mnist-tensorboard")
    assert service["spec"]["type"] == service_type
    assert service["spec"]["ports"][0].get("nodePort") == node_port


def test_tensorboard_node_selector_and_tolerations():
    """TensorBoard goes where its spec says, like a replica role (e.g. the node that holds the
    logs volume); without them its pod spec has neither."""
    placed = {
        "nodeSelector": {"tfkube.io/real-node": "true"},
        "tolerations": [{"key": "tfkube.io/real-node", "operator": "Exists"}],
    }
    pod_spec = one(render(job_of(tensorboard=placed)), "Deployment", "mnist-tensorboard")["spec"][
        "template"
    ]["spec"]
    assert pod_spec["nodeSelector"] == {"tfkube.io/real-node": "true"}
    assert pod_spec["tolerations"] == [{"key": "tfkube.io/real-node", "operator": "Exists"}]
    plain = one(render(job_of(tensorboard={})), "Deployment", "mnist-tensorboard")
    assert "nodeSelector" not in plain["spec"]["template"]["spec"]
    assert "tolerations" not in plain["spec"]["template"]["spec"]
    with pytest.raises(SpecError) as info:
        job_of(tensorboard={"nodeSelector": {"pool": "not ok!"}})
    assert info.value.errors[0].field == "spec.tensorboard.nodeSelector"


def test_tensorboard_disabled():
    assert not by_kind(render(job_of(tensorboard={"enabled": False})), "Deployment")


def test_tensorboard_node_port_needs_node_port_type():
    with pytest.raises(SpecError, match="nodePort needs serviceType NodePort"):
        job_of(tensorboard={"nodePort": 30001})


# -- determinism and YAML ----------------------------------------------------------------------


def test_output_is_deterministic_and_does_not_share_state():
    job = job_of(tensorboard={}, scheduling={"gang": "Volcano"}, tenant={"quota": {"pods": "9"}})
    first = render(job)
    snapshot = copy.deepcopy(first)
    first[0]["metadata"]["labels"]["x"] = "y"
    assert render(job) == snapshot
    assert dump_yaml(render(job)) == dump_yaml(render(job))


def test_yaml_is_multi_document_and_round_trips():
    objects = render()
    text = dump_yaml(objects)
    assert text.count("\n---\n") + text.startswith("---") == len(objects)
    assert list(yaml.safe_load_all(text)) == objects


# -- the CRD -------------------------------------------------------------------------------------


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        found.append((path, node))
        for key, value in node.items():
            found += _walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _walk(value, f"{path}[{i}]")
    return found


def test_crd_identity():
    spec = crd()["spec"]
    assert crd()["metadata"]["name"] == "tfjobs.tfkube.io"
    assert spec["group"] == "tfkube.io"
    assert spec["names"]["kind"] == "TFJob"
    assert spec["names"]["plural"] == "tfjobs"
    assert spec["names"]["shortNames"] == ["tfj"]
    version = spec["versions"][0]
    assert version["name"] == "v1alpha1"
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Phase"] == ".status.phase"
    assert columns["Ready"] == ".status.readyReplicas"
    assert columns["Succeeded"] == ".status.succeededReplicas"
    assert columns["Restarts"] == ".status.restarts"
    assert columns["Age"] == ".metadata.creationTimestamp"


def test_crd_schema_is_structural():
    """No $ref, no JSON-Schema-only keywords, and a type wherever Kubernetes wants one."""
    forbidden = {"$ref", "$defs", "anyOf", "oneOf", "allOf", "const", "default", "title"}
    for path, node in _walk(_schema()):
        if (
            path.endswith((".properties", ".x-kubernetes-validations"))
            or "x-kubernetes-validations" in path
        ):
            continue
        assert not forbidden & set(node), path
        if "x-kubernetes-preserve-unknown-fields" not in node and path.split(".")[-1] not in {
            "properties",
        }:
            assert "type" in node, path


def test_crd_preserves_unknown_fields_only_where_unavoidable():
    places = [
        path for path, node in _walk(_schema()) if node.get("x-kubernetes-preserve-unknown-fields")
    ]
    roles = ".properties.spec.properties.replicas.properties"
    env = ".properties.env.additionalProperties"
    # Environment values (a string or one of four forms) of the replica and of its helper
    # containers; kopf's bookkeeping in the status.
    assert places == [
        *(
            path
            for role in ("chief", "ps", "worker", "evaluator")
            for path in (
                f"{roles}.{role}{env}",
                f"{roles}.{role}.properties.initContainers.items{env}",
                f"{roles}.{role}.properties.sidecars.items{env}",
            )
        ),
        ".properties.status",
    ]


def test_crd_schema_follows_the_models():
    spec = _schema()["properties"]["spec"]
    run_policy = spec["properties"]["runPolicy"]["properties"]
    assert run_policy["restartPolicy"]["enum"] == ["Never", "OnFailure", "ExitCode"]
    assert run_policy["backoffLimit"] == {
        "type": "integer",
        "minimum": 0,
        "maximum": 1000,
        "description": "Restarts the whole job may take (over all replicas) before it is Failed.",
    }
    assert run_policy["activeDeadlineSeconds"]["exclusiveMinimum"] is True
    assert spec["required"] == ["replicas"]  # code: unless every role has a command
    assert spec["properties"]["replicas"]["required"] == ["worker"]
    assert set(spec["properties"]) == set(
        TFJob.model_json_schema(by_alias=True)["$defs"]["JobSpec"]["properties"]
    )


def test_crd_status_phases_are_the_planners():
    assert list(PHASES) == [p.value for p in JobPhase]
    status = _schema()["properties"]["status"]["properties"]
    assert status["phase"]["enum"] == list(PHASES)


@pytest.mark.parametrize("name", ["crd.yaml", "rbac.yaml", "operator.yaml"])
def test_deploy_files_are_generated(name):
    """deploy/ is what `tfkube install` applies; regenerate with
    `tfkube install --write-manifests deploy` after changing the models or the RBAC."""
    assert (REPO / "deploy" / name).read_text() == deploy_file_texts()[name]


def test_operator_rbac_covers_every_rendered_kind():
    granted = {
        (group, resource)
        for rule in OPERATOR_RULES
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        if "create" in rule["verbs"] and "delete" in rule["verbs"]
    }
    job = job_of(
        tensorboard={},
        tenant={"quota": {"pods": "1"}, "limitRange": {"max": {"cpu": "1"}}},
        scheduling={"gang": "Volcano"},
    )
    objects = render(job, registry_secret=_dockerconfig("r.example"))
    objects += render(job_of(scheduling={"gang": "SchedulerPlugins"}))
    for obj in objects:
        resource = resource_for(obj["apiVersion"], obj["kind"])
        assert (resource.group, resource.plural) in granted, obj["kind"]


def test_the_zipapp_runs_a_rendered_replica(tmp_path):
    """The real launcher, from the zipapp as a pod gets it, with a rendered pod's environment
    and Kubernetes' JOB_COMPLETION_INDEX: it fetches and verifies the code and runs the
    entrypoint with TF_CONFIG naming this replica's DNS address."""
    script = (
        b"#!/bin/sh\n"
        b'echo "$TF_CONFIG" > "$TFKUBE_LOG_DIR/tf_config.json"\n'
        b'echo "$@" > "$TFKUBE_LOG_DIR/args"\n'
    )
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("run.sh")
        info.size, info.mode = len(script), 0o755
        tar.addfile(info, io.BytesIO(script))
    archive = buffer.getvalue()
    objects = render_job(
        job_of(code={"source": "./code"}),
        RenderOptions(namespace="n", code_archive=archive),
    )
    env = env_of(objects, "worker")
    (tmp_path / "code.tar.gz").write_bytes(archive)
    (tmp_path / "launcher.pyz").write_bytes(
        base64.b64decode(one(objects, "ConfigMap", "mnist-launcher")["binaryData"]["launcher.pyz"])
    )
    logs = tmp_path / "logs"
    logs.mkdir()
    env.update(
        TFKUBE_CODE_URL=(tmp_path / "code.tar.gz").as_uri(),  # where the ConfigMap is mounted
        TFKUBE_WORK_DIR=str(tmp_path / "work"),
        TFKUBE_LOG_DIR=str(logs),
        JOB_COMPLETION_INDEX="2",
        PATH="/usr/bin:/bin",
    )
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "launcher.pyz")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    config = json.loads((logs / "tf_config.json").read_text())
    assert config["task"] == {"type": "worker", "index": 2}
    assert config["cluster"]["worker"][2] == "mnist-worker-2.mnist-worker:2222"
    assert "--job_name=worker --task_index=2" in (logs / "args").read_text()


# -- the launcher's termination message and the code's requirements ---------------------


def test_replicas_report_launcher_failures_and_install_requirements_per_pod():
    objects = render()
    for role in ("ps", "worker"):
        env = env_of(objects, role)
        assert env["TFKUBE_TERMINATION_LOG"] == "/dev/termination-log"
        assert env["TFKUBE_VENV_CACHE"] == "/tfkube/venvs"
        volumes = {v["name"]: v for v in pod(objects, role)["volumes"]}
        assert volumes["venvs"] == {"name": "venvs", "emptyDir": {}}
        mounts = {m["name"]: m for m in pod(objects, role)["containers"][0]["volumeMounts"]}
        assert mounts["venvs"]["mountPath"] == "/tfkube/venvs"


def test_a_node_cache_for_requirements_is_per_namespace():
    objects = render(venv_cache_host_path="/var/cache/tfkube/venvs/")
    volumes = {v["name"]: v for v in pod(objects, "worker")["volumes"]}
    assert volumes["venvs"]["hostPath"] == {
        "path": "/var/cache/tfkube/venvs/team-a",
        "type": "DirectoryOrCreate",
    }


def test_the_launcher_zipapp_carries_the_runtime_contract():
    names = zipfile.ZipFile(io.BytesIO(build_launcher_zipapp())).namelist()
    assert "tfkube/contract.py" in names


# -- a role's own command, volumes, helper containers (Kubeflow's shapes) -------------------


def test_per_role_restart_policy_wins_over_the_jobs():
    job = job_of(
        runPolicy={"restartPolicy": "OnFailure", "backoffLimit": 4},
        replicas={"ps": {"replicas": 1}, "worker": {"replicas": 2, "restartPolicy": "Never"}},
    )
    objects = render(job)
    assert one(objects, "Job", "mnist-worker")["spec"]["backoffLimit"] == 0
    assert _rules(objects, "worker") == [IGNORE_DISRUPTION, FAIL_ANY]
    assert _rules(objects, "ps") == [IGNORE_DISRUPTION]


def test_a_command_without_code_runs_as_given_through_the_launcher():
    job = parse_job(
        {
            "apiVersion": "tfkube.io/v1alpha1",
            "kind": "TFJob",
            "metadata": {"name": "mnist"},
            "spec": {
                "replicas": {
                    "worker": {
                        "replicas": 2,
                        "command": ["python", "/opt/train.py"],
                        "args": ["--steps=5"],
                        "workingDir": "/opt",
                        "serviceAccountName": "trainer",
                        "labels": {"team": "vision"},
                    }
                }
            },
        }
    )
    objects = render(job)
    container = pod(objects, "worker")["containers"][0]
    assert container["command"] == list(LAUNCHER_COMMAND)  # tees, signals, termination log
    assert container["workingDir"] == "/opt"
    env = env_of(objects, "worker")
    assert json.loads(env["TFKUBE_COMMAND"]) == ["python", "/opt/train.py"]
    assert json.loads(env["TFKUBE_ARGS"]) == ["--steps=5"]
    assert "TFKUBE_CODE_URL" not in env
    assert "TFKUBE_ENTRYPOINT" not in env
    assert "code" not in {v["name"] for v in pod(objects, "worker")["volumes"]}
    assert pod(objects, "worker")["serviceAccountName"] == "trainer"
    labels = one(objects, "Job", "mnist-worker")["spec"]["template"]["metadata"]["labels"]
    assert labels["team"] == "vision"
    assert labels["tfkube.io/replica-type"] == "worker"
    assert not by_kind(objects, "ConfigMap")[1:]  # only the launcher's


def test_env_references_volumes_and_helpers():
    job = job_of(
        replicas={
            "worker": {
                "replicas": 1,
                "command": ["sh", "-c", "python /app/train.py"],
                "env": {
                    "PLAIN": "x",
                    "KEY": {"secretKeyRef": {"name": "s3", "key": "k"}},
                    "CFG": {"configMapKeyRef": {"name": "c", "key": "e", "optional": True}},
                    "IP": {"fieldRef": {"fieldPath": "status.podIP"}},
                    "CP": {"command": "hadoop classpath"},
                },
                "volumes": [
                    {
                        "name": "ds",
                        "mountPath": "/datasets",
                        "claimName": "imagenet",
                        "readOnly": True,
                    },
                    {"name": "shm", "mountPath": "/dev/shm", "emptyDir": {"medium": "Memory"}},
                    {"name": "cfg", "mountPath": "/etc/t", "configMap": "settings", "subPath": "a"},
                    {"name": "scratch", "emptyDir": {}},
                ],
                "initContainers": [
                    {
                        "name": "fetch",
                        "image": "busybox",
                        "command": ["sh", "-c", "wget x"],
                        "volumeMounts": [{"name": "scratch", "mountPath": "/in"}],
                    }
                ],
                "sidecars": [
                    {
                        "name": "shipper",
                        "image": "fluent-bit",
                        "args": ["-i", "tail"],
                        "env": {"K": {"secretKeyRef": {"name": "s", "key": "k"}}},
                        "resources": {"cpu": "100m"},
                        "volumeMounts": [{"name": "logs", "mountPath": "/logs", "readOnly": True}],
                    }
                ],
            }
        }
    )
    spec = pod(render(job), "worker")
    container = spec["containers"][0]
    refs = {e["name"]: e.get("valueFrom") for e in container["env"] if "valueFrom" in e}
    assert refs == {
        "CFG": {"configMapKeyRef": {"name": "c", "key": "e", "optional": True}},
        "IP": {"fieldRef": {"fieldPath": "status.podIP"}},
        "KEY": {"secretKeyRef": {"name": "s3", "key": "k", "optional": False}},
    }
    values = {e["name"]: e.get("value") for e in container["env"] if "value" in e}
    assert values["PLAIN"] == "x"
    assert json.loads(values["TFKUBE_ENV_COMMANDS"]) == {"CP": "hadoop classpath"}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["ds"]["persistentVolumeClaim"] == {"claimName": "imagenet", "readOnly": True}
    assert volumes["shm"]["emptyDir"] == {"medium": "Memory"}
    assert volumes["cfg"]["configMap"] == {"name": "settings"}
    assert volumes["scratch"]["emptyDir"] == {}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["ds"] == {"name": "ds", "mountPath": "/datasets", "readOnly": True}
    assert mounts["cfg"]["subPath"] == "a"
    assert "scratch" not in mounts  # only the init container mounts it
    fetch, shipper = spec["initContainers"]
    assert fetch["name"] == "fetch"
    assert "restartPolicy" not in fetch  # runs to completion first
    assert fetch["volumeMounts"] == [{"name": "scratch", "mountPath": "/in"}]
    assert shipper["restartPolicy"] == "Always"  # a native sidecar: the pod still completes
    assert shipper["args"] == ["-i", "tail"]
    assert shipper["env"] == [
        {"name": "HOME", "value": "/tmp"},  # restricted: the image has no home for 65532
        {"name": "K", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k", "optional": False}}},
    ]
    assert shipper["resources"] == {"requests": {"cpu": "100m"}, "limits": {"cpu": "100m"}}


def test_min_available_is_the_pod_groups_min_member():
    job = job_of(scheduling={"gang": "Volcano", "minAvailable": 3})
    group = by_kind(render(job), "PodGroup")[0]
    assert group["spec"]["minMember"] == 3


# -- stall detection: the heartbeat and the readiness probe that reads it ------------------


def test_no_probe_without_stall_detection():
    container = pod(render(), "worker")["containers"][0]
    assert "readinessProbe" not in container
    assert contract.HEARTBEAT_FILE not in env_of(render(), "worker")


def test_stall_seconds_render_a_heartbeat_and_a_readiness_probe_on_every_role():
    objects = render(job_of(runPolicy__stallSeconds=30))
    for role in ("ps", "worker"):
        container = pod(objects, role)["containers"][0]
        assert env_of(objects, role)[contract.HEARTBEAT_FILE] == HEARTBEAT_PATH
        assert container["readinessProbe"] == stall_probe(30)
    probe = stall_probe(30)
    assert probe["exec"]["command"][:2] == ["sh", "-c"]
    assert (probe["periodSeconds"], probe["failureThreshold"]) == (10, 1)
    assert stall_probe(1)["periodSeconds"] == 1
    assert stall_probe(600)["periodSeconds"] == 10


def run_probe(script: str, heartbeat: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "-c", script.replace(HEARTBEAT_PATH, str(heartbeat))],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_the_probe_passes_on_a_fresh_heartbeat_and_fails_on_a_stale_or_missing_one(
    tmp_path: Path,
):
    """The probe's script itself, in the shell every image has."""
    script = stall_probe(15)["exec"]["command"][2]
    heartbeat = tmp_path / "heartbeat"
    assert run_probe(script, heartbeat).returncode != 0  # not written yet
    heartbeat.touch()
    assert run_probe(script, heartbeat).returncode == 0
    old = time.time() - 20
    os.utime(heartbeat, (old, old))
    stale = run_probe(script, heartbeat)
    assert stale.returncode == 1
    assert "no progress for 2" in stale.stdout
