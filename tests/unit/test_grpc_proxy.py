"""The server's gRPC proxy, its pure parts: which methods it forwards, the token it reads,
how a refusal becomes a gRPC status (tests/server/test_serving runs the real thing)."""

from __future__ import annotations

import grpc
import pytest

from tfkube.server.api.grpc_proxy import bearer, forwarded, grpc_status


@pytest.mark.parametrize(
    ("method", "ok"),
    [
        ("/tensorflow.serving.PredictionService/Predict", True),
        ("/tensorflow.serving.PredictionService/GetModelMetadata", True),
        ("/tensorflow.serving.ModelService/GetModelStatus", True),
        ("/tensorflow.serving.ModelService/HandleReloadConfigRequest", True),
        ("/grpc.health.v1.Health/Check", False),
        ("/tensorflow.serving.PredictionService/Predict/extra", False),
        ("/tensorflow.serving.SessionService/SessionRun", False),
    ],
)
def test_only_tensorflow_servings_services_are_forwarded(method: str, ok: bool) -> None:
    assert forwarded(method) is ok


@pytest.mark.parametrize(
    ("metadata", "token"),
    [
        ({"authorization": "Bearer tfk_abc"}, "tfk_abc"),
        ({"authorization": "bearer  tfk_abc "}, "tfk_abc"),
        ({"authorization": "Basic dXNlcg=="}, None),
        ({"authorization": "Bearer "}, None),
        ({}, None),
    ],
)
def test_the_token_is_a_bearer_one(metadata: dict[str, str], token: str | None) -> None:
    assert bearer(metadata) == token


def test_refusals_keep_their_meaning() -> None:
    assert grpc_status(401) is grpc.StatusCode.UNAUTHENTICATED
    assert grpc_status(403) is grpc.StatusCode.PERMISSION_DENIED
    assert grpc_status(404) is grpc.StatusCode.NOT_FOUND
    assert grpc_status(503) is grpc.StatusCode.UNAVAILABLE
    assert grpc_status(500) is grpc.StatusCode.INTERNAL
