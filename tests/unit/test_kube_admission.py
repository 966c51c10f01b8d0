"""The admission policy of a team's job (`tfkube.engines.admission_refusals`), pure and
table-driven: every branch a row, tfkube TFJobs and Kubeflow manifests alike (after
parsing), and the team's allowances as the API validates them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from tfkube.engines import Allowances, Submitter
from tfkube.engines import admission_refusals as refusals
from tfkube.engines._admission import matches
from tfkube.kube.names import (
    CREDENTIAL_PATTERNS,
    NODE_LOST_TAINTS,
    platform_credential,
    private_claim,
)
from tfkube.spec import DEFAULT_IMAGE, FieldError, errors_from, parse_job

KUBEFLOW = Path(__file__).resolve().parents[1] / "data" / "kubeflow"
MEMBER, TEAM_ADMIN, SITE_ADMIN = Submitter.MEMBER, Submitter.TEAM_ADMIN, Submitter.SITE_ADMIN
NONE = Allowances()
W = "spec.replicas.worker"


def tfjob(**spec: Any) -> dict[str, Any]:
    """A TFJob document; `worker=` adds to the worker role, other keys go under spec."""
    worker = {"replicas": 1, **spec.pop("worker", {})}
    return {
        "apiVersion": "tfkube.io/v1alpha1",
        "kind": "TFJob",
        "metadata": {"name": "j"},
        "spec": {
            "replicas": {"worker": worker},
            "code": {"source": "artifact:code"},
            **spec,
        },
    }


def kubeflow(container: dict[str, Any] | None = None, **pod: Any) -> dict[str, Any]:
    """A Kubeflow TFJob with one worker: `container` adds to its container, `pod` to its
    pod spec."""
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "kf"},
        "spec": {
            "tfReplicaSpecs": {
                "Worker": {
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "tensorflow",
                                    "image": "registry.example/train:1",
                                    "command": ["python", "/app/train.py"],
                                    **(container or {}),
                                }
                            ],
                            **pod,
                        }
                    },
                }
            }
        },
    }


def secret_env(name: str, key: str = "k") -> dict[str, Any]:
    return {"secretKeyRef": {"name": name, "key": key}}


def kf_env(name: str, ref: str = "secretKeyRef") -> dict[str, Any]:
    return {"env": [{"name": "V", "valueFrom": {ref: {"name": name, "key": "k"}}}]}


ALLOWED = Allowances(
    secrets=["s3-credentials", "team-*", "docker-registry"],
    config_maps=["train-settings"],
    claims=["datasets", "imagenet-*"],
    service_accounts=["uploader"],
    tensorboard_images=["registry.example/board:*"],
)
PLACED = Allowances(
    priority_classes=["batch-*"],
    toleration_keys=["nvidia.com/gpu", "pool-*"],
    schedulers=["volcano", "team-*"],
    volcano_queues=["team-a"],
)
"""What a site admin may allow a team: priorities, taints, schedulers and Volcano queues
reach past it."""
S = "spec.scheduling"


def tolerate(*keys: str | None) -> list[dict[str, Any]]:
    return [{"key": k, "operator": "Exists"} if k else {"operator": "Exists"} for k in keys]


ROWS = [
    # -- nothing named: everyone may ------------------------------------------------
    pytest.param(tfjob(), MEMBER, NONE, [], id="plain job"),
    pytest.param(tfjob(image="registry.example/train:1"), MEMBER, NONE, [], id="own image"),
    pytest.param(
        tfjob(worker={"env": {"POD": {"fieldRef": {"fieldPath": "metadata.name"}}}}),
        MEMBER,
        NONE,
        [],
        id="a pod field is no object",
    ),
    pytest.param(
        tfjob(worker={"volumes": [{"name": "shm", "mountPath": "/dev/shm", "emptyDir": {}}]}),
        MEMBER,
        NONE,
        [],
        id="a scratch folder",
    ),
    # -- Secrets ----------------------------------------------------------------------
    pytest.param(
        tfjob(worker={"env": {"DB": secret_env("db")}}),
        MEMBER,
        NONE,
        [f"{W}.env.DB.secretKeyRef.name"],
        id="env secret, not allowed",
    ),
    pytest.param(
        tfjob(worker={"env": {"DB": secret_env("s3-credentials")}}),
        MEMBER,
        ALLOWED,
        [],
        id="env secret, allowed by name",
    ),
    pytest.param(
        tfjob(worker={"env": {"DB": secret_env("team-db")}}),
        MEMBER,
        ALLOWED,
        [],
        id="env secret, allowed by prefix",
    ),
    pytest.param(
        tfjob(worker={"env": {"DB": secret_env("db")}}),
        TEAM_ADMIN,
        NONE,
        [],
        id="env secret, team admin",
    ),
    pytest.param(
        tfjob(worker={"env": {"DB": secret_env("db")}}),
        SITE_ADMIN,
        NONE,
        [],
        id="env secret, site admin",
    ),
    pytest.param(
        tfjob(worker={"volumes": [{"name": "s", "mountPath": "/s", "secret": "db"}]}),
        MEMBER,
        NONE,
        [f"{W}.volumes[0].secret"],
        id="secret volume, not allowed",
    ),
    pytest.param(
        tfjob(
            worker={
                "initContainers": [{"name": "i", "image": "x", "env": {"A": secret_env("db")}}],
                "sidecars": [{"name": "s", "image": "x", "env": {"B": secret_env("db")}}],
            }
        ),
        MEMBER,
        NONE,
        [
            f"{W}.initContainers[0].env.A.secretKeyRef.name",
            f"{W}.sidecars[0].env.B.secretKeyRef.name",
        ],
        id="helper containers' env",
    ),
    pytest.param(
        tfjob(imagePullSecrets=["regcred"]),
        MEMBER,
        NONE,
        ["spec.imagePullSecrets[0]"],
        id="pull secret, not allowed",
    ),
    pytest.param(
        tfjob(imagePullSecrets=["docker-registry"]),
        MEMBER,
        ALLOWED,
        [],
        id="pull secret named like a copy, allowed",
    ),
    pytest.param(
        tfjob(imagePullSecrets=["other-job-registry"]),
        TEAM_ADMIN,
        NONE,
        [],
        id="a pull-secret copy as a pull secret",
    ),
    # -- platform credentials: never, for anyone --------------------------------------
    *(
        pytest.param(
            tfjob(worker={"env": {"T": secret_env(name, "TFKUBE_TOKEN")}}),
            who,
            ALLOWED,
            [f"{W}.env.T.secretKeyRef.name"],
            id=f"{name} in env, {who.value}",
        )
        for name in ("notebook-0123abcd", "other-code-token", "digits-serving", "j-registry")
        for who in Submitter
    ),
    pytest.param(
        tfjob(worker={"volumes": [{"name": "s", "mountPath": "/s", "secret": "notebook-1"}]}),
        SITE_ADMIN,
        NONE,
        [f"{W}.volumes[0].secret"],
        id="notebook token as a volume",
    ),
    pytest.param(
        tfjob(imagePullSecrets=["notebook-1"]),
        SITE_ADMIN,
        NONE,
        ["spec.imagePullSecrets[0]"],
        id="notebook token as a pull secret",
    ),
    pytest.param(
        tfjob(
            worker={
                "sidecars": [{"name": "s", "image": "x", "env": {"T": secret_env("a-code-token")}}]
            }
        ),
        TEAM_ADMIN,
        NONE,
        [f"{W}.sidecars[0].env.T.secretKeyRef.name"],
        id="code token in a sidecar",
    ),
    # -- ConfigMaps, claims, service accounts -----------------------------------------
    pytest.param(
        tfjob(worker={"env": {"C": {"configMapKeyRef": {"name": "cfg", "key": "k"}}}}),
        MEMBER,
        NONE,
        [f"{W}.env.C.configMapKeyRef.name"],
        id="configmap env, not allowed",
    ),
    pytest.param(
        tfjob(
            worker={"volumes": [{"name": "c", "mountPath": "/c", "configMap": "train-settings"}]}
        ),
        MEMBER,
        ALLOWED,
        [],
        id="configmap volume, allowed",
    ),
    pytest.param(
        tfjob(worker={"volumes": [{"name": "c", "mountPath": "/c", "configMap": "other"}]}),
        MEMBER,
        ALLOWED,
        [f"{W}.volumes[0].configMap"],
        id="configmap volume, another",
    ),
    pytest.param(
        tfjob(worker={"volumes": [{"name": "d", "mountPath": "/d", "claimName": "datasets"}]}),
        MEMBER,
        NONE,
        [f"{W}.volumes[0].claimName"],
        id="claim volume, not allowed",
    ),
    pytest.param(
        tfjob(storage={"data": {"claimName": "imagenet-2012"}, "logs": {"claimName": "logs"}}),
        MEMBER,
        ALLOWED,
        ["spec.storage.logs.claimName"],
        id="storage claims: one allowed by prefix, one not",
    ),
    pytest.param(
        tfjob(
            worker={"volumes": [{"name": "h", "mountPath": "/h", "claimName": "home-notebook-x-0"}]}
        ),
        SITE_ADMIN,
        NONE,
        [f"{W}.volumes[0].claimName"],
        id="a notebook's home, even for a site admin",
    ),
    pytest.param(
        tfjob(storage={"data": {"claimName": "home-notebook-x-0"}}),
        MEMBER,
        Allowances.model_construct(claims=["home-*"]),  # as if stored unchecked
        ["spec.storage.data.claimName"],
        id="a notebook's home is never allowed",
    ),
    pytest.param(
        tfjob(worker={"serviceAccountName": "deployer"}),
        MEMBER,
        ALLOWED,
        [f"{W}.serviceAccountName"],
        id="service account, not allowed",
    ),
    pytest.param(
        tfjob(worker={"serviceAccountName": "uploader"}),
        MEMBER,
        ALLOWED,
        [],
        id="service account, allowed",
    ),
    pytest.param(
        tfjob(worker={"serviceAccountName": "deployer"}),
        TEAM_ADMIN,
        NONE,
        [],
        id="service account, team admin",
    ),
    # -- tenant objects ---------------------------------------------------------------
    pytest.param(
        tfjob(tenant={"quota": {"requests.cpu": "100"}}),
        MEMBER,
        ALLOWED,
        ["spec.tenant"],
        id="tenant, member",
    ),
    pytest.param(
        tfjob(tenant={"quota": {"pods": "9"}}),
        TEAM_ADMIN,
        ALLOWED,
        ["spec.tenant"],
        id="tenant, team admin",
    ),
    pytest.param(
        tfjob(tenant={"quota": {"pods": "9"}}), SITE_ADMIN, NONE, [], id="tenant, site admin"
    ),
    # -- TensorBoard images -----------------------------------------------------------
    pytest.param(tfjob(tensorboard={}), MEMBER, NONE, [], id="tensorboard, the default image"),
    pytest.param(
        tfjob(tensorboard={"image": DEFAULT_IMAGE}, image="registry.example/train:1"),
        MEMBER,
        NONE,
        [],
        id="tensorboard pinned to the default",
    ),
    pytest.param(
        tfjob(tensorboard={}, image="registry.example/train:1"),
        MEMBER,
        NONE,
        ["spec.tensorboard.image"],
        id="tensorboard of the job's own image",
    ),
    pytest.param(
        tfjob(tensorboard={"image": "evil.example/board"}),
        MEMBER,
        ALLOWED,
        ["spec.tensorboard.image"],
        id="tensorboard image, not allowed",
    ),
    pytest.param(
        tfjob(tensorboard={"image": "registry.example/board:2.21"}),
        MEMBER,
        ALLOWED,
        [],
        id="tensorboard image, allowed by prefix",
    ),
    pytest.param(
        tfjob(tensorboard={"image": "evil.example/board"}),
        TEAM_ADMIN,
        NONE,
        [],
        id="tensorboard image, team admin",
    ),
    pytest.param(
        tfjob(tensorboard={"image": "evil.example/board", "enabled": False}),
        MEMBER,
        NONE,
        [],
        id="tensorboard disabled",
    ),
    # -- Pod Security -----------------------------------------------------------------
    pytest.param(
        tfjob(podSecurity="baseline"),
        SITE_ADMIN,
        NONE,
        ["spec.podSecurity"],
        id="baseline, restricted team",
    ),
    pytest.param(
        tfjob(podSecurity="baseline"),
        MEMBER,
        Allowances(pod_security="baseline"),
        [],
        id="baseline, baseline team",
    ),
    pytest.param(
        tfjob(
            worker={
                "annotations": {
                    "container.apparmor.security.beta.kubernetes.io/tensorflow": "unconfined"
                }
            }
        ),
        SITE_ADMIN,
        NONE,
        [f"{W}.annotations.container.apparmor.security.beta.kubernetes.io/tensorflow"],
        id="apparmor annotation",
    ),
    pytest.param(
        tfjob(worker={"annotations": {"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}}),
        MEMBER,
        NONE,
        [f"{W}.annotations.seccomp.security.alpha.kubernetes.io/pod"],
        id="seccomp annotation",
    ),
    pytest.param(
        tfjob(worker={"annotations": {"tfkube.io/fake-duration": "5s"}}),
        MEMBER,
        NONE,
        [],
        id="other annotations",
    ),
    # -- every problem at once, over every role ----------------------------------------
    pytest.param(
        {
            **tfjob(tenant={}, imagePullSecrets=["a"]),
            "spec": {
                **tfjob(tenant={}, imagePullSecrets=["a"])["spec"],
                "replicas": {
                    "chief": {"env": {"X": secret_env("b")}},
                    "ps": {"serviceAccountName": "c"},
                    "worker": {"replicas": 2},
                    "evaluator": {"volumes": [{"name": "v", "mountPath": "/v", "claimName": "d"}]},
                },
            },
        },
        MEMBER,
        NONE,
        [
            "spec.imagePullSecrets[0]",
            "spec.replicas.chief.env.X.secretKeyRef.name",
            "spec.replicas.ps.serviceAccountName",
            "spec.replicas.evaluator.volumes[0].claimName",
            "spec.tenant",
        ],
        id="every role, every field",
    ),
    # -- Kubeflow manifests, after parsing -------------------------------------------
    pytest.param(
        kubeflow(kf_env("s3-credentials")),
        MEMBER,
        NONE,
        [f"{W}.env.V.secretKeyRef.name"],
        id="kubeflow env secret",
    ),
    pytest.param(
        kubeflow(kf_env("s3-credentials")), MEMBER, ALLOWED, [], id="kubeflow env secret, allowed"
    ),
    pytest.param(
        kubeflow(kf_env("notebook-42")),
        TEAM_ADMIN,
        ALLOWED,
        [f"{W}.env.V.secretKeyRef.name"],
        id="kubeflow notebook token",
    ),
    pytest.param(
        kubeflow(kf_env("train-settings", "configMapKeyRef")),
        MEMBER,
        NONE,
        [f"{W}.env.V.configMapKeyRef.name"],
        id="kubeflow env configmap",
    ),
    pytest.param(
        kubeflow(
            {"volumeMounts": [{"name": "creds", "mountPath": "/c"}]},
            volumes=[{"name": "creds", "secret": {"secretName": "x-code-token"}}],
        ),
        SITE_ADMIN,
        NONE,
        [f"{W}.volumes[0].secret"],
        id="kubeflow secret volume of a code token",
    ),
    pytest.param(
        kubeflow(serviceAccountName="admin-sa"),
        MEMBER,
        NONE,
        [f"{W}.serviceAccountName"],
        id="kubeflow service account",
    ),
    pytest.param(
        kubeflow(serviceAccount="admin-sa"),
        MEMBER,
        NONE,
        [f"{W}.serviceAccountName"],
        id="kubeflow deprecated serviceAccount",
    ),
    pytest.param(
        kubeflow(imagePullSecrets=[{"name": "regcred"}]),
        MEMBER,
        NONE,
        ["spec.imagePullSecrets[0]"],
        id="kubeflow pull secret",
    ),
    pytest.param(
        kubeflow(
            {"volumeMounts": [{"name": "ds", "mountPath": "/d"}]},
            volumes=[{"name": "ds", "persistentVolumeClaim": {"claimName": "datasets"}}],
        ),
        MEMBER,
        ALLOWED,
        [],
        id="kubeflow claim, allowed",
    ),
    # -- schedulers and Volcano queues: a site admin's --------------------------------
    pytest.param(
        tfjob(scheduling={"schedulerName": "team-b-scheduler"}),
        TEAM_ADMIN,
        ALLOWED,
        [f"{S}.schedulerName"],
        id="a scheduler, even a team admin's",
    ),
    pytest.param(
        tfjob(scheduling={"schedulerName": "default-scheduler"}),
        MEMBER,
        NONE,
        [],
        id="the default scheduler, named",
    ),
    pytest.param(
        tfjob(scheduling={"gang": "SchedulerPlugins"}),
        MEMBER,
        NONE,
        [f"{S}.gang"],
        id="a gang's own scheduler",
    ),
    pytest.param(
        tfjob(scheduling={"gang": "Volcano", "queue": "team-b"}),
        MEMBER,
        NONE,
        [f"{S}.gang", f"{S}.queue"],
        id="volcano and another team's queue",
    ),
    pytest.param(
        tfjob(scheduling={"gang": "Volcano", "queue": "default"}),
        MEMBER,
        Allowances(schedulers=["volcano"]),
        [],
        id="volcano's default queue",
    ),
    pytest.param(
        tfjob(scheduling={"gang": "Volcano", "queue": "team-a", "schedulerName": "team-v"}),
        MEMBER,
        PLACED,
        [],
        id="allowed scheduler and queue",
    ),
    pytest.param(
        tfjob(scheduling={"gang": "Kueue", "queue": "team-b"}),
        MEMBER,
        NONE,
        [],
        id="a Kueue LocalQueue is the namespace's own",
    ),
    pytest.param(
        tfjob(scheduling={"gang": "Volcano", "queue": "any", "schedulerName": "x"}),
        SITE_ADMIN,
        NONE,
        [],
        id="a site admin's scheduler and queue",
    ),
    # -- priority and tolerations: a site admin's --------------------------------------
    pytest.param(
        tfjob(scheduling={"priorityClassName": "system-cluster-critical"}),
        TEAM_ADMIN,
        ALLOWED,
        ["spec.scheduling.priorityClassName"],
        id="a critical priority, even a team admin's",
    ),
    pytest.param(
        tfjob(scheduling={"priorityClassName": "batch-low"}), MEMBER, PLACED, [], id="allowed"
    ),
    pytest.param(
        tfjob(scheduling={"priorityClassName": "system-node-critical"}),
        SITE_ADMIN,
        NONE,
        [],
        id="a site admin's priority",
    ),
    pytest.param(
        tfjob(worker={"tolerations": tolerate("dedicated", None)}),
        TEAM_ADMIN,
        ALLOWED,
        [f"{W}.tolerations[0].key", f"{W}.tolerations[1]"],
        id="a reserved pool, every taint",
    ),
    pytest.param(
        tfjob(worker={"tolerations": tolerate("nvidia.com/gpu", "pool-a")}),
        MEMBER,
        PLACED,
        [],
        id="tolerations allowed",
    ),
    pytest.param(
        tfjob(worker={"tolerations": tolerate(None)}),
        MEMBER,
        Allowances(toleration_keys=["*"]),
        [],
        id="every taint, allowed",
    ),
    pytest.param(
        tfjob(worker={"tolerations": tolerate(*NODE_LOST_TAINTS)}),
        MEMBER,
        NONE,
        [],
        id="the node-lost taints: only a delay",
    ),
    pytest.param(
        tfjob(tensorboard={"tolerations": tolerate("dedicated")}),
        TEAM_ADMIN,
        NONE,
        ["spec.tensorboard.tolerations[0].key"],
        id="TensorBoard's toleration",
    ),
    pytest.param(
        tfjob(worker={"nodeSelector": {"pool": "a"}}), MEMBER, NONE, [], id="a node selector"
    ),
    pytest.param(
        kubeflow(tolerations=[{"key": "dedicated", "operator": "Exists"}]),
        MEMBER,
        NONE,
        [f"{W}.tolerations[0].key"],
        id="kubeflow toleration",
    ),
]


@pytest.mark.parametrize(("document", "submitter", "allowances", "fields"), ROWS)
def test_refusals(
    document: dict[str, Any], submitter: Submitter, allowances: Allowances, fields: list[str]
) -> None:
    errors = refusals(parse_job(copy.deepcopy(document)), submitter, allowances)
    assert [e.field for e in errors] == fields
    for error in errors:  # each names its fix
        assert any(w in error.message for w in ("remove", "set ", "ask")), error.message


def _message(document: dict[str, Any], submitter: Submitter = MEMBER, **allowed: Any) -> str:
    (error,) = refusals(parse_job(document), submitter, Allowances(**allowed))
    assert isinstance(error, FieldError)
    return error.message


def test_messages_say_why_and_how() -> None:
    credential = _message(tfjob(worker={"env": {"T": secret_env("notebook-1")}}), SITE_ADMIN)
    assert "platform credential" in credential
    assert "notebook" in credential
    assert "remove the reference" in credential
    other = _message(tfjob(worker={"env": {"T": secret_env("db")}}))
    assert "'db'" in other
    assert "ask a team admin" in other
    assert "/api/v1/teams/<team>/allowances" in other
    assert "site admin" in _message(tfjob(tenant={}))
    board = _message(tfjob(tensorboard={}, image="registry.example/train:1"))
    assert "the job's image" in board
    assert f"spec.tensorboard.image: {DEFAULT_IMAGE}" in board
    assert "baseline" in _message(tfjob(podSecurity="baseline"))
    priority = _message(tfjob(scheduling={"priorityClassName": "high"}), TEAM_ADMIN)
    assert "preempt" in priority
    assert "ask a site admin" in priority
    taint = _message(tfjob(worker={"tolerations": tolerate("dedicated")}), TEAM_ADMIN)
    assert "taint 'dedicated'" in taint
    assert "toleration_keys" in taint
    gang = _message(tfjob(scheduling={"gang": "Volcano"}), TEAM_ADMIN)
    assert "scheduler 'volcano' (gang Volcano uses it)" in gang
    assert "schedulers in the team's allowances" in gang
    queue = _message(
        tfjob(scheduling={"gang": "Volcano", "queue": "q"}), TEAM_ADMIN, schedulers=["volcano"]
    )
    assert "Volcano queue 'q'" in queue
    assert "volcano_queues" in queue


def test_the_kubeflow_corpus_needs_allowances_for_members() -> None:
    """The corpus' manifests that name Secrets and ConfigMaps: a member's are refused
    until a team admin allows those names; a team admin's go through once a site admin
    allowed the corpus' priority, GPU taint, scheduler and Volcano queue."""
    expected = yaml.safe_load((KUBEFLOW / "expected.yaml").read_text())
    site = {
        "priority_classes": ["high-priority"],
        "toleration_keys": ["nvidia.com/gpu"],
        "schedulers": ["volcano"],
        "volcano_queues": ["research"],
    }
    allowed = Allowances(
        secrets=["s3-credentials"],
        config_maps=["train-settings"],
        claims=["imagenet-ro"],
        **site,
    )
    named = 0
    for path in sorted(KUBEFLOW.glob("*.yaml")):
        if path.name == "expected.yaml" or "refused" in expected.get(path.name, {}):
            continue
        job = parse_job(yaml.safe_load(path.read_text()), path.name)
        assert refusals(job, TEAM_ADMIN, Allowances(**site)) == [], path.name
        assert refusals(job, MEMBER, allowed) == [], path.name
        named += bool(refusals(job, MEMBER, Allowances()))
    assert named >= 2  # 08-volumes and 10-env-valuefrom


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("notebook-0123", "notebook"),
        ("mnist-code-token", "code-token"),
        ("mnist-registry", "registry"),
        ("digits-serving", "model-server"),
        ("notebooks", None),
        ("db", None),
        ("code-token-x", None),
    ],
)
def test_platform_credentials_by_name(name: str, kind: str | None) -> None:
    assert platform_credential(name) == kind


def test_credential_patterns_and_homes() -> None:
    assert set(CREDENTIAL_PATTERNS) == {"notebook-*", "*-code-token", "*-registry", "*-serving"}
    assert private_claim("home-notebook-abc-0")
    assert not private_claim("home")


@pytest.mark.parametrize(
    ("name", "entries", "hit"),
    [
        ("a", ["a"], True),
        ("ab", ["a"], False),
        ("ab", ["a*"], True),
        ("a", ["a*"], True),
        ("b", ["a*"], False),
        ("x", ["*"], True),
        ("x", [], False),
    ],
)
def test_matches(name: str, entries: list[str], hit: bool) -> None:
    assert matches(name, entries) is hit


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"secrets": ["ok", "notebook-1"]}, "secrets[1]"),
        ({"secrets": ["notebook-*"]}, "secrets[0]"),
        ({"secrets": ["note*"]}, "secrets[0]"),
        ({"secrets": ["*"]}, "secrets[0]"),
        ({"secrets": ["job-code-token"]}, "secrets[0]"),
        ({"secrets": ["digits-serving"]}, "secrets[0]"),
        ({"secrets": ["Upper"]}, "secrets[0]"),
        ({"secrets": ["a*b"]}, "secrets[0]"),
        ({"config_maps": ["-bad"]}, "config_maps[0]"),
        ({"claims": ["home-notebook-1-0"]}, "claims[0]"),
        ({"claims": ["home-*"]}, "claims[0]"),
        ({"service_accounts": ["a b"]}, "service_accounts[0]"),
        ({"tensorboard_images": ["has space"]}, "tensorboard_images[0]"),
        ({"pod_security": "privileged"}, "pod_security"),
        ({"priority_classes": ["System Critical"]}, "priority_classes[0]"),
        ({"toleration_keys": ["a b"]}, "toleration_keys[0]"),
        ({"toleration_keys": ["/gpu"]}, "toleration_keys[0]"),
        ({"schedulers": ["My Scheduler"]}, "schedulers[0]"),
        ({"volcano_queues": ["a/b"]}, "volcano_queues[0]"),
        ({"volumes": []}, "volumes"),
        ({"secrets": ["x"] * 201}, "secrets"),
    ],
)
def test_allowances_refuse(body: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Allowances.model_validate(body)
    assert field in [e.field for e in errors_from(caught.value)]


def test_allowances_accept_and_normalise() -> None:
    allowed = Allowances.model_validate(
        {
            "secrets": ["team-*", "db", "db", "docker-registry"],
            "config_maps": ["*"],
            "claims": ["datasets-*", "home"],
            "service_accounts": ["uploader"],
            "tensorboard_images": ["registry.example/board:*", "*"],
            "pod_security": "baseline",
            "priority_classes": ["batch-*"],
            "toleration_keys": ["nvidia.com/gpu", "pool-*", "*"],
        }
    )
    assert allowed.toleration_keys == ["*", "nvidia.com/gpu", "pool-*"]
    assert allowed.secrets == ["db", "docker-registry", "team-*"]
    assert allowed.model_dump(mode="json")["pod_security"] == "baseline"
    assert Allowances.model_validate({}) == Allowances()
