"""A TFJob as Kubernetes objects, as plain data: no I/O, no client, no cluster.

`render_job(job, options)` is what both the operator (which adds owner references and
creates the objects) and `tfkube render` (which prints them for `kubectl apply`) use, so
the two can never drift. `crd()` and `install_manifests()` are the cluster-wide objects
`tfkube install` applies and `deploy/` holds. The names and labels contract is in
`tfkube.render._names`; who retries what is in `tfkube.render._render` and
docs/kubernetes.md.

May import `tfkube.api` and `tfkube.cluster` only (import-linter layers).
"""

from tfkube.render._crd import CRD_NAME, GROUP, PLURAL, SHORT_NAMES, VERSION, crd
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
from tfkube.render._names import (
    LABEL_COMPONENT,
    LABEL_JOB,
    LABEL_MANAGED_BY,
    LABEL_ROLE,
    MANAGED_BY,
    TENANT_OBJECTS,
    claim_name,
    code_configmap_name,
    job_labels,
    launcher_configmap_name,
    registry_secret_name,
    role_job_name,
    tensorboard_name,
)
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

__all__ = [
    "CONTAINER",
    "CRD_NAME",
    "GROUP",
    "LABEL_COMPONENT",
    "LABEL_JOB",
    "LABEL_MANAGED_BY",
    "LABEL_ROLE",
    "LAUNCHER_COMMAND",
    "MANAGED_BY",
    "MAX_CODE_CONFIGMAP_BYTES",
    "OPERATOR_IMAGE",
    "OPERATOR_NAME",
    "OPERATOR_NAMESPACE",
    "OPERATOR_RULES",
    "PLURAL",
    "REGISTRY_SECRET",
    "SHORT_NAMES",
    "TENANT_OBJECTS",
    "USER_ERROR_EXIT_CODES",
    "VERSION",
    "RenderOptions",
    "backoff_limit",
    "build_launcher_zipapp",
    "claim_name",
    "code_configmap_name",
    "crd",
    "deploy_file_texts",
    "dump_yaml",
    "image_registry",
    "install_manifests",
    "job_labels",
    "launcher_configmap_name",
    "launcher_zipapp",
    "registry_secret_name",
    "render_job",
    "role_job_name",
    "tensorboard_name",
]
