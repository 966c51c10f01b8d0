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
from tfkube.engines._open import KINDS, EngineSettings, open_engine
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
    "Allowances",
    "Artifact",
    "ArtifactCopy",
    "Backend",
    "Capacity",
    "Credentials",
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
    "open_engine",
    "parse_credentials",
    "prepare_artifact",
]
