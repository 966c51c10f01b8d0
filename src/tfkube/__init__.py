"""tfkube: distributed TensorFlow training as one command.

Data flows one way: a job file is parsed into a typed `TFJob` (`tfkube.spec`), the cluster
math turns counts into addresses and the per-replica contract (`tfkube.tfcluster`), the
planner decides what the job should do next from what was observed (`tfkube.planner`),
and a backend (`tfkube.engines`) is the only place that acts: it starts the launcher
(`tfkube.launcher`) once per replica, as a process locally or as a pod in a cluster.
The server (`tfkube.server`) serves teams over HTTP; `tfkube.Client` talks to it.

This module imports nothing at start-up: the launcher (standard library only) runs from
it inside stock TensorFlow images. `tfkube.Client` is loaded on first use.
"""

import importlib
from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # Loaded by name on first use, so that nothing importing `tfkube` (every layer, the
    # launcher) depends on the client and its httpx.
    if name == "Client":
        return importlib.import_module("tfkube.client").Client
    raise AttributeError(f"module 'tfkube' has no attribute {name!r}")
