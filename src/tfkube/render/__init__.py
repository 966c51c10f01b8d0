"""A TFJob as Kubernetes objects, as plain data: no I/O, no client, no cluster.

`render_job(job, options)` is what both the operator (which adds owner references and
creates the objects) and `tfkube render` (which prints them for `kubectl apply`) use, so
the two can never drift. `crd()` and `install_manifests()` are the cluster-wide objects
`tfkube install` applies and `deploy/` holds; `server_manifests()` is what
`install --server` adds; `render_model_server()` and `render_notebook()` are what the
tfkube server applies for a model server and a notebook. The names and labels it gives
everything are the contract in
`tfkube.kube.names` (shared with the operator and the Kubernetes backend); who retries
what is in `tfkube.render._render` and docs/kubernetes.md; which volumes a job gets (a
claim only when asked for) in `tfkube.render._storage`.

This face is what the operator, the Kubernetes engine, the server and the CLI use; the
rest (RBAC rules, probes, images, the launcher zipapp) stays in the private modules, where
render's own unit tests reach it.

Imports `tfkube.spec`, `tfkube.tfcluster` and `tfkube.kube.names` only: never the planner,
the REST client or `kubernetes` (import-linter contracts in pyproject.toml).
"""

from tfkube.render._crd import crd
from tfkube.render._datacache import (
    DATACACHE_NAME,
    DATACACHE_PORT,
    DataCacheInstall,
    datacache_manifests,
    datacache_url,
)
from tfkube.render._deploy import (
    OPERATOR_IMAGE,
    OPERATOR_NAME,
    OPERATOR_NAMESPACE,
    REGISTRY_SECRET,
    Placement,
    deploy_file_texts,
    dump_yaml,
    install_manifests,
    operator_manifests,
    parse_node_selector,
    parse_toleration,
)
from tfkube.render._postgres import (
    POSTGRES_IMAGE,
    POSTGRES_NAME,
    POSTGRES_SECRET,
    database_claim_name,
    postgres_manifests,
    postgres_secret,
    postgres_secret_command,
)
from tfkube.render._render import (
    DEFAULT_MAX_PODS_PER_JOB,
    MAX_CODE_CONFIGMAP_BYTES,
    TENSORBOARD_PORT,
    RenderOptions,
    address_rule,
    render_job,
)
from tfkube.render._server import (
    DATABASE_SECRET,
    DATABASES,
    SERVER_GRPC_PORT,
    SERVER_NAME,
    SERVER_PORT,
    ServerInstall,
    data_claim_name,
    server_manifests,
)
from tfkube.render._storage import (
    DEFAULT_CLAIM_SIZE,
    EMPTY_DIR,
    JobVolumes,
    StorageDefaults,
    Volume,
    job_volumes,
    rendered_storage,
)
from tfkube.render._tenant import (
    TenantNetwork,
    network_policy,
    parse_egress_deny,
    tenant_objects,
)
from tfkube.render._workloads import (
    GRPC_PORT,
    NOTEBOOK_PORT,
    ModelServerSpec,
    NotebookSpec,
    ServingRuntime,
    parse_runtime,
    render_autoscaler,
    render_model_server,
    render_notebook,
    replica_request,
)

__all__ = [
    "DATABASES",
    "DATABASE_SECRET",
    "DATACACHE_NAME",
    "DATACACHE_PORT",
    "DEFAULT_CLAIM_SIZE",
    "DEFAULT_MAX_PODS_PER_JOB",
    "EMPTY_DIR",
    "GRPC_PORT",
    "MAX_CODE_CONFIGMAP_BYTES",
    "NOTEBOOK_PORT",
    "OPERATOR_IMAGE",
    "OPERATOR_NAME",
    "OPERATOR_NAMESPACE",
    "POSTGRES_IMAGE",
    "POSTGRES_NAME",
    "POSTGRES_SECRET",
    "REGISTRY_SECRET",
    "SERVER_GRPC_PORT",
    "SERVER_NAME",
    "SERVER_PORT",
    "TENSORBOARD_PORT",
    "DataCacheInstall",
    "JobVolumes",
    "ModelServerSpec",
    "NotebookSpec",
    "Placement",
    "RenderOptions",
    "ServerInstall",
    "ServingRuntime",
    "StorageDefaults",
    "TenantNetwork",
    "Volume",
    "address_rule",
    "crd",
    "data_claim_name",
    "database_claim_name",
    "datacache_manifests",
    "datacache_url",
    "deploy_file_texts",
    "dump_yaml",
    "install_manifests",
    "job_volumes",
    "network_policy",
    "operator_manifests",
    "parse_egress_deny",
    "parse_node_selector",
    "parse_runtime",
    "parse_toleration",
    "postgres_manifests",
    "postgres_secret",
    "postgres_secret_command",
    "render_autoscaler",
    "render_job",
    "render_model_server",
    "render_notebook",
    "rendered_storage",
    "replica_request",
    "server_manifests",
    "tenant_objects",
]
