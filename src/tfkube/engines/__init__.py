"""Engines: the only places with side effects. One `Backend` interface, two engines."""

from tfkube.engines._base import (
    Backend,
    JobEvent,
    JobExists,
    JobNotFound,
    JobView,
    ReplicaView,
)

__all__ = ["Backend", "JobEvent", "JobExists", "JobNotFound", "JobView", "ReplicaView"]
