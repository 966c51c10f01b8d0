"""The authenticating reverse proxy: `/proxy/<kind>/<id>/...` -> a process only the server
can reach: a job's TensorBoard, a team's model server, a user's notebook (HTTP and
WebSocket). The caller must be signed in and hold the kind's scope in the target's team
(404 otherwise, as everywhere; a notebook answers its owner only); the session cookie and
any Authorization header are never passed upstream, and the resolver adds the target's
own credential (a model server's secret, Jupyter's token), so a loopback port alone
grants nothing. State-changing requests and WebSockets with the cookie must come from
this origin.

Targets are a registry: kind -> resolver(db, id, principal, platform) -> the `Upstream`,
which the target's engine gives (`tfkube.engines.Engine.upstream`: a loopback process, or
the API server's service proxy to the target's Service); this module adds only the
caller's checks and what to count.

Origins (`core/origins.py`, `workload_origin.py`): a TensorBoard's or a notebook's pages
are the member's, so a browser gets them only on the target's own origin
(`<kind>-<id>.localhost:<port>` or below `--workload-url`), entered with a one-time grant
and then a pass cookie for that target alone; on the dashboard's origin a signed-in
browser asking for one is redirected there, and nothing proxied is ever a page: every
answer proxied on this origin (model servers' JSON, API clients' TensorBoard and
notebook requests with a Bearer token) carries `Content-Security-Policy: sandbox;
default-src 'none'` and `nosniff`.

An upstream that cuts its answer mid-body (its status and headers already passed on) cuts
the client's too: the proxy logs one line and raises `UpstreamCut`, uvicorn closes the
connection with the chunked body unfinished (the client sees an incomplete answer, never
a whole one), and `QuietCuts`, on uvicorn's error logger, keeps uvicorn's traceback for
that one exception out of the log. An upstream that gives no answer at all (`NO_ANSWER`: a
refused or dropped connection, closed before a status line) is asked once more for a GET
or HEAD, with a line logged; anything else gets 502 at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx
from fastapi import APIRouter, HTTPException, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse, RedirectResponse, StreamingResponse
from sqlalchemy.orm import Session
from starlette.requests import HTTPConnection
from starlette.websockets import WebSocketState

from tfkube.engines import NotAvailable
from tfkube.engines import Upstream as Target
from tfkube.server.api.deps import PlatformDep, Principal, SessionDep, bearer_principal
from tfkube.server.api.routes.workload_origin import enter_location, pass_principal, workload_in
from tfkube.server.core.origins import WORKLOAD_KINDS
from tfkube.server.core.scopes import Scope, visible
from tfkube.server.core.tables import Job, ModelServer, Notebook, Team, User
from tfkube.server.outputs.archive import needs_local_copy
from tfkube.server.platform import Platform
from tfkube.server.tenants import tenant_of
from tfkube.spec import load_job_text

router = APIRouter(tags=["proxy"])
log = logging.getLogger(__name__)


class UpstreamCut(Exception):
    """The upstream cut its answer after the client's response had begun: raised to end
    that response unfinished (the proxy logged it; `QuietCuts` keeps uvicorn quiet)."""


def _is_cut(exc: BaseException | None) -> bool:
    """Whether an exception is UpstreamCut, or a group holding only such. Pure."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_is_cut(e) for e in exc.exceptions)
    return isinstance(exc, UpstreamCut)


class QuietCuts(logging.Filter):
    """On uvicorn's error logger: drops its "Exception in ASGI application" record for an
    UpstreamCut (already logged in one line by the proxy); any other record passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and _is_cut(record.exc_info[1]))


QUIET_CUTS = QuietCuts()


def quiet_upstream_cuts() -> None:
    """Install QuietCuts on uvicorn's error logger (once: the same filter each time)."""
    logging.getLogger("uvicorn.error").addFilter(QUIET_CUTS)


HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "content-encoding",
}
NOT_FORWARDED = {"host", "cookie", "authorization", "x-csrf-token", "origin"}
"""The caller's credentials stay here; the origin was checked here (a notebook's Jupyter
would otherwise judge our origin as foreign)."""


@dataclass(frozen=True)
class Upstream:
    """Where a proxied request goes: `prefix` + the rest of the caller's path."""

    prefix: str
    """The upstream URL the caller's path below `/proxy/<kind>/<id>/` is appended to."""
    headers: dict[str, str] = field(default_factory=dict)
    """Sent upstream besides the caller's own (the target's credential; the caller's
    credentials never are)."""
    verify: ssl.SSLContext | bool = True
    """TLS verification for an https upstream (the API server's CA)."""
    params: dict[str, str] = field(default_factory=dict)
    """Query parameters added to the caller's."""
    on_response: Callable[[int], None] | None = None
    """Told each answer's status (a model server's request counts)."""
    unix: str | None = None
    """A Unix socket the connection goes to instead of `prefix`'s host and port (a
    workload in a network namespace of its own, behind its relay)."""


Resolver = Callable[[Session, str, Principal, Platform], Upstream]


def _target(found: Target, on_response: Callable[[int], None] | None = None) -> Upstream:
    return Upstream(
        found.prefix, found.headers, found.verify, found.params, on_response, found.unix
    )


def _tensorboard(db: Session, job_id: str, principal: Principal, platform: Platform) -> Upstream:
    job = db.get(Job, job_id)
    if job is None or not visible(principal.actor, job.team_id) or not job.output_dir:
        raise HTTPException(404, f"job {job_id!r} not found")
    principal.require(Scope.METRICS_READ, job.team_id)
    if (gone := needs_local_copy(job.outputs_at, "TensorBoard")) is not None:
        raise HTTPException(*gone)
    team = db.get(Team, job.team_id)
    assert team is not None
    spec = load_job_text(job.spec, f"job {job.name!r}")
    try:
        found = platform.tensorboards.upstream(tenant_of(team), job.id, spec, Path(job.output_dir))
    except NotAvailable as exc:
        raise HTTPException(404, str(exc)) from None
    except RuntimeError as exc:
        raise HTTPException(503, str(exc)) from None
    return _target(found)


def model_target(
    db: Session, server_id: str, principal: Principal, platform: Platform
) -> tuple[Target, Callable[[int], None]]:
    """A running model server the caller may use (`serving:read` in its team; anyone else
    is told it does not exist) -> where the engine serves it, and what counts an answer's
    status. Raises HTTPException (404, 403, 503). The REST proxy's and the gRPC proxy's
    (`api/grpc_proxy.py`) one check."""
    row = db.get(ModelServer, server_id)
    if row is None or not visible(principal.actor, row.team_id) or row.state != "running":
        raise HTTPException(404, f"model server {server_id!r} not found")
    principal.require(Scope.SERVING_READ, row.team_id)
    servers = platform.model_servers

    def counted(status: int) -> None:
        servers.count(row.id, status)

    try:
        return servers.upstream(db, row), counted
    except NotAvailable as exc:
        raise HTTPException(503, f"the model server is not running: {exc}") from None


def _model(db: Session, server_id: str, principal: Principal, platform: Platform) -> Upstream:
    return _target(*model_target(db, server_id, principal, platform))


def _notebook(db: Session, notebook_id: str, principal: Principal, platform: Platform) -> Upstream:
    row = db.get(Notebook, notebook_id)
    if row is None or row.user_id != principal.user.id:
        raise HTTPException(404, f"notebook {notebook_id!r} not found")
    if not visible(principal.actor, row.team_id):
        raise HTTPException(404, f"notebook {notebook_id!r} not found")
    principal.require(Scope.NOTEBOOKS, row.team_id)
    notebooks = platform.notebooks
    team, user = db.get(Team, row.team_id), db.get(User, row.user_id)
    assert team is not None
    assert user is not None
    try:
        row = notebooks.ensure(db, user, team)  # opening a stopped notebook starts it
        notebook_id = row.id

        def touched(_status: int) -> None:
            notebooks.touch(notebook_id)

        return _target(notebooks.upstream(db, row), touched)
    except (RuntimeError, NotAvailable) as exc:
        raise HTTPException(503, str(exc)) from None


TARGETS: dict[str, Resolver] = {
    "tensorboard": _tensorboard,
    "model": _model,
    "notebook": _notebook,
}
"""kind -> resolver."""

ERROR_SHAPES: dict[str, Callable[[str], dict[str, Any]]] = {
    "model": lambda detail: {"error": detail},
}
"""How a kind's clients expect the proxy's own errors: a TensorFlow Serving client reads
`{"error": ...}`."""


ON_THIS_ORIGIN = {
    "content-security-policy": "sandbox; default-src 'none'",
    "x-content-type-options": "nosniff",
    "cross-origin-resource-policy": "same-origin",
}
"""On every answer proxied on the dashboard's origin: no script, no plugin, no sniffing."""
ON_ITS_ORIGIN = {"cross-origin-resource-policy": "same-origin", "referrer-policy": "same-origin"}
"""On a workload's own origin (its own content policy, if any, is kept)."""


def _bearer(conn: HTTPConnection) -> bool:
    return conn.headers.get("authorization", "").lower().startswith("bearer ")


def _principal(
    conn: HTTPConnection, db: Session, method: str, key: bytes, kind: str, target_id: str
) -> Principal:
    from tfkube.server.accounts import actor_of, session_user, token_bearer
    from tfkube.server.core.security import SAFE_METHODS, SESSION_COOKIE

    header = conn.headers.get("authorization", "")
    workload = workload_in(conn)
    if workload is not None:  # a workload's origin: its pass only, for this very target
        if workload != (kind, target_id):
            raise HTTPException(404, f"nothing to proxy of kind {kind!r} here")
        principal = pass_principal(conn, db, key, kind, target_id)
        _same_origin(conn, method, SAFE_METHODS)
        return principal
    if header.lower().startswith("bearer "):
        bearer = token_bearer(db, header[7:].strip())
        if bearer is None:
            raise HTTPException(401, "the API token is not valid")
        return bearer_principal(db, bearer)
    cookie = conn.cookies.get(SESSION_COOKIE)
    user = session_user(db, cookie) if cookie else None
    if user is None:
        raise HTTPException(401, "sign in first")
    if kind in WORKLOAD_KINDS and method not in {"GET", "HEAD"}:
        # Its pages live on its own origin; the session cookie never drives it from here.
        raise HTTPException(
            403, f"a {kind} is served on its own origin; open it from the dashboard"
        )
    _same_origin(conn, method, SAFE_METHODS)
    return Principal(user, actor_of(db, user), session_id=cookie)


def _same_origin(conn: HTTPConnection, method: str, safe: frozenset[str]) -> None:
    """A cookie-authenticated request that changes state (or a WebSocket) must come from
    the origin it is sent to."""
    if method not in safe:
        origin = conn.headers.get("origin") or conn.headers.get("referer")
        if not origin or urlsplit(origin).netloc != conn.headers.get("host"):
            raise HTTPException(403, "refused: the request comes from another origin")


def _resolve(
    conn: HTTPConnection, db: Session, platform: Platform, kind: str, target_id: str, method: str
) -> tuple[Upstream, Principal]:
    resolver = TARGETS.get(kind)
    if resolver is None:
        raise HTTPException(404, f"nothing to proxy of kind {kind!r}")
    principal = _principal(conn, db, method, platform.key, kind, target_id)
    upstream = resolver(db, target_id, principal, platform)
    db.commit()  # no database connection held while it streams
    return upstream, principal


def _enter(
    conn: HTTPConnection, db: Session, platform: Platform, kind: str, target_id: str, path: str
) -> RedirectResponse:
    """A browser on the dashboard's origin asking for a TensorBoard or a notebook: the
    target's checks (and start) as for any request, then off to its own origin with a
    one-time grant."""
    _, principal = _resolve(conn, db, platform, kind, target_id, conn.scope.get("method", "GET"))
    location = enter_location(
        conn, principal, platform.key, platform.settings, kind, target_id, path
    )
    return RedirectResponse(location, status_code=303)


NO_ANSWER = (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError, httpx.ReadError)
"""An upstream that gave no answer at all: refused, dropped or never made the connection,
or closed it before a status line (a relay whose inside connection failed closes its side)."""
CONNECT_TIMEOUT = 10.0
"""Seconds for an upstream's connection to be made (the rest of the request has no limit:
a notebook's kernel or a long prediction streams). Inside a cluster a connection takes
milliseconds; one that takes seconds went into a void, as a connection to a Service just
created does when its name resolves before kube-proxy has written its ClusterIP's rules:
the first packet leaves untranslated and, since address translation is decided on a
connection's first packet, so do its retransmits, for as long as the connection is tried.
A new connection is translated (a GET tries one, AGAIN_FOR)."""
TIMEOUT = httpx.Timeout(60.0, connect=CONNECT_TIMEOUT, read=None)
"""Every upstream client's (the app's shared one too)."""
AGAIN_FOR = {"GET": 1, "HEAD": 1}
"""Requests sent once more after NO_ANSWER: only those that change nothing (a page loads
dozens of files at once, and one of them failing is an error dialog in JupyterLab);
anything else is the caller's to retry."""
AGAIN_AFTER = 0.2
"""Seconds before that second try."""


def _warn(said: str, kind: str, target: str, method: str, path: str, exc: Exception) -> None:
    """One line on what an upstream did to a request: "proxy: the <kind> <id> " + said, %s
    for the method, the path, the error's type and its text."""
    args = (kind, target, method, path, type(exc).__name__, exc or "no detail")
    log.warning("proxy: the %s %s " + said, *args)


def _client(request: Request, target: Upstream) -> tuple[httpx.AsyncClient, bool]:
    """The app's shared client (kept-alive connections to loopback targets), or a new one
    for a target with its own TLS settings or behind a Unix socket (-> (client, close it
    after))."""
    shared: httpx.AsyncClient | None = getattr(request.app.state, "proxy_client", None)
    if target.unix is not None:
        # Plain HTTP over a relay's socket makes no TLS context (some 80 ms a request);
        # an https prefix would keep the target's verification.
        verify = target.verify if target.prefix.startswith("https:") else False
        transport = httpx.AsyncHTTPTransport(uds=target.unix, verify=verify)
        return httpx.AsyncClient(timeout=TIMEOUT, verify=verify, transport=transport), True
    if target.verify is True and shared is not None:
        return shared, False
    return httpx.AsyncClient(timeout=TIMEOUT, verify=target.verify), True


@router.api_route(
    "/proxy/{kind}/{target_id}/{path:path}",
    methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"],
    response_model=None,
)
async def proxy(
    kind: str, target_id: str, path: str, request: Request, db: SessionDep, platform: PlatformDep
) -> StreamingResponse | JSONResponse | RedirectResponse:
    on_its_origin = workload_in(request) is not None
    try:
        if kind in WORKLOAD_KINDS and not on_its_origin and not _bearer(request):
            return await asyncio.to_thread(_enter, request, db, platform, kind, target_id, path)
        upstream_at, _ = await asyncio.to_thread(
            _resolve, request, db, platform, kind, target_id, request.method
        )
    except HTTPException as exc:
        if on_its_origin and exc.status_code == 401 and request.method in {"GET", "HEAD"}:
            # No pass (yet, or any more): through the dashboard's origin, which signs in,
            # checks and grants again.
            back = f"{platform.settings.base_url}/proxy/{kind}/{target_id}/{path}"
            query = f"?{request.url.query}" if request.url.query else ""
            return RedirectResponse(back + query, status_code=303)
        shape = ERROR_SHAPES.get(kind)
        if shape is None:
            raise
        return JSONResponse(shape(str(exc.detail)), status_code=exc.status_code)
    url = f"{upstream_at.prefix}/{path}"
    headers = {
        k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP | NOT_FORWARDED
    }
    headers.update(upstream_at.headers)
    content = await request.body()
    tries = 1 + AGAIN_FOR.get(request.method, 0)
    for attempt in range(1, tries + 1):
        client, own = _client(request, upstream_at)
        try:
            upstream = await client.send(
                client.build_request(
                    request.method,
                    url,
                    params=[*request.query_params.multi_items(), *upstream_at.params.items()],
                    headers=headers,
                    content=content,
                    timeout=TIMEOUT,
                ),
                stream=True,
            )
            break
        except httpx.HTTPError as exc:
            if own:
                await client.aclose()
            if attempt < tries and isinstance(exc, NO_ANSWER):
                said = "gave no answer to %s /%s (%s: %s); asking once more"
                _warn(said, kind, target_id, request.method, path, exc)
                await asyncio.sleep(AGAIN_AFTER)
                continue
            detail = f"cannot reach the {kind} of {target_id}: {exc}"
            shape = ERROR_SHAPES.get(kind)
            if shape is not None:
                return JSONResponse(shape(detail), status_code=502)
            raise HTTPException(502, detail) from None
    if upstream_at.on_response is not None:
        upstream_at.on_response(upstream.status_code)

    async def body() -> AsyncIterator[bytes]:
        try:
            async for chunk in upstream.aiter_raw():
                yield chunk
        except httpx.HTTPError as exc:
            said = "cut its answer to %s /%s mid-body (%s: %s); the client's answer is cut too"
            _warn(said, kind, target_id, request.method, path, exc)
            raise UpstreamCut(str(exc)) from None
        finally:
            await upstream.aclose()
            if own:
                await client.aclose()

    kept = {
        k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP | {"set-cookie"}
    }
    if "content-encoding" in upstream.headers:
        kept["content-encoding"] = upstream.headers["content-encoding"]
    kept.update(ON_ITS_ORIGIN if on_its_origin else ON_THIS_ORIGIN)
    return StreamingResponse(body(), status_code=upstream.status_code, headers=kept)


@router.websocket("/proxy/{kind}/{target_id}/{path:path}")
async def proxy_websocket(websocket: WebSocket, kind: str, target_id: str, path: str) -> None:
    """A WebSocket through the same checks (a notebook's kernels talk over these); a
    cookie-authenticated one must come from this origin (no cross-site hijacking)."""
    from websockets.asyncio.client import connect, unix_connect
    from websockets.exceptions import ConnectionClosed, InvalidHandshake

    platform: Platform = websocket.app.state.platform
    try:
        if kind in WORKLOAD_KINDS and workload_in(websocket) is None and not _bearer(websocket):
            raise HTTPException(403, f"a {kind} is served on its own origin")
        with platform.sessions() as db:
            upstream_at, _ = await asyncio.to_thread(
                _resolve, websocket, db, platform, kind, target_id, "WEBSOCKET"
            )
    except HTTPException as exc:
        await websocket.close(code=4000 + exc.status_code, reason=str(exc.detail)[:120])
        return
    url = f"{upstream_at.prefix}/{path}".replace("http", "ws", 1)
    query = [*websocket.query_params.multi_items(), *upstream_at.params.items()]
    if query:
        url += "?" + urlencode(query)
    wanted = list(websocket.scope.get("subprotocols") or [])
    tls = upstream_at.verify if isinstance(upstream_at.verify, ssl.SSLContext) else None
    options: dict[str, Any] = {
        "additional_headers": upstream_at.headers,
        "subprotocols": wanted or None,
        "ssl": tls,
        "max_size": None,
        "open_timeout": 30,
    }
    try:
        if upstream_at.unix is not None:
            upstream = await unix_connect(upstream_at.unix, url, **options)
        else:
            upstream = await connect(url, **options)
    except (OSError, InvalidHandshake, TimeoutError) as exc:
        # Closed before it was accepted, the caller sees only a 403: the reason is logged.
        log.warning("a %s's WebSocket: its upstream refused it: %s", kind, exc)
        await websocket.close(code=1011, reason=f"upstream: {exc}"[:120])
        return
    await websocket.accept(subprotocol=upstream.subprotocol)

    async def to_upstream() -> None:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("bytes")
            await upstream.send(data if data is not None else message.get("text") or "")

    async def to_caller() -> None:
        async for data in upstream:
            if isinstance(data, bytes):
                await websocket.send_bytes(data)
            else:
                await websocket.send_text(data)

    tasks = [asyncio.create_task(to_upstream()), asyncio.create_task(to_caller())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    except ConnectionClosed:
        pass
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await upstream.close()
        # A browser that left (a closed tab, a page reloaded) is an ordinary end, not an
        # error: close only a caller still there, and a race with its leaving is quiet.
        if websocket.client_state != WebSocketState.DISCONNECTED:
            with contextlib.suppress(RuntimeError, WebSocketDisconnect):
                await websocket.close()
