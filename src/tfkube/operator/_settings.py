"""What the operator is told: its command's flags and its environment, read in one place.

`tfkube install` (and deploy/operator.yaml) runs the operator with TFKUBE_OPERATOR_NAMESPACE
set from the pod's own namespace and TFKUBE_REGISTRY_SECRET naming the platform's
image-pull Secret there (`tfkube.kube.names` holds both names, which `tfkube.render` writes
into the Deployment). Unset, the defaults are those `tfkube install` uses. The cluster
administrator's storage for jobs that name none (TFKUBE_LOGS_STORAGE_CLASS or
TFKUBE_LOGS_CLAIM, from `tfkube install --logs-storage-class/--logs-claim`) is read here
too; unset, such jobs keep their logs in their pods.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tfkube.kube.names import (
    DATA_CACHE_ENV,
    LOGS_CLAIM_ENV,
    LOGS_SIZE_ENV,
    LOGS_STORAGE_CLASS_ENV,
    MAX_PODS_PER_JOB_ENV,
    OPERATOR_NAMESPACE_ENV,
    REGISTRY_SECRET_ENV,
)
from tfkube.render import (
    DEFAULT_CLAIM_SIZE,
    DEFAULT_MAX_PODS_PER_JOB,
    OPERATOR_NAMESPACE,
    REGISTRY_SECRET,
    StorageDefaults,
)

NAMESPACE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
"""A namespace's name (a DNS-1123 label)."""


@dataclass(frozen=True)
class OperatorSettings:
    namespaces: tuple[str, ...] = ()
    """Watch only these namespaces (`--namespace`), by name (not kopf's patterns: the
    operator's own pod informer lists and watches each by its name); empty means every
    namespace."""
    kubeconfig: Path | None = None
    """A kubeconfig file (`--kubeconfig`); default $KUBECONFIG, ~/.kube/config, or the
    service account."""
    verbose: bool = False
    """Debug logging, kopf's and the clients' too (`--verbose`)."""
    operator_namespace: str = OPERATOR_NAMESPACE
    """The namespace the operator was installed in (TFKUBE_OPERATOR_NAMESPACE): where the
    platform's image-pull Secret lives."""
    registry_secret: str | None = REGISTRY_SECRET
    """The platform's image-pull Secret in `operator_namespace` (TFKUBE_REGISTRY_SECRET; set
    but empty: none), copied into every job's namespace as `<job>-registry` when it exists;
    without it jobs pull anonymously."""
    data_cache: str | None = None
    """The node data cache's address (TFKUBE_NODE_DATA_CACHE), given to replicas that
    fetch data (TFKUBE_DATA_CACHE_URL); None: they fetch from the server only."""
    storage: StorageDefaults = field(default_factory=StorageDefaults)
    """What jobs whose spec names no logs storage get (TFKUBE_LOGS_STORAGE_CLASS,
    TFKUBE_LOGS_CLAIM, TFKUBE_LOGS_SIZE); by default nothing: their logs stay in their
    pods (an emptyDir each)."""
    max_pods_per_job: int = DEFAULT_MAX_PODS_PER_JOB
    """At most this many replicas of a role per Indexed Job (`--max-pods-per-job`,
    TFKUBE_MAX_PODS_PER_JOB): a role with more is split into several Jobs
    (`tfkube.render.RenderOptions.max_pods_per_job`). A job keeps the value it was made
    with (`status.podsPerJob`)."""

    @classmethod
    def read(
        cls,
        environ: Mapping[str, str] = os.environ,
        *,
        namespaces: tuple[str, ...] = (),
        kubeconfig: Path | None = None,
        verbose: bool = False,
        max_pods_per_job: int | None = None,
    ) -> OperatorSettings:
        """The settings from the command's flags and the environment (a flag wins). Raises
        ValueError when both a logs storage class and a logs claim are set, for a
        maximum of pods per Job that is not a whole number of at least 1, or for a
        namespace that is not a namespace's name."""
        for namespace in namespaces:
            if not NAMESPACE_NAME.fullmatch(namespace):
                raise ValueError(f"{namespace!r} is not a namespace's name")
        per_job = max_pods_per_job
        if per_job is None:
            text = environ.get(MAX_PODS_PER_JOB_ENV) or str(DEFAULT_MAX_PODS_PER_JOB)
            if not (text.isascii() and text.isdigit()):
                raise ValueError(f"{MAX_PODS_PER_JOB_ENV} must be a whole number, not {text!r}")
            per_job = int(text)
        if per_job < 1:
            raise ValueError(
                f"the maximum of pods per Job ({MAX_PODS_PER_JOB_ENV}, --max-pods-per-job) "
                f"must be at least 1, not {per_job}"
            )
        return cls(
            namespaces=namespaces,
            kubeconfig=kubeconfig,
            verbose=verbose,
            operator_namespace=environ.get(OPERATOR_NAMESPACE_ENV) or OPERATOR_NAMESPACE,
            registry_secret=environ.get(REGISTRY_SECRET_ENV, REGISTRY_SECRET) or None,
            data_cache=environ.get(DATA_CACHE_ENV) or None,
            storage=StorageDefaults(
                logs_storage_class=environ.get(LOGS_STORAGE_CLASS_ENV) or None,
                logs_claim=environ.get(LOGS_CLAIM_ENV) or None,
                logs_size=environ.get(LOGS_SIZE_ENV) or DEFAULT_CLAIM_SIZE,
            ),
            max_pods_per_job=per_job,
        )
