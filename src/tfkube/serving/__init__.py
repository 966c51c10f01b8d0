"""Serving trained models: a model server that speaks TensorFlow Serving's REST and gRPC
APIs (`python -m tfkube.serving`), and the export convention it reads.

    _versions   which exported versions exist, which ones are served, labels (pure)
    _rest       TensorFlow Serving's REST API: paths, bodies, answers, errors (pure, numpy)
    _protowire  TensorFlow Serving's gRPC messages as bytes (pure, numpy)
    _store      the versions in memory; TensorFlow loads them (a thread polls for new
                ones), warms them up
    _batching   TensorFlow Serving's batching: queues, batch threads
    _calls      what both doors ask of the model
    _app        the REST shell (bare ASGI on uvicorn)
    _grpc       the gRPC shell (grpcio)

Importing this package loads neither TensorFlow nor the HTTP stack, so the platform
server can list a job's exported versions cheaply.
"""

from __future__ import annotations

from tfkube.serving._versions import (
    SAVED_MODEL_FILES,
    VersionPolicy,
    choose_version,
    exported_versions,
    version_of,
)

__all__ = [
    "SAVED_MODEL_FILES",
    "VersionPolicy",
    "choose_version",
    "exported_versions",
    "version_of",
]
