"""Engines: what runs tfkube's workloads and isolates them.

`Backend` is one tenant's training jobs (what the CLI speaks to); `Engine` is the whole
engine as the platform server sees it: tenants, jobs, model servers, notebooks and
TensorBoards behind one protocol (`_workloads`). `local/` runs processes on this machine,
`kubernetes/` objects in a cluster; neither imports the other, and `open_engine` picks one
lazily.
"""

from tfkube.engines._admission import Allowances, Submitter, admission_refusals
from tfkube.engines._artifact import Artifact, prepare_artifact
from tfkube.engines._base import (
    Backend,
    DataFrom,
    JobEvent,
    JobExists,
    JobNotFound,
    JobView,
    ShipTo,
    SubmitDeferred,
    UsageUnavailable,
)
from tfkube.engines._data import (
    Credentials,
    DataSourceError,
    HdfsCredentials,
    S3Credentials,
    StoreRef,
    check_source,
    credentials_from_json,
    credentials_problem,
    parse_credentials,
)
from tfkube.engines._open import (
    KINDS,
    METADATA_ADDRESSES,
    SERVICE_NETWORKS,
    EngineSettings,
    open_engine,
    parse_service_network,
)
from tfkube.engines._served import (
    FAILED as STAGING_FAILED,
)
from tfkube.engines._served import (
    READY as STAGED,
)
from tfkube.engines._served import (
    STAGING,
    Stager,
    StageRequest,
    forget_served,
    read_state,
    served_cache_limit,
    served_digest,
    share_of,
    tar_digest,
    tar_stream,
)
from tfkube.engines._workloads import (
    ArtifactCopy,
    Capacity,
    Engine,
    Features,
    Handle,
    Health,
    JobStorage,
    ModelServerWorkload,
    NotAvailable,
    NotebookWorkload,
    Tenant,
    TensorBoardWorkload,
    Upstream,
    Workload,
    WorkloadStatus,
)

__all__ = [
    "KINDS",
    "METADATA_ADDRESSES",
    "SERVICE_NETWORKS",
    "STAGED",
    "STAGING",
    "STAGING_FAILED",
    "Allowances",
    "Artifact",
    "ArtifactCopy",
    "Backend",
    "Capacity",
    "Credentials",
    "DataFrom",
    "DataSourceError",
    "Engine",
    "EngineSettings",
    "Features",
    "Handle",
    "HdfsCredentials",
    "Health",
    "JobEvent",
    "JobExists",
    "JobNotFound",
    "JobStorage",
    "JobView",
    "ModelServerWorkload",
    "NotAvailable",
    "NotebookWorkload",
    "S3Credentials",
    "ShipTo",
    "StageRequest",
    "Stager",
    "StoreRef",
    "SubmitDeferred",
    "Submitter",
    "Tenant",
    "TensorBoardWorkload",
    "Upstream",
    "UsageUnavailable",
    "Workload",
    "WorkloadStatus",
    "admission_refusals",
    "check_source",
    "credentials_from_json",
    "credentials_problem",
    "forget_served",
    "open_engine",
    "parse_credentials",
    "parse_service_network",
    "prepare_artifact",
    "read_state",
    "served_cache_limit",
    "served_digest",
    "share_of",
    "tar_digest",
    "tar_stream",
]
