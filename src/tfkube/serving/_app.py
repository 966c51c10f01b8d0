"""The model server's HTTP shell (Starlette on uvicorn): authenticate, route, parse
(`_rest`), run (`_store`), answer. Every error, including a crash inside TensorFlow, goes
out in TensorFlow Serving's `{"error": ...}` shape with its status code.

When the platform starts a model server it gives it a secret (`TFKUBE_SERVING_TOKEN`):
every request must carry it as `Authorization: Bearer`, which only the platform's
authenticating proxy adds, so the loopback port alone grants nothing.
"""

from __future__ import annotations

import hmac
import json
import logging
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tfkube.serving._rest import (
    Code,
    ServingError,
    metadata_answer,
    not_found,
    parse_predict,
    predict_answer,
    route,
    status_answer,
)
from tfkube.serving._store import ModelStore

log = logging.getLogger("tfkube.serving")


def _json(body: Any, status: int = 200) -> Response:
    # TensorFlow Serving writes NaN and Infinity as bare tokens (api_rest.md, "JSON
    # conformance"); the standard library does the same with allow_nan.
    return Response(
        json.dumps(body, allow_nan=True, separators=(",", ":")),
        status_code=status,
        media_type="application/json",
    )


def _predict(store: ModelStore, version: int | None, body: bytes) -> dict[str, Any]:
    """Parse, run and answer a :predict (in a worker thread: TensorFlow blocks)."""
    servable = store.servable(version)
    request = parse_predict(body, servable.info.signatures)
    outputs = servable.run(request.signature_name, request.inputs)
    return predict_answer(outputs, request.row_format)


def create_app(store: ModelStore, token: str | None = None) -> Starlette:
    async def handle(request: Request) -> Response:
        if token is not None:
            sent = request.headers.get("authorization", "")
            if not hmac.compare_digest(sent.encode(), f"Bearer {token}".encode()):
                return _json(
                    ServingError(Code.UNAUTHENTICATED, "a valid token is required").body(), 401
                )
        path = request.url.path
        if not path.startswith("/v1/"):
            return _json({"error": f"Not found: {path}"}, 404)
        try:
            call = route(request.method, path)
            if call.model != store.name:
                raise not_found(call.model, call.version)
            if call.kind == "status":
                return _json(status_answer(store.name, store.statuses(), call.version))
            if call.kind == "metadata":
                return _json(metadata_answer(store.name, store.servable(call.version).info))
            body = await request.body()
            return _json(await run_in_threadpool(_predict, store, call.version, body))
        except ServingError as exc:
            return _json(exc.body(), exc.http_status)
        except Exception as exc:  # never a crash, never a bare 500 page
            log.exception("request %s %s failed", request.method, path)
            return _json({"error": f"{type(exc).__name__}: {exc}"}, 500)

    return Starlette(
        routes=[Route("/{path:path}", handle, methods=["GET", "POST", "PUT", "PATCH", "DELETE"])]
    )
