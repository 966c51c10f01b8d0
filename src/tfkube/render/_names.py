"""Names and labels of everything rendered for a job: the contract the operator, the
Kubernetes backend, the KWOK test stages and `kubectl` users all rely on.

    <job>                 headless Service (pods' subdomain) and PodGroup
    <job>-<role>          Indexed Job; its pods' hostnames are <job>-<role>-<i>
    <job>-launcher        ConfigMap with the launcher zipapp
    <job>-code            ConfigMap with a small local code folder (when packed)
    <job>-registry        copy of the platform's image-pull Secret
    <job>-data, -logs     PersistentVolumeClaims (unless an existing claim is named)
    <job>-tensorboard     TensorBoard Deployment and Service
    tfkube-tenant         the namespace's ResourceQuota and LimitRange (shared by its jobs)
"""

from __future__ import annotations

LABEL_JOB = "tfkube.io/job-name"
LABEL_ROLE = "tfkube.io/replica-type"
"""Only on replica pods and their Jobs (the KWOK stages key PS behaviour off it)."""
LABEL_COMPONENT = "tfkube.io/component"
"""`replica`, `tensorboard`, `launcher`, `storage`, ... : tells a job's objects apart."""
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "tfkube"

TENANT_OBJECTS = "tfkube-tenant"


def job_labels(job_name: str, role: str | None = None) -> dict[str, str]:
    """The labels every object of a job carries; with `role`, a replica's labels too.

    Select a job's replica pods with `tfkube.io/job-name=<job>,tfkube.io/replica-type`
    (TensorBoard pods carry the job name but no replica type)."""
    labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_JOB: job_name}
    if role is not None:
        labels[LABEL_ROLE] = role
    return labels


def role_job_name(job_name: str, role: str) -> str:
    """The Indexed Job of one role; Kubernetes names its pods' hostnames `<this>-<i>`."""
    return f"{job_name}-{role}"


def launcher_configmap_name(job_name: str) -> str:
    return f"{job_name}-launcher"


def code_configmap_name(job_name: str) -> str:
    return f"{job_name}-code"


def registry_secret_name(job_name: str) -> str:
    """Per job, not per namespace: the copy is owned by (and deleted with) its job."""
    return f"{job_name}-registry"


def claim_name(job_name: str, volume: str) -> str:
    return f"{job_name}-{volume}"


def tensorboard_name(job_name: str) -> str:
    return f"{job_name}-tensorboard"
