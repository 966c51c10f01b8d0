"""The local engine: replicas as processes on this machine (the embedded default)."""

from tfkube.backends.local._engine import LocalBackend
from tfkube.backends.local._store import tfkube_home

__all__ = ["LocalBackend", "tfkube_home"]
