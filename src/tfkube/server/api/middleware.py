"""Three guards every request passes before it is routed (plain ASGI, no body copies):

- `ForwardedClient`: the client's address and scheme as `core/forwarded.py` decides
  (forwarding headers count only from a configured proxy); uvicorn's own reading of
  them is off (`serve`).
- `BodyLimit`: the body bound of `core/inputs.py`. A declared `Content-Length` over it is
  answered 413 at once, before a byte of the body is read; a body that passes it while
  it streams (chunked, or longer than declared) is cut off with 413 there. Either way the
  connection is closed after the answer, so the rest is never read.
- `UrlControlCharacters`: a path or query parameter holding a control character (a NUL,
  a newline: never part of a name) is answered 400 naming the parameter, before any
  route turns it into a file name, a database value or a header. The proxy's URLs are
  the proxied program's business and pass.
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from fastapi import FastAPI
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tfkube.server.core.forwarded import Network, parse_networks, resolve_client
from tfkube.server.core.inputs import body_limit, control_problem, declared_too_large
from tfkube.wire import ErrorBody

CLOSE = {"Connection": "close"}
"""Sent with a refusal of a body: uvicorn then closes the connection instead of reading
what the client still sends."""


def too_large(limit: int, what: str = "the request body") -> HTTPException:
    return HTTPException(413, f"{what} is larger than the {limit:,} byte limit", CLOSE)


class ForwardedClient:
    def __init__(self, app: ASGIApp, trusted: tuple[Network, ...]) -> None:
        self.app = app
        self.trusted = trusted

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in {"http", "websocket"}:
            peer = scope.get("client")
            headers = Headers(scope=scope)
            client = resolve_client(
                peer[0] if peer else None,
                scope.get("scheme", "http"),
                headers.getlist("x-forwarded-for"),
                headers.getlist("x-forwarded-proto"),
                self.trusted,
            )
            scope = dict(scope)
            scope["client"] = (client.address, peer[1] if peer else 0)
            if scope["type"] == "http":
                scope["scheme"] = client.scheme
            else:
                scope["scheme"] = "wss" if client.scheme == "https" else "ws"
        await self.app(scope, receive, send)


class BodyLimit:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = body_limit(scope["method"], scope["path"])
        if limit is None:
            await self.app(scope, receive, send)
            return
        if declared_too_large(Headers(scope=scope).get("content-length"), limit):
            await _refuse(send, too_large(limit))
            return
        received = 0

        async def bounded() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise too_large(limit)
            return message

        await self.app(scope, bounded, send)


class UrlControlCharacters:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope["path"].startswith("/proxy/"):
            found = url_problem(scope["path"], scope.get("query_string", b""))
            if found is not None:
                field, problem = found
                await _refuse(send, HTTPException(400, f"{field}: {problem}"), [(field, problem)])
                return
        await self.app(scope, receive, send)


def url_problem(path: str, query: bytes) -> tuple[str, str] | None:
    """(the parameter, why) when a path or query parameter holds a control character."""
    if problem := control_problem(path):
        return "(path)", problem
    pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True, encoding="utf-8")
    for key, value in pairs:
        if problem := control_problem(key):
            return "(query)", problem
        if problem := control_problem(value):
            return key, problem
    return None


async def _refuse(
    send: Send, exc: HTTPException, errors: list[tuple[str, str]] | None = None
) -> None:
    body = ErrorBody.of(exc.detail, errors or []).model_dump_json().encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
        (b"cache-control", b"no-store"),
    ]
    await send({"type": "http.response.start", "status": exc.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def install(app: FastAPI, trusted_proxies: tuple[str, ...]) -> None:
    """The guards, outermost first: who the client is, then the URL, then the body."""
    app.add_middleware(BodyLimit)
    app.add_middleware(UrlControlCharacters)
    app.add_middleware(ForwardedClient, trusted=parse_networks(trusted_proxies))
