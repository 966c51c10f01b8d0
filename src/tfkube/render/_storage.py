"""Where a job's data and logs live in a cluster: a claim only when something asks for
one (pure).

    spec.storage.<data|logs>          what the replicas mount as `data` / `logs`
      claimName                       that existing claim (logs: in a folder <job> of it)
      storageClassName and/or size    a new claim <job>-<data|logs> (ReadWriteMany)
      nothing, logs only:
        the administrator's default   StorageDefaults (the operator's settings): a new
                                      claim of its class, or its claim in every namespace
                                      (in a folder <job> of it)
        spec.tensorboard              a new claim <job>-logs (TensorBoard reads the logs
                                      from another pod)
      nothing                         an emptyDir in each pod: scratch space, gone with it

A claim nobody asked for would wait forever on a cluster without a default StorageClass
or a provisioner (many bare and on-premises clusters), and every replica with it. Without
a shared logs volume each replica keeps its logs and checkpoints in its own pod: `tfkube
logs` reads them from the pod log API while the pod exists, and a whole-job restart (a PS
lost) starts training from scratch; the operator says so (docs/kubernetes.md, "Storage").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tfkube.kube.names import SCRATCH_VOLUME, claim_name
from tfkube.spec import TFJob, VolumeSpec

DEFAULT_CLAIM_SIZE = "10Gi"
"""The size of a claim tfkube creates when nothing names one."""
EMPTY_DIR = SCRATCH_VOLUME
"""How `rendered_storage` (and so a TFJob's `status.storage`) names a volume that is no
claim."""


@dataclass(frozen=True)
class StorageDefaults:
    """What a cluster's administrator gives every job whose spec names no logs storage:
    the operator's settings (`tfkube install --logs-storage-class` or `--logs-claim`).
    Neither: such a job's logs stay in its pods."""

    logs_storage_class: str | None = None
    """A new claim `<job>-logs` of this StorageClass for each such job."""
    logs_claim: str | None = None
    """This existing ReadWriteMany claim, which the administrator makes in every namespace
    jobs run in; each job writes in a folder of its own name."""
    logs_size: str = DEFAULT_CLAIM_SIZE
    """The size of a new claim (with `logs_storage_class`)."""

    def __post_init__(self) -> None:
        if self.logs_storage_class and self.logs_claim:
            raise ValueError(
                "give a storage class for new logs claims or an existing claim, not both"
            )

    @property
    def gives_logs(self) -> bool:
        return bool(self.logs_storage_class or self.logs_claim)


class Source(StrEnum):
    CLAIM = "claim"
    """An existing claim: nothing is created."""
    NEW_CLAIM = "new claim"
    """A claim tfkube creates with the job (and deletes with it)."""
    EMPTY_DIR = EMPTY_DIR
    """An empty folder of each pod."""


@dataclass(frozen=True)
class Volume:
    """One of a job's two volumes (`data` or `logs`), as every replica pod mounts it."""

    which: str
    source: Source
    why: str
    """What decided it (a field of the spec, the administrator's default, nothing)."""
    claim: str | None = None
    sub_path: str | None = None
    """The job's own folder in a claim shared by many jobs."""
    size: str | None = None
    storage_class: str | None = None
    """A new claim's class; None: the cluster's default class."""

    @property
    def shared(self) -> bool:
        """Whether every replica (and TensorBoard) sees the same files."""
        return self.source is not Source.EMPTY_DIR

    def pod_volume(self) -> dict[str, Any]:
        if self.claim is None:
            return {"name": self.which, "emptyDir": {}}
        return {"name": self.which, "persistentVolumeClaim": {"claimName": self.claim}}

    def summary(self) -> str:
        """`claim NAME`, `claim NAME (folder JOB)` or `emptyDir`."""
        if self.claim is None:
            return EMPTY_DIR
        return f"claim {self.claim}" + (f" (folder {self.sub_path})" if self.sub_path else "")


@dataclass(frozen=True)
class JobVolumes:
    data: Volume
    logs: Volume

    def new_claims(self) -> list[Volume]:
        return [v for v in (self.data, self.logs) if v.source is Source.NEW_CLAIM]


def _asked(job: TFJob, which: str, volume: VolumeSpec) -> Volume:
    field = f"spec.storage.{which}"
    if volume.claim_name:
        # A claim named by the job may be shared by many jobs: the logs get a folder each.
        sub_path = job.name if which == "logs" else None
        return Volume(which, Source.CLAIM, f"{field}.claimName", volume.claim_name, sub_path)
    return Volume(
        which,
        Source.NEW_CLAIM,
        field,
        claim_name(job.name, which),
        size=volume.size or DEFAULT_CLAIM_SIZE,
        storage_class=volume.storage_class_name,
    )


def _logs(job: TFJob, defaults: StorageDefaults) -> Volume:
    spec = job.spec.storage.logs
    if spec.asks_for_claim:
        return _asked(job, "logs", spec)
    if defaults.logs_claim:
        why = "the cluster's default for jobs (the operator's logs claim)"
        return Volume("logs", Source.CLAIM, why, defaults.logs_claim, job.name)
    tensorboard = job.spec.tensorboard
    if defaults.logs_storage_class or (tensorboard is not None and tensorboard.enabled):
        why = (
            "the cluster's default for jobs (the operator's logs storage class)"
            if defaults.logs_storage_class
            else "spec.tensorboard (TensorBoard reads the logs from its own pod)"
        )
        return Volume(
            "logs",
            Source.NEW_CLAIM,
            why,
            claim_name(job.name, "logs"),
            size=defaults.logs_size,
            storage_class=defaults.logs_storage_class,
        )
    return Volume("logs", Source.EMPTY_DIR, "nothing asks for a claim")


def job_volumes(job: TFJob, defaults: StorageDefaults | None = None) -> JobVolumes:
    """The job's `data` and `logs` volumes (see the module docstring)."""
    data = job.spec.storage.data
    return JobVolumes(
        data=(
            _asked(job, "data", data)
            if data.asks_for_claim
            else Volume("data", Source.EMPTY_DIR, "nothing asks for a claim")
        ),
        logs=_logs(job, defaults or StorageDefaults()),
    )


def rendered_storage(objects: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """What rendered objects give the replicas as `data` and `logs`: `claim NAME` or
    `emptyDir` (read from the role Jobs' pod templates: what the operator knows of a job's
    storage, whoever decided it)."""
    out: dict[str, str] = {}
    for obj in objects:
        if obj.get("kind") != "Job":
            continue
        pod = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        for volume in pod.get("volumes") or []:
            name = volume.get("name")
            if name not in ("data", "logs") or name in out:
                continue
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            out[name] = f"claim {claim}" if claim else EMPTY_DIR
    return out
