"""The model server's REST door: TensorFlow Serving's REST API as a bare ASGI application on
uvicorn (httptools, uvloop where installed): authenticate, route, parse (`_rest`, straight
to arrays), run (`_calls`: batched; a lone request whose model call is quick runs on the
loop's own thread, with no hop to a batch thread and back), answer (orjson, straight from
the arrays). Every error, including a crash inside TensorFlow, goes out in TensorFlow
Serving's `{"error": ...}` shape with its status code.

When the platform starts a model server it gives it a secret (`TFKUBE_SERVING_TOKEN`):
every request must carry it as `Authorization: Bearer`, which only the platform's
authenticating proxy adds, so the port alone grants nothing. One path needs no secret and
tells only readiness (`contract.SERVING_READY_PATH`): a version is available and, when the
model server has a gRPC door, that door answers its health check (`grpc_ready`).

No web framework in between: a request is one path, a method and a body, and each layer
a framework adds cost more than the JSON of a batch-1 request (docs/benchmarks.md).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from tfkube import contract
from tfkube.serving._calls import Calls, LoopCalls
from tfkube.serving._rest import (
    Code,
    ServingError,
    dumps,
    metadata_answer,
    not_found,
    parse_predict,
    predict_body,
    route,
    shortened,
    status_answer,
)

log = logging.getLogger("tfkube.serving")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_JSON = [(b"content-type", b"application/json")]


async def _answer(send: Send, status: int, body: bytes) -> None:
    headers = [*_JSON, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _too_large(limit: int) -> ServingError:
    return ServingError(
        Code.RESOURCE_EXHAUSTED,
        f"the request body is over {limit} bytes, the most this model server reads "
        "(--max_request_bytes)",
        http_status=413,
    )


PENDING_BODIES = 4
"""The REST door holds at most this many `--max_request_bytes` of bodies at once, over all
its requests (read, parsed or waiting for their model call); a request past it is
refused at once, RESOURCE_EXHAUSTED (429, TensorFlow Serving's status for the code)."""


class BodyBudget:
    """The bytes of request bodies the REST door holds now (one event loop: no lock)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.held = 0

    def take(self, size: int) -> None:
        if self.held + size > self.total:
            raise ServingError(
                Code.RESOURCE_EXHAUSTED,
                f"the model server holds {self.held} bytes of request bodies already; "
                f"{size} more would pass its {self.total} ({PENDING_BODIES} x "
                "--max_request_bytes): try again",
            )
        self.held += size

    def give(self, size: int) -> None:
        self.held -= size


async def _body(
    receive: Receive, scope: Scope, limit: int, budget: BodyBudget, taken: list[int]
) -> bytes:
    """The request's body, at most `limit` bytes: a declared `Content-Length` over it is
    refused before a byte is read, a streamed body as it passes it. Its bytes are taken
    from `budget` as they are declared or arrive (`taken` says how many, for the caller
    to give back once the request is answered)."""
    for key, value in scope["headers"]:
        if key == b"content-length":
            if not value.strip().isdigit() or int(value) > limit:
                raise _too_large(limit)
            budget.take(int(value))
            taken[0] += int(value)
    parts = []
    received = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionError("the client went away")
        part = message.get("body", b"")
        received += len(part)
        if received > limit:
            raise _too_large(limit)
        if received > taken[0]:
            budget.take(received - taken[0])
            taken[0] = received
        parts.append(part)
        if not message.get("more_body"):
            return parts[0] if len(parts) == 1 else b"".join(parts)


ReadyCheck = Callable[[], Awaitable[str | None]]
"""None when ready, else why not."""


def create_app(
    calls: Calls, token: str | None = None, grpc_ready: ReadyCheck | None = None
) -> ASGIApp:
    expected = f"Bearer {token}".encode() if token is not None else None
    store = calls.store
    loop_calls = LoopCalls(calls)
    budget = BodyBudget(PENDING_BODIES * calls.max_request_bytes)

    async def lifespan(receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def answer(method: str, path: str, receive: Receive, scope: Scope) -> tuple[int, bytes]:
        call = route(method, path)
        if call.kind == "status":
            if call.model != store.name:
                raise not_found(call.model, call.version)
            version = call.version
            if call.label:
                version = store.resolve(None, call.label)
            return 200, dumps(status_answer(store.name, store.statuses(), version))
        version, servable = calls.servable(call.model, call.version, call.label)
        if call.kind == "metadata":
            return 200, dumps(metadata_answer(store.name, servable.info))
        taken = [0]
        try:
            body = await _body(receive, scope, calls.max_request_bytes, budget, taken)
            request = parse_predict(
                body, servable.info.signatures, calls.max_elements, calls.bounds
            )
            outputs = await loop_calls.run(
                version, servable, request.signature_name, request.inputs
            )
            return 200, predict_body(outputs, request.row_format)
        finally:
            budget.give(taken[0])

    async def _answer_ready(send: Send) -> None:
        why = None if store.serving_version is not None else "no version is available yet"
        if why is None and grpc_ready is not None:
            why = await grpc_ready()
        if why is None:
            await _answer(send, 200, b'{"ready":true}')
        else:
            await _answer(send, 503, dumps(ServingError(Code.UNAVAILABLE, why).body()))

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        if path == contract.SERVING_READY_PATH and method in ("GET", "HEAD"):
            await _answer_ready(send)
            return
        if expected is not None:
            sent = b""
            for key, value in scope["headers"]:
                if key == b"authorization":
                    sent = value
                    break
            if not hmac.compare_digest(sent, expected):
                error = ServingError(Code.UNAUTHENTICATED, "a valid token is required")
                await _answer(send, 401, dumps(error.body()))
                return
        if not path.startswith("/v1/"):
            await _answer(send, 404, dumps({"error": f"Not found: {path}"}))
            return
        try:
            status, body = await answer(method, path, receive, scope)
        except ServingError as exc:
            status, body = exc.http_status, dumps(exc.body())
        except ConnectionError:
            return
        except Exception as exc:  # never a crash, never a bare 500 page
            log.exception("request %s %s failed", method, path)
            status, body = 500, dumps({"error": shortened(f"{type(exc).__name__}: {exc}")})
        await _answer(send, status, body)

    return app
