"""A model server's autoscaling as its owner asks for it (pure): how many replicas at
least and at most, and the CPU utilization they are scaled to. On Kubernetes it becomes a
HorizontalPodAutoscaler (`tfkube.render.render_autoscaler`); what a team may ask for is
the server's decision (`tfkube.server.workloads.model_servers.autoscale_problems`)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, ValidationInfo, field_validator

from tfkube.spec._models import _Model

MAX_REPLICAS_LIMIT = 100
"""No model server asks for more, whatever a site allows (a typo guard)."""


class Autoscale(_Model):
    """`{minReplicas, maxReplicas, targetCPUUtilization, scaleDownStabilizationSeconds}`."""

    min_replicas: Annotated[int, Field(ge=1, le=MAX_REPLICAS_LIMIT)] = 1
    """Replicas kept however idle (at least 1: a model server never scales to zero)."""
    max_replicas: Annotated[int, Field(ge=1, le=MAX_REPLICAS_LIMIT)]
    """Replicas at most; bounded by the server's `--serving-max-replicas` and the team's
    quota (the server refuses more)."""
    target_cpu_utilization: Annotated[int, Field(ge=1, le=100, alias="targetCPUUtilization")] = 70
    """The average CPU use the replicas are scaled to, in percent of each one's CPU
    request (which equals its limit: 100 is a replica at its limit)."""
    scale_down_stabilization_seconds: Annotated[int | None, Field(ge=0, le=3600)] = None
    """How long load must stay low before replicas are removed (the highest recommendation
    of this window wins); None: Kubernetes' default, 300 s."""

    @field_validator("max_replicas")
    @classmethod
    def _at_least_min(cls, value: int, info: ValidationInfo) -> int:
        least = info.data.get("min_replicas")  # validated first (declared first)
        if least is not None and value < least:
            raise ValueError(
                f"{value} is less than minReplicas ({least}); raise maxReplicas or lower "
                "minReplicas"
            )
        return value
