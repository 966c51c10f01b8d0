"""A TFJob as Kubernetes objects (plain dicts). Pure: no I/O, deterministic order.

    TFJob + RenderOptions
      -> [Namespace]                     include_namespace only
         [ResourceQuota, LimitRange]     spec.tenant: the namespace's, shared by its jobs
         [Secret <job>-registry]         copy of the platform's image-pull secret
         ConfigMap <job>-launcher        the launcher zipapp (binaryData)
         [ConfigMap <job>-code]          a small local code folder, packed
         [PVC <job>-data, <job>-logs]    only when asked for (`_storage`): else an
                                         emptyDir per pod
         Service per role Job            headless, named as its Job, selecting its
                                         pods: DNS names only, no cluster IP (one
                                         Service <job> with `one_service`)
         [PodGroup <job>]                Volcano / scheduler-plugins gang
         Job <job>-<role> per role       Indexed: hostnames <job>-<role>-<i>, subdomain
                                         its Service; a role of more than
                                         max_pods_per_job (S) replicas is ceil(n/S)
                                         Jobs, <job>-<role>-s<k> for k >= 1
         [Deployment, Service <job>-tensorboard]

Who retries what (see docs/kubernetes.md):
- Kubernetes retries a failed replica, per index, inside its role's Job: `backoffLimit`
  is runPolicy.backoffLimit (the job's whole budget, so it can only be an upper bound per
  role) and `podFailurePolicy` encodes runPolicy.restartPolicy: Never fails the Job on any
  non-zero exit, ExitCode on 1-127 except the launcher's retryable 75, OnFailure never;
  a disruption (preemption, eviction, node drain) is ignored, i.e. retried uncounted. So
  a crash-looping role leaves at most backoffLimit+1 dead pods, operator or not. A node
  that stops answering evicts its replicas after runPolicy.nodeLostSeconds
  (`node_lost_tolerations`), not Kubernetes' 300 s.
- The operator (`managed=True`) decides what concerns the job as a whole with the shared
  planner: success policy, ending PS/TensorBoard, restarts counted over all roles, the
  job-wide deadline and TTL. A PS failure must restart the whole job (workers resume from
  the checkpoint), so a managed PS Job has backoffLimit 0 and fails on its first failure
  (a disruption by a rule of its own, so the operator can tell a drain's eviction from a
  crash once the pod is gone) and the operator re-creates every role's Job. Managed Jobs also get no
  `ttlSecondsAfterFinished`: Kubernetes deleting a finished Job behind the operator's back
  would look like a missing Job to re-create; the TFJob's TTL deletes everything.
- Rendered for plain `kubectl apply` (`managed=False`) Kubernetes is all there is: the PS
  Job retries like the others and finished Jobs carry the TTL.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tfkube import contract
from tfkube.kube.names import (
    CODE_TOKEN_KEY,
    DATA_TOKEN_KEY,
    JOB_NAME_KEY,
    LABEL_COMPONENT,
    LABEL_CREDENTIAL,
    LABEL_INDEX_OFFSET,
    LABEL_JOB,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    NODE_LOST_TAINTS,
    REPLICA_CONTAINER,
    SHIP_TOKEN_KEY,
    SIZE_WORKERS_KEY,
    TENANT_OBJECTS,
    TENSORBOARD_PORT_NAME,
    code_configmap_name,
    code_token_secret_name,
    job_labels,
    launcher_configmap_name,
    registry_secret_name,
    replica_pod_labels,
    role_job_name,
    size_configmap_name,
    tensorboard_name,
)
from tfkube.render._launcher import launcher_zipapp
from tfkube.render._security import (
    HOME_DIR,
    pod_security_context,
    secure_container,
)
from tfkube.render._storage import JobVolumes, StorageDefaults, job_volumes
from tfkube.spec import (
    CLUSTER_ONLY_ENV,
    GANG_SCHEDULERS,
    EnvFromConfigMap,
    EnvFromField,
    EnvFromSecret,
    ExtraVolume,
    FieldError,
    GangScheduler,
    PodSecurity,
    PullPolicy,
    ReplicaSpec,
    Resources,
    RestartPolicy,
    Role,
    SpecError,
    TaintEffect,
    TensorBoardSpec,
    TFJob,
    Toleration,
    TolerationOperator,
    VolumeSpec,
    replica_environment,
)
from tfkube.tfcluster import service_address_rule, shard_counts

LAUNCHER_DIR = "/opt/tfkube"
LAUNCHER_FILE = "launcher.pyz"
LAUNCHER_COMMAND = ("python3", f"{LAUNCHER_DIR}/{LAUNCHER_FILE}")
"""Every replica's command: the same launcher as locally, from the mounted ConfigMap."""
CODE_DIR = "/opt/tfkube-code"
CODE_FILE = "code.tar.gz"
WORK_DIR = "/tfkube/work"
"""An emptyDir: the launcher unpacks the code here (the image's own files stay untouched)."""
DEFAULT_MOUNTS = {"data": "/tfkube/data", "logs": "/tfkube/logs"}
CONTAINER = REPLICA_CONTAINER
HEARTBEAT_PATH = "/tmp/tfkube-heartbeat"
"""With runPolicy.stallSeconds: the launcher's heartbeat (`tfkube.contract.HEARTBEAT_FILE`),
in the container's own /tmp, which stock images have writable."""
MAX_PROBE_PERIOD_SECONDS = 10
PROBE_TIMEOUT_SECONDS = 10
"""Generous: a probe that times out on a loaded node counts as a failure, i.e. a stall."""
PORT_NAME = "tf"
TENSORBOARD_PORT = 6006
GPU_RESOURCE = "nvidia.com/gpu"
MAX_CODE_CONFIGMAP_BYTES = 768 * 1024
"""A ConfigMap holds at most 1 MiB; leave room for the rest of the object."""
VENV_DIR = "/tfkube/venvs"
"""Where the launcher installs the code's requirements.txt (see RenderOptions.venv_cache)."""
TERMINATION_LOG = "/dev/termination-log"
"""The launcher's failure reason lands in the pod's status (containerStatuses[].state
.terminated.message), where the operator reads it."""
USER_ERROR_EXIT_CODES = tuple(c for c in range(1, 128) if c not in contract.RETRYABLE_EXITS)
"""Under restartPolicy ExitCode these fail the job at once (the planner's rule too)."""
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
COSCHEDULING_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
GRACE_MARGIN_SECONDS = 5
"""Pod grace beyond the launcher's own: it forwards SIGTERM, waits, then SIGKILLs."""
DOCKER_HUB = "docker.io"

Object = dict[str, Any]

DEFAULT_MAX_PODS_PER_JOB = 500
"""The Job controller's own cap of pod creations per sync of one Job
(`MaxPodCreateDeletePerSync`): a larger Job needs more than one sync, one after another."""


@dataclass(frozen=True)
class RenderOptions:
    """How to render a job, beyond its spec: the things only the caller knows."""

    namespace: str
    """The namespace every object goes to (the job's own `metadata.namespace` is ignored)."""
    registry_secret: Mapping[str, Any] | None = None
    """The platform's image-pull Secret as read by the caller (a plain mapping, e.g.
    `ApiClient().sanitize_for_serialization(v1_secret)`, with base64 `data`). It is copied
    into the job's namespace as `<job>-registry`, so nobody creates it by hand there, and the
    registries it has credentials for make images private (pulled `Always`)."""
    managed: bool = False
    """True when the tfkube operator owns the job (see the module docstring): PS Jobs fail
    on their first failure so the operator restarts the whole job, and no Job TTL."""
    launcher_zipapp: bytes | None = None
    """The launcher zipapp; None builds it from the installed package (once, cached)."""
    code_archive: bytes | None = None
    """A local code folder packed as .tar.gz, shipped in the ConfigMap `<job>-code` (at most
    768 KiB). Needed when `spec.code.source` is not a URL: a cluster cannot see a folder."""
    include_namespace: bool = False
    """Also emit the Namespace (first), for `kubectl apply` into a new tenant namespace."""
    pod_annotations: Mapping[str, str] = field(default_factory=dict)
    """Extra annotations on every replica pod (the spec's per-role ones win)."""
    venv_cache_host_path: str | None = None
    """A node folder for the environments the launcher builds from a code's
    requirements.txt: the pods of a namespace on one node then share them (hostPath
    `<this>/<namespace>`). None keeps one per pod (an emptyDir). A hostPath volume breaks
    Pod Security's baseline and restricted levels alike: only for a namespace that
    enforces neither (`privileged`), never used by the operator or the tfkube server."""
    code_token_secret: str | None = None
    """A Secret (key `token`) holding the bearer token replicas send when they fetch an
    http(s) code URL: the tfkube server's job-scoped claim. It reaches the launcher as
    TFKUBE_CODE_TOKEN from the Secret, so it is never in the pod spec itself."""
    storage: StorageDefaults | None = None
    """The cluster administrator's logs storage for jobs that name none (the operator's
    settings); None: such a job's logs stay in its pods (`tfkube.render._storage`)."""
    ship_url: str | None = None
    """Where the replicas ship what the tfkube server keeps of them (TFKUBE_SHIP_URL); their
    token is the key `ship` of the job's Secret `code_token_secret_name` (never in the pod
    spec). None: nothing shipped (the server reads a shared claim, or there is no server)."""
    data_url: str | None = None
    """Where the replicas other than PS fetch their data into their own data folder (an
    emptyDir) before they start (TFKUBE_DATA_URL): the tfkube server's data door for a job
    with an uploaded data set or a data source the server staged. Their token is the key
    `data` of the job's Secret `code_token_secret_name`. None: a job with a data source is
    refused (only a server stages one)."""
    data_cache: str | None = None
    """The node data cache's address (the operator's settings: `tfkube install --server`):
    replicas with a data_url also get TFKUBE_DATA_CACHE_URL, the same path at the cache,
    which they ask first. None: they ask the server only."""
    max_pods_per_job: int = DEFAULT_MAX_PODS_PER_JOB
    """S: a role of more than S replicas is split into ceil(n/S) Indexed Jobs (shards) of
    at most S, which Kubernetes' Job controller creates side by side (it creates one Job's
    pods at most 500 per sync, slowly starting each; different Jobs are synced at once:
    docs/benchmarks.md). Shard k holds replicas k*S..k*S+S-1 (`tfkube.tfcluster.shard_of`);
    a job whose every role fits one Job renders exactly as without shards."""
    one_service: bool = False
    """Render the one headless Service every job had before 2026-12-04 (`<job>`, selecting
    all its replicas; addresses `<job>-<role>-<i>.<job>`) instead of one per Indexed Job
    (`<job>-<role>-<i>.<job>-<role>`): the operator renders a job made that way so for the
    rest of its life (`tfkube.kube.observe.layout`). One Service for every pod costs the
    scheduler's default topology spread the square of the replicas (docs/benchmarks.md,
    runs Q6)."""


def _meta(name: str, namespace: str, labels: Mapping[str, str], user: Mapping[str, str]) -> Object:
    """Object metadata; the job's own labels come first so ours always win."""
    return {"name": name, "namespace": namespace, "labels": {**user, **labels}}


def _registry_hosts(secret: Mapping[str, Any]) -> set[str] | None:
    """Registries the secret has credentials for; None when it cannot be read (then every
    image counts as private: the safe side)."""
    data = secret.get("data") or {}
    string_data = secret.get("stringData") or {}
    for key in (".dockerconfigjson", ".dockercfg"):
        try:
            if key in string_data:
                text = str(string_data[key])
            elif key in data:
                text = base64.b64decode(str(data[key]), validate=True).decode()
            else:
                continue
            config = json.loads(text)
        except (binascii.Error, UnicodeDecodeError, json.JSONDecodeError):
            return None
        auths = config.get("auths", config) if isinstance(config, dict) else None
        if not isinstance(auths, dict):
            return None
        return {_normal_host(str(h)) for h in auths}
    return None


def _normal_host(server: str) -> str:
    host = server.removeprefix("https://").removeprefix("http://").split("/")[0]
    return DOCKER_HUB if host in {"index.docker.io", "registry-1.docker.io"} else host


def image_registry(image: str) -> str:
    """The registry host of an image reference (`docker.io` when it names none)."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return _normal_host(first)
    return DOCKER_HUB


@dataclass(frozen=True)
class _Pull:
    secrets: tuple[str, ...]
    private_hosts: set[str] | None
    """None: every image is private."""
    default_policy: str

    def policy(self, image: str) -> str:
        private = self.private_hosts is None or image_registry(image) in self.private_hosts
        return PullPolicy.ALWAYS.value if private else self.default_policy


def _pull(job: TFJob, options: RenderOptions) -> _Pull:
    secrets: list[str] = []
    hosts: set[str] | None = set()
    if options.registry_secret is not None:
        secrets.append(registry_secret_name(job.name))
        hosts = _registry_hosts(options.registry_secret)
    if job.spec.image_pull_secrets:
        secrets += job.spec.image_pull_secrets
        hosts = None  # secrets we cannot read: treat every image as private
    if not secrets:
        hosts = set()
    default = (job.spec.image_pull_policy or PullPolicy.IF_NOT_PRESENT).value
    return _Pull(tuple(dict.fromkeys(secrets)), hosts, default)


def _resources(resources: Resources) -> Object:
    """Requests equal limits (Guaranteed QoS: no noisy neighbour takes a tenant's CPU or
    memory); GPUs are a limit only, which Kubernetes copies to the request."""
    amounts = {k: v for k, v in (("cpu", resources.cpu), ("memory", resources.memory)) if v}
    out: Object = {}
    if amounts:
        out["requests"] = dict(amounts)
    limits = dict(amounts)
    if resources.gpu:
        limits[GPU_RESOURCE] = str(resources.gpu)
    if limits:
        out["limits"] = limits
    return out


def _mount_path(volume: VolumeSpec, which: str) -> str:
    return volume.mount_path or DEFAULT_MOUNTS[which]


DISRUPTED: Object = {"type": "DisruptionTarget", "status": "True"}
"""A pod ended by a disruption (preempted, evicted, its node lost): Kubernetes' condition."""


def _pod_failure_policy(job: TFJob, role: Role, managed: bool) -> Object:
    if managed and role is Role.PS:
        # Any PS loss, disruptions included, is the operator's whole-job restart. A
        # disruption fails the Job by a rule of its own, so the Job's Failed condition
        # names it ("Pod <ns>/<pod> has condition DisruptionTarget matching FailJob rule at
        # index 0") after the evicted pod is gone: a drain is then not counted as a
        # restart (`tfkube.kube.observe`: disruptions).
        return {
            "rules": [
                {"action": "FailJob", "onPodConditions": [DISRUPTED]},
                {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}},
            ]
        }
    rules: list[Object] = [{"action": "Ignore", "onPodConditions": [DISRUPTED]}]
    policy = job.spec.restart_policy(role)
    if policy is RestartPolicy.NEVER:
        rules.append({"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}})
    elif policy is RestartPolicy.EXIT_CODE:
        rules.append(
            {
                "action": "FailJob",
                "onExitCodes": {"operator": "In", "values": list(USER_ERROR_EXIT_CODES)},
            }
        )
    return {"rules": rules}


def backoff_limit(job: TFJob, role: Role, managed: bool) -> int:
    """Kubernetes' retry budget of one role's Job (see the module docstring)."""
    if job.spec.restart_policy(role) is RestartPolicy.NEVER:
        return 0
    if managed and role is Role.PS:
        return 0
    return job.spec.run_policy.backoff_limit


@dataclass(frozen=True)
class _Context:
    job: TFJob
    options: RenderOptions
    pull: _Pull
    code_url: str | None
    """None: the job has no code (every role runs its own command)."""
    code_sha256: str | None
    volumes: JobVolumes
    logs_claim: str | None
    """None: the logs are an emptyDir in each pod."""
    logs_sub_path: str | None
    scheduler_name: str | None
    shard_size: int | None
    """`shard_size(job, options)`: None when every role is one Job."""

    @property
    def ns(self) -> str:
        return self.options.namespace

    @property
    def user_labels(self) -> dict[str, str]:
        return dict(self.job.metadata.labels)


def _code(job: TFJob, options: RenderOptions) -> tuple[str | None, str | None]:
    code = job.spec.code
    if code is None:
        return None, None
    if code.is_url:
        return code.source, code.sha256
    if options.code_archive is None:
        raise SpecError(
            [
                FieldError(
                    "spec.code.source",
                    f"{code.source!r} is a local folder, which pods in a cluster cannot "
                    "read; give an http(s) URL of a .tar.gz (with spec.code.sha256), or "
                    f"pack a folder of at most {MAX_CODE_CONFIGMAP_BYTES // 1024} KiB into "
                    "a ConfigMap (`tfkube render --pack-code`)",
                )
            ],
            f"job {job.name!r} (for a cluster)",
        )
    if len(options.code_archive) > MAX_CODE_CONFIGMAP_BYTES:
        raise SpecError(
            [
                FieldError(
                    "spec.code.source",
                    f"the packed code is {len(options.code_archive) // 1024} KiB, more than "
                    f"a ConfigMap's {MAX_CODE_CONFIGMAP_BYTES // 1024} KiB; host it as a "
                    ".tar.gz at an http(s) URL and give its sha256",
                )
            ],
            f"job {job.name!r} (for a cluster)",
        )
    return f"file://{CODE_DIR}/{CODE_FILE}", hashlib.sha256(options.code_archive).hexdigest()


def _context(job: TFJob, options: RenderOptions) -> _Context:
    code_url, code_sha = _code(job, options)
    volumes = job_volumes(job, options.storage)
    scheduling = job.spec.scheduling
    scheduler = scheduling.scheduler if scheduling is not None else None
    return _Context(
        job=job,
        options=options,
        pull=_pull(job, options),
        code_url=code_url,
        code_sha256=code_sha,
        volumes=volumes,
        logs_claim=volumes.logs.claim,
        # An existing logs claim is shared by many jobs: each gets its own folder in it.
        logs_sub_path=volumes.logs.sub_path,
        scheduler_name=scheduler,
        shard_size=shard_size(job, options),
    )


def _namespace(ctx: _Context) -> Object:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": ctx.ns, "labels": {LABEL_MANAGED_BY: MANAGED_BY}},
    }


def _tenant(ctx: _Context) -> list[Object]:
    tenant = ctx.job.spec.tenant
    if tenant is None:
        return []
    # Not the job's labels: these belong to the namespace and outlive any one job.
    labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_COMPONENT: "tenant"}
    meta = {"name": TENANT_OBJECTS, "namespace": ctx.ns, "labels": labels}
    out: list[Object] = []
    if tenant.quota:
        out.append(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": dict(meta),
                "spec": {"hard": dict(sorted(tenant.quota.items()))},
            }
        )
    lr = tenant.limit_range
    if lr is not None:
        limit: Object = {"type": "Container"}
        for key, values in (
            ("default", lr.default),
            ("defaultRequest", lr.default_request),
            ("max", lr.max),
            ("min", lr.min),
        ):
            if values:
                limit[key] = dict(sorted(values.items()))
        out.append(
            {
                "apiVersion": "v1",
                "kind": "LimitRange",
                "metadata": dict(meta),
                "spec": {"limits": [limit]},
            }
        )
    return out


def _registry_secret(ctx: _Context) -> list[Object]:
    source = ctx.options.registry_secret
    if source is None:
        return []
    secret: Object = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(
            registry_secret_name(ctx.job.name),
            ctx.ns,
            {**job_labels(ctx.job.name), LABEL_COMPONENT: "registry", LABEL_CREDENTIAL: "registry"},
            ctx.user_labels,
        ),
        "type": source.get("type") or "kubernetes.io/dockerconfigjson",
    }
    for key in ("data", "stringData"):
        if source.get(key):
            secret[key] = dict(sorted(source[key].items()))
    return [secret]


def _configmaps(ctx: _Context) -> list[Object]:
    zipapp = ctx.options.launcher_zipapp
    if zipapp is None:
        zipapp = launcher_zipapp()
    name = ctx.job.name
    out: list[Object] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta(
                launcher_configmap_name(name),
                ctx.ns,
                {**job_labels(name), LABEL_COMPONENT: "launcher"},
                ctx.user_labels,
            ),
            "binaryData": {LAUNCHER_FILE: base64.b64encode(zipapp).decode()},
        }
    ]
    code = ctx.job.spec.code
    if ctx.options.code_archive is not None and code is not None and not code.is_url:
        out.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": _meta(
                    code_configmap_name(name),
                    ctx.ns,
                    {**job_labels(name), LABEL_COMPONENT: "code"},
                    ctx.user_labels,
                ),
                "binaryData": {CODE_FILE: base64.b64encode(ctx.options.code_archive).decode()},
            }
        )
    if ctx.job.resizable():
        out.append(_size_configmap(ctx))
    return out


def _size_configmap(ctx: _Context) -> Object:
    """A resizable job's number of workers (`size_configmap_name`): every replica's
    TFKUBE_NUM_WORKERS comes from it when its pod is made, and the operator updates it
    before it resizes the worker Job (`tfkube scale`), so added workers boot knowing the
    job's size now. A Job's pod template cannot change while the Job runs."""
    job = ctx.job
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(
            size_configmap_name(job.name),
            ctx.ns,
            {**job_labels(job.name), LABEL_COMPONENT: "size"},
            ctx.user_labels,
        ),
        "data": {SIZE_WORKERS_KEY: str(job.spec.replicas.count(Role.WORKER))},
    }


def _claims(ctx: _Context) -> list[Object]:
    """The claims the job asked for (none unless asked: `tfkube.render._storage`)."""
    out: list[Object] = []
    for volume in ctx.volumes.new_claims():
        assert volume.claim is not None
        assert volume.size is not None
        spec: Object = {
            # Every replica (on any node) and TensorBoard share it: GlusterFS, CephFS, NFS.
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": volume.size}},
        }
        if volume.storage_class:
            spec["storageClassName"] = volume.storage_class
        out.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": _meta(
                    volume.claim,
                    ctx.ns,
                    {**job_labels(ctx.job.name), LABEL_COMPONENT: "storage"},
                    ctx.user_labels,
                ),
                "spec": spec,
            }
        )
    return out


def _headless_services(ctx: _Context) -> list[Object]:
    """The pods' subdomains: a Service per role Job, named as the Job and selecting its
    pods by the Job controller's label; or the job's one (`RenderOptions.one_service`)."""
    job = ctx.job
    if ctx.options.one_service:
        selector = {LABEL_JOB: job.name, LABEL_COMPONENT: "replica"}
        return [_headless_service(ctx, job.name, job_labels(job.name), selector)]
    return [
        _headless_service(
            ctx,
            role_job_name(job.name, role.value, shard),
            job_labels(job.name, role.value),
            {JOB_NAME_KEY: role_job_name(job.name, role.value, shard)},
        )
        for role in Role
        for shard in range(len(_shard_counts(ctx, role)))
    ]


def _headless_service(
    ctx: _Context, name: str, labels: Mapping[str, str], selector: Mapping[str, str]
) -> Object:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(name, ctx.ns, {**labels, LABEL_COMPONENT: "replica"}, ctx.user_labels),
        "spec": {
            # DNS records straight to pod IPs: no virtual IP, no iptables rule per replica.
            "clusterIP": "None",
            # TF servers look each other up while starting, before any pod is Ready.
            "publishNotReadyAddresses": True,
            "selector": dict(selector),
            "ports": [
                {
                    "name": PORT_NAME,
                    "port": ctx.job.spec.run_policy.port,
                    "targetPort": ctx.job.spec.run_policy.port,
                    "protocol": "TCP",
                }
            ],
        },
    }


def _pod_group(ctx: _Context) -> list[Object]:
    scheduling = ctx.job.spec.scheduling
    if scheduling is None or scheduling.gang not in GANG_SCHEDULERS:
        return []
    name = ctx.job.name
    meta = _meta(name, ctx.ns, {**job_labels(name), LABEL_COMPONENT: "gang"}, ctx.user_labels)
    spec: Object = {"minMember": ctx.job.gang_size()}
    if scheduling.gang is GangScheduler.VOLCANO:
        if scheduling.queue:
            spec["queue"] = scheduling.queue
        if scheduling.priority_class_name:
            spec["priorityClassName"] = scheduling.priority_class_name
        api = "scheduling.volcano.sh/v1beta1"
    else:
        if scheduling.schedule_timeout_seconds:
            spec["scheduleTimeoutSeconds"] = scheduling.schedule_timeout_seconds
        api = "scheduling.x-k8s.io/v1alpha1"
    return [{"apiVersion": api, "kind": "PodGroup", "metadata": meta, "spec": spec}]


def _volume_source(volume: ExtraVolume) -> Object:
    if volume.claim_name is not None:
        return {
            "persistentVolumeClaim": {"claimName": volume.claim_name, "readOnly": volume.read_only}
        }
    if volume.config_map is not None:
        return {"configMap": {"name": volume.config_map}}
    if volume.secret is not None:
        return {"secret": {"secretName": volume.secret}}
    assert volume.empty_dir is not None
    empty: Object = {}
    if volume.empty_dir.medium:
        empty["medium"] = volume.empty_dir.medium
    if volume.empty_dir.size_limit:
        empty["sizeLimit"] = volume.empty_dir.size_limit
    return {"emptyDir": empty}


def _mount(name: str, path: str, read_only: bool, sub_path: str | None) -> Object:
    out: Object = {"name": name, "mountPath": path}
    if read_only:
        out["readOnly"] = True
    if sub_path:
        out["subPath"] = sub_path
    return out


def _volumes(ctx: _Context, role: Role) -> tuple[list[Object], list[Object]]:
    """(pod volumes, container mounts) of one role. PS never read data: no data mount."""
    storage = ctx.job.spec.storage
    spec = ctx.job.spec.replicas.get(role)
    volumes: list[Object] = [
        {
            "name": "launcher",
            "configMap": {
                "name": launcher_configmap_name(ctx.job.name),
                "defaultMode": 0o444,
            },
        },
        {"name": "work", "emptyDir": {}},
        ctx.volumes.logs.pod_volume(),  # a claim when asked for, else scratch space
        _venv_volume(ctx),
    ]
    logs_mount: Object = {"name": "logs", "mountPath": _mount_path(storage.logs, "logs")}
    if ctx.logs_sub_path:
        logs_mount["subPath"] = ctx.logs_sub_path
    mounts: list[Object] = [
        {"name": "launcher", "mountPath": LAUNCHER_DIR, "readOnly": True},
        {"name": "work", "mountPath": WORK_DIR},
        logs_mount,
        {"name": "venvs", "mountPath": VENV_DIR},
    ]
    if role is not Role.PS:
        volumes.append(ctx.volumes.data.pod_volume())
        mounts.append({"name": "data", "mountPath": _mount_path(storage.data, "data")})
    for extra in spec.volumes if spec is not None else []:
        volumes.append({"name": extra.name, **_volume_source(extra)})
        if extra.mount_path is not None:
            mounts.append(_mount(extra.name, extra.mount_path, extra.read_only, extra.sub_path))
    if ctx.code_url is not None and ctx.code_url.startswith("file://"):
        volumes.append(
            {
                "name": "code",
                "configMap": {"name": code_configmap_name(ctx.job.name), "defaultMode": 0o444},
            }
        )
        mounts.append({"name": "code", "mountPath": CODE_DIR, "readOnly": True})
    return volumes, mounts


def _venv_volume(ctx: _Context) -> Object:
    host = ctx.options.venv_cache_host_path
    if host is None:
        return {"name": "venvs", "emptyDir": {}}
    path = f"{host.rstrip('/')}/{ctx.ns}"  # per namespace: tenants never share one
    return {"name": "venvs", "hostPath": {"path": path, "type": "DirectoryOrCreate"}}


def shard_size(job: TFJob, options: RenderOptions) -> int | None:
    """S when some role of the job needs more than one Indexed Job, else None (every role
    is one Job, named and addressed as without shards)."""
    size = options.max_pods_per_job
    if any(job.spec.replicas.count(role) > size for role in Role):
        return size
    return None


def address_rule(job: TFJob, options: RenderOptions) -> str:
    """The rule every replica of the job is addressed by
    (`tfkube.tfcluster.service_address_rule`), as its pods get it (TFKUBE_ADDRESS)."""
    return service_address_rule(
        job.name, job.spec.run_policy.port, None, shard_size(job, options), options.one_service
    )


def _environment(ctx: _Context, role: Role, offset: int = 0) -> list[Object]:
    job = ctx.job
    rule = address_rule(job, ctx.options)
    env = replica_environment(
        job,
        role,
        rule,  # not 11,000 addresses
        code_url=ctx.code_url,
        code_sha256=ctx.code_sha256,
        data_dir=_mount_path(job.spec.storage.data, "data"),
        log_dir=_mount_path(job.spec.storage.logs, "logs"),
        work_dir=WORK_DIR,
        termination_log=TERMINATION_LOG,
        index=None,  # one template for every index: the launcher reads JOB_COMPLETION_INDEX
        venv_cache=VENV_DIR,
    )
    if job.spec.run_policy.stall_seconds is not None:
        env[contract.HEARTBEAT_FILE] = HEARTBEAT_PATH
    if offset:  # a later shard's Job: its index 0 is replica `offset`
        env[contract.INDEX_OFFSET] = str(offset)
    spec = job.spec.replicas.get(role)
    if job.spec.pod_security is PodSecurity.RESTRICTED and "HOME" not in (spec.env if spec else {}):
        env.setdefault("HOME", HOME_DIR)  # the image has no home for the pod's user
    out: list[Object] = [{"name": k, "value": env[k]} for k in sorted(env)]
    if job.resizable():  # the size the job has when the pod is made (`size_configmap`)
        ref = {"name": size_configmap_name(job.name), "key": SIZE_WORKERS_KEY}
        out = [
            {"name": e["name"], "valueFrom": {"configMapKeyRef": ref}}
            if e["name"] == contract.NUM_WORKERS
            else e
            for e in out
        ]
    references = {k: v for k, v in (spec.env if spec else {}).items() if not isinstance(v, str)}
    out += _env_list({k: v for k, v in references.items() if isinstance(v, CLUSTER_ONLY_ENV)})
    if ctx.options.code_token_secret:
        out.append(
            {
                "name": contract.CODE_TOKEN,
                "valueFrom": {
                    "secretKeyRef": {"name": ctx.options.code_token_secret, "key": CODE_TOKEN_KEY}
                },
            }
        )
    if ctx.options.data_url and role is not Role.PS:  # PS never read data
        secret = code_token_secret_name(job.name)
        out.append({"name": contract.DATA_URL, "value": ctx.options.data_url})
        if ctx.options.data_cache:
            path = urllib.parse.urlsplit(ctx.options.data_url).path
            out.append({"name": contract.DATA_CACHE_URL,
                        "value": ctx.options.data_cache.rstrip("/") + path})  # fmt: skip
        out.append(
            {
                "name": contract.DATA_TOKEN,
                "valueFrom": {"secretKeyRef": {"name": secret, "key": DATA_TOKEN_KEY}},
            }
        )
    if ctx.options.ship_url:
        secret = code_token_secret_name(job.name)
        out.append({"name": contract.SHIP_URL, "value": ctx.options.ship_url})
        out.append(
            {
                "name": contract.SHIP_TOKEN,
                "valueFrom": {"secretKeyRef": {"name": secret, "key": SHIP_TOKEN_KEY}},
            }
        )
    return out


def _value_from(value: EnvFromSecret | EnvFromConfigMap | EnvFromField) -> Object:
    """A variable Kubernetes resolves when the pod starts."""
    if isinstance(value, EnvFromSecret):
        ref = value.secret_key_ref
        return {"secretKeyRef": {"name": ref.name, "key": ref.key, "optional": ref.optional}}
    if isinstance(value, EnvFromConfigMap):
        cm = value.config_map_key_ref
        return {"configMapKeyRef": {"name": cm.name, "key": cm.key, "optional": cm.optional}}
    return {"fieldRef": {"fieldPath": value.field_ref.field_path}}


def _env_list(env: Mapping[str, object]) -> list[Object]:
    """Values and references, by name (a container's `env`)."""
    out: list[Object] = []
    for name in sorted(env):
        value = env[name]
        if isinstance(value, str):
            out.append({"name": name, "value": value})
        elif isinstance(value, CLUSTER_ONLY_ENV):
            out.append({"name": name, "valueFrom": _value_from(value)})
    return out


def _helpers(spec: ReplicaSpec, pull: _Pull, level: PodSecurity) -> list[Object]:
    """The role's init containers, then its sidecars as native sidecars (init containers
    that keep running, `restartPolicy: Always`): Kubernetes starts them before the replica
    and stops them after it, so the pod still ends when the replica does."""
    out: list[Object] = []
    for container, sidecar in [
        *((c, False) for c in spec.init_containers),
        *((c, True) for c in spec.sidecars),
    ]:
        item: Object = {
            "name": container.name,
            "image": container.image,
            "imagePullPolicy": pull.policy(container.image),
        }
        if container.command is not None:
            item["command"] = list(container.command)
        if container.args:
            item["args"] = list(container.args)
        if container.env:
            item["env"] = _env_list(container.env)
        resources = _resources(container.resources)
        if resources:
            item["resources"] = resources
        if container.volume_mounts:
            item["volumeMounts"] = [
                _mount(m.name, m.mount_path, m.read_only, m.sub_path)
                for m in container.volume_mounts
            ]
        if sidecar:
            item["restartPolicy"] = "Always"
        out.append(secure_container(item, level))
    return out


def _placement(spec: ReplicaSpec | TensorBoardSpec | None) -> Object:
    """nodeSelector and tolerations of a replica role or of TensorBoard."""
    out: Object = {}
    if spec is not None and spec.node_selector:
        out["nodeSelector"] = dict(sorted(spec.node_selector.items()))
    if spec is not None and spec.tolerations:
        out["tolerations"] = [
            t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in spec.tolerations
        ]
    return out


def _tolerates(toleration: Toleration, key: str) -> bool:
    """Whether a user's toleration already decides what a NoExecute taint `key` does."""
    if toleration.effect not in (None, TaintEffect.NO_EXECUTE):
        return False
    if toleration.key is None:
        return toleration.operator is TolerationOperator.EXISTS
    return toleration.key == key


def node_lost_tolerations(job: TFJob, spec: ReplicaSpec | None) -> list[Object]:
    """runPolicy.nodeLostSeconds as tolerations of the node-lost taints, except for a key
    the replica's own tolerations already cover: theirs win. Without them Kubernetes adds
    300 s ones, and the whole job waits five minutes on a dead machine."""
    own = spec.tolerations if spec is not None and spec.tolerations else []
    seconds = job.spec.run_policy.node_lost_seconds
    return [
        {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}
        for key in NODE_LOST_TAINTS
        if not any(_tolerates(t, key) for t in own)
    ]


def _pod_scheduling(ctx: _Context, spec: ReplicaSpec | None) -> Object:
    out: Object = _placement(spec)
    lost = node_lost_tolerations(ctx.job, spec)
    if lost:
        out["tolerations"] = [*out.get("tolerations", []), *lost]
    if ctx.scheduler_name:
        out["schedulerName"] = ctx.scheduler_name
    scheduling = ctx.job.spec.scheduling
    if scheduling is not None and scheduling.priority_class_name:
        out["priorityClassName"] = scheduling.priority_class_name
    if ctx.pull.secrets:
        out["imagePullSecrets"] = [{"name": s} for s in ctx.pull.secrets]
    return out


def stall_probe(stall_seconds: int) -> Object:
    """Stall detection in a pod: ready while the launcher's heartbeat is younger than
    stallSeconds. The operator reads the pod's Ready turning False after its container
    started as the replica being stalled (`tfkube.kube.observe.last_progress`); before the
    first success the pod is simply not ready yet. `sh`, `date` and `stat` are in every
    stock image; the Service publishes not-ready addresses, so a stalled replica stays
    reachable."""
    script = (
        f'age=$(( $(date +%s) - $(stat -c %Y {HEARTBEAT_PATH}) )) && [ "$age" -lt {stall_seconds} ]'
        ' || { echo "no progress for ${age:-?}s"; exit 1; }'
    )
    return {
        "exec": {"command": ["sh", "-c", script]},
        "periodSeconds": max(1, min(MAX_PROBE_PERIOD_SECONDS, stall_seconds // 3)),
        "timeoutSeconds": PROBE_TIMEOUT_SECONDS,
        "successThreshold": 1,
        "failureThreshold": 1,
    }


def _shard_counts(ctx: _Context, role: Role) -> list[int]:
    """How many replicas each of the role's Indexed Jobs holds (none for no replica)."""
    count = ctx.job.spec.replicas.count(role)
    if ctx.shard_size is None:
        return [count] if count > 0 else []
    return shard_counts(count, ctx.shard_size)


def _role_jobs(ctx: _Context, role: Role) -> list[Object]:
    """The role's Indexed Job, or its shards' (`RenderOptions.max_pods_per_job`)."""
    return [_role_job(ctx, role, k, n) for k, n in enumerate(_shard_counts(ctx, role))]


def _role_job(ctx: _Context, role: Role, shard: int, count: int) -> Object:
    job = ctx.job
    spec = job.spec.replicas.get(role)
    assert spec is not None
    offset = shard * (ctx.shard_size or 0)
    name = role_job_name(job.name, role.value, shard)
    labels = {**job_labels(job.name, role.value), LABEL_COMPONENT: "replica"}
    scheduling = job.spec.scheduling
    pod_labels = {**ctx.user_labels, **spec.labels, **replica_pod_labels(job.name, role.value)}
    annotations = {**ctx.options.pod_annotations, **spec.annotations}
    if offset:
        labels[LABEL_INDEX_OFFSET] = str(offset)
        annotations[LABEL_INDEX_OFFSET] = str(offset)
    job_meta = _meta(name, ctx.ns, labels, ctx.user_labels)
    suspend = job.spec.run_policy.suspend
    if scheduling is not None:
        if scheduling.gang is GangScheduler.VOLCANO:
            annotations[VOLCANO_GROUP_ANNOTATION] = job.name
        elif scheduling.gang is GangScheduler.SCHEDULER_PLUGINS:
            pod_labels[COSCHEDULING_GROUP_LABEL] = job.name
        elif scheduling.gang is GangScheduler.KUEUE:
            assert scheduling.queue is not None
            job_meta["labels"][contract.KUEUE_QUEUE_LABEL] = scheduling.queue
            suspend = True  # Kueue un-suspends the Job when it admits it
    volumes, mounts = _volumes(ctx, role)
    image = spec.image or job.spec.image
    port = job.spec.run_policy.port
    container: Object = {
        "name": CONTAINER,
        "image": image,
        "imagePullPolicy": ctx.pull.policy(image),
        "command": list(LAUNCHER_COMMAND),
        "env": _environment(ctx, role, offset),
        "ports": [{"name": PORT_NAME, "containerPort": port, "protocol": "TCP"}],
        "resources": _resources(spec.resources),
        "volumeMounts": mounts,
        # A failed replica's last log lines become its termination message, which
        # `tfkube status` shows without a log read (tfkube.kube.observe.failure_message).
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if spec.working_dir:
        container["workingDir"] = spec.working_dir
    if job.spec.run_policy.stall_seconds is not None:
        container["readinessProbe"] = stall_probe(job.spec.run_policy.stall_seconds)
    level = job.spec.pod_security
    container = secure_container(container, level, home=False)  # HOME: _environment
    template_meta: Object = {"labels": dict(sorted(pod_labels.items()))}
    if annotations:
        template_meta["annotations"] = dict(sorted(annotations.items()))
    grace = int(job.spec.run_policy.termination_grace_seconds + 0.999) + GRACE_MARGIN_SECONDS
    pod_spec: Object = {
        "restartPolicy": "Never",  # retries are the Job's (podFailurePolicy needs Never)
        # With its Service's name as subdomain, <job>-<role>-<i>.<job>-<role> resolves.
        "subdomain": job.name if ctx.options.one_service else name,
        # One env var per Service in the namespace would only add noise (and size).
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": grace,
        **_pod_scheduling(ctx, spec),
        "securityContext": pod_security_context(level),
        "containers": [container],
        "volumes": volumes,
    }
    helpers = _helpers(spec, ctx.pull, level)
    if helpers:
        pod_spec["initContainers"] = helpers
    if spec.service_account_name:
        pod_spec["serviceAccountName"] = spec.service_account_name
    else:  # no API credentials in a replica unless its role names a service account
        pod_spec["automountServiceAccountToken"] = False
    job_spec: Object = {
        "completionMode": "Indexed",
        "completions": count,
        "parallelism": count,
        "backoffLimit": backoff_limit(job, role, ctx.options.managed),
        "podFailurePolicy": _pod_failure_policy(job, role, ctx.options.managed),
    }
    if job.spec.run_policy.active_deadline_seconds is not None:
        job_spec["activeDeadlineSeconds"] = job.spec.run_policy.active_deadline_seconds
    ttl = job.spec.run_policy.ttl_seconds_after_finished
    if ttl is not None and not ctx.options.managed:
        job_spec["ttlSecondsAfterFinished"] = ttl
    if suspend:
        job_spec["suspend"] = True
    job_spec["template"] = {"metadata": template_meta, "spec": pod_spec}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": job_meta, "spec": job_spec}


def _tensorboard(ctx: _Context) -> list[Object]:
    tb = ctx.job.spec.tensorboard
    if tb is None or not tb.enabled:
        return []
    name = tensorboard_name(ctx.job.name)
    labels = {**job_labels(ctx.job.name), LABEL_COMPONENT: "tensorboard"}
    selector = {LABEL_JOB: ctx.job.name, LABEL_COMPONENT: "tensorboard"}
    image = tb.image or ctx.job.spec.image
    logs = _mount_path(ctx.job.spec.storage.logs, "logs")
    mount: Object = {"name": "logs", "mountPath": logs, "readOnly": True}
    if ctx.logs_sub_path:
        mount["subPath"] = ctx.logs_sub_path
    level = ctx.job.spec.pod_security
    pod_spec: Object = {
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        **_placement(tb),
        "securityContext": pod_security_context(level),
        "containers": [
            {
                "name": "tensorboard",
                "image": image,
                "imagePullPolicy": ctx.pull.policy(image),
                "command": [
                    "tensorboard",
                    f"--logdir={logs}",
                    "--host=0.0.0.0",
                    f"--port={TENSORBOARD_PORT}",
                ],
                "ports": [
                    {
                        "name": TENSORBOARD_PORT_NAME,
                        "containerPort": TENSORBOARD_PORT,
                        "protocol": "TCP",
                    }
                ],
                # TensorBoard answers slowly while it loads event files beside busy
                # training: Kubernetes' 1 s probe timeout kept it out of its Service.
                "readinessProbe": {
                    "httpGet": {"path": "/", "port": TENSORBOARD_PORT_NAME},
                    "periodSeconds": 5,
                    "timeoutSeconds": 10,
                },
                "resources": _resources(tb.resources),
                "volumeMounts": [mount],
            }
        ],
        "volumes": [{"name": "logs", "persistentVolumeClaim": {"claimName": ctx.logs_claim}}],
    }
    pod_spec["containers"] = [secure_container(c, level) for c in pod_spec["containers"]]
    if ctx.pull.secrets:
        pod_spec["imagePullSecrets"] = [{"name": s} for s in ctx.pull.secrets]
    deployment: Object = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(name, ctx.ns, labels, ctx.user_labels),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": {**ctx.user_labels, **labels}},
                "spec": pod_spec,
            },
        },
    }
    port: Object = {
        "name": TENSORBOARD_PORT_NAME,
        "port": TENSORBOARD_PORT,
        "targetPort": TENSORBOARD_PORT_NAME,
        "protocol": "TCP",
    }
    if tb.node_port is not None:
        port["nodePort"] = tb.node_port
    service: Object = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(name, ctx.ns, labels, ctx.user_labels),
        "spec": {"type": tb.service_type.value, "selector": selector, "ports": [port]},
    }
    return [deployment, service]


def render_job(job: TFJob, options: RenderOptions) -> list[dict[str, Any]]:
    """Every object of `job`, in the order `kubectl apply -f` should create them.

    Raises `SpecError` (naming the field) when the job cannot run in a cluster as given,
    e.g. local code without `options.code_archive`. No owner references: the operator adds
    them; rendered for `kubectl apply` the objects have none.
    """
    data = job.spec.storage.data
    if data.source is not None and options.data_url is None:
        # Only a tfkube server stages a source (and holds its credentials): refused by
        # `tfkube submit`, `tfkube render` and the operator alike, never run without data.
        raise SpecError(
            [
                FieldError(
                    "spec.storage.data.source",
                    "in a cluster a data source is staged by the tfkube server: submit the "
                    "job through it (--engine server), or give the data in a claim "
                    "(spec.storage.data.claimName)",
                )
            ],
            f"job {job.name!r} (for a cluster)",
        )
    if options.data_url is not None and (data.path is not None or data.asks_for_claim):
        # The launcher empties the data folder it fills: never a claim others share.
        raise SpecError(
            [
                FieldError(
                    "spec.storage.data.claimName",
                    "a data set fetched from the server goes into each pod's own data "
                    "folder: remove claimName, storageClassName, size and path",
                )
            ],
            f"job {job.name!r} (for a cluster)",
        )
    ctx = _context(job, options)
    objects: list[Object] = []
    if options.include_namespace:
        objects.append(_namespace(ctx))
    objects += _tenant(ctx)
    objects += _registry_secret(ctx)
    objects += _configmaps(ctx)
    objects += _claims(ctx)
    objects += _headless_services(ctx)
    objects += _pod_group(ctx)
    objects += [j for role in Role for j in _role_jobs(ctx, role)]
    objects += _tensorboard(ctx)
    return objects
