"""The authenticating reverse proxy: `/proxy/<kind>/<id>/...` -> a process only the server
can reach (a job's TensorBoard now; model servers and notebooks later register their
kind). The caller must be signed in and hold the kind's scope in the target's team (404
otherwise, as everywhere); the session cookie and any Authorization header are never
passed upstream. State-changing requests with the cookie must come from this origin.

Targets are a registry: kind -> resolver(db, id, principal) -> the upstream base URL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from urllib.parse import urlsplit

import httpx
from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session

from tfkube.server._platform import Platform
from tfkube.server._scopes import Scope, visible
from tfkube.server._tables import Job
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
Resolver = Callable[[Session, str, Principal, Platform], str]


def _tensorboard(db: Session, job_id: str, principal: Principal, platform: Platform) -> str:
    job = db.get(Job, job_id)
    if job is None or not visible(principal.actor, job.team_id) or not job.output_dir:
        raise HTTPException(404, f"job {job_id!r} not found")
    principal.require(Scope.METRICS_READ, job.team_id)
    if platform.engines.kind != "local":
        raise HTTPException(501, "TensorBoard through the proxy runs on the local engine only")
    return platform.tensorboards.ensure(job.id, job.output_dir, f"/proxy/tensorboard/{job.id}")


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
    principal = _principal(request, db, platform)
    base = await asyncio.to_thread(resolver, db, target_id, principal, platform)
    url = f"{base}/proxy/{kind}/{target_id}/{path}"
    headers = {
        k: v
        for k, v in request.headers.items()
        if k.lower() not in HOP_BY_HOP | {"host", "cookie", "authorization", "x-csrf-token"}
    }
    client = httpx.AsyncClient(timeout=httpx.Timeout(60.0, read=None))
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
