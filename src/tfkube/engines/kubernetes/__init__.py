"""The Kubernetes engine: TFJobs on the cluster of a kubeconfig (needs the `kubernetes`
extra). `KubernetesBackend` submits and reads TFJob resources (the operator runs them);
`install` applies the CRD, RBAC and the operator (see `_install`). Both stand on
`tfkube.kube` (names, the pod interpreter, REST), as the operator does."""

from tfkube.engines.kubernetes._backend import KubernetesBackend, LogsUnavailable, job_view
from tfkube.engines.kubernetes._cluster import KubernetesEngine, NamespaceTerminating
from tfkube.engines.kubernetes._install import (
    Applied,
    InstallError,
    apply_objects,
    delete_objects,
    install,
)
from tfkube.kube.rest import api_client_from

__all__ = [
    "Applied",
    "InstallError",
    "KubernetesBackend",
    "KubernetesEngine",
    "LogsUnavailable",
    "NamespaceTerminating",
    "api_client_from",
    "apply_objects",
    "delete_objects",
    "install",
    "job_view",
]
