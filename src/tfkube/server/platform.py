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
from tfkube.server.artifacts import BlobStore
from tfkube.server.core.config import ServerSettings
from tfkube.server.core.ratelimit import LoginGuard
from tfkube.server.jobs.service import JobService
from tfkube.server.metrics import Metrics
from tfkube.server.notifications import Notifier
from tfkube.server.outputs.scalars import ScalarReader
from tfkube.server.outputs.shipped import ShippedStore
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

    def __post_init__(self) -> None:
        if self.metrics is None:
            self.metrics = Metrics(self.sessions)
