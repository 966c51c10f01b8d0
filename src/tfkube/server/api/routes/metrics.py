"""`/metrics` for Prometheus: needs a site admin's API token (scrape with
`authorization: {credentials: tfk_...}`), like every endpoint but health and sign-in."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from tfkube.server.api.deps import PlatformDep, SiteAdmin

router = APIRouter(tags=["metrics"])


@router.get("/metrics")
def metrics(_: SiteAdmin, platform: PlatformDep) -> Response:
    assert platform.metrics is not None
    return Response(generate_latest(platform.metrics.registry), media_type=CONTENT_TYPE_LATEST)
