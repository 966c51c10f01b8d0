"""The local engine: replicas as processes on this machine (the embedded default)."""

from tfkube.engines.local._engine import LocalBackend
from tfkube.engines.local._host import LocalEngine
from tfkube.engines.local._store import tfkube_home

__all__ = ["LocalBackend", "LocalEngine", "tfkube_home"]
