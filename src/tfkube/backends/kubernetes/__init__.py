"""The Kubernetes engine: TFJobs on the cluster of a kubeconfig (needs the `kubernetes`
extra). `install` applies the CRD, RBAC and the operator (see `_install`)."""

from tfkube.backends.kubernetes._install import Applied, InstallError, api_client_from, install

__all__ = ["Applied", "InstallError", "api_client_from", "install"]
