"""A TFJob as Kubernetes objects, as plain data: no I/O, no client, no cluster.

`render_job(job, options)` is what both the operator (which adds owner references and
creates the objects) and `tfkube render` (which prints them for `kubectl apply`) use, so
the two can never drift. `crd()` and `install_manifests()` are the cluster-wide objects
`tfkube install` applies and `deploy/` holds; `server_manifests()` is what
`install --server` adds; `render_model_server()` and `render_notebook()` are what the
tfkube server applies for a model server and a notebook. The names and labels it gives
everything are the contract in
`tfkube.kube.names` (shared with the operator and the Kubernetes backend); who retries
what is in `tfkube.render._render` and docs/kubernetes.md.

Imports `tfkube.spec`, `tfkube.tfcluster` and `tfkube.kube.names` only: never the planner,
the REST client or `kubernetes` (import-linter contracts in pyproject.toml).
"""

from tfkube.render._crd import SHORT_NAMES, crd
from tfkube.render._deploy import (
    OPERATOR_IMAGE,
    OPERATOR_NAME,
    OPERATOR_NAMESPACE,
    OPERATOR_RULES,
    REGISTRY_SECRET,
    deploy_file_texts,
    dump_yaml,
    install_manifests,
)
from tfkube.render._launcher import build_launcher_zipapp, launcher_zipapp
from tfkube.render._render import (
    CONTAINER,
    LAUNCHER_COMMAND,
    MAX_CODE_CONFIGMAP_BYTES,
    USER_ERROR_EXIT_CODES,
    RenderOptions,
    backoff_limit,
    image_registry,
    render_job,
)
from tfkube.render._server import (
    SERVER_NAME,
    SERVER_PORT,
    SERVER_RULES,
    ServerInstall,
    server_manifests,
)
from tfkube.render._serving import (
    TF_SERVING_IMAGE,
    TFKUBE_SERVING_IMAGE,
    ModelServerSpec,
    NotebookSpec,
    ServingRuntime,
    job_export_volume,
    parse_runtime,
    render_model_server,
    render_notebook,
)
from tfkube.render._tenant import DEFAULT_REQUEST, quota_hard, tenant_objects

__all__ = [
    "CONTAINER",
    "DEFAULT_REQUEST",
    "LAUNCHER_COMMAND",
    "MAX_CODE_CONFIGMAP_BYTES",
    "OPERATOR_IMAGE",
    "OPERATOR_NAME",
    "OPERATOR_NAMESPACE",
    "OPERATOR_RULES",
    "REGISTRY_SECRET",
    "SERVER_NAME",
    "SERVER_PORT",
    "SERVER_RULES",
    "SHORT_NAMES",
    "TFKUBE_SERVING_IMAGE",
    "TF_SERVING_IMAGE",
    "USER_ERROR_EXIT_CODES",
    "ModelServerSpec",
    "NotebookSpec",
    "RenderOptions",
    "ServerInstall",
    "ServingRuntime",
    "backoff_limit",
    "build_launcher_zipapp",
    "crd",
    "deploy_file_texts",
    "dump_yaml",
    "image_registry",
    "install_manifests",
    "job_export_volume",
    "launcher_zipapp",
    "parse_runtime",
    "quota_hard",
    "render_job",
    "render_model_server",
    "render_notebook",
    "server_manifests",
    "tenant_objects",
]
