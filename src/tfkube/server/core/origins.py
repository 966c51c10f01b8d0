"""Workload origins: where a TensorBoard or a notebook is served to a browser, and the
one-time grant that lets a signed-in person in (pure: the key and the clock are
arguments).

A workload's pages are the member's (a TensorBoard plugin or image, a notebook's HTML
output): on the dashboard's origin their script would act with the session of whoever
opened them. So each one is served from its own origin, which the dashboard's session
cookie never reaches:

    <kind>-<id>.<suffix>[:port]     e.g. http://tensorboard-0123abcd89ef4567.localhost:8470

`*.localhost` names this machine in browsers (Chromium, Firefox), so a server reached on
loopback needs nothing configured; a server people reach by a public name needs a
wildcard name of its own (`tfkube server --workload-url https://*.wl.example.com`).
Each target is its own site, so neither the dashboard nor another target's page can be
read or used from it.

    dashboard origin  GET /proxy/<kind>/<id>/<path>  (session cookie)
        -> the target's checks (the resolver), then 303 to
           <workload origin>/.tfkube/enter?grant=<grant>&next=/proxy/<kind>/<id>/<path>
    workload origin   GET /.tfkube/enter   -> the grant opened: signed, this target only,
           60 s, used once -> the pass cookie (HttpOnly, SameSite=Lax, host-only, this
           target only) -> 303 to `next`
    workload origin   /proxy/<kind>/<id>/... with the pass -> the resolver's checks again
           on every request, the pass's login session still valid -> the workload

A grant and a pass name the user, the login session (its stored digest, so signing out
ends the pass too), the kind and the target; they are `<payload>.<hmac>` with a purpose
of their own, so neither can stand in for the other or for a code claim.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import json
import re
import threading
from dataclasses import dataclass
from urllib.parse import urlsplit

WORKLOAD_KINDS = frozenset({"tensorboard", "notebook"})
"""The proxy kinds whose pages are served on their own origin."""
ENTER_PATH = "/.tfkube/enter"
PASS_COOKIE = "tfkube_workload"
GRANT_SECONDS = 60.0
_TARGET = re.compile(r"^[0-9a-f]{1,32}$")
_LABEL = re.compile(r"^(?P<kind>[a-z]+)-(?P<target>[0-9a-f]{1,32})$")


@dataclass(frozen=True)
class Origins:
    """How workload origins are named: `<scheme>://<kind>-<id>.<suffix>[:<port>]`."""

    scheme: str
    suffix: str
    port: int | None
    """None: the scheme's default port."""

    def host(self, kind: str, target: str) -> str:
        host = f"{kind}-{target}.{self.suffix}"
        return f"{host}:{self.port}" if self.port is not None else host

    def url(self, kind: str, target: str) -> str:
        return f"{self.scheme}://{self.host(kind, target)}"

    @property
    def secure(self) -> bool:
        return self.scheme == "https"


def parse_workload_url(value: str) -> Origins:
    """`--workload-url` (e.g. `https://*.wl.example.com`) -> Origins; ValueError says why."""
    parts = urlsplit(value.strip())
    host = parts.hostname or ""
    if parts.scheme not in {"http", "https"} or not host.startswith("*.") or len(host) < 4:
        raise ValueError(
            f"{value!r} is not a wildcard URL like https://*.workloads.example.com "
            "(each workload gets its own name below it)"
        )
    if parts.path not in {"", "/"} or parts.query or parts.username:
        raise ValueError(f"{value!r}: give only the scheme, the wildcard name and a port")
    return Origins(parts.scheme, host[2:], parts.port)


def _is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _split_host(host_header: str) -> tuple[str, int | None]:
    parts = urlsplit(f"//{host_header}")
    try:
        return (parts.hostname or ""), parts.port
    except ValueError:
        return "", None


def origins_for(configured: Origins | None, scheme: str, host_header: str) -> Origins | None:
    """The workload origins for a request that arrived at `host_header` (pure): the
    configured ones, else `*.localhost` on the same port when the dashboard itself was
    reached on loopback, else None (none can be derived: an admin must configure one)."""
    if configured is not None:
        return configured
    host, port = _split_host(host_header)
    if host and _is_loopback(host):
        return Origins(scheme, "localhost", port)
    return None


def workload_of(configured: Origins | None, host_header: str) -> tuple[str, str] | None:
    """(kind, target) when `host_header` names a workload origin, else None (pure)."""
    host, port = _split_host(host_header.lower())
    label, dot, suffix = host.partition(".")
    m = _LABEL.match(label)
    if not dot or m is None or m.group("kind") not in WORKLOAD_KINDS:
        return None
    if configured is not None and suffix == configured.suffix and port == configured.port:
        return m.group("kind"), m.group("target")
    if suffix == "localhost":
        return m.group("kind"), m.group("target")
    return None


def safe_next(kind: str, target: str, wanted: str | None) -> str:
    """Where the enter step sends the browser: `wanted` when it is a path of this target
    (no other path, host or scheme), else the target's top (pure)."""
    top = f"/proxy/{kind}/{target}/"
    if (
        wanted
        and (wanted.startswith(top) or wanted == top[:-1])
        and "\\" not in wanted
        and not any(ord(c) < 0x20 or c == "\x7f" for c in wanted)
    ):
        return wanted
    return top


# -- grants and passes -----------------------------------------------------------------------


class PassError(ValueError):
    """A grant or pass that does not open this target (malformed, forged, expired,
    for another target, already used)."""


@dataclass(frozen=True)
class Pass:
    user: int
    session: str
    """The login session's stored digest (signing out or a password change ends it)."""
    kind: str
    target: str
    exp: float
    nonce: str = ""
    """Grants only: what makes each one single-use."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(key: bytes, purpose: str, payload: str) -> str:
    return _b64(hmac.new(key, f"{purpose}:{payload}".encode(), hashlib.sha256).digest())


def _sign(key: bytes, purpose: str, p: Pass) -> str:
    body = {"u": p.user, "s": p.session, "k": p.kind, "t": p.target, "e": int(p.exp), "n": p.nonce}
    payload = _b64(json.dumps(body, separators=(",", ":"), sort_keys=True).encode())
    return f"{payload}.{_mac(key, purpose, payload)}"


def _open(key: bytes, purpose: str, token: str, kind: str, target: str, now: float) -> Pass:
    payload, dot, signature = token.partition(".")
    if not dot or not hmac.compare_digest(signature, _mac(key, purpose, payload)):
        raise PassError("not signed by this server")
    try:
        data = json.loads(_unb64(payload))
        p = Pass(
            int(data["u"]), str(data["s"]), str(data["k"]), str(data["t"]), float(data["e"]),
            str(data["n"]),
        )  # fmt: skip
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise PassError("malformed") from None
    if p.exp < now:
        raise PassError("expired")
    if (p.kind, p.target) != (kind, target):
        raise PassError("for another workload")
    return p


def sign_grant(key: bytes, p: Pass) -> str:
    return _sign(key, "workload-grant", p)


def open_grant(key: bytes, token: str, kind: str, target: str, now: float) -> Pass:
    return _open(key, "workload-grant", token, kind, target, now)


def sign_pass(key: bytes, p: Pass) -> str:
    return _sign(key, "workload-pass", p)


def open_pass(key: bytes, token: str, kind: str, target: str, now: float) -> Pass:
    return _open(key, "workload-pass", token, kind, target, now)


class UsedGrants:
    """The nonces of grants already exchanged, until they expire (in this process: a
    grant lives 60 s, and a server runs as one process)."""

    def __init__(self) -> None:
        self._used: dict[str, float] = {}
        self._lock = threading.Lock()

    def use(self, grant: Pass, now: float) -> bool:
        """True the first time this grant is used, False after."""
        with self._lock:
            for nonce, exp in list(self._used.items()):
                if exp < now:
                    del self._used[nonce]
            if not grant.nonce or grant.nonce in self._used:
                return False
            self._used[grant.nonce] = grant.exp
            return True


def valid_target(target: str) -> bool:
    return bool(_TARGET.match(target))
