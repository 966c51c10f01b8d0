"""What a job submitted for a team may make the cluster do: the admission policy. Pure.

    admission_refusals(job, submitter, allowances) -> [FieldError]   (empty: admitted)

A job names objects of its namespace that Kubernetes hands to its pods without asking who
wrote the job (the operator creates the pods): Secrets (env `secretKeyRef`, secret
volumes, helper containers' env, image-pull secrets), ConfigMaps, claims and service
accounts; it may also ask for the namespace's quota objects (`spec.tenant`), a TensorBoard
image whose pages the team's viewers open, and a Pod Security level. Engine-neutral and
pure, beside the engines' protocol because it is a tenant's boundary (the server may not
import `tfkube.kube`; the local engine refuses cluster-only fields on its own). So a tfkube server
decides here, before anything is created (`tfkube.server.jobs.allowances`), with:

    what the job names                               member        team admin  site admin
    a platform credential (*)                        refused       refused     refused
    a Secret, ConfigMap, claim, service account      if allowed    yes         yes
    spec.tenant (the namespace's quota objects)      refused       refused     yes
    a TensorBoard image other than DEFAULT_IMAGE     if allowed    yes         yes
    spec.podSecurity: baseline                       only where a site admin allowed the team
    spec.scheduling.priorityClassName                only those a site admin allowed    yes
    a scheduler other than the default (schedulerName or the gang's)
                                                     only those a site admin allowed    yes
    a Volcano queue other than `default`             only those a site admin allowed    yes
    a toleration (of a role or of TensorBoard)       only keys a site admin allowed     yes
    pod annotations setting AppArmor/seccomp         refused       refused     refused

(*) `tfkube.kube.names.platform_credential`: a notebook's tokens, a job's code token, a
model server's (a pull-secret copy is one too, except as a pull secret); and a notebook's
home claim.

A priority, a toleration, a scheduler and a Volcano queue reach past the team: a higher
PriorityClass preempts other teams' pods, a toleration lands pods on the nodes a taint
keeps for someone else (a GPU pool, a team's own machines), a scheduler decides placement
and preemption by its own rules, and a Volcano queue (cluster-scoped) is its owners' share
of the cluster (Kueue's LocalQueues are the namespace's own, so a Kueue queue stays free).
So those lists are a site admin's, and bind team admins too; a node selector alone only
narrows where the pods may go, and stays free, and so do the node-lost taints (tolerating
them only delays an eviction: `runPolicy.nodeLostSeconds`).

Allowances are per team (`Allowances`): names, or prefixes written `name-*`. Every refusal
names the field and the fix. Kubernetes enforces the Pod Security level a second time
(the team namespace's `pod-security.kubernetes.io/enforce` label, `tfkube.kube.names`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from tfkube.kube.names import (
    CREDENTIAL_PATTERNS,
    NODE_LOST_TAINTS,
    NOTEBOOK_HOME_PREFIX,
    platform_credential,
    private_claim,
)
from tfkube.spec import (
    DEFAULT_IMAGE,
    Container,
    EnvFromConfigMap,
    EnvFromSecret,
    FieldError,
    GangScheduler,
    PodSecurity,
    ReplicaSpec,
    Role,
    TFJob,
    Toleration,
)


class Submitter(StrEnum):
    """Who submits, as far as admission cares."""

    SITE_ADMIN = "site-admin"
    TEAM_ADMIN = "team-admin"
    MEMBER = "member"


_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
_PREFIX = re.compile(r"([a-z0-9][-a-z0-9.]*)?\*")
_IMAGE = re.compile(r"[^\s*]+\*?|\*")
_TAINT_KEY = re.compile(
    r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
)
_TAINT_PREFIX = re.compile(r"[-A-Za-z0-9_./]*\*")
_NOTEBOOK_PREFIX = "notebook-"
SECURITY_ANNOTATIONS = (
    "container.apparmor.security.beta.kubernetes.io/",
    "seccomp.security.alpha.kubernetes.io/",
    "container.seccomp.security.alpha.kubernetes.io/",
)
"""Pod annotations that set a security profile: Pod Security decides those, not a job."""


def matches(name: str, entries: Sequence[str]) -> bool:
    """Whether `name` is one of `entries` (a name, or a prefix written `prefix*`)."""
    return any(name == e or (e.endswith("*") and name.startswith(e[:-1])) for e in entries)


def _entry(value: str) -> str:
    """A name, or a prefix ending with '*'."""
    if len(value) > 253 or not (_NAME.fullmatch(value) or _PREFIX.fullmatch(value)):
        raise ValueError(
            f"{value!r} is not a name or a prefix: lower-case letters, digits, '-' and '.', "
            "optionally ending with '*' (e.g. 'datasets' or 'datasets-*')"
        )
    return value


def _takes_in(value: str, prefix: str) -> bool:
    """Whether the entry `value` would match some name starting with `prefix`."""
    if value.endswith("*"):
        return prefix.startswith(value[:-1]) or value[:-1].startswith(prefix)
    return value.startswith(prefix)


def _secret_entry(value: str) -> str:
    _entry(value)
    # A pull-secret copy (*-registry) may be allowed: as a pull secret only.
    kind = None if value.endswith("*") else platform_credential(value)
    if kind not in (None, "registry") or _takes_in(value, _NOTEBOOK_PREFIX):
        raise ValueError(f"{value!r} would allow a platform credential; {_NEVER}")
    return value


def _claim_entry(value: str) -> str:
    _entry(value)
    if _takes_in(value, NOTEBOOK_HOME_PREFIX):
        raise ValueError(f"{value!r} would allow notebooks' homes, each its own user's alone")
    return value


def _image_entry(value: str) -> str:
    if len(value) > 512 or not _IMAGE.fullmatch(value):
        raise ValueError(
            f"{value!r} is not an image reference or a prefix ending with '*' "
            "(e.g. 'registry.example/tensorboard:2.21' or 'registry.example/tb:*')"
        )
    return value


def _taint_entry(value: str) -> str:
    """A taint key (`dedicated`, `nvidia.com/gpu`), or a prefix ending with '*' ('*' alone:
    every taint, even a toleration without a key)."""
    if len(value) > 316 or not (_TAINT_KEY.fullmatch(value) or _TAINT_PREFIX.fullmatch(value)):
        raise ValueError(
            f"{value!r} is not a taint key or a prefix: [a DNS prefix/]a name of letters, "
            "digits, '-', '_' and '.', optionally ending with '*' (e.g. 'nvidia.com/gpu' or "
            "'pool-*')"
        )
    return value


_Limit = Field(max_length=200)
Names = Annotated[list[Annotated[str, AfterValidator(_entry)]], _Limit]
SecretNames = Annotated[list[Annotated[str, AfterValidator(_secret_entry)]], _Limit]
ClaimNames = Annotated[list[Annotated[str, AfterValidator(_claim_entry)]], _Limit]
Images = Annotated[list[Annotated[str, AfterValidator(_image_entry)]], _Limit]
TaintKeys = Annotated[list[Annotated[str, AfterValidator(_taint_entry)]], _Limit]


class Allowances(BaseModel):
    """What a team's members' jobs may use beyond their own: names, or prefixes written
    `name-*`. Team admins change the lists; a site admin changes `pod_security`,
    `priority_classes` and `toleration_keys` (they reach past the team)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    secrets: SecretNames = []
    """Secrets of the team's namespace (env secretKeyRef, secret volumes, image-pull
    secrets). Never a platform credential (notebook-*, *-code-token, *-serving)."""
    config_maps: Names = []
    """ConfigMaps of the namespace (env configMapKeyRef, configMap volumes)."""
    claims: ClaimNames = []
    """PersistentVolumeClaims of the namespace (volumes, spec.storage.*.claimName). Never
    a notebook's home (home-notebook-*)."""
    service_accounts: Names = []
    """ServiceAccounts a role may run as (serviceAccountName): their tokens are mounted."""
    tensorboard_images: Images = []
    """TensorBoard images besides the default (`tensorflow/tensorflow:<version>`): its
    pages are opened by the team's viewers, so the image is the team admins' choice."""
    pod_security: PodSecurity = PodSecurity.RESTRICTED
    """The Pod Security level the team's namespace enforces (`restricted`, or `baseline`
    for images that must run as root); only a site admin changes it."""
    priority_classes: Names = []
    """PriorityClasses the team's jobs may name (spec.scheduling.priorityClassName): a
    higher one preempts other teams' pods; only a site admin changes it."""
    toleration_keys: TaintKeys = []
    """Taint keys the team's jobs may tolerate (`nvidia.com/gpu`, `pool-*`; `*` every
    taint): a taint keeps nodes for their owners; only a site admin changes it."""
    schedulers: Names = []
    """Schedulers the team's pods may go to besides the cluster's default
    (spec.scheduling.schedulerName, or the one a gang implies: `volcano`,
    `scheduler-plugins-scheduler`): a scheduler decides where pods land and whom they
    preempt, for every team; only a site admin changes it."""
    volcano_queues: Names = []
    """Volcano queues the team's jobs may name (spec.scheduling.queue with gang Volcano)
    besides `default`: a queue is cluster-wide and holds its owners' share of the
    cluster; only a site admin changes it."""

    @field_validator(
        "secrets",
        "config_maps",
        "claims",
        "service_accounts",
        "tensorboard_images",
        "priority_classes",
        "toleration_keys",
        "schedulers",
        "volcano_queues",
    )
    @classmethod
    def _sorted(cls, values: list[str]) -> list[str]:
        return sorted(set(values))


_NEVER = (
    "Secrets named "
    + ", ".join(p for p in CREDENTIAL_PATTERNS if p != "*-registry")
    + " hold tfkube's own tokens and no job may read them (nor *-registry, the platform's "
    "pull-secret copies, other than as image pull secrets)"
)


def _allow_hint(what: str) -> str:
    return (
        f"remove it, or ask a team admin to allow it for members' jobs ({what} in the "
        "team's allowances: PUT /api/v1/teams/<team>/allowances)"
    )


class _Check:
    """One job's refusals, gathered (every problem at once, as the spec's errors are)."""

    def __init__(self, submitter: Submitter, allowances: Allowances) -> None:
        self.submitter, self.allowed = submitter, allowances
        self.errors: list[FieldError] = []

    @property
    def trusted(self) -> bool:
        """Team and site admins may use any object of the namespace (they could allow it)."""
        return self.submitter is not Submitter.MEMBER

    def tolerations(self, where: str, tolerations: Sequence[Toleration] | None) -> None:
        """What reaches past the team is a site admin's alone."""
        if self.submitter is Submitter.SITE_ADMIN:
            return
        keys = self.allowed.toleration_keys
        for i, toleration in enumerate(tolerations or []):
            key = toleration.key or ""
            if key in NODE_LOST_TAINTS or (matches(key, keys) if key else "*" in keys):
                continue
            what = f"taint {key!r}" if key else "every taint (operator Exists, no key)"
            self.errors.append(
                FieldError(
                    f"{where}.tolerations[{i}]" + (".key" if key else ""),
                    f"tolerates {what}, which keeps nodes for others; remove it, or ask a "
                    "site admin to allow the key for the team (toleration_keys in the team's "
                    "allowances: PUT /api/v1/teams/<team>/allowances)",
                )
            )

    def secret(self, field: str, name: str, pull: bool = False) -> None:
        kind = platform_credential(name)
        if kind is not None and not (pull and kind == "registry"):
            self.errors.append(
                FieldError(
                    field,
                    f"{name!r} is a platform credential (tfkube's {kind} Secret): no job may "
                    f"read it ({_NEVER}); remove the reference",
                )
            )
        elif not self.trusted and not matches(name, self.allowed.secrets):
            self.errors.append(
                FieldError(
                    field,
                    f"Secret {name!r} is not allowed for members' jobs; " + _allow_hint("secrets"),
                )
            )

    def named(self, field: str, kind: str, key: str, name: str) -> None:
        if not self.trusted and not matches(name, getattr(self.allowed, key)):
            self.errors.append(
                FieldError(
                    field, f"{kind} {name!r} is not allowed for members' jobs; " + _allow_hint(key)
                )
            )

    def claim(self, field: str, name: str) -> None:
        if private_claim(name):
            self.errors.append(
                FieldError(
                    field,
                    f"claim {name!r} is a notebook's home, its user's alone; remove it",
                )
            )
        else:
            self.named(field, "claim", "claims", name)


def _env(check: _Check, where: str, env: dict[str, object]) -> None:
    for variable, value in env.items():
        if isinstance(value, EnvFromSecret):
            check.secret(f"{where}.env.{variable}.secretKeyRef.name", value.secret_key_ref.name)
        elif isinstance(value, EnvFromConfigMap):
            check.named(
                f"{where}.env.{variable}.configMapKeyRef.name",
                "ConfigMap",
                "config_maps",
                value.config_map_key_ref.name,
            )


def _roles(job: TFJob) -> Iterator[tuple[str, ReplicaSpec]]:
    for role in Role:
        spec = job.spec.replicas.get(role)
        if spec is not None:
            yield f"spec.replicas.{role.value}", spec


def _role(check: _Check, where: str, spec: ReplicaSpec) -> None:
    _env(check, where, dict(spec.env))
    for i, volume in enumerate(spec.volumes):
        if volume.secret is not None:
            check.secret(f"{where}.volumes[{i}].secret", volume.secret)
        if volume.config_map is not None:
            check.named(
                f"{where}.volumes[{i}].configMap", "ConfigMap", "config_maps", volume.config_map
            )
        if volume.claim_name is not None:
            check.claim(f"{where}.volumes[{i}].claimName", volume.claim_name)
    helpers: list[tuple[str, Container]] = [
        *((f"{where}.initContainers[{i}]", c) for i, c in enumerate(spec.init_containers)),
        *((f"{where}.sidecars[{i}]", c) for i, c in enumerate(spec.sidecars)),
    ]
    for at, container in helpers:
        _env(check, at, dict(container.env))
    if spec.service_account_name:
        check.named(
            f"{where}.serviceAccountName",
            "service account",
            "service_accounts",
            spec.service_account_name,
        )
    check.tolerations(where, spec.tolerations)
    for key in spec.annotations:
        if key.startswith(SECURITY_ANNOTATIONS):
            check.errors.append(
                FieldError(
                    f"{where}.annotations.{key}",
                    "sets a security profile of the pods, which the namespace's Pod Security "
                    "level decides; remove it",
                )
            )


def _priority(check: _Check, job: TFJob) -> None:
    scheduling = job.spec.scheduling
    name = scheduling.priority_class_name if scheduling is not None else None
    if name is None or check.submitter is Submitter.SITE_ADMIN:
        return
    if not matches(name, check.allowed.priority_classes):
        check.errors.append(
            FieldError(
                "spec.scheduling.priorityClassName",
                f"PriorityClass {name!r} would let the team's pods preempt other teams'; "
                "remove it, or ask a site admin to allow it for the team (priority_classes in "
                "the team's allowances: PUT /api/v1/teams/<team>/allowances)",
            )
        )


DEFAULT_SCHEDULER = "default-scheduler"
"""The cluster's own scheduler's name: every pod may go to it."""
DEFAULT_VOLCANO_QUEUE = "default"
"""The queue Volcano gives a PodGroup that names none: every team may use it."""


def _scheduling(check: _Check, job: TFJob) -> None:
    """A scheduler and a Volcano queue reach past the team: a site admin's lists."""
    scheduling = job.spec.scheduling
    if scheduling is None or check.submitter is Submitter.SITE_ADMIN:
        return
    scheduler = scheduling.scheduler
    if scheduler not in (None, DEFAULT_SCHEDULER) and not matches(
        scheduler, check.allowed.schedulers
    ):
        field, why = "spec.scheduling.schedulerName", ""
        if not scheduling.scheduler_name:
            field, why = "spec.scheduling.gang", f" (gang {scheduling.gang.value} uses it)"
        check.errors.append(
            FieldError(
                field,
                f"scheduler {scheduler!r}{why} decides where every team's pods land and whom "
                "they preempt; remove it, or ask a site admin to allow it for the team "
                "(schedulers in the team's allowances: PUT /api/v1/teams/<team>/allowances)",
            )
        )
    queue = scheduling.queue
    if (
        scheduling.gang is GangScheduler.VOLCANO
        and queue not in (None, DEFAULT_VOLCANO_QUEUE)
        and not matches(queue, check.allowed.volcano_queues)
    ):
        check.errors.append(
            FieldError(
                "spec.scheduling.queue",
                f"Volcano queue {queue!r} is cluster-wide and holds its owners' share of the "
                f"cluster; remove it (the {DEFAULT_VOLCANO_QUEUE!r} queue), or ask a site "
                "admin to allow it for the team (volcano_queues in the team's allowances: "
                "PUT /api/v1/teams/<team>/allowances)",
            )
        )


def _tensorboard(check: _Check, job: TFJob) -> None:
    board = job.spec.tensorboard
    if board is not None and board.enabled:
        check.tolerations("spec.tensorboard", board.tolerations)
    if board is None or not board.enabled or check.trusted:
        return
    image = board.image or job.spec.image
    if image == DEFAULT_IMAGE or matches(image, check.allowed.tensorboard_images):
        return
    own = "" if board.image else " (the job's image: TensorBoard runs spec.image by default)"
    check.errors.append(
        FieldError(
            "spec.tensorboard.image",
            f"TensorBoard would run {image!r}{own}, whose pages the team's viewers open; set "
            f"spec.tensorboard.image: {DEFAULT_IMAGE}, or " + _allow_hint("tensorboard_images"),
        )
    )


def admission_refusals(
    job: TFJob, submitter: Submitter, allowances: Allowances
) -> list[FieldError]:
    """Why `job` may not run as `submitter` submitted it, given the team's `allowances`
    (the table in the module docstring); [] when it may."""
    check = _Check(submitter, allowances)
    for i, name in enumerate(job.spec.image_pull_secrets or []):
        check.secret(f"spec.imagePullSecrets[{i}]", name, pull=True)
    for which in ("data", "logs"):
        volume = getattr(job.spec.storage, which)
        if volume.claim_name:
            check.claim(f"spec.storage.{which}.claimName", volume.claim_name)
    for where, spec in _roles(job):
        _role(check, where, spec)
    if job.spec.tenant is not None and submitter is not Submitter.SITE_ADMIN:
        check.errors.append(
            FieldError(
                "spec.tenant",
                "only a site admin may set the namespace's quota objects; remove it (the "
                "team's quota is a site admin's setting: PATCH /api/v1/teams/<team>)",
            )
        )
    _priority(check, job)
    _scheduling(check, job)
    _tensorboard(check, job)
    if job.spec.pod_security is PodSecurity.BASELINE and (
        allowances.pod_security is PodSecurity.RESTRICTED
    ):
        check.errors.append(
            FieldError(
                "spec.podSecurity",
                "the team's namespace enforces Pod Security restricted, which refuses "
                "baseline pods; remove podSecurity (the pods then run as a non-root user), "
                "or ask a site admin to allow baseline for the team",
            )
        )
    return check.errors
