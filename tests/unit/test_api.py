"""The job format: defaults, every validation rule, error paths and messages, backoff
delays and the replica environment."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from tfkube.spec import (
    API_VERSION,
    DEFAULT_IMAGE,
    KIND,
    BackoffSpec,
    CleanPodPolicy,
    EnvFromCommand,
    FieldError,
    RestartPolicy,
    Role,
    SpecError,
    SuccessPolicy,
    TFJob,
    dump_job,
    load_job_text,
    parse_job,
    replica_environment,
)

SHA = "0123456789abcdef" * 4
DELETE = object()
"""Marks a key to remove in `job_dict`."""


def job_dict(**changes: Any) -> dict[str, Any]:
    """A minimal valid job with `changes` applied; keys are dotted paths ('__' for '.')."""
    data: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": "mnist"},
        "spec": {"replicas": {"worker": {"replicas": 1}}, "code": {"source": "./code"}},
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


def errors_of(data: Any) -> list[FieldError]:
    with pytest.raises(SpecError) as info:
        parse_job(data)
    return info.value.errors


def fields_of(errors: list[FieldError]) -> list[str]:
    return [e.field for e in errors]


# -- defaults ---------------------------------------------------------------------------


def test_minimal_job_dump_fills_every_default():
    job = parse_job(job_dict())
    assert yaml.safe_load(dump_job(job)) == {
        "apiVersion": "tfkube.io/v1alpha1",
        "kind": "TFJob",
        "metadata": {"name": "mnist", "labels": {}},
        "spec": {
            "replicas": {
                "worker": {
                    "replicas": 1,
                    "resources": {"gpu": 0},
                    "env": {},
                    "args": [],
                    "annotations": {},
                    "labels": {},
                    "volumes": [],
                    "initContainers": [],
                    "sidecars": [],
                },
            },
            "code": {"source": "./code", "entrypoint": "run.sh"},
            "storage": {"data": {}, "logs": {}},  # no claim asked for
            "runPolicy": {
                "restartPolicy": "OnFailure",
                "backoffLimit": 3,
                "backoff": {"baseSeconds": 1.0, "capSeconds": 60.0},
                "cleanPodPolicy": "Running",
                "successPolicy": "Default",
                "terminationGraceSeconds": 5.0,
                "port": 2222,
                "suspend": False,
                "stragglerSeconds": 60,
                "stallAction": "Report",
                "nodeLostSeconds": 30,
            },
            "image": DEFAULT_IMAGE,
            "podSecurity": "restricted",
        },
    }


def test_dump_round_trips():
    job = parse_job(
        job_dict(
            spec__replicas__chief={"replicas": 1},
            spec__replicas__ps={"replicas": 2, "env": {"A": {"command": "echo hi"}}},
            spec__runPolicy={"activeDeadlineSeconds": 60, "ttlSecondsAfterFinished": 0},
        )
    )
    assert load_job_text(dump_job(job)) == job


def test_defaults_on_the_model():
    job = parse_job(job_dict(apiVersion=DELETE, kind=DELETE))
    assert job.api_version == API_VERSION
    assert job.kind == KIND
    assert job.name == "mnist"
    assert job.metadata.namespace is None
    rp = job.spec.run_policy
    assert rp.restart_policy is RestartPolicy.ON_FAILURE
    assert rp.clean_pod_policy is CleanPodPolicy.RUNNING
    assert rp.success_policy is SuccessPolicy.DEFAULT
    assert rp.active_deadline_seconds is None
    assert rp.ttl_seconds_after_finished is None
    assert job.spec.code.sha256 is None
    assert not job.spec.code.is_url
    assert job.spec.replicas.counts() == {"chief": 0, "ps": 0, "worker": 1, "evaluator": 0}
    assert job.spec.replicas.get(Role.PS) is None


def test_worker_replicas_default_to_one():
    job = parse_job(job_dict(spec__replicas__worker={}))
    assert job.spec.replicas.count(Role.WORKER) == 1


def test_snake_case_names_are_accepted_too():
    job = parse_job(job_dict(spec__run_policy={"backoff_limit": 7}))
    assert job.spec.run_policy.backoff_limit == 7


@pytest.mark.parametrize(
    ("source", "is_url"),
    [
        pytest.param("./code", False, id="folder"),
        pytest.param("http://h/c.tar.gz", True, id="http"),
        pytest.param("https://h/c.tar.gz", True, id="https"),
        pytest.param("file:///c.tar.gz", False, id="file-url-is-not-fetched-remotely"),
    ],
)
def test_code_is_url(source, is_url):
    assert parse_job(job_dict(spec__code__source=source)).spec.code.is_url is is_url


def test_replica_keys_in_start_order():
    job = parse_job(
        job_dict(
            spec__replicas={
                "evaluator": {},
                "worker": {"replicas": 2},
                "ps": {"replicas": 2},
                "chief": {},
            }
        )
    )
    assert [f"{r.value}-{i}" for r, i in job.replica_keys()] == [
        "chief-0",
        "ps-0",
        "ps-1",
        "worker-0",
        "worker-1",
        "evaluator-0",
    ]


def test_models_are_frozen():
    job = parse_job(job_dict())
    with pytest.raises(ValueError, match="frozen"):
        job.metadata.name = "other"  # type: ignore[misc]


# -- valid values at the edges ----------------------------------------------------------


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"metadata__name": "a"}, id="name-one-char"),
        pytest.param({"metadata__name": "a" * 40}, id="name-40-chars"),
        pytest.param({"metadata__name": "0-a-9"}, id="name-digits-and-dashes"),
        pytest.param({"spec__replicas__chief": {"replicas": 0}}, id="chief-0"),
        pytest.param({"spec__replicas__chief": {"replicas": 1}}, id="chief-1"),
        pytest.param({"spec__replicas__evaluator": {"replicas": 1}}, id="evaluator-1"),
        pytest.param({"spec__replicas__ps": {"replicas": 0}}, id="ps-0"),
        pytest.param({"spec__replicas__worker__replicas": 100_000}, id="workers-max"),
        pytest.param(
            {"spec__replicas__worker__resources": {"cpu": "500m", "memory": "4Gi", "gpu": 16}},
            id="quantities",
        ),
        pytest.param({"spec__replicas__worker__resources__cpu": "0.5"}, id="cpu-decimal"),
        pytest.param({"spec__replicas__worker__resources__memory": "512M"}, id="memory-M"),
        pytest.param(
            {"spec__replicas__worker__env": {"_X": "1", "a9": "", "TFKUBE": "x", "TF_CONFIGS": ""}},
            id="env-names",
        ),
        pytest.param(
            {"spec__replicas__worker__env": {"CLASSPATH": {"command": "hadoop classpath"}}},
            id="env-command",
        ),
        pytest.param({"spec__code__entrypoint": "bin/run.sh"}, id="entrypoint-subdir"),
        pytest.param({"spec__code__entrypoint": "./train.py"}, id="entrypoint-dot-slash"),
        pytest.param({"spec__code__entrypoint": "a..b/run.sh"}, id="entrypoint-dots-in-name"),
        pytest.param({"spec__code__sha256": SHA}, id="sha256"),
        pytest.param(
            {"spec__runPolicy__backoff": {"baseSeconds": 5, "capSeconds": 5}}, id="cap-eq-base"
        ),
        pytest.param({"spec__runPolicy__backoffLimit": 0}, id="backoff-limit-0"),
        pytest.param({"spec__runPolicy__ttlSecondsAfterFinished": 0}, id="ttl-0"),
        pytest.param({"spec__runPolicy__restartPolicy": "ExitCode"}, id="restart-exitcode"),
        pytest.param({"spec__runPolicy__restartPolicy": "Never"}, id="restart-never"),
        pytest.param({"spec__runPolicy__cleanPodPolicy": "None"}, id="clean-none"),
        pytest.param({"spec__runPolicy__successPolicy": "AllWorkers"}, id="success-all"),
        pytest.param({"spec__runPolicy__port": 1024}, id="port-min"),
        pytest.param({"spec__runPolicy__port": 65535}, id="port-max"),
    ],
)
def test_valid_edges(changes):
    parse_job(job_dict(**changes))


# -- every validation rule: the field path and what to do -------------------------------

UNKNOWN = "unknown field; remove it or check its spelling"
NAME = "is not a valid job name; use at most 40 lower-case letters"
AT_LEAST_0 = "is out of range: it must be at least 0"
QUANTITY = "is not a quantity; write e.g. '2', '500m', '4Gi'"
ENV_NAME = "is not a valid environment variable name; use letters, digits and '_'"
RESERVED = "is set by tfkube itself; choose another name"
ENTRYPOINT = "must be a path inside the code folder, like 'run.sh'"


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        # unknown fields at several depths
        pytest.param({"status": {}}, "status", UNKNOWN, id="unknown-top"),
        pytest.param({"metadata__nmae": "x"}, "metadata.nmae", UNKNOWN, id="unknown-metadata"),
        pytest.param({"spec__replica": {}}, "spec.replica", UNKNOWN, id="unknown-spec"),
        pytest.param(
            {"spec__replicas__master": {}}, "spec.replicas.master", UNKNOWN, id="unknown-role"
        ),
        pytest.param(
            {"spec__replicas__worker__count": 2},
            "spec.replicas.worker.count",
            UNKNOWN,
            id="unknown-replica-field",
        ),
        pytest.param(
            {"spec__replicas__worker__resources__gpus": 1},
            "spec.replicas.worker.resources.gpus",
            UNKNOWN,
            id="unknown-resources-field",
        ),
        pytest.param(
            {"spec__runPolicy__backoff__factor": 2},
            "spec.runPolicy.backoff.factor",
            UNKNOWN,
            id="unknown-depth-4",
        ),
        pytest.param(
            {"spec__storage__logs__pvc": "x"},
            "spec.storage.logs.pvc",
            UNKNOWN,
            id="unknown-storage",
        ),
        pytest.param(
            {"spec__replicas__worker__env": {"A": {"command": "x", "shell": "sh"}}},
            "spec.replicas.worker.env.A.shell",
            UNKNOWN,
            id="unknown-env-command-field",
        ),
        pytest.param(
            {"spec__runPolicy__restart_policy_": "Never"},
            "spec.runPolicy.restart_policy_",
            UNKNOWN,
            id="unknown-near-miss",
        ),
        # names
        pytest.param({"metadata__name": "Mnist"}, "metadata.name", NAME, id="name-uppercase"),
        pytest.param({"metadata__name": "my_job"}, "metadata.name", NAME, id="name-underscore"),
        pytest.param({"metadata__name": "a" * 41}, "metadata.name", NAME, id="name-41-chars"),
        pytest.param({"metadata__name": "-job"}, "metadata.name", NAME, id="name-leading-dash"),
        pytest.param({"metadata__name": "job-"}, "metadata.name", NAME, id="name-trailing-dash"),
        pytest.param({"metadata__name": ""}, "metadata.name", NAME, id="name-empty"),
        pytest.param({"metadata__name": "a.b"}, "metadata.name", NAME, id="name-dot"),
        pytest.param({"metadata__name": "job\n"}, "metadata.name", NAME, id="name-newline"),
        pytest.param(
            {"metadata__name": DELETE}, "metadata.name", "required field is missing", id="no-name"
        ),
        # counts
        pytest.param(
            {"spec__replicas__worker__replicas": -1},
            "spec.replicas.worker.replicas",
            AT_LEAST_0,
            id="workers-negative",
        ),
        pytest.param(
            {"spec__replicas__ps": {"replicas": -2}},
            "spec.replicas.ps.replicas",
            AT_LEAST_0,
            id="ps-negative",
        ),
        pytest.param(
            {"spec__replicas__worker__replicas": 100_001},
            "spec.replicas.worker.replicas",
            "is out of range: it must be at most 100000",
            id="workers-too-many",
        ),
        pytest.param(
            {"spec__replicas__chief": {"replicas": 2}},
            "spec.replicas.chief",
            "there can be 0 or 1 of this role, not 2; set replicas to 1",
            id="chief-2",
        ),
        pytest.param(
            {"spec__replicas__evaluator": {"replicas": 2}},
            "spec.replicas.evaluator",
            "there can be 0 or 1 of this role, not 2; set replicas to 1",
            id="evaluator-2",
        ),
        pytest.param(
            {"spec__replicas__worker__replicas": 0},
            "spec.replicas.worker",
            "a job needs at least one worker; set worker replicas to 1 or more",
            id="worker-0",
        ),
        pytest.param(
            {"spec__replicas": {"ps": {"replicas": 1}}},
            "spec.replicas.worker",
            "a job needs at least one worker; set worker replicas to 1 or more",
            id="worker-missing",
        ),
        pytest.param(
            {"spec__replicas__worker__replicas": "two"},
            "spec.replicas.worker.replicas",
            "valid integer",
            id="workers-not-a-number",
        ),
        pytest.param(
            {"spec__replicas": DELETE},
            "spec.replicas",
            "required field is missing; add it",
            id="replicas-missing",
        ),
        # quantities
        pytest.param(
            {"spec__replicas__worker__resources__cpu": "lots"},
            "spec.replicas.worker.resources.cpu",
            QUANTITY,
            id="cpu-word",
        ),
        pytest.param(
            {"spec__replicas__worker__resources__memory": "4GB"},
            "spec.replicas.worker.resources.memory",
            QUANTITY,
            id="memory-GB",
        ),
        pytest.param(
            {"spec__replicas__worker__resources__memory": "-1Gi"},
            "spec.replicas.worker.resources.memory",
            QUANTITY,
            id="memory-negative",
        ),
        pytest.param(
            {"spec__replicas__worker__resources__cpu": "2\n"},
            "spec.replicas.worker.resources.cpu",
            QUANTITY,
            id="cpu-trailing-newline",
        ),
        pytest.param(
            {"spec__replicas__worker__resources__cpu": ""},
            "spec.replicas.worker.resources.cpu",
            QUANTITY,
            id="cpu-empty",
        ),
        pytest.param(
            {"spec__replicas__ps": {"resources": {"gpu": -1}}},
            "spec.replicas.ps.resources.gpu",
            AT_LEAST_0,
            id="gpu-negative",
        ),
        pytest.param(
            {"spec__replicas__worker__resources__gpu": 17},
            "spec.replicas.worker.resources.gpu",
            "it must be at most 16",
            id="gpu-17",
        ),
        # environment
        pytest.param(
            {"spec__replicas__worker__env": {"1X": "v"}},
            "spec.replicas.worker.env",
            ENV_NAME,
            id="env-leading-digit",
        ),
        pytest.param(
            {"spec__replicas__worker__env": {"MY-VAR": "v"}},
            "spec.replicas.worker.env",
            ENV_NAME,
            id="env-dash",
        ),
        pytest.param(
            {"spec__replicas__worker__env": {"": "v"}},
            "spec.replicas.worker.env",
            ENV_NAME,
            id="env-empty-name",
        ),
        pytest.param(
            {"spec__replicas__worker__env": {"A\n": "v"}},
            "spec.replicas.worker.env",
            ENV_NAME,
            id="env-trailing-newline",
        ),
        pytest.param(
            {"spec__replicas__ps": {"env": {"TFKUBE_ROLE": "x"}}},
            "spec.replicas.ps.env",
            RESERVED,
            id="env-reserved-tfkube",
        ),
        pytest.param(
            {"spec__replicas__worker__env": {"TFKUBE_": "x"}},
            "spec.replicas.worker.env",
            RESERVED,
            id="env-reserved-prefix",
        ),
        pytest.param(
            {"spec__replicas__chief": {"env": {"TF_CONFIG": "{}"}}},
            "spec.replicas.chief.env",
            RESERVED,
            id="env-reserved-tf-config",
        ),
        pytest.param(
            {"spec__replicas__worker__env": {"A": 1}},
            "spec.replicas.worker.env.A",
            "must be a string, {command: ...}, {secretKeyRef",
            id="env-value-number",
        ),
        pytest.param(
            {"spec__replicas__worker__env": {"A": {}}},
            "spec.replicas.worker.env.A",
            "must be a string, {command: ...}",
            id="env-form-missing",
        ),
        pytest.param(
            {"spec__replicas__worker__env": {"A": {"command": 3}}},
            "spec.replicas.worker.env.A.command",
            "valid string",
            id="env-command-not-a-string",
        ),
        pytest.param(
            {"spec__replicas__worker__env": {"A": {"secretKeyRef": {"name": "s"}}}},
            "spec.replicas.worker.env.A.secretKeyRef.key",
            "required field is missing; add it",
            id="env-secret-without-key",
        ),
        pytest.param(
            {"spec__replicas__worker__env": {"A": {"fieldRef": {"fieldPath": "spec.x"}}}},
            "spec.replicas.worker.env.A.fieldRef.fieldPath",
            "is not a pod field Kubernetes can give",
            id="env-unknown-pod-field",
        ),
        pytest.param(
            {"spec__code": DELETE},
            "spec.code",
            "required unless every role gives its own command",
            id="code-or-commands",
        ),
        pytest.param(
            {"spec__replicas__worker__command": []},
            "spec.replicas.worker.command",
            "must name a program",
            id="empty-command",
        ),
        pytest.param(
            {"spec__replicas__worker__workingDir": "app"},
            "spec.replicas.worker.workingDir",
            "must be an absolute path",
            id="relative-working-dir",
        ),
        pytest.param(
            {
                "spec__replicas__worker__volumes": [
                    {"name": "logs", "mountPath": "/x", "emptyDir": {}}
                ]
            },
            "spec.replicas.worker.volumes[0].name",
            "one of tfkube's own volumes",
            id="volume-name-reserved",
        ),
        pytest.param(
            {"spec__replicas__worker__volumes": [{"name": "d", "mountPath": "/x"}]},
            "spec.replicas.worker.volumes[0]",
            "give exactly one source",
            id="volume-without-source",
        ),
        pytest.param(
            {
                "spec__replicas__worker__volumes": [
                    {"name": "d", "mountPath": "/x", "claimName": "c", "secret": "s"}
                ]
            },
            "spec.replicas.worker.volumes[0]",
            "(found claim_name, secret)",
            id="volume-two-sources",
        ),
        pytest.param(
            {"spec__replicas__worker__sidecars": [{"name": "tensorflow", "image": "x"}]},
            "spec.replicas.worker.sidecars[0].name",
            "the replica's own container",
            id="sidecar-named-tensorflow",
        ),
        pytest.param(
            {
                "spec__replicas__worker__sidecars": [
                    {"name": "s", "image": "x", "volumeMounts": [{"name": "v", "mountPath": "/v"}]}
                ]
            },
            "spec.replicas.worker",
            "mounts 'v', which is not a volume of this role",
            id="sidecar-mounts-unknown-volume",
        ),
        pytest.param(
            {
                "spec__replicas__worker__sidecars": [
                    {"name": "s", "image": "x", "env": {"A": {"command": "x"}}}
                ]
            },
            "spec.replicas.worker.sidecars[0].env.A",
            "must be a string, {secretKeyRef",
            id="sidecar-env-command",
        ),
        pytest.param(
            {"spec__scheduling": {"gang": "Volcano", "minAvailable": 5}},
            "spec",
            "minAvailable 5 is more than the job's 1",
            id="min-available-too-big",
        ),
        # code
        pytest.param(
            {"spec__code__entrypoint": "/bin/run.sh"},
            "spec.code.entrypoint",
            ENTRYPOINT,
            id="entrypoint-absolute",
        ),
        pytest.param(
            {"spec__code__entrypoint": "../run.sh"},
            "spec.code.entrypoint",
            ENTRYPOINT,
            id="entrypoint-dotdot",
        ),
        pytest.param(
            {"spec__code__entrypoint": "bin/../../run.sh"},
            "spec.code.entrypoint",
            ENTRYPOINT,
            id="entrypoint-inner-dotdot",
        ),
        pytest.param(
            {"spec__code__entrypoint": "   "},
            "spec.code.entrypoint",
            ENTRYPOINT,
            id="entrypoint-blank",
        ),
        pytest.param(
            {"spec__code__entrypoint": ""},
            "spec.code.entrypoint",
            ENTRYPOINT,
            id="entrypoint-empty",
        ),
        pytest.param(
            {"spec__code__sha256": SHA.upper()},
            "spec.code.sha256",
            "must be 64 lower-case hex digits (the output of sha256sum)",
            id="sha-uppercase",
        ),
        pytest.param(
            {"spec__code__sha256": SHA[:-1]},
            "spec.code.sha256",
            "must be 64 lower-case hex digits",
            id="sha-63",
        ),
        pytest.param(
            {"spec__code__sha256": SHA + "0"},
            "spec.code.sha256",
            "must be 64 lower-case hex digits",
            id="sha-65",
        ),
        pytest.param(
            {"spec__code__sha256": "g" * 64},
            "spec.code.sha256",
            "must be 64 lower-case hex digits",
            id="sha-not-hex",
        ),
        pytest.param(
            {"spec__code__sha256": "sha256:" + SHA},
            "spec.code.sha256",
            "must be 64 lower-case hex digits",
            id="sha-prefixed",
        ),
        pytest.param(
            {"spec__code__source": DELETE},
            "spec.code.source",
            "required field is missing; add it",
            id="source-missing",
        ),
        # run policy
        pytest.param(
            {"spec__runPolicy__backoff": {"baseSeconds": 10, "capSeconds": 5}},
            "spec.runPolicy.backoff",
            "capSeconds must be at least baseSeconds",
            id="cap-below-base",
        ),
        pytest.param(
            {"spec__runPolicy__backoff": {"capSeconds": 0.5}},
            "spec.runPolicy.backoff",
            "capSeconds must be at least baseSeconds",
            id="cap-below-default-base",
        ),
        pytest.param(
            {"spec__runPolicy__backoff__baseSeconds": 0},
            "spec.runPolicy.backoff.baseSeconds",
            "is out of range: it must be more than 0",
            id="base-zero",
        ),
        pytest.param(
            {"spec__runPolicy__restartPolicy": "Always"},
            "spec.runPolicy.restartPolicy",
            "must be 'Never', 'OnFailure' or 'ExitCode'",
            id="restart-always",
        ),
        pytest.param(
            {"spec__runPolicy__restartPolicy": "onfailure"},
            "spec.runPolicy.restartPolicy",
            "must be 'Never', 'OnFailure' or 'ExitCode'",
            id="restart-wrong-case",
        ),
        pytest.param(
            {"spec__runPolicy__cleanPodPolicy": "Some"},
            "spec.runPolicy.cleanPodPolicy",
            "must be 'Running', 'All' or 'None'",
            id="clean-bad",
        ),
        pytest.param(
            {"spec__runPolicy__successPolicy": "ChiefOnly"},
            "spec.runPolicy.successPolicy",
            "must be 'Default' or 'AllWorkers'",
            id="success-bad",
        ),
        pytest.param(
            {"spec__runPolicy__backoffLimit": -1},
            "spec.runPolicy.backoffLimit",
            AT_LEAST_0,
            id="backoff-limit-negative",
        ),
        pytest.param(
            {"spec__runPolicy__activeDeadlineSeconds": 0},
            "spec.runPolicy.activeDeadlineSeconds",
            "must be more than 0",
            id="deadline-zero",
        ),
        pytest.param(
            {"spec__runPolicy__ttlSecondsAfterFinished": -1},
            "spec.runPolicy.ttlSecondsAfterFinished",
            AT_LEAST_0,
            id="ttl-negative",
        ),
        pytest.param(
            {"spec__runPolicy__terminationGraceSeconds": 301},
            "spec.runPolicy.terminationGraceSeconds",
            "it must be at most 300",
            id="grace-too-long",
        ),
        pytest.param(
            {"spec__runPolicy__port": 80},
            "spec.runPolicy.port",
            "80 is out of range: it must be at least 1024",
            id="port-privileged",
        ),
        # apiVersion and kind
        pytest.param(
            {"apiVersion": "tfkube.io/v1"},
            "apiVersion",
            "must be 'tfkube.io/v1alpha1'",
            id="api-version-wrong",
        ),
        pytest.param({"kind": "Job"}, "kind", "must be 'TFJob'", id="kind-wrong"),
    ],
)
def test_validation_names_field_and_fix(changes, field, message):
    errors = errors_of(job_dict(**changes))
    assert field in fields_of(errors), errors
    assert any(e.field == field and message in e.message for e in errors), errors


def test_error_message_lists_every_field_with_source():
    data = job_dict(
        metadata__name="Bad_Name",
        spec__replicas__chief={"replicas": 2},
        spec__runPolicy__restartPolicy="Always",
    )
    with pytest.raises(SpecError) as info:
        parse_job(data, source="jobs/mnist.yaml")
    text = str(info.value)
    assert text.splitlines()[0] == "jobs/mnist.yaml is not a valid TFJob:"
    assert fields_of(info.value.errors) == [
        "metadata.name",
        "spec.replicas.chief",
        "spec.runPolicy.restartPolicy",
    ]
    for e in info.value.errors:
        assert f"  {e.field}: {e.message}" in text
    assert info.value.source == "jobs/mnist.yaml"
    assert isinstance(info.value, ValueError)


def test_union_errors_are_not_repeated():
    errors = errors_of(job_dict(spec__replicas__worker__env={"A": 1}))
    pairs = [(e.field, e.message) for e in errors]
    assert len(pairs) == len(set(pairs))
    assert all(e.field == "spec.replicas.worker.env.A" for e in errors)  # no branch names


def test_list_indexes_in_paths():
    errors = errors_of(job_dict(spec__replicas__worker__args=["--ok", 3]))
    assert fields_of(errors) == ["spec.replicas.worker.args[1]"]


def test_kubeflow_api_version_is_converted_or_rejected_with_kubeflow_fields():
    data = job_dict(apiVersion="kubeflow.org/v1", spec={"tfReplicaSpecs": {}})
    errors = errors_of(data)
    assert len(errors) == 1  # not a list of every unknown Kubeflow field
    assert errors[0].field == "spec.tfReplicaSpecs"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param([1, 2], "a job file must be a YAML mapping", id="list"),
        pytest.param("job", "a job file must be a YAML mapping", id="string"),
        pytest.param(None, "a job file must be a YAML mapping", id="none"),
    ],
)
def test_parse_job_needs_a_mapping(data, message):
    errors = errors_of(data)
    assert errors == [FieldError("(top level)", message)]


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        pytest.param("", "(top level)", "the file is empty", id="empty"),
        pytest.param("   \n\n", "(top level)", "the file is empty", id="blank"),
        pytest.param("# only a comment\n", "(top level)", "the file is empty", id="comment"),
        pytest.param("metadata: [\n", "(yaml)", "not valid YAML", id="unclosed-list"),
        pytest.param("a: b: c\n", "(yaml)", "not valid YAML", id="nested-colon"),
        pytest.param("a:\n\tb: 1\n", "(yaml)", "not valid YAML", id="tab"),
        pytest.param("- 1\n- 2\n", "(top level)", "must be a YAML mapping", id="list"),
        pytest.param("just text\n", "(top level)", "must be a YAML mapping", id="scalar"),
    ],
)
def test_load_job_text_errors(text, field, message):
    with pytest.raises(SpecError) as info:
        load_job_text(text, source="job.yaml")
    assert len(info.value.errors) == 1
    assert info.value.errors[0].field == field
    assert message in info.value.errors[0].message
    assert str(info.value).startswith("job.yaml is not a valid TFJob:")


def test_load_job_text_reads_yaml():
    text = yaml.safe_dump(job_dict(spec__replicas__ps={"replicas": 2}))
    job = load_job_text(text)
    assert isinstance(job, TFJob)
    assert job.spec.replicas.count(Role.PS) == 2


def test_load_job_text_reports_validation_errors_with_source():
    with pytest.raises(SpecError) as info:
        load_job_text(yaml.safe_dump(job_dict(metadata__name="X")), source="x.yaml")
    assert fields_of(info.value.errors) == ["metadata.name"]
    assert info.value.source == "x.yaml"


# -- backoff ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "cap", "attempt", "expected"),
    [
        pytest.param(1.0, 60.0, 0, 1.0, id="first"),
        pytest.param(1.0, 60.0, 1, 2.0, id="doubles"),
        pytest.param(1.0, 60.0, 2, 4.0, id="quadruples"),
        pytest.param(1.0, 60.0, 5, 32.0, id="below-cap"),
        pytest.param(1.0, 60.0, 6, 60.0, id="capped"),
        pytest.param(1.0, 60.0, 1000, 60.0, id="huge-attempt-capped"),
        pytest.param(0.5, 3.0, 0, 0.5, id="fractional-base"),
        pytest.param(0.5, 3.0, 2, 2.0, id="fractional-growth"),
        pytest.param(0.5, 3.0, 3, 3.0, id="fractional-capped"),
        pytest.param(5.0, 5.0, 0, 5.0, id="cap-equals-base"),
        pytest.param(5.0, 5.0, 3, 5.0, id="cap-equals-base-later"),
        pytest.param(3600.0, 86400.0, 30, 86400.0, id="max-values"),
    ],
)
def test_backoff_delay(base, cap, attempt, expected):
    delay = BackoffSpec(base_seconds=base, cap_seconds=cap).delay(attempt)
    assert delay == expected
    assert isinstance(delay, float)


def test_backoff_delay_never_decreases():
    spec = BackoffSpec(base_seconds=0.25, cap_seconds=100)
    delays = [spec.delay(n) for n in range(50)]
    assert delays == sorted(delays)
    assert delays[-1] == 100


# -- replica_environment ----------------------------------------------------------------

CLUSTER = {"ps": ["p:1"], "worker": ["w0:1", "w1:1"]}


def env_for(job: TFJob, role: Role = Role.WORKER, **kw: Any) -> dict[str, str]:
    args: dict[str, Any] = {
        "code_url": "file:///code.tar.gz",
        "code_sha256": None,
        "data_dir": "/data",
        "log_dir": "/logs",
        "work_dir": "/work",
        "termination_log": "/work/termination-log",
        **kw,
    }
    return replica_environment(job, role, CLUSTER, **args)


def test_replica_environment_basics():
    job = parse_job(
        job_dict(
            spec__replicas__worker__replicas=2,
            spec__replicas__ps={"replicas": 1},
            spec__code__entrypoint="train.py",
            spec__runPolicy__terminationGraceSeconds=7.5,
        )
    )
    assert env_for(job, index=1) == {
        "TFKUBE_JOB": "mnist",
        "TFKUBE_ROLE": "worker",
        "TFKUBE_INDEX": "1",
        "TFKUBE_CLUSTER": json.dumps(CLUSTER, sort_keys=True),
        "TFKUBE_NUM_PS": "1",
        "TFKUBE_NUM_WORKERS": "2",
        "TFKUBE_HAS_CHIEF": "0",
        "TFKUBE_DATA_DIR": "/data",
        "TFKUBE_LOG_DIR": "/logs",
        "TFKUBE_CODE_URL": "file:///code.tar.gz",
        "TFKUBE_ENTRYPOINT": "train.py",
        "TFKUBE_WORK_DIR": "/work",
        "TFKUBE_GRACE_SECONDS": "7.5",
        "TFKUBE_TERMINATION_LOG": "/work/termination-log",
        "PYTHONUNBUFFERED": "1",
    }


@pytest.mark.parametrize(
    ("index", "expected"),
    [
        pytest.param(None, None, id="absent-in-cluster"),
        pytest.param(0, "0", id="zero-is-present"),
        pytest.param(3, "3", id="three"),
    ],
)
def test_replica_environment_index(index, expected):
    job = parse_job(job_dict())
    assert env_for(job, index=index).get("TFKUBE_INDEX") == expected


@pytest.mark.parametrize(
    ("sha", "expected"),
    [
        pytest.param(None, None, id="none"),
        pytest.param("", None, id="empty"),
        pytest.param(SHA, SHA, id="set"),
    ],
)
def test_replica_environment_sha(sha, expected):
    job = parse_job(job_dict())
    assert env_for(job, code_sha256=sha).get("TFKUBE_CODE_SHA256") == expected


@pytest.mark.parametrize(
    ("changes", "role", "expected"),
    [
        pytest.param({}, Role.WORKER, {"TFKUBE_HAS_CHIEF": "0"}, id="no-chief"),
        pytest.param(
            {"spec__replicas__chief": {}},
            Role.CHIEF,
            {"TFKUBE_HAS_CHIEF": "1", "TFKUBE_ROLE": "chief"},
            id="chief",
        ),
        pytest.param(
            {"spec__replicas__chief": {"replicas": 0}},
            Role.WORKER,
            {"TFKUBE_HAS_CHIEF": "0"},
            id="chief-zero",
        ),
        pytest.param(
            {"spec__replicas__evaluator": {}},
            Role.EVALUATOR,
            {"TFKUBE_ROLE": "evaluator", "TFKUBE_NUM_PS": "0", "TFKUBE_NUM_WORKERS": "1"},
            id="evaluator",
        ),
    ],
)
def test_replica_environment_roles(changes, role, expected):
    env = env_for(parse_job(job_dict(**changes)), role)
    assert {k: env[k] for k in expected} == expected


def test_replica_environment_env_args_and_commands():
    job = parse_job(
        job_dict(
            spec__replicas__worker={
                "env": {
                    "PLAIN": "value",
                    "EMPTY": "",
                    "CLASSPATH": {"command": "hadoop classpath --glob"},
                    "B_CMD": {"command": "echo b"},
                },
                "args": ["--epochs=3", "--lr", "0.1"],
            },
            spec__replicas__ps={"env": {"PS_ONLY": "1"}},
        )
    )
    env = env_for(job)
    assert env["PLAIN"] == "value"
    assert env["EMPTY"] == ""
    assert "CLASSPATH" not in env  # computed by the launcher, not passed as text
    assert json.loads(env["TFKUBE_ENV_COMMANDS"]) == {
        "B_CMD": "echo b",
        "CLASSPATH": "hadoop classpath --glob",
    }
    assert list(json.loads(env["TFKUBE_ENV_COMMANDS"])) == ["B_CMD", "CLASSPATH"]  # sorted
    assert json.loads(env["TFKUBE_ARGS"]) == ["--epochs=3", "--lr", "0.1"]
    assert "PS_ONLY" not in env  # another role's env

    ps_env = env_for(job, Role.PS)
    assert ps_env["PS_ONLY"] == "1"
    assert "PLAIN" not in ps_env
    assert "TFKUBE_ARGS" not in ps_env
    assert "TFKUBE_ENV_COMMANDS" not in ps_env


def test_replica_environment_env_command_model():
    job = parse_job(job_dict(spec__replicas__worker__env={"A": {"command": "date"}}))
    assert job.spec.replicas.worker is not None
    assert job.spec.replicas.worker.env == {"A": EnvFromCommand(command="date")}


def test_replica_environment_needs_the_role():
    job = parse_job(job_dict())
    with pytest.raises(AssertionError, match="has no ps replicas"):
        env_for(job, Role.PS)
