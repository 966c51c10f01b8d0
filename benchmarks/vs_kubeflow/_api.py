"""Async REST access to the test API server for the benchmark and its plain client (no I/O
at import). aiohttp (already a kopf dependency) rather than the official client: the
benchmark must follow up to 11,000 pods without its own decoding cost becoming the figure.

    Api(identity).request(method, path, body, query)  -> decoded JSON (raises ApiError)
    Api(identity).follow(path, handle, stop)          -> list, then WATCH from its
                                                         resourceVersion until `stop` is set
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

Handler = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True)
class Identity:
    """Who talks to the API server: its own token, so the audit log tells the actors apart."""

    name: str
    server: str
    token: str
    ca_file: str

    def kubeconfig(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "bench",
                    "cluster": {"server": self.server, "certificate-authority": self.ca_file},
                }
            ],
            "users": [{"name": self.name, "user": {"token": self.token}}],
            "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": self.name}}],
            "current-context": "bench",
        }

    def write_kubeconfig(self, path: Path) -> Path:
        path.write_text(json.dumps(self.kubeconfig(), indent=2))
        path.chmod(0o600)
        return path

    @classmethod
    def from_kubeconfig(cls, path: Path) -> Identity:
        cfg = json.loads(path.read_text())
        cluster = cfg["clusters"][0]["cluster"]
        user = cfg["users"][0]
        return cls(
            user["name"], cluster["server"], user["user"]["token"], cluster["certificate-authority"]
        )


class ApiError(Exception):
    def __init__(self, status: int, text: str) -> None:
        self.status = status
        super().__init__(f"HTTP {status}: {text[:300]}")


class Api:
    """One aiohttp session for one identity; use as `async with Api(identity) as api`."""

    def __init__(self, identity: Identity, connections: int = 100) -> None:
        self.identity = identity
        self.connections = connections
        self.session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Api:
        context = ssl.create_default_context(cafile=self.identity.ca_file)
        self.session = aiohttp.ClientSession(
            base_url=self.identity.server,
            connector=aiohttp.TCPConnector(ssl=context, limit=self.connections),
            headers={
                "Authorization": f"Bearer {self.identity.token}",
                "Accept": "application/json",
                "User-Agent": f"tfkube-bench/{self.identity.name}",
            },
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
        )
        return self

    async def __aexit__(self, *_: object) -> None:
        if self.session is not None:
            await self.session.close()

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: Mapping[str, Any] | None = None,
        allow: tuple[int, ...] = (),
        retries: int = 20,
    ) -> Any:
        """One request; 429 (the API server's flow control) is retried after its
        Retry-After, as client-go does. `allow`ed statuses return None."""
        assert self.session is not None
        for _ in range(retries):
            async with self.session.request(
                method,
                path,
                params={k: str(v) for k, v in (query or {}).items()},
                data=json.dumps(body) if body is not None else None,
                headers={"Content-Type": "application/json"} if body is not None else None,
                timeout=aiohttp.ClientTimeout(total=120),
            ) as resp:
                text = await resp.text()
                if resp.status == 429:
                    await asyncio.sleep(float(resp.headers.get("Retry-After", "1")))
                    continue
                if resp.status in allow:
                    return None
                if not 200 <= resp.status <= 299:
                    raise ApiError(resp.status, text)
                return json.loads(text) if text else None
        raise ApiError(429, f"{method} {path}: still throttled after {retries} tries")

    async def list_all(
        self, path: str, query: Mapping[str, Any] | None = None
    ) -> tuple[list[Any], str]:
        """Every object (500 a time) and the list's resourceVersion to watch from."""
        items: list[Any] = []
        token = ""
        while True:
            q = {**(query or {}), "limit": 500, **({"continue": token} if token else {})}
            data = await self.request("GET", path, query=q)
            items += data.get("items") or []
            token = data["metadata"].get("continue") or ""
            if not token:
                return items, data["metadata"]["resourceVersion"]

    async def follow(
        self,
        path: str,
        handle: Handler,
        stop: asyncio.Event,
        query: Mapping[str, Any] | None = None,
    ) -> None:
        """List, then watch: `handle(type, object)` for every object and change, in order,
        until `stop` is set (or the task is cancelled). Watches time out server-side and
        are resumed from the last resourceVersion (bookmarks keep it fresh); an expired one
        (410) lists again."""
        assert self.session is not None
        while not stop.is_set():
            items, version = await self.list_all(path, query)
            for item in items:
                handle("ADDED", item)
            while not stop.is_set():
                params = {
                    **(query or {}),
                    "watch": "1",
                    "resourceVersion": version,
                    "allowWatchBookmarks": "true",
                    "timeoutSeconds": "240",
                }
                expired = False
                async with self.session.get(
                    path, params=params, timeout=aiohttp.ClientTimeout(total=None, sock_read=300)
                ) as resp:
                    if resp.status != 200:
                        raise ApiError(resp.status, await resp.text())
                    async for line in _lines(resp):
                        event = json.loads(line)
                        kind, obj = event.get("type"), event.get("object") or {}
                        if kind == "ERROR":
                            expired = obj.get("code") == 410
                            break
                        version = obj["metadata"]["resourceVersion"]
                        if kind != "BOOKMARK":
                            handle(kind, obj)
                if expired:
                    break


async def _lines(resp: aiohttp.ClientResponse) -> Any:
    """A watch's events, one JSON line each, of any length (a Kubeflow pod at 11,000
    replicas is a 330 KB line), until the server ends the stream."""
    buffer = b""
    async for chunk in resp.content.iter_any():
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.strip():
                yield line
