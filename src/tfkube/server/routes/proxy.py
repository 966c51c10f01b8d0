"""The authenticating reverse proxy: `/proxy/<kind>/<id>/...` -> a process only the server
can reach (a job's TensorBoard now; model servers and notebooks later register their
kind). The caller must be signed in and hold the kind's scope in the target's team (404
otherwise, as everywhere); the session cookie and any Authorization header are never
passed upstream. State-changing requests with the cookie must come from this origin.

Targets are a registry: kind -> resolver(db, id, principal) -> the `Upstream`: on the
local engine a loopback process; on Kubernetes the API server's service proxy to the
job's Service, reached with the server's credentials."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx
from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session

from tfkube.api import load_job_text
from tfkube.kube.names import TENSORBOARD_PORT_NAME, tensorboard_name
from tfkube.kube.rest import service_proxy_path
from tfkube.server._platform import Platform
from tfkube.server._scopes import Scope, visible
from tfkube.server._tables import Job, Team
from tfkube.server.deps import PlatformDep, Principal, SessionDep

router = APIRouter(tags=["proxy"])
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


@dataclass(frozen=True)
class Upstream:
    """Where a proxied request goes: `prefix` + the rest of the caller's path."""

    prefix: str
    """The upstream URL the caller's path below `/proxy/<kind>/<id>/` is appended to."""
    headers: dict[str, str] = field(default_factory=dict)
    """Sent upstream besides the caller's own (e.g. the server's API-server token; the
    caller's credentials never are)."""
    verify: ssl.SSLContext | bool = True
    """TLS verification for an https upstream (the API server's CA)."""


Resolver = Callable[[Session, str, Principal, Platform], Upstream]


def _tensorboard(db: Session, job_id: str, principal: Principal, platform: Platform) -> Upstream:
    job = db.get(Job, job_id)
    if job is None or not visible(principal.actor, job.team_id) or not job.output_dir:
        raise HTTPException(404, f"job {job_id!r} not found")
    principal.require(Scope.METRICS_READ, job.team_id)
    prefix = f"/proxy/tensorboard/{job.id}"
    if platform.engines.kind == "local":
        base = platform.tensorboards.ensure(job.id, job.output_dir, prefix)
        return Upstream(f"{base}{prefix}")
    # Kubernetes: the job's TensorBoard Service through the API server's service proxy,
    # with the server's own credentials (RBAC: services/proxy). TensorBoard's pages use
    # relative links, so it serves below any prefix without --path_prefix.
    spec = load_job_text(job.spec, f"job {job.name!r}").spec.tensorboard
    if spec is None or not spec.enabled:
        raise HTTPException(
            404, f"job {job.name!r} runs no TensorBoard; submit it with tensorboard: true"
        )
    team = db.get(Team, job.team_id)
    assert team is not None
    endpoint = platform.engines.endpoint()
    path = service_proxy_path(team.namespace, tensorboard_name(job.name), TENSORBOARD_PORT_NAME)
    return Upstream(f"{endpoint.host}{path}", endpoint.headers(), endpoint.ssl_context)


TARGETS: dict[str, Resolver] = {"tensorboard": _tensorboard}
"""kind -> resolver; serving and notebooks add theirs."""


def _principal(request: Request, db: Session, platform: Platform) -> Principal:
    from tfkube.server._accounts import actor_of, session_user, token_user
    from tfkube.server._security import SAFE_METHODS, SESSION_COOKIE

    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        user = token_user(db, header[7:].strip())
        if user is None:
            raise HTTPException(401, "the API token is not valid")
        return Principal(user, actor_of(db, user))
    cookie = request.cookies.get(SESSION_COOKIE)
    user = session_user(db, cookie) if cookie else None
    if user is None:
        raise HTTPException(401, "sign in first")
    if request.method not in SAFE_METHODS:
        origin = request.headers.get("origin") or request.headers.get("referer")
        if not origin or urlsplit(origin).netloc != request.headers.get("host"):
            raise HTTPException(403, "refused: the request comes from another origin")
    return Principal(user, actor_of(db, user), session_id=cookie)


@router.api_route(
    "/proxy/{kind}/{target_id}/{path:path}",
    methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"],
    response_model=None,
)
async def proxy(
    kind: str, target_id: str, path: str, request: Request, db: SessionDep, platform: PlatformDep
) -> StreamingResponse:
    resolver = TARGETS.get(kind)
    if resolver is None:
        raise HTTPException(404, f"nothing to proxy of kind {kind!r}")
    principal = await asyncio.to_thread(_principal, request, db, platform)
    upstream_at = await asyncio.to_thread(resolver, db, target_id, principal, platform)
    await asyncio.to_thread(db.commit)  # no database connection held while it streams
    url = f"{upstream_at.prefix}/{path}"
    headers = {
        k: v
        for k, v in request.headers.items()
        if k.lower() not in HOP_BY_HOP | {"host", "cookie", "authorization", "x-csrf-token"}
    }
    headers.update(upstream_at.headers)
    client = httpx.AsyncClient(timeout=httpx.Timeout(60.0, read=None), verify=upstream_at.verify)
    try:
        upstream = await client.send(
            client.build_request(
                request.method,
                url,
                params=request.query_params,
                headers=headers,
                content=await request.body(),
            ),
            stream=True,
        )
    except httpx.HTTPError as exc:
        await client.aclose()
        raise HTTPException(502, f"cannot reach the {kind} of {target_id}: {exc}") from None

    async def body() -> AsyncIterator[bytes]:
        try:
            async for chunk in upstream.aiter_raw():
                yield chunk
        finally:
            await upstream.aclose()
            await client.aclose()

    kept = {
        k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP | {"set-cookie"}
    }
    if "content-encoding" in upstream.headers:
        kept["content-encoding"] = upstream.headers["content-encoding"]
    return StreamingResponse(body(), status_code=upstream.status_code, headers=kept)
