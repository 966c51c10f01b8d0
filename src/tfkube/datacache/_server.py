"""The node cache's HTTP door: the server's data route (`tfkube.contract`, "Data"), answered
from this node's disk when the server says the caller may read a tar this node holds.

    GET /api/v1/data/<job id>/<replica>   (the replica's own token, as for the server)
        1. asks the server `<server>/api/v1/data/<job id>/<replica>/key` with that token;
           any refusal (404, 410, 503 with its Retry-After) goes back verbatim
        2. the key the server named: served from disk when held here; else streamed from
           the server's data route to the caller while written to incoming/, kept only
           when its length and sha256 are the ones the server named
        502 when the server cannot be reached (the launcher then asks the server itself)
    GET /metrics   the counters, in Prometheus' text format
    GET /healthz   "ok"

Authorisation is the server's alone: nothing is served without the server naming, for this
token, the key it is served by, and keys are per team. Tokens are never logged. Standard
library only (it runs in tfkube's image, but needs nothing of the server).
"""

from __future__ import annotations

import http.client
import json
import logging
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import IO, Any

from tfkube.contract import DATA_KEY_PATH, SHIP_REPLICA
from tfkube.datacache._store import DiskCache, Incomplete, KeyAnswer, parse_key_answer

log = logging.getLogger("tfkube.datacache")

_PATH = re.compile(r"/api/v1/data/([A-Za-z0-9_-]{1,64})/([a-z]+-\d{1,6})")
_CHUNK = 1 << 20
_MAX_REFUSAL = 64 * 1024
TIMEOUT = 60.0


@dataclass
class Counters:
    """What the cache did since it started (`/metrics`)."""

    bytes_from_disk: int = 0
    bytes_from_server: int = 0
    hits: int = 0
    misses: int = 0
    refused: int = 0
    unreachable: int = 0
    not_kept: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, **counts: int) -> None:
        with self.lock:
            for name, n in counts.items():
                setattr(self, name, getattr(self, name) + n)

    def text(self) -> str:
        with self.lock:
            rows = [
                ("tfkube_datacache_bytes_from_disk_total", self.bytes_from_disk),
                ("tfkube_datacache_bytes_from_server_total", self.bytes_from_server),
                ("tfkube_datacache_hits_total", self.hits),
                ("tfkube_datacache_misses_total", self.misses),
                ("tfkube_datacache_refused_total", self.refused),
                ("tfkube_datacache_server_unreachable_total", self.unreachable),
                ("tfkube_datacache_not_kept_total", self.not_kept),
            ]
        return "".join(f"# TYPE {n} counter\n{n} {v}\n" for n, v in rows)


class _Unreachable(Exception):
    pass


@dataclass(frozen=True)
class _Refusal:
    status: int
    body: bytes
    content_type: str
    retry_after: str | None


class NodeCache:
    """The state the handlers share: the disk, the server, the counters, a lock per key
    (so the pods of one node that ask for one tar at once fetch it once)."""

    def __init__(self, disk: DiskCache, server: str, cafile: str | None = None) -> None:
        self.disk = disk
        self.server = server.rstrip("/")
        self.counters = Counters()
        self._context = None
        if server.startswith("https:") and cafile:
            import ssl

            self._context = ssl.create_default_context(cafile=cafile)
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def key_lock(self, key: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    def upstream(self, path: str, authorization: str) -> Any:
        """The server's answer (an open response) or _Refusal / _Unreachable raised."""
        request = urllib.request.Request(self.server + path)
        request.add_header("Authorization", authorization)
        try:
            return urllib.request.urlopen(request, timeout=TIMEOUT, context=self._context)
        except urllib.error.HTTPError as err:
            with err:
                body = err.read(_MAX_REFUSAL)
                refusal = _Refusal(
                    err.code,
                    body,
                    err.headers.get("Content-Type") or "application/json",
                    err.headers.get("Retry-After"),
                )
            raise _RefusedError(refusal) from None
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            raise _Unreachable(str(getattr(exc, "reason", exc))) from None


class _RefusedError(Exception):
    def __init__(self, refusal: _Refusal) -> None:
        super().__init__(refusal.status)
        self.refusal = refusal


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the request line only ever names a job and a replica; our own lines say more

    def _answer(self, status: int, body: bytes, content_type: str, extra: dict[str, str]) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in extra.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _relay(self, r: _Refusal) -> None:
        """The server's refusal, verbatim (its status, detail and Retry-After)."""
        self.server.cache.counters.add(refused=1)
        extra = {"Retry-After": r.retry_after} if r.retry_after else {}
        self._answer(r.status, r.body, r.content_type, extra)

    def _detail(self, status: int, detail: str) -> None:
        self._answer(status, json.dumps({"detail": detail}).encode(), "application/json", {})

    def do_GET(self) -> None:
        cache = self.server.cache
        path = urllib.parse.urlsplit(self.path).path
        if path == "/healthz":
            self._answer(200, b"ok\n", "text/plain", {})
            return
        if path == "/metrics":
            self._answer(200, cache.counters.text().encode(), "text/plain; version=0.0.4", {})
            return
        found = _PATH.fullmatch(path)
        if not found or not SHIP_REPLICA.fullmatch(found.group(2)):
            self._detail(404, "not found")
            return
        job, replica = found.groups()
        authorization = self.headers.get("Authorization", "")
        door = f"/api/v1/data/{job}/{replica}"
        try:
            with cache.upstream(f"{door}/{DATA_KEY_PATH}", authorization) as answer:
                body = json.loads(answer.read(_MAX_REFUSAL))
        except _RefusedError as refused:
            self._relay(refused.refusal)
            return
        except (_Unreachable, ValueError, http.client.HTTPException) as exc:
            cache.counters.add(unreachable=1)
            log.warning("job %s %s: the server cannot be asked: %s", job, replica, exc)
            self._detail(502, "the node cache cannot reach the tfkube server")
            return
        named = parse_key_answer(body)
        if named is None:
            cache.counters.add(unreachable=1)
            self._detail(502, "the tfkube server's answer is not a key")
            return
        with cache.key_lock(named.key):
            held = cache.disk.open(named.key)
            if held is not None:
                self._from_disk(job, replica, named, *held)
                return
            self._from_server(job, replica, named, door, authorization)

    def _from_disk(self, job: str, replica: str, named: KeyAnswer, f: IO[bytes], size: int) -> None:
        cache = self.server.cache
        with f:
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            sent = 0
            try:
                while chunk := f.read(_CHUNK):
                    self.wfile.write(chunk)
                    sent += len(chunk)
            finally:
                cache.counters.add(hits=1, bytes_from_disk=sent)
        log.info("job %s %s: key %s.., %d bytes from the node's disk", job, replica,
                 named.key[:12], sent)  # fmt: skip

    def _from_server(
        self, job: str, replica: str, named: KeyAnswer, door: str, authorization: str
    ) -> None:
        cache = self.server.cache
        try:
            answer = cache.upstream(door, authorization)
        except _RefusedError as refused:
            self._relay(refused.refusal)
            return
        except _Unreachable as exc:
            cache.counters.add(unreachable=1)
            log.warning("job %s %s: the server cannot be reached: %s", job, replica, exc)
            self._detail(502, "the node cache cannot reach the tfkube server")
            return
        cache.counters.add(misses=1)
        writer = cache.disk.writer(named) if named.size <= cache.disk.limit else None
        fetched = 0
        with answer:
            self.send_response(200)
            self.send_header("Content-Type", answer.headers.get("Content-Type") or
                             "application/octet-stream")  # fmt: skip
            self.send_header("Content-Length", str(named.size))
            self.end_headers()
            try:
                while chunk := answer.read(_CHUNK):
                    fetched += len(chunk)
                    cache.counters.add(bytes_from_server=len(chunk))
                    if writer is not None:
                        writer.write(chunk)
                    self.wfile.write(chunk)
                if writer is not None:
                    writer.commit()
            except (Incomplete, OSError, ValueError, http.client.HTTPException) as exc:
                # Cut short (the server went, the caller went) or not the named bytes:
                # nothing is kept, and the caller's answer ends short of its length.
                if writer is not None:
                    writer.abort()
                cache.counters.add(not_kept=1)
                log.warning("job %s %s: key %s.. not kept after %d bytes: %s", job, replica,
                            named.key[:12], fetched, exc)  # fmt: skip
                self.close_connection = True
                return
        kept = "" if writer else " (larger than the cache: not kept)"
        log.info("job %s %s: key %s.., %d bytes from the server%s", job, replica,
                 named.key[:12], fetched, kept)  # fmt: skip
        if writer is not None:
            for gone in cache.disk.evict(keep=(named.key,)):
                log.info("evicted key %s..", gone[:12])


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], cache: NodeCache) -> None:
        self.cache = cache
        super().__init__(address, _Handler)


def make_server(host: str, port: int, cache: NodeCache) -> _Server:
    return _Server((host, port), cache)
