"""The TFJob format: typed models with defaults and validation. No I/O.

A job file is YAML with `apiVersion: tfkube.io/v1alpha1` and `kind: TFJob`. Field names
are camelCase in YAML (as in Kubernetes) and snake_case in Python. Every model forbids
unknown fields, so a typo fails loudly instead of being ignored.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

API_VERSION = "tfkube.io/v1alpha1"
KIND = "TFJob"
DEFAULT_IMAGE = "tensorflow/tensorflow:2.21.0"
MAX_NAME_LENGTH = 40
"""Kubernetes hostnames are `<job>-<role>-<index>` and must fit a 63-character DNS label;
40 leaves room for `-evaluator-` and a five-digit index."""

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|Ki|Mi|Gi|Ti|M|G|T)?$")


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        use_attribute_docstrings=True,
    )


class Role(StrEnum):
    """A replica role. The values are the names TensorFlow uses in TF_CONFIG."""

    CHIEF = "chief"
    PS = "ps"
    WORKER = "worker"
    EVALUATOR = "evaluator"


class RestartPolicy(StrEnum):
    NEVER = "Never"
    """A replica that fails fails the job."""
    ON_FAILURE = "OnFailure"
    """Any non-zero exit is retried (within backoffLimit)."""
    EXIT_CODE = "ExitCode"
    """Retry only exits that mean a signal or an infrastructure fault (128+N, 75); an exit
    code of 1-127 is the user's error and fails the job at once."""


class CleanPodPolicy(StrEnum):
    RUNNING = "Running"
    """When the job ends, stop every replica that still runs (PS included). The default."""
    ALL = "All"
    """Like Running; in a cluster also delete finished pods."""
    NONE = "None"
    """Leave running replicas alone until the job is deleted or its TTL passes."""


class SuccessPolicy(StrEnum):
    DEFAULT = "Default"
    """The chief decides when there is one, else worker 0."""
    ALL_WORKERS = "AllWorkers"
    """Every worker (and the chief, if any) must succeed."""


class Resources(_Model):
    """What one replica may use. Locally these are recorded and checked for sense; in a
    cluster they become requests and limits."""

    cpu: str | None = None
    """CPU as a Kubernetes quantity, e.g. "2" or "500m"."""
    memory: str | None = None
    """Memory as a Kubernetes quantity, e.g. "4Gi"."""
    gpu: Annotated[int, Field(ge=0, le=16)] = 0
    """Number of GPUs (`nvidia.com/gpu`); a whole number."""

    @field_validator("cpu", "memory")
    @classmethod
    def _quantity(cls, value: str | None) -> str | None:
        if value is not None and not _QUANTITY.fullmatch(value):
            raise ValueError(f"{value!r} is not a quantity; write e.g. '2', '500m', '4Gi'")
        return value


class EnvFromCommand(_Model):
    """An environment variable computed at start-up, inside the replica, from a command's
    output (e.g. `hadoop classpath --glob` for CLASSPATH): images do not expand `$(...)`."""

    command: str
    """A shell command; its standard output, stripped, becomes the value."""


EnvValue = str | EnvFromCommand


class ReplicaSpec(_Model):
    """One role's replicas."""

    replicas: Annotated[int, Field(ge=0, le=100_000)] = 1
    """How many replicas of this role."""
    resources: Resources = Resources()
    env: dict[str, EnvValue] = {}
    """Extra environment; a value is a string or `{command: ...}`."""
    args: list[str] = []
    """Extra arguments appended after the classic flags."""
    image: str | None = None
    """Container image in a cluster; defaults to `spec.image`."""
    annotations: dict[str, str] = {}
    """Cluster: extra annotations on this role's pods (e.g. for a service mesh or, in
    tests, the fake nodes' `tfkube.io/fake-*` behaviour). Ignored by the local engine."""

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, EnvValue]) -> dict[str, EnvValue]:
        for name in env:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(
                    f"{name!r} is not a valid environment variable name; use letters, "
                    "digits and '_', not starting with a digit"
                )
            if name.startswith("TFKUBE_") or name == "TF_CONFIG":
                raise ValueError(f"{name!r} is set by tfkube itself; choose another name")
        return env


class Replicas(_Model):
    """The job's replicas by role. Roles other than these four are rejected."""

    chief: ReplicaSpec | None = None
    ps: ReplicaSpec | None = None
    worker: Annotated[ReplicaSpec | None, Field(validate_default=True)] = None
    evaluator: ReplicaSpec | None = None

    @field_validator("chief", "evaluator")
    @classmethod
    def _at_most_one(cls, spec: ReplicaSpec | None) -> ReplicaSpec | None:
        if spec is not None and spec.replicas > 1:
            raise ValueError(
                f"there can be 0 or 1 of this role, not {spec.replicas}; set replicas to 1"
            )
        return spec

    @field_validator("worker")
    @classmethod
    def _has_workers(cls, spec: ReplicaSpec | None) -> ReplicaSpec | None:
        if spec is None or spec.replicas < 1:
            raise ValueError("a job needs at least one worker; set worker replicas to 1 or more")
        return spec

    def count(self, role: Role) -> int:
        spec: ReplicaSpec | None = getattr(self, role.value)
        return spec.replicas if spec is not None else 0

    def get(self, role: Role) -> ReplicaSpec | None:
        spec: ReplicaSpec | None = getattr(self, role.value)
        return spec

    def counts(self) -> dict[str, int]:
        return {role.value: self.count(role) for role in Role}


class CodeSpec(_Model):
    """Where the training code comes from. Every replica fetches and verifies its own copy."""

    source: str
    """A local folder (relative to the job file) or an http(s) URL of a .tar.gz."""
    entrypoint: str = "run.sh"
    """The file in the code to run; it gets the classic flags and TF_CONFIG."""
    sha256: str | None = None
    """Expected SHA-256 of the .tar.gz at a URL; replicas refuse code that differs."""

    @field_validator("entrypoint")
    @classmethod
    def _relative(cls, value: str) -> str:
        if value.startswith("/") or ".." in value.split("/") or not value.strip():
            raise ValueError(
                f"{value!r} must be a path inside the code folder, like 'run.sh' or 'bin/run.sh'"
            )
        return value

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[0-9a-f]{64}", value):
            raise ValueError("must be 64 lower-case hex digits (the output of sha256sum)")
        return value

    @property
    def is_url(self) -> bool:
        return self.source.startswith(("http://", "https://"))


class VolumeSpec(_Model):
    """A directory every replica that needs it shares. Locally `path` is a folder on this
    machine; in a cluster it is a PersistentVolumeClaim mounted at `mountPath`."""

    path: str | None = None
    """Local folder (relative to the job file); default: inside the job's own directory."""
    claim_name: str | None = None
    """Cluster: use this existing PersistentVolumeClaim instead of creating one."""
    storage_class_name: str | None = None
    """Cluster: storage class of the claim tfkube creates (e.g. GlusterFS, CephFS, NFS)."""
    size: str = "10Gi"
    """Cluster: size of the claim tfkube creates."""
    mount_path: str | None = None
    """Cluster: where the volume is mounted in the containers."""


class StorageSpec(_Model):
    data: VolumeSpec = VolumeSpec()
    """Training data, read by workers (each its own shard)."""
    logs: VolumeSpec = VolumeSpec()
    """Logs, checkpoints and TensorBoard summaries, shared by every replica so a restarted
    replica resumes from the last checkpoint."""


class BackoffSpec(_Model):
    """Delay before restart number n (0-based): min(cap, base * 2**n)."""

    base_seconds: Annotated[float, Field(gt=0, le=3600)] = 1.0
    cap_seconds: Annotated[float, Field(gt=0, le=86400)] = 60.0

    @model_validator(mode="after")
    def _cap_above_base(self) -> Self:
        if self.cap_seconds < self.base_seconds:
            raise ValueError("capSeconds must be at least baseSeconds")
        return self

    def delay(self, attempt: int) -> float:
        return float(min(self.cap_seconds, self.base_seconds * 2 ** min(attempt, 30)))


class RunPolicy(_Model):
    restart_policy: RestartPolicy = RestartPolicy.ON_FAILURE
    backoff_limit: Annotated[int, Field(ge=0, le=1000)] = 3
    """Restarts the whole job may take (over all replicas) before it is Failed."""
    backoff: BackoffSpec = BackoffSpec()
    active_deadline_seconds: Annotated[int, Field(gt=0)] | None = None
    """The job is Failed (DeadlineExceeded) when it has run this long."""
    ttl_seconds_after_finished: Annotated[int, Field(ge=0)] | None = None
    """A finished job (and everything it created) is deleted this long after it ends."""
    clean_pod_policy: CleanPodPolicy = CleanPodPolicy.RUNNING
    success_policy: SuccessPolicy = SuccessPolicy.DEFAULT
    termination_grace_seconds: Annotated[float, Field(ge=0, le=300)] = 5.0
    """How long a replica gets after SIGTERM before SIGKILL."""
    port: Annotated[int, Field(ge=1024, le=65535)] = 2222
    """Cluster: the port every replica's TF server listens on (locally ports are free ones)."""
    suspend: bool = False
    """Cluster: true stops every replica (their pods are deleted) and keeps the job; false
    again resumes it; as for a Kubernetes Job, activeDeadlineSeconds counts from the resume."""


class JobSpec(_Model):
    replicas: Replicas
    code: CodeSpec
    storage: StorageSpec = StorageSpec()
    run_policy: RunPolicy = RunPolicy()
    image: str = DEFAULT_IMAGE
    """Cluster: the default image of every replica (a stock TensorFlow image works)."""


class Metadata(_Model):
    name: str
    """The job's name: a DNS-1123 label of at most 40 characters."""
    namespace: str | None = None
    labels: dict[str, str] = {}

    @field_validator("name")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        if len(value) > MAX_NAME_LENGTH or not _DNS_LABEL.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a valid job name; use at most {MAX_NAME_LENGTH} lower-case "
                "letters, digits and '-', starting and ending with a letter or digit "
                "(e.g. 'mnist-1')"
            )
        return value


class TFJob(_Model):
    """A distributed TensorFlow training job."""

    api_version: Literal["tfkube.io/v1alpha1"] = Field("tfkube.io/v1alpha1", alias="apiVersion")
    kind: Literal["TFJob"] = "TFJob"
    metadata: Metadata
    spec: JobSpec

    @property
    def name(self) -> str:
        return self.metadata.name

    def replica_keys(self) -> list[tuple[Role, int]]:
        """Every replica as (role, index), in start order."""
        return [(role, i) for role in Role for i in range(self.spec.replicas.count(role))]
