"""The TFJob format: typed models with defaults and validation. No I/O.

A job file is YAML with `apiVersion: tfkube.io/v1alpha1` and `kind: TFJob`. Field names
are camelCase in YAML (as in Kubernetes) and snake_case in Python. Every model forbids
unknown fields, so a typo fails loudly instead of being ignored.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel, to_snake

from tfkube.contract import DEFAULT_ENTRYPOINT, RESERVED_PREFIX, TF_CONFIG
from tfkube.spec._data import (
    DataSource,
    HdfsSource,
    S3Source,
    ShardRule,
    check_endpoint,
    check_secret_name,
    parse_source,
)

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


class SecretKeyRef(_Model):
    """One key of a Secret in the job's namespace."""

    name: str
    """The Secret's name."""
    key: str
    """The key within it."""
    optional: bool = False
    """True: a missing Secret or key leaves the variable unset instead of failing the pod."""


class ConfigMapKeyRef(_Model):
    """One key of a ConfigMap in the job's namespace."""

    name: str
    """The ConfigMap's name."""
    key: str
    """The key within it."""
    optional: bool = False
    """True: a missing ConfigMap or key leaves the variable unset instead of failing the pod."""


class FieldRef(_Model):
    """A field of the replica's own pod, as Kubernetes' downward API gives it."""

    field_path: str
    """e.g. `metadata.name`, `metadata.namespace`, `spec.nodeName`, `status.podIP`,
    `status.hostIP`, `metadata.labels['key']`."""

    @field_validator("field_path")
    @classmethod
    def _known(cls, value: str) -> str:
        plain = {
            "metadata.name",
            "metadata.namespace",
            "metadata.uid",
            "spec.nodeName",
            "spec.serviceAccountName",
            "status.hostIP",
            "status.hostIPs",
            "status.podIP",
            "status.podIPs",
        }
        if value not in plain and not _INDEXED_FIELD.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a pod field Kubernetes can give; use one of "
                f"{', '.join(sorted(plain))} or metadata.labels['KEY'] / "
                "metadata.annotations['KEY']"
            )
        return value


_INDEXED_FIELD = re.compile(r"^metadata\.(labels|annotations)\['[^']+'\]$")


class EnvFromSecret(_Model):
    """Cluster: a variable read from a Secret (credentials stay out of the spec)."""

    secret_key_ref: SecretKeyRef


class EnvFromConfigMap(_Model):
    """Cluster: a variable read from a ConfigMap."""

    config_map_key_ref: ConfigMapKeyRef


class EnvFromField(_Model):
    """Cluster: a variable holding a field of the replica's pod (its name, its IP, ...)."""

    field_ref: FieldRef


_ENV_KINDS = (
    ("command", EnvFromCommand),
    ("secretKeyRef", EnvFromSecret),
    ("configMapKeyRef", EnvFromConfigMap),
    ("fieldRef", EnvFromField),
)


def _env_kind(value: object) -> str | None:
    """Which form an environment value has, by its one key (so an error names only the
    fields of that form, not of every form the value could have been)."""
    if isinstance(value, str):
        return "str"
    if isinstance(value, BaseModel):
        return type(value).__name__
    if isinstance(value, dict):
        for key, model in _ENV_KINDS:
            if key in value or to_snake(key) in value:
                return model.__name__
    return None


def _kube_env_kind(value: object) -> str | None:
    kind = _env_kind(value)
    return None if kind == EnvFromCommand.__name__ else kind


KubeEnvValue = Annotated[
    Annotated[str, Tag("str")]
    | Annotated[EnvFromSecret, Tag("EnvFromSecret")]
    | Annotated[EnvFromConfigMap, Tag("EnvFromConfigMap")]
    | Annotated[EnvFromField, Tag("EnvFromField")],
    Discriminator(
        _kube_env_kind,
        custom_error_type="env_value",
        custom_error_message="must be a string, {secretKeyRef: {name, key}}, "
        "{configMapKeyRef: {name, key}} or {fieldRef: {fieldPath}}",
    ),
]
"""What Kubernetes itself can set: a value, or a reference it resolves when the pod starts."""
EnvValue = Annotated[
    Annotated[str, Tag("str")]
    | Annotated[EnvFromCommand, Tag("EnvFromCommand")]
    | Annotated[EnvFromSecret, Tag("EnvFromSecret")]
    | Annotated[EnvFromConfigMap, Tag("EnvFromConfigMap")]
    | Annotated[EnvFromField, Tag("EnvFromField")],
    Discriminator(
        _env_kind,
        custom_error_type="env_value",
        custom_error_message="must be a string, {command: ...}, {secretKeyRef: {name, key}}, "
        "{configMapKeyRef: {name, key}} or {fieldRef: {fieldPath}}",
    ),
]
"""A replica's variable: also `{command: ...}`, which tfkube's launcher computes."""
CLUSTER_ONLY_ENV = (EnvFromSecret, EnvFromConfigMap, EnvFromField)
"""Values only Kubernetes can resolve: the local engine refuses them."""


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


RESERVED_VOLUMES = frozenset({"launcher", "work", "logs", "data", "venvs", "code"})
"""tfkube's own volumes in every replica pod (see tfkube.render); a role's extra volumes
take other names. Helper containers may mount `data` and `logs` by these names."""
_ABSOLUTE = re.compile(r"^/[^\0]*$")


def _dns_label(value: str, what: str) -> str:
    if len(value) > 63 or not _DNS_LABEL.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a valid {what}; use at most 63 lower-case letters, digits "
            "and '-', starting and ending with a letter or digit"
        )
    return value


def _absolute(value: str) -> str:
    if not _ABSOLUTE.fullmatch(value) or ".." in value.split("/"):
        raise ValueError(f"{value!r} must be an absolute path without '..', e.g. '/mnt/data'")
    return value


class EmptyDir(_Model):
    """A scratch folder that lives as long as the pod."""

    medium: Literal["", "Memory"] = ""
    """"" (the node's disk) or Memory (tmpfs, e.g. a bigger /dev/shm for data loaders)."""
    size_limit: str | None = None
    """The most it may hold, as a quantity (e.g. "1Gi")."""

    @field_validator("size_limit")
    @classmethod
    def _quantity(cls, value: str | None) -> str | None:
        if value is not None and not _QUANTITY.fullmatch(value):
            raise ValueError(f"{value!r} is not a quantity; write e.g. '1Gi'")
        return value


class ExtraVolume(_Model):
    """Cluster: one more volume mounted into this role's replica container (Kubeflow's
    `volumes` + `volumeMounts`): an existing claim with a dataset, a ConfigMap or Secret
    of settings, a scratch folder. Exactly one source. tfkube's own shared storage
    (`spec.storage`) stays where it is; the local engine refuses extra volumes (it cannot
    mount them)."""

    name: str
    """The volume's name in the pod (a DNS label, not one of tfkube's own)."""
    mount_path: str | None = None
    """Where the replica container sees it (an absolute path); empty: only the role's
    helper containers mount it (e.g. a scratch folder an init container fills)."""
    read_only: bool = False
    """Mount it read-only."""
    sub_path: str | None = None
    """Mount only this folder of the volume."""
    claim_name: str | None = None
    """An existing PersistentVolumeClaim in the job's namespace."""
    config_map: str | None = None
    """A ConfigMap in the job's namespace (one file per key)."""
    secret: str | None = None
    """A Secret in the job's namespace (one file per key)."""
    empty_dir: EmptyDir | None = None
    """A scratch folder of the pod."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if value in RESERVED_VOLUMES:
            raise ValueError(
                f"{value!r} is one of tfkube's own volumes "
                f"({', '.join(sorted(RESERVED_VOLUMES))}); choose another name"
            )
        return _dns_label(value, "volume name")

    @field_validator("mount_path")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        return _absolute(value) if value is not None else None

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        given = [
            k
            for k in ("claim_name", "config_map", "secret", "empty_dir")
            if getattr(self, k) is not None
        ]
        if len(given) != 1:
            raise ValueError(
                "give exactly one source: claimName, configMap, secret or emptyDir"
                + (f" (found {', '.join(given)})" if given else "")
            )
        return self


class VolumeMount(_Model):
    """Where a helper container sees one of the role's volumes."""

    name: str
    """An extra volume of the role, or tfkube's `data` or `logs`."""
    mount_path: str
    """An absolute path in the helper container."""
    read_only: bool = False
    sub_path: str | None = None

    @field_validator("mount_path")
    @classmethod
    def _path(cls, value: str) -> str:
        return _absolute(value)


class Container(_Model):
    """Cluster: a helper container in every pod of a role: an init container (runs to
    completion before the replica starts, e.g. to download a dataset) or a sidecar (runs
    beside it, e.g. a log shipper; Kubernetes' native sidecars, so the pod still completes
    when the replica does). It runs its own image as given: no launcher, no TF_CONFIG."""

    name: str
    """A DNS label, unique in the pod (not `tensorflow`, the replica's own container)."""
    image: str
    """Its image."""
    command: list[str] | None = None
    """Its program and arguments; empty runs the image's own ENTRYPOINT."""
    args: list[str] = []
    """Arguments after `command` (or the image's ENTRYPOINT)."""
    env: dict[str, KubeEnvValue] = {}
    """Its environment: values, or Secret/ConfigMap/pod-field references."""
    resources: Resources = Resources()
    """Its requests and limits."""
    volume_mounts: list[VolumeMount] = []
    """The role's volumes it sees, and where."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if value == "tensorflow":
            raise ValueError("'tensorflow' is the replica's own container; choose another name")
        return _dns_label(value, "container name")

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, KubeEnvValue]) -> dict[str, KubeEnvValue]:
        for name in env:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(
                    f"{name!r} is not a valid environment variable name; use letters, "
                    "digits and '_', not starting with a digit"
                )
        return env


class ReplicaSpec(_Model):
    """One role's replicas."""

    replicas: Annotated[int, Field(ge=0, le=100_000)] = 1
    """How many replicas of this role."""
    resources: Resources = Resources()
    env: dict[str, EnvValue] = {}
    """Extra environment; a value is a string or `{command: ...}`."""
    args: list[str] = []
    """Extra arguments: after the classic flags for the code's entrypoint, or after
    `command` (as Kubernetes appends a container's args to its command)."""
    command: list[str] | None = None
    """The program to run instead of the code's entrypoint, as given (Kubeflow's container
    `command`): `[python, /opt/train.py]`, `[sh, -c, "..."]`. It gets TF_CONFIG and the
    TFKUBE_* variables but not the classic flags (those are for tfkube's own `run.sh`
    contract). It runs in the code folder when the job has code, else in `workingDir`
    (cluster: the image's own working directory by default). Locally its program must
    exist on this machine (`python`/`python3` is tfkube's interpreter), or the job is
    refused before anything starts."""
    working_dir: str | None = None
    """The replica's working directory when the job has no code (cluster: the container's
    workingDir; locally a folder that must exist here)."""
    restart_policy: RestartPolicy | None = None
    """This role's restart policy; default `runPolicy.restartPolicy` (e.g. PS OnFailure,
    workers ExitCode)."""
    image: str | None = None
    """Container image in a cluster; defaults to `spec.image`."""
    annotations: dict[str, str] = {}
    """Cluster: extra annotations on this role's pods (e.g. for a service mesh or, in
    tests, the fake nodes' `tfkube.io/fake-*` behaviour). Ignored by the local engine."""
    labels: dict[str, str] = {}
    """Cluster: extra labels on this role's pods (tfkube's own labels win). Ignored by the
    local engine."""
    node_selector: dict[str, str] | None = None
    """Cluster: node labels this role's pods require (e.g. `{tfkube.io/gpu: "true"}` or a
    node pool). Per role because PS and workers often belong on different machines."""
    tolerations: list[Toleration] | None = None
    """Cluster: taints this role's pods tolerate (e.g. a tainted GPU pool)."""
    volumes: list[ExtraVolume] = []
    """Cluster: more volumes for this role's replica container (a dataset's claim, a
    ConfigMap, a scratch folder); the local engine refuses them."""
    init_containers: list[Container] = []
    """Cluster: helper containers that run to completion, in order, before the replica
    starts (e.g. a download); the local engine refuses them."""
    sidecars: list[Container] = []
    """Cluster: helper containers beside the replica for as long as it runs; the local
    engine refuses them."""
    service_account_name: str | None = None
    """Cluster: the ServiceAccount of this role's pods (e.g. one with cloud storage
    access); default the namespace's `default`."""

    @field_validator("node_selector")
    @classmethod
    def _selector(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return _check_labels(value)

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        _check_labels(value)
        return value

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and (not value or not value[0].strip()):
            raise ValueError("must name a program, e.g. [python, /opt/train.py] or [sh, -c, ...]")
        return value

    @field_validator("working_dir")
    @classmethod
    def _working_dir(cls, value: str | None) -> str | None:
        return _absolute(value) if value is not None else None

    @model_validator(mode="after")
    def _helpers(self) -> Self:
        names = [c.name for c in (*self.init_containers, *self.sidecars)]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"helper container names must be unique: {', '.join(twice)}")
        volumes = [v.name for v in self.volumes]
        if len(set(volumes)) != len(volumes):
            raise ValueError("volume names must be unique within a role")
        known = {*volumes, "data", "logs"}
        for c in (*self.init_containers, *self.sidecars):
            for m in c.volume_mounts:
                if m.name not in known:
                    raise ValueError(
                        f"container {c.name!r} mounts {m.name!r}, which is not a volume of "
                        f"this role; add it to volumes or use data/logs"
                    )
        return self

    def cluster_only(self) -> list[str]:
        """The fields set here that only a cluster can honour (the local engine refuses
        them), as camelCase names."""
        out = [
            name
            for name, given in (
                ("volumes", self.volumes),
                ("initContainers", self.init_containers),
                ("sidecars", self.sidecars),
            )
            if given
        ]
        out += [f"env.{k}" for k, v in self.env.items() if isinstance(v, CLUSTER_ONLY_ENV)]
        return out

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
    entrypoint: str = DEFAULT_ENTRYPOINT
    """The file in the code to run; it gets the classic flags and TF_CONFIG. Roles that
    give a `command` run that instead (in the code folder), and then the code need not
    hold an entrypoint."""
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
    machine. In a cluster it is a PersistentVolumeClaim only when the job asks for one
    (`claimName`, `storageClassName` or `size`) or the cluster's administrator gives every
    job one (logs only: docs/kubernetes.md, "Storage"); otherwise each pod has its own
    empty folder (an `emptyDir`), gone with the pod."""

    path: str | None = None
    """Local folder (relative to the job file); default: inside the job's own directory."""
    claim_name: str | None = None
    """Cluster: use this existing PersistentVolumeClaim (nothing is created)."""
    storage_class_name: str | None = None
    """Cluster: a new claim `<job>-<data|logs>` of this storage class (e.g. GlusterFS,
    CephFS, NFS)."""
    size: str | None = None
    """Cluster: a new claim `<job>-<data|logs>` of this size (default 10Gi), of the
    cluster's default storage class unless `storageClassName` names one."""
    mount_path: str | None = None
    """Cluster: where the volume is mounted in the containers."""

    @field_validator("size")
    @classmethod
    def _size(cls, value: str | None) -> str | None:
        if value is not None and not _QUANTITY.fullmatch(value):
            raise ValueError(f"{value!r} is not a quantity; write e.g. '10Gi'")
        return value

    @property
    def asks_for_claim(self) -> bool:
        """Cluster: whether the job asks for a claim here (an existing one or a new one)."""
        return any(v is not None for v in (self.claim_name, self.storage_class_name, self.size))


class DataVolumeSpec(VolumeSpec):
    """The training data's folder, and where its contents come from when they already live
    in a store (`source`): staged before any replica starts (docs/architecture.md, "Data
    sources")."""

    source: str | None = None
    """Where the data lives: `s3://bucket/prefix` (every object under the prefix, on any
    S3-compatible store with `endpoint`) or `hdfs://namenode:port/path` (the file, or every
    file below the folder, read over WebHDFS). Local engine: fetched into a content-keyed
    cache before any replica starts (a later job with the same data fetches nothing) and
    shown read-only at TFKUBE_DATA_DIR. Credentials come from the environment
    (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY; HADOOP_USER_NAME for HDFS) or `tfkube run
    --data-credentials FILE`, or, through a server, from the team's secret `credentials`
    names; never from here."""
    endpoint: str | None = None
    """The S3-compatible store's URL, e.g. `http://127.0.0.1:8333` (default: AWS); for
    HDFS the NameNode's HTTP (WebHDFS) address (default: port 9870 of its host)."""
    region: str | None = None
    """The store's region, when it needs one (default us-east-1)."""
    credentials: str | None = None
    """Through a tfkube server: the name of the team's secret that holds the store's
    credentials (a team admin stores it: `POST /api/v1/teams/{team}/secrets`). Only the
    name is in the job; `tfkube run` on this machine ignores it (it takes
    --data-credentials or the environment)."""
    shard: ShardRule | None = None
    """`byWorker`: worker i of n gets only `sorted(files)[i::n]` of the source (staged into
    a folder of its own, its TFKUBE_DATA_DIR); PS replicas get none, the chief and an
    evaluator every file. Without it every replica sees every file."""

    @field_validator("source")
    @classmethod
    def _source(cls, value: str | None) -> str | None:
        if value is not None:
            parse_source(value)
        return value

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        return None if value is None else check_endpoint(value)

    @field_validator("region")
    @classmethod
    def _region(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[a-z0-9-]{1,32}", value):
            raise ValueError(f"{value!r} is not a region; write e.g. 'us-east-1'")
        return value

    @field_validator("credentials")
    @classmethod
    def _credentials(cls, value: str | None) -> str | None:
        if value is not None:
            check_secret_name(value)
        return value

    @model_validator(mode="after")
    def _source_alone(self) -> Self:
        if self.source is None:
            named = (
                ("endpoint", self.endpoint),
                ("region", self.region),
                ("credentials", self.credentials),
                ("shard", self.shard),
            )
            for name, value in named:
                if value is not None:
                    raise ValueError(f"{name} goes with source (s3://bucket/prefix); add it")
            return self
        if self.path is not None or self.asks_for_claim:
            raise ValueError(
                "source is staged into the job's own data folder: remove path, claimName, "
                "storageClassName and size, or remove source"
            )
        if isinstance(self.parsed_source, HdfsSource) and self.region is not None:
            raise ValueError("region is for S3 sources; remove it for hdfs://")
        return self

    @property
    def parsed_source(self) -> DataSource | None:
        """The parsed source (None: no source)."""
        return None if self.source is None else parse_source(self.source)

    @property
    def s3(self) -> S3Source | None:
        """The parsed source when it is S3's (None: no source, or another store)."""
        parsed = self.parsed_source
        return parsed if isinstance(parsed, S3Source) else None


class StorageSpec(_Model):
    data: DataVolumeSpec = DataVolumeSpec()
    """Training data, read by workers (each its own shard). From a store when `source`
    says so. In a cluster: a claim when asked (a dataset's existing claim), else an empty
    folder in each pod."""
    logs: VolumeSpec = VolumeSpec()
    """Logs, checkpoints and TensorBoard summaries. Shared by every replica when it is a
    claim, so a restarted replica resumes from the last checkpoint; in a cluster without
    one each pod keeps its own (a whole-job restart then starts from scratch)."""


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
    """Every role's restart policy, unless the role sets its own
    (`replicas.<role>.restartPolicy`)."""
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
    """A running replica that wrote no log line, while nothing was written in the job's
    log/checkpoint folder, for this long is Stalled (shown in status, an event recorded);
    `stallAction` says what else happens. Unset: no stall detection. On Kubernetes the
    launcher's heartbeat and a readiness probe observe it (docs/kubernetes.md)."""
    straggler_seconds: Annotated[int, Field(gt=0, le=86400)] = 60
    """A training replica (chief or worker) whose own step rate (its `tfkube-steps: N`
    lines) over this many seconds is below half the median of the job's training replicas
    is flagged a straggler (status, an event, the job page): locally by its supervisor, on
    Kubernetes by a tfkube server reading the replicas' kept logs."""
    stall_action: StallAction = StallAction.REPORT
    """Report (the default), Restart (counts against backoffLimit) or Fail."""
    node_lost_seconds: Annotated[int, Field(ge=0, le=3600)] = 30
    """Cluster: how long a replica's pod stays bound to a node that stopped answering
    (taints `node.kubernetes.io/not-ready` / `unreachable`, NoExecute) before it is evicted
    and its Job makes it again elsewhere. Kubernetes' default is 300 s, during which the
    whole job waits on the dead machine; a replica's own toleration of either taint wins.
    Too short and a node's brief hiccup restarts its replicas (they resume from the last
    checkpoint)."""


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


GANG_SCHEDULERS = {
    GangScheduler.VOLCANO: "volcano",
    GangScheduler.SCHEDULER_PLUGINS: "scheduler-plugins-scheduler",
}
"""The scheduler a gang's pods go to unless `schedulerName` names another."""


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
    min_available: Annotated[int, Field(ge=1)] | None = None
    """Volcano/SchedulerPlugins: how many pods must be placeable together before any
    starts (the PodGroup's minMember); default every chief, PS and worker."""

    @property
    def scheduler(self) -> str | None:
        """The scheduler the pods go to: `scheduler_name`, else the gang's own (`volcano`,
        `scheduler-plugins-scheduler`), else None (the cluster's default)."""
        return self.scheduler_name or GANG_SCHEDULERS.get(self.gang)

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


class PodSecurity(StrEnum):
    """Cluster: the Kubernetes Pod Security level every pod of the job meets, as rendered
    (and as a team namespace enforces it: `pod-security.kubernetes.io/enforce`)."""

    RESTRICTED = "restricted"
    """The default: every container runs as the non-root user 65532 (group and fsGroup
    65532, HOME /tmp), without privilege escalation or capabilities, under the container
    runtime's default seccomp profile."""
    BASELINE = "baseline"
    """Containers run as their image's own user (root when the image says so) with the
    runtime's default capabilities; host access (host namespaces, hostPath, privileged)
    stays refused. Only where the namespace allows it (a team a site admin allowed
    baseline; docs/security.md)."""


class JobSpec(_Model):
    replicas: Replicas
    code: Annotated[CodeSpec | None, Field(validate_default=True)] = None
    """The training code every replica fetches. Required unless every role gives its own
    `command` (e.g. code baked into its image)."""
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
    """Cluster: ResourceQuota and LimitRange of the job's namespace (through a tfkube
    server: site admins only; a team's quota is the team's setting)."""
    pod_security: PodSecurity = PodSecurity.RESTRICTED
    """Cluster: `restricted` (the default) or `baseline`: how the pods are secured (see
    the levels); a namespace enforcing `restricted` refuses `baseline` pods."""

    @field_validator("code")
    @classmethod
    def _code_or_commands(cls, code: CodeSpec | None, info: ValidationInfo) -> CodeSpec | None:
        replicas = info.data.get("replicas")
        if code is None and isinstance(replicas, Replicas):
            without = [r.value for r in Role if (s := replicas.get(r)) and s.command is None]
            if without:
                raise ValueError(
                    "required unless every role gives its own command: add code (source, "
                    f"entrypoint), or a command to {', '.join(without)}"
                )
        return code

    @model_validator(mode="after")
    def _gang_size(self) -> Self:
        scheduling = self.scheduling
        if scheduling is not None and scheduling.min_available is not None:
            members = sum(self.replicas.count(r) for r in (Role.CHIEF, Role.PS, Role.WORKER))
            if scheduling.min_available > members:
                raise ValueError(
                    f"scheduling.minAvailable {scheduling.min_available} is more than the "
                    f"job's {members} chief, PS and worker replicas; lower it"
                )
        return self

    def restart_policy(self, role: Role | str) -> RestartPolicy:
        """The role's own restart policy, else the job's."""
        spec = self.replicas.get(Role(role))
        own = spec.restart_policy if spec is not None else None
        return own or self.run_policy.restart_policy

    def runs_entrypoint(self) -> bool:
        """Whether some role runs the code's entrypoint (has no command of its own)."""
        return any(
            (s := self.replicas.get(r)) is not None and s.replicas > 0 and s.command is None
            for r in Role
        )

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

    def resizable(self) -> bool:
        """Whether the number of workers may change while the job runs: asynchronous PS
        training (a PS, no chief; `tfkube.planner.scale_problems` says why not, naming the
        field)."""
        replicas = self.spec.replicas
        return replicas.count(Role.PS) > 0 and replicas.count(Role.CHIEF) == 0

    def gang_size(self) -> int:
        """How many pods a gang scheduler must place together (its PodGroup's minMember):
        `minAvailable`, else every chief, PS and worker (the evaluator is not part of the
        TF cluster)."""
        scheduling = self.spec.scheduling
        if scheduling is not None and scheduling.min_available:
            return scheduling.min_available
        return sum(self.spec.replicas.count(r) for r in (Role.CHIEF, Role.PS, Role.WORKER))
