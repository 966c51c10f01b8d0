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

Channels to model servers are reused per address and closed once nothing uses them
(`Channels`): a model server's old address (rolled, rescheduled) when its calls end, an
address no call used for IDLE_SECONDS (a model server deleted), all at shutdown.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc
from fastapi import HTTPException

from tfkube.server.accounts import token_bearer
from tfkube.server.api.deps import bearer_principal
from tfkube.server.api.routes.proxy import model_target
from tfkube.server.core.inputs import MAX_PROXY_BODY_BYTES

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
LISTENER = [
    ("grpc.max_receive_message_length", MAX_PROXY_BODY_BYTES),
    ("grpc.max_send_message_length", -1),
]
"""The listener's bound on a call's message: the REST proxy's on a body. grpcio reads a
whole message before the handler sees the call's token, so without a bound anyone who
reaches the port could make the server hold 2 GiB a call (RESOURCE_EXHAUSTED now, before
the token is looked at)."""
DIRECT = [*UNLIMITED, ("grpc.enable_http_proxy", 0)]
"""The channels to model servers: a route the engine chose (a relay's socket, a Service
on the cluster's network), never an HTTP proxy of the server's environment."""
IDLE_SECONDS = 600.0
"""A channel no call used for this long is closed (its model server gone, most likely);
the next call to that address opens a new one."""
SWEEP_SECONDS = 60.0
"""How often the proxy closes idle channels."""


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


@dataclass
class _Held:
    channel: grpc.Channel
    used: float
    """When a call last started or ended on it (`Channels.clock`)."""
    calls: int = 0
    """Calls on it now."""
    retired: bool = False
    """No model server's address any more: closed when its last call ends."""


class Channels:
    """The proxy's channels to model servers, one per address, each closed once nothing
    uses it, never under a call in flight: the address a model server had before its
    current one (rolled or rescheduled) when the calls on it end; an address no call
    used for `idle` seconds at the next `sweep` (a model server deleted: the proxy is not
    told); all at `close`."""

    def __init__(
        self, idle: float = IDLE_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.idle = idle
        self.clock = clock
        self._held: dict[str, _Held] = {}
        self._address: dict[str, str] = {}
        """Model server id -> the address its last call went to."""
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def call(self, server_id: str, address: str) -> Iterator[grpc.Channel]:
        """The channel to `address` for one call to model server `server_id`, held open
        while the block runs. A model server's earlier address that none other has is
        retired: its channel is closed now, or when its last call ends."""
        closing: list[grpc.Channel] = []
        with self._lock:
            before = self._address.get(server_id)
            self._address[server_id] = address
            if before is not None and before != address:
                closing += self._retire(before)
            held = self._held.get(address)
            if held is None:
                held = _Held(grpc.insecure_channel(address, options=DIRECT), self.clock())
                self._held[address] = held
            held.retired = False
            held.calls += 1
            held.used = self.clock()
        _close(closing)
        try:
            yield held.channel
        finally:
            with self._lock:
                held.calls -= 1
                held.used = self.clock()
                last = held.retired and held.calls == 0 and self._held.get(address) is held
                if last:
                    del self._held[address]
            if last:
                _close([held.channel])

    def _retire(self, address: str) -> list[grpc.Channel]:
        """Under the lock: mark `address` retired unless a model server still has it; its
        channel when it can be closed now."""
        held = self._held.get(address)
        if held is None or address in self._address.values():
            return []
        held.retired = True
        if held.calls:
            return []
        del self._held[address]
        return [held.channel]

    def sweep(self) -> list[str]:
        """Close the channels no call used for `idle` seconds; their addresses."""
        now = self.clock()
        with self._lock:
            idle = [a for a, h in self._held.items() if not h.calls and now - h.used >= self.idle]
            closing = [self._held.pop(a).channel for a in idle]
            for server_id, address in list(self._address.items()):
                if address in idle:
                    del self._address[server_id]
        _close(closing)
        return idle

    def open(self) -> list[str]:
        """The addresses with a channel now."""
        with self._lock:
            return sorted(self._held)

    def close(self) -> None:
        """Close every channel (at shutdown, after the calls ended)."""
        with self._lock:
            closing = [h.channel for h in self._held.values()]
            self._held.clear()
            self._address.clear()
        _close(closing)


def _close(channels: list[grpc.Channel]) -> None:
    for channel in channels:
        channel.close()


class GrpcProxy:
    """The listener and its channels to the model servers (`Channels`)."""

    def __init__(
        self,
        platform: Platform,
        host: str,
        port: int,
        threads: int = 16,
        sweep_seconds: float = SWEEP_SECONDS,
    ) -> None:
        self.platform = platform
        self.address = f"{host}:{port}"
        self.channels = Channels()
        self._sweep_seconds = sweep_seconds
        self._stopping = threading.Event()
        self._sweeper = threading.Thread(
            target=self._sweep, name="tfkube-grpc-proxy-sweep", daemon=True
        )
        self._server = grpc.server(
            ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tfkube-grpc-proxy"),
            handlers=[_Handler(self._forward)],
            options=LISTENER,
        )
        if self._server.add_insecure_port(self.address) == 0:
            raise OSError(f"cannot listen for gRPC on {self.address}")

    def start(self) -> None:
        self._server.start()
        self._sweeper.start()
        log.info("TensorFlow Serving's gRPC API through the server on %s", self.address)

    def stop(self, grace: float = 5.0) -> None:
        self._stopping.set()
        self._server.stop(grace).wait(grace + 1)
        if self._sweeper.is_alive():
            self._sweeper.join()
        self.channels.close()

    def _sweep(self) -> None:
        while not self._stopping.wait(self._sweep_seconds):
            for address in self.channels.sweep():
                log.info("closed the idle gRPC channel to %s", address)

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
            holder = token_bearer(db, token or "")
            if holder is None:
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "the API token is not valid")
            assert holder is not None
            try:
                found, counted = model_target(
                    db, server_id, bearer_principal(db, holder), self.platform
                )
            except HTTPException as exc:
                context.abort(grpc_status(exc.status_code), str(exc.detail))
            db.commit()
        if found.grpc is None:
            context.abort(grpc.StatusCode.UNAVAILABLE, unreachable(found.no_grpc))
        assert found.grpc is not None
        upstream = [(k.lower(), v) for k, v in found.grpc_metadata.items()]
        with self.channels.call(server_id, found.grpc) as channel:
            try:
                answer: bytes = channel.unary_unary(method)(
                    request, metadata=upstream, timeout=context.time_remaining()
                )
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


__all__ = [
    "MODEL_SERVER",
    "Channels",
    "GrpcProxy",
    "bearer",
    "forwarded",
    "grpc_status",
    "unreachable",
]
