"""Names, labels and annotations of everything tfkube puts in a cluster: the one contract
that rendering, the operator, the Kubernetes backend, the KWOK test stages and `kubectl`
users all rely on. Pure constants and string functions (no planner, no client), so
`tfkube.render` can stand on it too.

    <job>                 PodGroup (and the one headless Service of a job made before
                          2026-12-04, its pods' subdomain)
    <job>-<role>          Indexed Job and its headless Service (its pods' subdomain); its
                          pods' hostnames are <job>-<role>-<i>
    <job>-<role>-s<k>     a role of more than S replicas (the operator's
                          --max-pods-per-job) is ceil(n/S) Indexed Jobs, each with its
                          Service: shard k (k >= 1) holds replicas k*S..k*S+S-1, hostnames
                          <job>-<role>-s<k>-<i - k*S>
    <job>-launcher        ConfigMap with the launcher zipapp
    <job>-code            ConfigMap with a small local code folder (when packed)
    <job>-size            ConfigMap with a resizable job's current number of workers
    <job>-registry        copy of the platform's image-pull Secret
    <job>-code-token      the server's code-fetch token for the job's replicas (Secret)
    <job>-data, -logs     PersistentVolumeClaims (unless an existing claim is named)
    <job>-tensorboard     TensorBoard Deployment and Service
    tfkube-tenant         the namespace's ResourceQuota and LimitRange (shared by its jobs)
    <name>-serving        a model server: ConfigMap (model config), Deployment, Service
    notebook-<id>         a notebook: Secret (its tokens), StatefulSet, headless Service;
                          its home is the claim home-notebook-<id>-0

Platform credentials: the Secrets tfkube makes for its own tokens (`<job>-code-token`,
`notebook-<id>`, `<job>-registry`, and `<name>-serving` for a model server's) carry the
label `tfkube.io/credential` and are recognised by name (`platform_credential`), so the
admission policy (`tfkube.engines.admission_refusals`) never lets a job name one; notebook homes
(`home-notebook-*` claims) are a user's own the same way (`private_claim`).
"""

from __future__ import annotations

import re

from tfkube.spec import API_VERSION
from tfkube.tfcluster import shard_suffix

GROUP, VERSION = API_VERSION.split("/")
"""The TFJob resource's API group and version (`tfkube.io/v1alpha1`)."""
PLURAL = "tfjobs"
CRD_NAME = f"{PLURAL}.{GROUP}"

LABEL_JOB = "tfkube.io/job-name"
LABEL_ROLE = "tfkube.io/replica-type"
"""Only on replica pods and their Jobs (the KWOK stages key PS behaviour off it)."""
LABEL_COMPONENT = "tfkube.io/component"
"""`replica`, `tensorboard`, `launcher`, `storage`, ... : tells a job's objects apart."""
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "tfkube"
INDEX_KEY = "batch.kubernetes.io/job-completion-index"
LABEL_INDEX_OFFSET = "tfkube.io/index-offset"
"""A label on the Jobs of a role's shards after the first (`role_job_name`) and an
annotation on their pods: the replica index of the Job's index 0 (k*S), so a pod's replica
index is its completion index plus this (`tfkube.kube.observe.pod_index`). Absent: 0.
Older operators put it on pods as a label: `index_offset` reads both."""
JOB_UID_KEY = "batch.kubernetes.io/controller-uid"
"""Kubernetes' own label on a Job's pods: the Job's uid (selects exactly one shard's pods)."""
JOB_NAME_KEY = "batch.kubernetes.io/job-name"
"""Kubernetes' own label on a Job's pods: the Job's name (what a role Job's headless
Service selects: that Job's pods and no other's)."""
REPLICA_CONTAINER = "tensorflow"
"""The replica container's name in each pod (status, logs and stall detection read it)."""
"""Kubernetes' own label (and annotation) with a pod's index in its Indexed Job."""

GENERATION_ANNOTATION = "tfkube.io/restart-generation"
"""On role Jobs: the whole-job restart they belong to (see `tfkube.kube.observe`)."""
STOP_ANNOTATION = "tfkube.io/stop"
"""`true` on a TFJob: end the job now, Failed (Stopped); what `KubernetesBackend.stop` sets."""

SHIP_URL_ANNOTATION = "tfkube.io/ship-url"
"""On a TFJob: where its replicas ship what the tfkube server keeps of them
(TFKUBE_SHIP_URL); their token is the key `ship` of the job's Secret
`code_token_secret_name` (TFKUBE_SHIP_TOKEN). Set by the server for a job without
shared storage."""
SHIP_TOKEN_KEY = "ship"
DATA_URL_ANNOTATION = "tfkube.io/data-url"
"""On a TFJob: where its replicas (not its PS) fetch their data (TFKUBE_DATA_URL), an
uploaded data set or a source the tfkube server staged; their token is the key `data` of
the job's Secret `code_token_secret_name` (TFKUBE_DATA_TOKEN). Set by the server."""
DATA_TOKEN_KEY = "data"
CODE_TOKEN_KEY = "token"
CODE_TOKEN_ANNOTATION = "tfkube.io/code-token-secret"
"""On a TFJob: the Secret (key `token`) its replicas send when they fetch their code (the
tfkube server's job-scoped claim); the operator renders TFKUBE_CODE_TOKEN from it."""

TENANT_OBJECTS = "tfkube-tenant"
"""The namespace's ResourceQuota and LimitRange: shared by its jobs, owned by none."""

OPERATOR_NAMESPACE_ENV = "TFKUBE_OPERATOR_NAMESPACE"
"""The operator's own namespace, where the platform's image-pull Secret is: its Deployment
sets it from the pod's namespace, so `tfkube install -n <ns>` needs nothing more."""
REGISTRY_SECRET_ENV = "TFKUBE_REGISTRY_SECRET"
"""The name of the platform's image-pull Secret in the operator's namespace (empty: none)."""
DATA_CACHE_ENV = "TFKUBE_NODE_DATA_CACHE"
"""The operator's: the node data cache's address (`tfkube install --server`, unless
`--no-data-cache`); every replica with a data address also gets its job's address at the
cache (TFKUBE_DATA_CACHE_URL). Unset: replicas fetch from the server only."""
LOGS_STORAGE_CLASS_ENV = "TFKUBE_LOGS_STORAGE_CLASS"
"""The operator's: a StorageClass; every job whose spec names no logs storage gets a new
claim `<job>-logs` of it (`tfkube install --logs-storage-class`)."""
LOGS_CLAIM_ENV = "TFKUBE_LOGS_CLAIM"
"""The operator's: an existing claim in every job namespace; every job whose spec names no
logs storage writes its logs in a folder of it (`tfkube install --logs-claim`)."""
MAX_PODS_PER_JOB_ENV = "TFKUBE_MAX_PODS_PER_JOB"
"""The operator's: at most this many replicas of a role per Indexed Job (default 500, the
Job controller's creations per sync of one Job): a role with more is several Jobs, which
Kubernetes creates side by side (`tfkube operator --max-pods-per-job`)."""
LOGS_SIZE_ENV = "TFKUBE_LOGS_SIZE"
"""The operator's: the size of the claims `TFKUBE_LOGS_STORAGE_CLASS` makes (default 10Gi)."""
SCRATCH_VOLUME = "emptyDir"
"""A TFJob's `status.storage` (`{data: ..., logs: ...}`, written by the operator) says
`claim <name>` for a volume on a claim and this for one that is each pod's own folder,
gone with the pod (no claim asked for)."""


def job_labels(job_name: str, role: str | None = None) -> dict[str, str]:
    """The labels every object of a job carries; with `role`, a replica's labels too.

    Select a job's replica pods with `replica_selector(job)` (TensorBoard pods carry the
    job name but no replica type)."""
    labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_JOB: job_name}
    if role is not None:
        labels[LABEL_ROLE] = role
    return labels


def replica_pod_labels(job_name: str, role: str) -> dict[str, str]:
    """tfkube's labels on a replica pod: three, beside the Job controller's five.

    Eight labels in all keep every pod in Go's small-map path: the scheduler's default
    topology spread matches every pod's labels against the job's Service selector for
    every pod it places (the square of the replicas), and with nine or more labels each
    lookup hashes (docs/benchmarks.md, "Where the scheduler's CPU goes"). So the pods do
    not carry `app.kubernetes.io/managed-by` (their Jobs do), and a later shard's offset
    is an annotation (`LABEL_INDEX_OFFSET`)."""
    return {LABEL_JOB: job_name, LABEL_ROLE: role, LABEL_COMPONENT: "replica"}


def replica_selector(job_name: str | None = None, role: str | None = None) -> str:
    """The label selector of replica pods and role Jobs: of every job, of one job, or of
    one role of one job."""
    if job_name is None:
        return LABEL_ROLE
    return f"{LABEL_JOB}={job_name},{LABEL_ROLE}" + (f"={role}" if role is not None else "")


def owner_reference(tfjob_name: str, uid: str) -> dict[str, object]:
    """What makes an object the TFJob's: the garbage collector deletes it with the TFJob."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TFJob",
        "name": tfjob_name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def role_job_name(job_name: str, role: str, shard: int = 0) -> str:
    """The Indexed Job of one role (of one of its shards: `tfkube.tfcluster.shard_of`);
    Kubernetes names its pods' hostnames `<this>-<i>`. Shard 0 is the role's one Job of
    old, `<job>-<role>`; shard k is `<job>-<role>-s<k>`. The job name's limit
    (`tfkube.spec.MAX_NAME_LENGTH`) leaves room for both in a 63-character hostname."""
    return f"{job_name}-{role}{shard_suffix(shard)}"


def role_job_shard(job_name: str, role: str, name: str) -> int | None:
    """Which shard of the role's Jobs `name` is (`role_job_name`), or None: not one."""
    base = role_job_name(job_name, role)
    if name == base:
        return 0
    found = (
        re.fullmatch(r"-s([1-9][0-9]{0,5})", name[len(base) :]) if name.startswith(base) else None
    )
    return int(found.group(1)) if found is not None else None


def launcher_configmap_name(job_name: str) -> str:
    return f"{job_name}-launcher"


def code_configmap_name(job_name: str) -> str:
    return f"{job_name}-code"


def size_configmap_name(job_name: str) -> str:
    """A resizable job's current number of workers (key `SIZE_WORKERS_KEY`): new pods read
    TFKUBE_NUM_WORKERS from it, so a worker added by `tfkube scale` boots knowing the size
    the job has now (a Job's pod template cannot change while it runs)."""
    return f"{job_name}-size"


SIZE_WORKERS_KEY = "workers"


def code_token_secret_name(job_name: str) -> str:
    """The job's code-fetch token (the platform server's claim), read by its replicas as
    TFKUBE_CODE_TOKEN; owned by the TFJob."""
    return f"{job_name}-code-token"


def registry_secret_name(job_name: str) -> str:
    """Per job, not per namespace: the copy is owned by (and deleted with) its job."""
    return f"{job_name}-registry"


def claim_name(job_name: str, volume: str) -> str:
    return f"{job_name}-{volume}"


LABEL_MODEL_SERVER = "tfkube.io/model-server"
"""On a model server's objects and pods: its name. (Not the job label: the operator
watches pods that carry that one.)"""
LABEL_NOTEBOOK = "tfkube.io/notebook"
"""On a notebook's objects and pods: its id."""


def model_server_name(name: str) -> str:
    """A model server's ConfigMap, Deployment and Service."""
    return f"{name}-serving"


def notebook_name(notebook_id: str) -> str:
    """A notebook's Secret, StatefulSet and Service (its pod: `<this>-0`)."""
    return f"notebook-{notebook_id}"


def tensorboard_name(job_name: str) -> str:
    return f"{job_name}-tensorboard"


TENSORBOARD_PORT_NAME = "http"
"""The TensorBoard Service's port, by name: the server reaches it through the API server's
service proxy (`.../services/<job>-tensorboard:http/proxy/`)."""


LABEL_CREDENTIAL = "tfkube.io/credential"
"""On the Secrets that hold a platform credential: what it is (`code-token`, `notebook`,
`registry`, `model-server`). `kubectl get secrets -l tfkube.io/credential` lists them."""

_CREDENTIAL_PREFIXES = {"notebook-": "notebook"}
_CREDENTIAL_SUFFIXES = {
    "-code-token": "code-token",
    "-registry": "registry",
    "-serving": "model-server",
}


def platform_credential(secret: str) -> str | None:
    """What platform credential a Secret of that name holds (`code-token`, `notebook`,
    `registry`, `model-server`), or None for a name tfkube never gives its own Secrets.
    Names, not labels: the admission policy decides before anything is read from the
    cluster. These name patterns are the platform's in every team namespace."""
    for prefix, kind in _CREDENTIAL_PREFIXES.items():
        if secret.startswith(prefix):
            return kind
    for suffix, kind in _CREDENTIAL_SUFFIXES.items():
        if secret.endswith(suffix):
            return kind
    return None


CREDENTIAL_PATTERNS = (
    *(f"{p}*" for p in _CREDENTIAL_PREFIXES),
    *(f"*{s}" for s in _CREDENTIAL_SUFFIXES),
)
"""The Secret names `platform_credential` recognises, as patterns (for messages, docs)."""

NOTEBOOK_HOME_PREFIX = "home-notebook-"


def private_claim(claim: str) -> bool:
    """A notebook's home (`home-<notebook-<id>>-0` from its StatefulSet's claim template):
    its user's files, never another workload's to mount."""
    return claim.startswith(NOTEBOOK_HOME_PREFIX)


POD_SECURITY_ENFORCE = "pod-security.kubernetes.io/enforce"
"""Kubernetes' Pod Security admission label on a namespace: the level every pod there
must meet (`restricted`, `baseline`, `privileged`); `-warn` and `-audit` beside it."""
POD_SECURITY_LABELS = (
    POD_SECURITY_ENFORCE,
    "pod-security.kubernetes.io/warn",
    "pod-security.kubernetes.io/audit",
)


def pod_security_labels(level: str) -> dict[str, str]:
    """A team namespace's Pod Security labels: enforce, warn and audit at `level`."""
    return dict.fromkeys(POD_SECURITY_LABELS, level)


NODE_LOST_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
"""The taints the node lifecycle controller puts (NoExecute) on a node that stopped
answering; a pod tolerating them for N seconds is evicted N seconds after (which is all
tolerating them does: any job may)."""


PRIORITY_CLASS_PREFIX = "tfkube-priority-"


def team_priority_class(priority: int) -> str | None:
    """The PriorityClass of a team's job pods from the team's priority (a site admin's,
    -1000..1000; the class's value is the priority itself): `tfkube-priority-5`,
    `tfkube-priority-minus-5`; None for 0, the priority of pods that name no class."""
    if priority == 0:
        return None
    if priority > 0:
        return f"{PRIORITY_CLASS_PREFIX}{priority}"
    return f"{PRIORITY_CLASS_PREFIX}minus-{-priority}"


METADATA_ADDRESSES = ("169.254.169.254/32", "fd00:ec2::254/128")
"""The clouds' instance metadata services (AWS, GCP, Azure, OpenStack; AWS's IPv6 one):
they hand whoever asks from a node the node's cloud credentials. A team's pods are
refused them unless a site says otherwise (`tfkube.render.TenantNetwork.denied`,
`tfkube server --kube-egress-deny`)."""
