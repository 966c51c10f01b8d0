"""TensorFlow Serving's gRPC API through the server (`tfkube server --grpc-port`).

The server's HTTP side is HTTP/1.1 (uvicorn), so gRPC has a listener of its own. A call
names its model server and brings the member's API token as metadata, the way a
TensorFlow Serving client adds any metadata:

    authorization: Bearer tfk_...          a personal API token (`serving:read` in the team)
    tfkube-model-server: <id>              which model server (a model's name is not unique
                                           across teams; its id is)

Each call is checked as the REST proxy checks a request (`routes.proxy.model_target`:
the token, the team visible, `serving:read`, the model server running; anyone else is
told NOT_FOUND) and its bytes go unchanged to the engine's gRPC door for that model
server (`Upstream.grpc`) with the engine's metadata for it (`Upstream.grpc_metadata`: a
local model server's own secret; none on Kubernetes, and never the engine's credentials
for the API server); the caller's token never goes upstream. Only TensorFlow Serving's two
services are forwarded (`tensorflow.serving.PredictionService`,
`tensorflow.serving.ModelService`); any other method is UNIMPLEMENTED. Where the engine
has no gRPC door the server can reach (a Kubernetes model server when the server is
outside the cluster and not told it reaches the Service network: the API server's service
proxy carries HTTP/1.1 only) the call answers UNAVAILABLE with the engine's reason
(`Upstream.no_grpc`, which names the option that gives one).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import grpc
from fastapi import HTTPException

from tfkube.server.accounts import actor_of, token_user
from tfkube.server.api.deps import Principal
from tfkube.server.api.routes.proxy import model_target

if TYPE_CHECKING:
    from tfkube.server.platform import Platform

log = logging.getLogger(__name__)

SERVICES = ("/tensorflow.serving.PredictionService/", "/tensorflow.serving.ModelService/")
"""The methods forwarded: TensorFlow Serving's own."""
MODEL_SERVER = "tfkube-model-server"
"""The metadata naming the model server (its id, as in `/proxy/model/<id>/`)."""
STATUS = {
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    503: grpc.StatusCode.UNAVAILABLE,
}
"""The REST proxy's refusals as gRPC status codes."""
UNLIMITED = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
DIRECT = [*UNLIMITED, ("grpc.enable_http_proxy", 0)]
"""The channels to model servers: a route the engine chose (a relay's socket, a Service
on the cluster's network), never an HTTP proxy of the server's environment."""


def grpc_status(http_status: int) -> grpc.StatusCode:
    """A refusal's HTTP status as a gRPC status code. Pure."""
    return STATUS.get(http_status, grpc.StatusCode.INTERNAL)


def forwarded(method: str) -> bool:
    """Whether a gRPC method is one of TensorFlow Serving's. Pure."""
    return method.startswith(SERVICES) and method.count("/") == 2


def unreachable(why: str) -> str:
    """The UNAVAILABLE message when the engine offers no gRPC door. Pure."""
    said = "this model server has no gRPC door the server can reach"
    return f"{said}: {why}" if why else said


def bearer(metadata: dict[str, str]) -> str | None:
    """The API token of `authorization: Bearer <token>`, else None. Pure."""
    scheme, _, value = metadata.get("authorization", "").partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


class GrpcProxy:
    """The listener and its channels to the model servers (one per address, reused)."""

    def __init__(self, platform: Platform, host: str, port: int, threads: int = 16) -> None:
        self.platform = platform
        self.address = f"{host}:{port}"
        self._channels: dict[str, grpc.Channel] = {}
        self._lock = threading.Lock()
        self._server = grpc.server(
            ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tfkube-grpc-proxy"),
            handlers=[_Handler(self._forward)],
            options=UNLIMITED,
        )
        if self._server.add_insecure_port(self.address) == 0:
            raise OSError(f"cannot listen for gRPC on {self.address}")

    def start(self) -> None:
        self._server.start()
        log.info("TensorFlow Serving's gRPC API through the server on %s", self.address)

    def stop(self, grace: float = 5.0) -> None:
        self._server.stop(grace).wait(grace + 1)
        with self._lock:
            for channel in self._channels.values():
                channel.close()
            self._channels.clear()

    def _channel(self, target: str) -> grpc.Channel:
        with self._lock:
            channel = self._channels.get(target)
            if channel is None:
                channel = grpc.insecure_channel(target, options=DIRECT)
                self._channels[target] = channel
            return channel

    def _forward(self, method: str, request: bytes, context: grpc.ServicerContext) -> bytes:
        metadata = {k.lower(): v for k, v in context.invocation_metadata() if isinstance(v, str)}
        token = bearer(metadata)
        server_id = metadata.get(MODEL_SERVER, "")
        if token is None:
            context.abort(
                grpc.StatusCode.UNAUTHENTICATED,
                "send a personal API token as metadata: authorization: Bearer <token>",
            )
        if not server_id:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"name the model server by its id as metadata: {MODEL_SERVER}: <id>",
            )
        with self.platform.sessions() as db:
            user = token_user(db, token or "")
            if user is None:
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "the API token is not valid")
            assert user is not None
            try:
                found, counted = model_target(
                    db, server_id, Principal(user, actor_of(db, user)), self.platform
                )
            except HTTPException as exc:
                context.abort(grpc_status(exc.status_code), str(exc.detail))
            db.commit()
        if found.grpc is None:
            context.abort(grpc.StatusCode.UNAVAILABLE, unreachable(found.no_grpc))
        assert found.grpc is not None
        call = self._channel(found.grpc).unary_unary(method)
        upstream = [(k.lower(), v) for k, v in found.grpc_metadata.items()]
        try:
            answer: bytes = call(request, metadata=upstream, timeout=context.time_remaining())
        except grpc.RpcError as exc:
            counted(500)
            code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
            details = exc.details() if hasattr(exc, "details") else str(exc)
            context.abort(code, details or "")
        counted(200)
        return answer


class _Handler(grpc.GenericRpcHandler):  # type: ignore[misc]
    """Every TensorFlow Serving method, as bytes in and bytes out."""

    def __init__(self, forward: Callable[[str, bytes, grpc.ServicerContext], bytes]) -> None:
        self.forward = forward

    def service(self, handler_call_details: Any) -> grpc.RpcMethodHandler | None:
        method = str(handler_call_details.method)
        if not forwarded(method):
            return None  # UNIMPLEMENTED

        def unary(request: bytes, context: grpc.ServicerContext) -> bytes:
            return self.forward(method, request, context)

        return grpc.unary_unary_rpc_method_handler(unary)


__all__ = ["MODEL_SERVER", "GrpcProxy", "bearer", "forwarded", "grpc_status", "unreachable"]
