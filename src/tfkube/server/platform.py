"""Everything a request handler may need, made once at start-up: settings, the database,
the engine every workload runs on, the job service, the blob store, the login limiter,
the workloads behind the proxy (TensorBoards, model servers, notebooks)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import Engine as Database
from sqlalchemy.orm import Session, sessionmaker

from tfkube.engines import Engine
from tfkube.server.artifacts import BlobStore, BlobStoreError
from tfkube.server.core.config import ServerSettings
from tfkube.server.core.ratelimit import LoginGuard
from tfkube.server.core.tables import Job
from tfkube.server.jobs.service import JobService
from tfkube.server.metrics import Metrics
from tfkube.server.notifications import Notifier
from tfkube.server.outputs.archive import ARCHIVE
from tfkube.server.outputs.archived import ArchivedOutputs
from tfkube.server.outputs.folder import LocalFolder, OutputsFolder
from tfkube.server.outputs.scalars import ScalarReader
from tfkube.server.outputs.shipped import ShippedStore
from tfkube.server.s3blobs import ArchiveReader
from tfkube.server.workloads.model_servers import ModelServers
from tfkube.server.workloads.notebooks import Notebooks
from tfkube.server.workloads.tensorboards import TensorBoards

log = logging.getLogger("tfkube.server")


@dataclass
class Platform:
    settings: ServerSettings
    database: Database
    sessions: sessionmaker[Session]
    key: bytes
    engine: Engine
    """Where every team's workloads run (`tfkube.engines`): the server asks it, never
    which kind it is."""
    jobs: JobService
    blobs: BlobStore
    model_servers: ModelServers
    """The teams' model servers (routes/serving.py, the proxy's `model` kind)."""
    notebooks: Notebooks
    """The users' notebooks (routes/notebooks.py, the proxy's `notebook` kind)."""
    tensorboards: TensorBoards
    """The jobs' TensorBoards behind the proxy, on demand (routes/proxy.py)."""
    notifier: Notifier
    """The users' notifications: queued on their jobs' events, delivered (notifications.py)."""
    logins: LoginGuard = field(default_factory=LoginGuard)
    """Failed sign-ins per name and address (core/ratelimit.py)."""
    scalars: ScalarReader = field(default_factory=ScalarReader)
    shipped: ShippedStore = field(default_factory=ShippedStore)
    """What replicas ship where the server cannot read their folder (routes/ship.py)."""
    metrics: Metrics | None = None
    closing: list[Callable[[], None]] = field(default_factory=list)
    """Called at shutdown after the job loop stopped (the outputs' archiver)."""
    starting: list[Callable[[], None]] = field(default_factory=list)
    """Called at start after the job loop started (the retention loop)."""
    archive: ArchiveReader | None = None
    """With `--store s3://`: ended jobs' archives read back (`s3blobs.ArchiveReader`)."""

    def archived(self, job: Job) -> ArchivedOutputs | None:
        """The job's archive when its logs and outputs live only there (`Job.outputs_at`),
        else None (read the output folder). Raises LookupError (the archive is missing,
        or the server runs without `--store` now), `ArchiveRefused`, `BlobStoreError`."""
        if job.outputs_at != ARCHIVE:
            return None
        if self.archive is None or not job.archive_key:
            raise LookupError(
                "this job's logs and outputs are kept in the store's archive only, and the "
                "server runs without --store now"
            )
        return self.archive.outputs(job.archive_key)

    def outputs(self, job: Job) -> OutputsFolder | None:
        """Where the job's outputs are read (scalars, usage, checkpoint, result): its
        archive when they live only there, else its output folder; None when it keeps none
        on the server. Raises as `archived` does."""
        if (archive := self.archived(job)) is not None:
            return archive
        return LocalFolder(job.output_dir) if job.output_dir else None

    def outputs_if_readable(self, job: Job) -> OutputsFolder | None:
        """`outputs`, or None where the archive cannot be read now (refused, missing, the
        store failing): for answers that show what they can (the compare page's curves)."""
        from tfkube.server.outputs.archived import ArchiveRefused

        try:
            return self.outputs(job)
        except (ArchiveRefused, LookupError, BlobStoreError):
            return None

    def __post_init__(self) -> None:
        if self.metrics is None:
            self.metrics = Metrics(self.sessions)
