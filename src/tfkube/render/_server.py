"""The platform server in a cluster: what `tfkube install --server` adds (pure).

    ServiceAccount, ClusterRole, ClusterRoleBinding  tfkube-server   (SERVER_RULES)
    PersistentVolumeClaim   tfkube-server-data   the data dir: SQLite, artifacts, keys
                                                 (none when the admin names a claim:
                                                 `data_claim`)
    (database "postgres")   tfkube-postgres      PostgreSQL in a pod: tfkube.render._postgres
    Deployment              tfkube-server        `tfkube server --engine kubernetes`
    Service                 tfkube-server        ClusterIP :8470, for people (port-forward
                                                 or an Ingress) and for replicas fetching code

The server runs jobs as TFJobs in one namespace per team (`tfkube-<team>`), which it makes
when the team is made; so its RBAC is cluster-wide (a namespace it creates later cannot
be named in a RoleBinding now), but narrow in verbs: it never reads Secrets (it writes one
code-token Secret per job and one per notebook), never touches pods beyond reading them
and their logs, and reaches a job's TensorBoard, a model server or a notebook only
through the API server's service proxy.

Kept logs: with `outputs_claim`, every team namespace holds a ReadWriteMany claim of that
name (jobs write their logs and summaries to `<claim>/<job>`), and the server mounts the
claim of the same name in its own namespace at `<data dir>/teams`, on the same share, so
it reads team T's outputs at `<data dir>/teams/T/outputs/<job>`. docs/kubernetes.md says
how to lay the share out.

The database (`database`): "sqlite" (the default) keeps SQLite on the data claim (and, as
before, an optional Secret `tfkube-server-database`, key `url`, switches to an external
PostgreSQL); "postgres" adds PostgreSQL as a StatefulSet of its own image
(`tfkube.render._postgres`) and the server connects to it as the role `tfkube` (password
from the Secret `tfkube-postgres`, read by libpq as `PGPASSWORD`), after an init container
saw it answer; "external" requires the Secret `tfkube-server-database` (its `url`, with the
password, never in the pod spec) and waits for that database the same way.

The image is the operator's (deploy/Dockerfile installs the `kubernetes` and `server`
extras).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from tfkube import contract
from tfkube.kube.names import GROUP, LABEL_MANAGED_BY, MANAGED_BY, PLURAL
from tfkube.render._datacache import DataCacheInstall, datacache_manifests
from tfkube.render._deploy import Placement, api_access
from tfkube.render._postgres import (
    DEFAULT_DATABASE_SIZE,
    POSTGRES_IMAGE,
    POSTGRES_SECRET,
    POSTGRES_SECRET_KEY,
    WAIT_FOR_DATABASE,
    postgres_manifests,
    postgres_url,
)

SERVER_NAME = "tfkube-server"
SERVER_PORT = 8470
SERVER_GRPC_PORT = 8500
"""The server's gRPC door (TensorFlow Serving's API for the teams' model servers, with a
member's token): in the cluster it dials each model server's Service by its DNS name."""
SERVER_DATA_DIR = "/var/lib/tfkube"
SERVER_DATA_CLAIM = "tfkube-server-data"
DATABASE_SECRET = "tfkube-server-database"
"""Secret (key `url`) in the server's namespace naming an external PostgreSQL
(`postgresql://...`): required with `database="external"`; optional with "sqlite" (when it
exists the server uses it, as before this option existed)."""
DATABASES = ("sqlite", "postgres", "external")
"""`tfkube install --server --database`: SQLite on the data claim; PostgreSQL in a pod
installed with the server; an external PostgreSQL named by the Secret DATABASE_SECRET."""

SERVER_RULES: tuple[dict[str, Any], ...] = (
    # A team is a namespace with its quota and default requests (server-side apply: patch,
    # and create when new).
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "create", "patch"]},
    # ... and its NetworkPolicy: only its own pods, tfkube's and the API server reach its
    # pods (`tfkube.render.TenantNetwork`); the API server's addresses are read from the
    # `kubernetes` Service's EndpointSlices unless `--kube-ingress-from` names them.
    {
        "apiGroups": ["networking.k8s.io"],
        "resources": ["networkpolicies"],
        "verbs": ["get", "create", "patch"],
    },
    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list"]},
    {
        "apiGroups": [""],
        "resources": ["resourcequotas", "limitranges"],
        "verbs": ["get", "list", "create", "patch"],
    },
    # A team's priority as a PriorityClass (`tfkube-priority-<n>`, value n, -1000..1000).
    {
        "apiGroups": ["scheduling.k8s.io"],
        "resources": ["priorityclasses"],
        "verbs": ["get", "create", "patch"],
    },
    # Jobs: created, read, stopped (an annotation), deleted; the operator does the rest.
    {
        "apiGroups": [GROUP],
        "resources": [PLURAL],
        "verbs": ["get", "list", "watch", "create", "patch", "delete"],
    },
    # The job's code token: written (and owned by its TFJob), never read back.
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "update", "patch", "delete"]},
    # Replica state and logs, read the way `tfkube status` reads them.
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["pods", "events"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    # Each replica's CPU and memory (the kubelet's resource metrics, through metrics-server).
    {"apiGroups": ["metrics.k8s.io"], "resources": ["pods"], "verbs": ["get", "list"]},
    # Whether a node can serve logs (a KWOK fake node cannot); cluster status.
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]},
    # Model servers (ConfigMap, Deployment, Service) and notebooks (Secret, StatefulSet,
    # Service): applied server-side, read for their status, deleted when stopped. A
    # notebook's home claim (its StatefulSet's) is never deleted by the server.
    {
        "apiGroups": ["apps"],
        "resources": ["deployments", "statefulsets"],
        "verbs": ["get", "create", "patch", "delete"],
    },
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "patch", "delete"]},
    # Services also read: a model server's ClusterIP, which the server dials for gRPC
    # (`--kube-service-network cluster-ip`; patch returns as much).
    {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "create", "patch", "delete"]},
    # An autoscaled model server's HorizontalPodAutoscaler: applied, read for its
    # replicas, deleted with it (owned by its Deployment, without blockOwnerDeletion: no
    # right on deployments/finalizers needed).
    {
        "apiGroups": ["autoscaling"],
        "resources": ["horizontalpodautoscalers"],
        "verbs": ["get", "create", "patch", "delete"],
    },
    # A job's TensorBoard, a model server, a notebook, behind the server's login (Jupyter
    # also saves with PUT and PATCH and deletes files).
    {
        "apiGroups": [""],
        "resources": ["services/proxy"],
        "verbs": ["get", "create", "update", "patch", "delete"],
    },
)


@dataclass(frozen=True)
class ServerInstall:
    """How `tfkube install --server` sets the server up."""

    storage_class: str | None = None
    """Storage class of the data claim (default: the cluster's default class)."""
    storage_size: str = "20Gi"
    """Size of the data claim: the database and every uploaded artifact."""
    data_claim: str | None = None
    """An existing claim in the server's namespace for its data folder (the cluster
    administrator's, e.g. bound to a volume made by hand on a cluster without a
    provisioner); then tfkube creates none. The data folder holds every uploaded code and
    data set (and SQLite's database): it must outlive the pod, so it is never an emptyDir."""
    outputs_claim: str | None = None
    """A ReadWriteMany claim in every team namespace that jobs write their logs and
    summaries to, and in the server's namespace the same share, mounted at
    `<data dir>/teams`: logs stay readable after pods are gone. None: logs come from the
    pod log API while pods exist."""
    public_url: str | None = None
    """How people reach the server (its links and the Origin check), e.g. the Ingress'
    https URL; default: whatever Host they use."""
    placement: Placement = field(default_factory=Placement)
    """The server pod's node selector and tolerations (`tfkube install --node-selector
    --toleration`, the operator's too; PostgreSQL's pod too)."""
    database: str = "sqlite"
    """One of DATABASES."""
    database_claim: str | None = None
    """database "postgres": an existing claim in the namespace for PostgreSQL's data (none
    is made); else its StatefulSet's claim template makes `data-tfkube-postgres-0` of
    `storage_class` (or the default class), `database_size`."""
    database_size: str = DEFAULT_DATABASE_SIZE
    postgres_image: str = POSTGRES_IMAGE
    notebook_placement: Placement = field(default_factory=Placement)
    """Where the server puts notebooks (`tfkube install --notebook-node-selector
    --notebook-toleration`, passed to `tfkube server` as the same flags)."""
    ingress_from: tuple[str, ...] = ()
    """CIDRs outside the pod network that may reach team pods (`tfkube install --server
    --ingress-from`, passed as `--kube-ingress-from`): where the API server's service
    proxy connects from when that is not the API servers' own addresses (a managed
    control plane behind a tunnel). Empty: those addresses."""
    egress_deny: tuple[str, ...] | None = None
    """CIDRs team pods may not connect to (`tfkube install --server --egress-deny`,
    passed as `--kube-egress-deny`; empty: `none`, nothing refused). None: the server's
    default, the clouds' metadata services."""
    data_cache: DataCacheInstall | None = None
    """The node data cache on every node (`tfkube install --server --data-cache`,
    `tfkube.render._datacache`); None (the default until it is shown on a real node):
    replicas fetch their data from the server only."""

    def __post_init__(self) -> None:
        if self.database not in DATABASES:
            raise ValueError(f"--database {self.database!r}: give one of {', '.join(DATABASES)}")
        if self.database_claim and self.database != "postgres":
            raise ValueError("--database-claim goes with --database postgres")


def _labels() -> dict[str, str]:
    return {
        LABEL_MANAGED_BY: MANAGED_BY,
        "app.kubernetes.io/name": "tfkube",
        "app.kubernetes.io/component": "server",
    }


def _selector() -> dict[str, str]:
    return {"app.kubernetes.io/name": "tfkube", "app.kubernetes.io/component": "server"}


def server_url(namespace: str) -> str:
    """How replicas in any namespace reach the server (cluster DNS)."""
    return f"http://{SERVER_NAME}.{namespace}.svc:{SERVER_PORT}"


def server_command(namespace: str, options: ServerInstall) -> list[str]:
    command = [
        "tfkube",
        "server",
        "--engine",
        "kubernetes",
        "--host",
        "0.0.0.0",
        "--port",
        str(SERVER_PORT),
        "--grpc-port",
        str(SERVER_GRPC_PORT),
        "--data-dir",
        SERVER_DATA_DIR,
        "--code-url",
        server_url(namespace),
        "--kube-platform-namespace",
        namespace,
    ]
    if options.outputs_claim:
        command += ["--outputs-claim", options.outputs_claim]
    if options.public_url:
        command += ["--public-url", options.public_url]
    command += options.notebook_placement.flags("--notebook-node-selector", "--notebook-toleration")
    for cidr in options.ingress_from:
        command += ["--kube-ingress-from", cidr]
    if options.egress_deny is not None:
        for cidr in options.egress_deny or ("none",):
            command += ["--kube-egress-deny", cidr]
    return command


def server_rbac(namespace: str) -> list[dict[str, Any]]:
    labels = _labels()
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": SERVER_NAME, "namespace": namespace, "labels": labels},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": SERVER_NAME, "labels": labels},
            "rules": [dict(r) for r in SERVER_RULES],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": SERVER_NAME, "labels": labels},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": SERVER_NAME,
            },
            "subjects": [{"kind": "ServiceAccount", "name": SERVER_NAME, "namespace": namespace}],
        },
    ]


def data_claim_name(options: ServerInstall) -> str:
    """The claim the server's data folder is on."""
    return options.data_claim or SERVER_DATA_CLAIM


def _data_claim(namespace: str, options: ServerInstall) -> dict[str, Any]:
    spec: dict[str, Any] = {
        # One server writes its SQLite database: a plain single-node volume is enough.
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": options.storage_size}},
    }
    if options.storage_class is not None:
        spec["storageClassName"] = options.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": SERVER_DATA_CLAIM, "namespace": namespace, "labels": _labels()},
        "spec": spec,
    }


def _deployment(namespace: str, image: str, options: ServerInstall) -> dict[str, Any]:
    access_volume, access_mount = api_access()
    mounts: list[dict[str, Any]] = [
        {"name": "data", "mountPath": SERVER_DATA_DIR},
        {"name": "tmp", "mountPath": "/tmp"},
        access_mount,
    ]
    volumes: list[dict[str, Any]] = [
        {"name": "data", "persistentVolumeClaim": {"claimName": data_claim_name(options)}},
        {"name": "tmp", "emptyDir": {}},
        access_volume,
    ]
    if options.outputs_claim:
        mounts.append({"name": "outputs", "mountPath": f"{SERVER_DATA_DIR}/teams"})
        volumes.append(
            {"name": "outputs", "persistentVolumeClaim": {"claimName": options.outputs_claim}}
        )

    def probe(**more: int) -> dict[str, Any]:
        return {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10, **more}

    security = {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    env = [{"name": "HOME", "value": "/tmp"}, *database_env(namespace, options)]
    container: dict[str, Any] = {
        "name": "server",
        "image": image,
        "command": server_command(namespace, options),
        "env": env,
        "ports": [
            {"name": "http", "containerPort": SERVER_PORT, "protocol": "TCP"},
            {"name": "grpc", "containerPort": SERVER_GRPC_PORT, "protocol": "TCP"},
        ],
        "readinessProbe": probe(),
        "livenessProbe": probe(failureThreshold=6),
        "resources": {
            "requests": {"cpu": "250m", "memory": "512Mi"},
            "limits": {"memory": "2Gi"},
        },
        "securityContext": security,
        "volumeMounts": mounts,
    }
    init: dict[str, Any] = {}
    if options.database != "sqlite":
        # The server runs its migrations at start: first wait until the database answers
        # and lets the server's role in (a StatefulSet, an external one after an outage).
        init["initContainers"] = [
            {
                "name": "wait-for-database",
                "image": image,
                "command": ["python3", "-c", WAIT_FOR_DATABASE],
                "env": copy.deepcopy(env),  # no YAML anchors in printed manifests
                "resources": {
                    "requests": {"cpu": "10m", "memory": "64Mi"},
                    "limits": {"memory": "256Mi"},
                },
                "securityContext": copy.deepcopy(security),
                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
            }
        ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": SERVER_NAME, "namespace": namespace, "labels": _labels()},
        "spec": {
            "replicas": 1,
            # One writer of the SQLite file and of the job sync: never two at once.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": _selector()},
            "template": {
                "metadata": {"labels": _labels()},
                "spec": {
                    "serviceAccountName": SERVER_NAME,
                    "automountServiceAccountToken": False,  # api_access(), explicitly
                    **options.placement.pod_fields(),
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 65532,
                        "runAsGroup": 65532,
                        "fsGroup": 65532,  # the data claim is writable by the server
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    **init,
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }


def database_env(namespace: str, options: ServerInstall) -> list[dict[str, Any]]:
    """The server's database settings: a URL, and the password only as a secretKeyRef."""
    if options.database == "postgres":
        return [
            {"name": contract.DATABASE_URL, "value": postgres_url(namespace)},
            {
                "name": "PGPASSWORD",  # libpq's; the URL holds no password
                "valueFrom": {
                    "secretKeyRef": {"name": POSTGRES_SECRET, "key": POSTGRES_SECRET_KEY}
                },
            },
        ]
    ref: dict[str, Any] = {"name": DATABASE_SECRET, "key": "url"}
    if options.database == "sqlite":
        ref["optional"] = True
    return [{"name": contract.DATABASE_URL, "valueFrom": {"secretKeyRef": ref}}]


def _service(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": SERVER_NAME, "namespace": namespace, "labels": _labels()},
        "spec": {
            "type": "ClusterIP",
            "selector": _selector(),
            "ports": [
                {"name": "http", "port": SERVER_PORT, "targetPort": "http", "protocol": "TCP"},
                {
                    "name": "grpc",
                    "port": SERVER_GRPC_PORT,
                    "targetPort": "grpc",
                    "protocol": "TCP",
                },
            ],
        },
    }


def server_manifests(
    namespace: str, image: str, options: ServerInstall | None = None
) -> list[dict[str, Any]]:
    """The server's objects in `namespace`, in the order to apply them."""
    chosen = options or ServerInstall()
    database = (
        postgres_manifests(
            namespace,
            chosen.postgres_image,
            chosen.database_claim,
            chosen.storage_class,
            chosen.database_size,
            chosen.placement.pod_fields(),
            clients=_selector(),
        )
        if chosen.database == "postgres"
        else []
    )
    return [
        *server_rbac(namespace),
        *([] if chosen.data_claim else [_data_claim(namespace, chosen)]),
        *database,
        _deployment(namespace, image, chosen),
        _service(namespace),
        *(
            datacache_manifests(namespace, image, server_url(namespace), chosen.data_cache)
            if chosen.data_cache
            else []
        ),
    ]
