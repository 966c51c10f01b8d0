"""Fetching a URL a member gave (a job's http(s) code), as the server: never toward this
machine or an internal network unless an admin allowed the range, never for long.

    fetch(url, dest, policy)
      for each hop (the URL, then each redirect, at most MAX_REDIRECTS):
        resolve the host once (getaddrinfo)            -> every address judged by
        `refused(address, policy.allowed)` (pure): loopback, link-local, private (RFC 1918,
        ULA, CGNAT 100.64/10), unspecified, multicast, reserved and documentation ranges,
        and the IPv4 inside IPv4-mapped, NAT64 and 6to4 addresses, are refused unless an
        admin allowed them (`tfkube server --allow-fetch-from CIDR`)
        connect to the address that was judged (the name is never resolved again: no DNS
        rebinding); TLS checks the certificate against the name (SNI)
      the whole fetch has a deadline, the answer's head a time limit, and once the body
      flows it must keep a minimum rate (a watchdog shuts the socket otherwise)

Every refused target and every target that does not answer get the same text
(`REFUSED`), refused before any connection: the answer tells a member nothing about which
addresses exist or which ports are open here.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urljoin, urlsplit

from tfkube.netguard import IPNetwork, refused

REFUSED = (
    "the server does not fetch from this address, or it does not answer (loopback, "
    "link-local and private addresses are refused unless an administrator allows them)"
)
"""The one text for every refused or unreachable target."""
MAX_REDIRECTS = 5
_REDIRECTS = {301, 302, 303, 307, 308}


class FetchRefused(Exception):
    """The target is refused or does not answer (always the text `REFUSED`)."""

    def __init__(self) -> None:
        super().__init__(REFUSED)


class FetchFailed(Exception):
    """The target answered, but not with the file (an HTTP error, too slow, too big)."""


def resolve(host: str, port: int) -> list[str]:
    """Every address `host` has (getaddrinfo), in the resolver's order."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    return list(dict.fromkeys(str(info[4][0]) for info in found))


@dataclass(frozen=True)
class FetchPolicy:
    allowed: tuple[IPNetwork, ...] = ()
    """Ranges an admin allows despite `refused` (`--allow-fetch-from`, parsed by
    `core.forwarded.parse_networks`)."""
    deadline: float = 120.0
    """Seconds for the whole fetch, redirects included."""
    head_seconds: float = 20.0
    """Seconds until the answer's status and headers have arrived (per hop)."""
    min_rate: int = 64 * 1024
    """Bytes per second the body must average once `grace` seconds have passed."""
    grace: float = 5.0
    max_bytes: int = 512 * 1024 * 1024
    resolver: Callable[[str, int], list[str]] = field(default=resolve, compare=False)
    """Name -> addresses (a seam for tests; getaddrinfo)."""


def verdict(
    policy: FetchPolicy,
    now: float,
    *,
    deadline: float,
    started: float,
    body_started: float | None,
    received: int,
) -> str | None:
    """Why a fetch in progress must stop now, or None (pure): past its deadline; no head
    within `head_seconds`; or, `grace` seconds after its body began, an average rate
    below `min_rate`."""
    if now > deadline:
        return f"it took longer than {policy.deadline:.0f} s"
    if body_started is None:
        if now - started > policy.head_seconds:
            return f"it did not answer within {policy.head_seconds:.0f} s"
        return None
    flowing = now - body_started
    if flowing > policy.grace and received < policy.min_rate * flowing:
        return (
            f"it sent {received / flowing:.0f} bytes/s, less than the {policy.min_rate} "
            "bytes/s a download must keep"
        )
    return None


class _Watchdog:
    """Shuts the socket down when the fetch runs past its deadline, its head takes too
    long, or its body is slower than the minimum rate: a blocked read then returns."""

    def __init__(self, sock: socket.socket, policy: FetchPolicy, deadline: float) -> None:
        self.sock, self.policy, self.deadline = sock, policy, deadline
        self.started = time.monotonic()
        self.body_started: float | None = None
        self.received = 0
        self.why: str | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="tfkube-fetch", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.wait(0.2):
            why = verdict(
                self.policy,
                time.monotonic(),
                deadline=self.deadline,
                started=self.started,
                body_started=self.body_started,
                received=self.received,
            )
            if why is not None:
                self.why = why
                with contextlib.suppress(OSError):
                    self.sock.shutdown(socket.SHUT_RDWR)
                return

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def _connect(host: str, address: str, port: int, tls: bool, timeout: float) -> socket.socket:
    try:
        sock = socket.create_connection((address, port), timeout=timeout)
    except OSError:
        raise FetchRefused() from None  # closed and filtered ports look alike
    if not tls:
        return sock
    try:
        return ssl.create_default_context().wrap_socket(sock, server_hostname=host)
    except (OSError, ssl.SSLError) as exc:
        sock.close()
        raise FetchFailed(f"TLS with {host} failed: {exc}") from None


def fetch(url: str, dest: Path, policy: FetchPolicy) -> str:
    """Download `url` to `dest` under `policy`; -> the SHA-256 of what was written.
    Raises FetchRefused (the one text) or FetchFailed (what the target did wrong)."""
    deadline = time.monotonic() + policy.deadline
    for _hop in range(MAX_REDIRECTS + 1):
        parts = urlsplit(url)
        if parts.scheme not in {"http", "https"}:
            raise FetchFailed(f"only http and https URLs are fetched, not {parts.scheme!r}")
        host = parts.hostname
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise FetchFailed("the URL has an invalid port") from None
        if not host:
            raise FetchRefused()
        addresses = policy.resolver(host, port)
        if not addresses or any(refused(a, policy.allowed) for a in addresses):
            raise FetchRefused()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise FetchFailed(f"it took longer than {policy.deadline:.0f} s")
        sock = _connect(host, addresses[0], port, parts.scheme == "https", min(10.0, remaining))
        location = _get(sock, parts.scheme, host, port, url, dest, policy, deadline)
        if location is None:
            return _sha256(dest)
        url = urljoin(url, location)
    raise FetchFailed(f"more than {MAX_REDIRECTS} redirects")


def _get(
    sock: socket.socket,
    scheme: str,
    host: str,
    port: int,
    url: str,
    dest: Path,
    policy: FetchPolicy,
    deadline: float,
) -> str | None:
    """One request on a connected socket: the body into `dest`, or a redirect's Location."""
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    default = 443 if scheme == "https" else 80
    name = f"[{host}]" if ":" in host else host
    conn = http.client.HTTPConnection(host, port)
    conn.sock = sock
    sock.settimeout(None)  # the watchdog bounds every wait
    watchdog = _Watchdog(sock, policy, deadline)
    try:
        conn.putrequest("GET", target, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", name if port == default else f"{name}:{port}")
        conn.putheader("User-Agent", "tfkube-server")
        conn.putheader("Accept-Encoding", "identity")
        conn.endheaders()
        response = conn.getresponse()
        if response.status in _REDIRECTS and response.getheader("location"):
            return response.getheader("location")
        if response.status != 200:
            raise FetchFailed(f"it answered HTTP {response.status} {response.reason}")
        watchdog.body_started = time.monotonic()
        with dest.open("wb") as out:
            while chunk := response.read1(1 << 16):
                watchdog.received += len(chunk)
                if watchdog.received > policy.max_bytes:
                    raise FetchFailed(f"it is larger than the {policy.max_bytes} byte limit")
                out.write(chunk)
        if watchdog.why is not None:
            raise FetchFailed(watchdog.why)
        return None
    except (OSError, http.client.HTTPException) as exc:
        if watchdog.why is not None:
            raise FetchFailed(watchdog.why) from None
        raise FetchFailed(f"the connection failed ({type(exc).__name__})") from None
    finally:
        watchdog.stop()
        conn.close()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
