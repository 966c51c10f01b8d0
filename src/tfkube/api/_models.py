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

from tfkube.contract import RESERVED_PREFIX, TF_CONFIG

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


class StallAction(StrEnum):
    """What happens to a replica that made no progress for `stallSeconds`."""

    REPORT = "Report"
    """Show it as Stalled and record an event; nothing else (the default)."""
    RESTART = "Restart"
    """Restart it (a stalled PS restarts the replicas that use it, as a failed one
    does); counts against backoffLimit."""
    FAIL = "Fail"
    """Fail the job at once (reason Stalled)."""


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


class TolerationOperator(StrEnum):
    EQUAL = "Equal"
    """The taint's value must equal `value`."""
    EXISTS = "Exists"
    """Any taint with this key (no `value`)."""


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Toleration(_Model):
    """Cluster: lets a replica run on nodes with a matching taint (e.g. a GPU pool that is
    tainted so that only training jobs land there). Same meaning as a Kubernetes toleration."""

    key: str | None = None
    """The taint key; empty with operator Exists tolerates every taint."""
    operator: TolerationOperator = TolerationOperator.EQUAL
    value: str | None = None
    """The taint value to match (operator Equal only)."""
    effect: TaintEffect | None = None
    """Only taints with this effect; empty matches every effect."""
    toleration_seconds: Annotated[int, Field(ge=0)] | None = None
    """NoExecute only: how long the pod stays bound after the taint appears."""

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.operator is TolerationOperator.EXISTS and self.value:
            raise ValueError("operator Exists takes no value; remove value or use Equal")
        if self.operator is TolerationOperator.EQUAL and not self.key:
            raise ValueError("operator Equal needs a key; set key or use operator Exists")
        if self.toleration_seconds is not None and self.effect is not TaintEffect.NO_EXECUTE:
            raise ValueError("tolerationSeconds applies to effect NoExecute only")
        return self


_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")


def _check_labels(labels: dict[str, str] | None) -> dict[str, str] | None:
    for key, value in (labels or {}).items():
        if not _LABEL_KEY.fullmatch(key):
            raise ValueError(
                f"{key!r} is not a valid label key; use an optional DNS prefix and '/', then "
                "at most 63 letters, digits, '-', '_' or '.' (e.g. 'tfkube.io/pool')"
            )
        if not _LABEL_VALUE.fullmatch(value) or len(value) > 63:
            raise ValueError(
                f"{value!r} (for {key!r}) is not a valid label value; use at most 63 "
                "letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
            )
    return labels


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
    node_selector: dict[str, str] | None = None
    """Cluster: node labels this role's pods require (e.g. `{tfkube.io/gpu: "true"}` or a
    node pool). Per role because PS and workers often belong on different machines."""
    tolerations: list[Toleration] | None = None
    """Cluster: taints this role's pods tolerate (e.g. a tainted GPU pool)."""

    @field_validator("node_selector")
    @classmethod
    def _selector(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return _check_labels(value)

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, EnvValue]) -> dict[str, EnvValue]:
        for name in env:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(
                    f"{name!r} is not a valid environment variable name; use letters, "
                    "digits and '_', not starting with a digit"
                )
            if name.startswith(RESERVED_PREFIX) or name == TF_CONFIG:
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
    stall_seconds: Annotated[int, Field(gt=0)] | None = None
    """Local engine: a running replica that wrote no log line, while nothing was written
    in the job's log/checkpoint folder, for this long is Stalled (shown in status, an
    event recorded); `stallAction` says what else happens. Unset: no stall detection."""
    stall_action: StallAction = StallAction.REPORT
    """Report (the default), Restart (counts against backoffLimit) or Fail."""


class PullPolicy(StrEnum):
    ALWAYS = "Always"
    IF_NOT_PRESENT = "IfNotPresent"
    NEVER = "Never"


class ServiceType(StrEnum):
    CLUSTER_IP = "ClusterIP"
    """Reachable inside the cluster only (`kubectl port-forward` from outside)."""
    NODE_PORT = "NodePort"
    """Also reachable on every node's address at a port from the node-port range."""


class TensorBoardSpec(_Model):
    """Cluster: a TensorBoard Deployment and Service per job, reading the shared logs
    volume. Present (even as `{}`) means wanted."""

    enabled: bool = True
    """false keeps the section but runs no TensorBoard."""
    service_type: ServiceType = ServiceType.CLUSTER_IP
    """How TensorBoard is exposed: ClusterIP (default) or NodePort."""
    node_port: Annotated[int, Field(ge=30000, le=32767)] | None = None
    """NodePort only: a fixed node port; empty lets Kubernetes choose one."""
    image: str | None = None
    """Image with the `tensorboard` command; defaults to `spec.image` (stock TensorFlow
    images include it)."""
    resources: Resources = Resources(cpu="100m", memory="512Mi")
    """Requests and limits of the TensorBoard container."""
    node_selector: dict[str, str] | None = None
    """Node labels the TensorBoard pod requires, as for a replica role (it reads the logs
    volume, so it belongs where that volume can be mounted)."""
    tolerations: list[Toleration] | None = None
    """Taints the TensorBoard pod tolerates, as for a replica role."""

    @field_validator("node_selector")
    @classmethod
    def _selector(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return _check_labels(value)

    @model_validator(mode="after")
    def _node_port_needs_type(self) -> Self:
        if self.node_port is not None and self.service_type is not ServiceType.NODE_PORT:
            raise ValueError("nodePort needs serviceType NodePort; set it or remove nodePort")
        return self


class GangScheduler(StrEnum):
    """Who makes sure a job's replicas start together (or not at all): without it, half a
    job can hold GPUs while waiting for the other half, and two such jobs deadlock."""

    NONE = "None"
    """The default scheduler, pod by pod."""
    VOLCANO = "Volcano"
    """A Volcano PodGroup (scheduling.volcano.sh/v1beta1); pods use the volcano scheduler."""
    SCHEDULER_PLUGINS = "SchedulerPlugins"
    """A scheduler-plugins coscheduling PodGroup (scheduling.x-k8s.io/v1alpha1)."""
    KUEUE = "Kueue"
    """Kueue admits the job's Jobs from a LocalQueue (label kueue.x-k8s.io/queue-name)."""


class SchedulingSpec(_Model):
    """Cluster: gang scheduling and priority."""

    gang: GangScheduler = GangScheduler.NONE
    queue: str | None = None
    """Volcano: the queue of the PodGroup. Kueue: the LocalQueue name (required)."""
    scheduler_name: str | None = None
    """The pods' schedulerName; defaults to `volcano` (Volcano) or
    `scheduler-plugins-scheduler` (SchedulerPlugins), else the cluster default."""
    priority_class_name: str | None = None
    """PriorityClass of the pods (and of the PodGroup)."""
    schedule_timeout_seconds: Annotated[int, Field(gt=0)] | None = None
    """SchedulerPlugins: how long the group may wait to be scheduled as a whole."""

    @model_validator(mode="after")
    def _queue_for_kueue(self) -> Self:
        if self.gang is GangScheduler.KUEUE and not self.queue:
            raise ValueError("gang Kueue needs queue: the name of a Kueue LocalQueue")
        if self.schedule_timeout_seconds is not None and (
            self.gang is not GangScheduler.SCHEDULER_PLUGINS
        ):
            raise ValueError("scheduleTimeoutSeconds applies to gang SchedulerPlugins only")
        return self


_RESOURCE_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9._/]*[a-z0-9])?$")


def _check_quantities(values: dict[str, str]) -> dict[str, str]:
    for name, value in values.items():
        if not _RESOURCE_NAME.fullmatch(name):
            raise ValueError(
                f"{name!r} is not a resource name; e.g. 'cpu', 'requests.nvidia.com/gpu', 'pods'"
            )
        if not _QUANTITY.fullmatch(value):
            raise ValueError(
                f"{value!r} (for {name!r}) is not a quantity; write e.g. '2', '500m', '4Gi'"
            )
    return values


class LimitRangeSpec(_Model):
    """Per-container defaults and bounds in the tenant's namespace (a LimitRange)."""

    default: dict[str, str] = {}
    """Limits of containers that set none, e.g. `{cpu: "2", memory: 4Gi}`."""
    default_request: dict[str, str] = {}
    """Requests of containers that set none."""
    max: dict[str, str] = {}
    """The most one container may ask for."""
    min: dict[str, str] = {}
    """The least one container must ask for."""

    @field_validator("default", "default_request", "max", "min")
    @classmethod
    def _quantities(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_quantities(value)


class TenantSpec(_Model):
    """Cluster: resource isolation for the namespace the job runs in. The objects are the
    namespace's (named `tfkube-tenant`), shared by its jobs, and outlive any one job."""

    quota: dict[str, str] = {}
    """ResourceQuota `hard` limits, e.g. `{requests.cpu: "64", requests.nvidia.com/gpu: "8",
    pods: "500"}`."""
    limit_range: LimitRangeSpec | None = None
    """Container defaults and bounds (a LimitRange)."""

    @field_validator("quota")
    @classmethod
    def _quantities(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_quantities(value)


class JobSpec(_Model):
    replicas: Replicas
    code: CodeSpec
    storage: StorageSpec = StorageSpec()
    run_policy: RunPolicy = RunPolicy()
    image: str = DEFAULT_IMAGE
    """Cluster: the default image of every replica (a stock TensorFlow image works)."""
    image_pull_policy: PullPolicy | None = None
    """Cluster: pull policy of public images (default IfNotPresent). Images from a private
    registry (one the registry secret has credentials for, or any image when
    `imagePullSecrets` is set) are always pulled with `Always`, whatever this says: a node's
    cached copy must never run for a tenant without the credentials."""
    image_pull_secrets: list[str] | None = None
    """Cluster: names of existing image-pull Secrets in the job's namespace, in addition to
    the platform's registry secret that tfkube copies there."""
    tensorboard: TensorBoardSpec | None = None
    """Cluster: a TensorBoard per job; absent means none, `{}` one with the defaults."""
    scheduling: SchedulingSpec | None = None
    """Cluster: gang scheduling (Volcano, scheduler-plugins, Kueue) and priority."""
    tenant: TenantSpec | None = None
    """Cluster: ResourceQuota and LimitRange of the job's namespace."""

    @field_validator("image_pull_secrets")
    @classmethod
    def _secret_names(cls, value: list[str] | None) -> list[str] | None:
        for name in value or []:
            if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name) or len(name) > 253:
                raise ValueError(f"{name!r} is not a Secret name (lower-case DNS name)")
        return value


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
