"""Serving trained models: a model server that speaks TensorFlow Serving's REST API
(`python -m tfkube.serving`), and the export convention it reads.

    _versions  which exported versions exist, which one is served (pure)
    _rest      TensorFlow Serving's REST API: paths, bodies, answers, errors (pure, numpy)
    _store     the versions in memory; TensorFlow loads them (a thread polls for new ones)
    _app       the HTTP shell (Starlette + uvicorn)

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
