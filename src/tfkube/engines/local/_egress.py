"""A package-index proxy: a confined step's one way out of its network namespace.

A confined job's `requirements.txt` is installed by a prepare step (`_supervisor`) that
runs in the job's own network namespace, which holds only loopback. Its one way out is
this proxy, a small process of ours (root, unconfined, tfkube's own code) that listens
on 127.0.0.1:<port> inside the namespace and makes its connections in the host's:

    uv / pip ──HTTP CONNECT host:443, or GET http://host:port/...──> proxy (inside)
             ──> the package index (made in the host's namespace), nothing else

uv and pip honour HTTPS_PROXY/HTTP_PROXY, set in the prepare step's environment only.
Every request names its target; the proxy joins it only to the package index hosts
(`allowed_targets`: pypi.org and files.pythonhosted.org on 443 by default, else the
hosts and ports of the admin's `--package-index` URLs). Anything else is answered 403
with the reason, and the build code of a package built from source (which runs in the
step) reaches nothing else: not the host's loopback (other teams' services, the server's
API, a PostgreSQL), not the machine's other daemons, not the network.

Names are resolved here, in the host's namespace, and judged after resolution with the
fetch rule (`tfkube.netguard.refused` and the server's `--allow-fetch-from` ranges): a
default index host that resolves to a loopback or private address is refused. An index
the admin named explicitly is trusted at exactly its host and port, whatever it resolves
to (a mirror on the machine or the site's network): that, and only that, address of the
loopback is reachable.

How it holds both sides: as `_relay`, it starts in the host's namespace with a
descriptor of the job's, makes its one listening socket inside (`_netns.Namespaces`)
and every other socket in the host's. After a plain GET is forwarded the connection
carries bytes to that target only; a CONNECT tunnel likewise: whatever the client sends
later on it goes to the same allowed host and port.

Run: `python -m tfkube.engines.local._egress --netns-fd N [--port P] [--index URL ...]
[--allow-range CIDR ...]`; it prints `ready` once it
listens, and ends on SIGTERM (the supervisor stops it by PID when the step has ended).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import signal
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from tfkube.engines.local._netns import Namespaces, splice
from tfkube.netguard import IPNetwork, index_target, refused

DEFAULT_INDEX = "https://pypi.org/simple/"
DEFAULT_TARGETS = (("pypi.org", 443), ("files.pythonhosted.org", 443))
"""Where uv and pip fetch from PyPI: its simple index and its files."""
PORT = 3128
"""Where the proxy listens inside the namespace (nothing else listens there yet)."""
MAX_HEAD = 16 * 1024
HEAD_SECONDS = 30.0


@dataclass(frozen=True)
class Policy:
    """Where the proxy may connect: `targets` (host, port) by name; `trusted` those
    named explicitly by an admin (any address); `ranges` the `--allow-fetch-from` ones."""

    targets: frozenset[tuple[str, int]]
    trusted: bool = False
    ranges: tuple[IPNetwork, ...] = ()


def policy_for(indexes: Sequence[str], ranges: Sequence[IPNetwork] = ()) -> Policy:
    """The proxy's policy (pure): PyPI's hosts when no index is configured; else the
    configured indexes' hosts and ports, trusted at any address."""
    if not indexes:
        return Policy(frozenset(DEFAULT_TARGETS), trusted=False, ranges=tuple(ranges))
    return Policy(frozenset(index_target(u) for u in indexes), trusted=True, ranges=tuple(ranges))


def target_problem(policy: Policy, host: str, port: int) -> str | None:
    """Why a connection to host:port is refused before resolution, or None (pure)."""
    if (host.lower().rstrip("."), port) in policy.targets:
        return None
    allowed = ", ".join(f"{h}:{p}" for h, p in sorted(policy.targets))
    return (
        f"{host}:{port} is not a package index: this step may reach only {allowed} "
        "(an admin sets the index with --package-index)"
    )


def address_problem(policy: Policy, host: str, address: str) -> str | None:
    """Why connecting to `address` (what `host` resolved to) is refused, or None (pure):
    a loopback, private or otherwise internal address, unless the admin named this
    index explicitly or allowed the range."""
    if policy.trusted or not refused(address, policy.ranges):
        return None
    return (
        f"{host} resolves to {address}, an internal address: refused "
        "(an admin allows a range with --allow-fetch-from)"
    )


def parse_ranges(ranges: Sequence[str]) -> list[IPNetwork]:
    """`--allow-fetch-from` ranges as networks (pure; checked when the server started)."""
    return [ipaddress.ip_network(n, strict=False) for n in ranges]


def package_env(indexes: Sequence[str], port: int, direct: Sequence[str] = ()) -> dict[str, str]:
    """The variables that send uv and pip through the proxy at 127.0.0.1:`port` (and to
    the first configured index), for the prepare step's or a notebook's environment only
    (pure). `direct`: origins (`scheme://host:port`) reached without it (a notebook's
    API relay, which the proxy would refuse)."""
    proxy = f"http://127.0.0.1:{port}"
    env = {
        "HTTPS_PROXY": proxy,
        "HTTP_PROXY": proxy,
        "https_proxy": proxy,
        "http_proxy": proxy,
        "NO_PROXY": ",".join(direct),
        "no_proxy": ",".join(direct),
    }
    if indexes:
        env["UV_DEFAULT_INDEX"] = env["PIP_INDEX_URL"] = indexes[0]
    return env


def parse_request_line(line: str) -> tuple[str, str, int, str] | str:
    """(method, host, port, origin-form target) of a proxy request's first line, or why
    it is not one this proxy serves (pure): CONNECT host:port, or a GET/HEAD in absolute
    form (http:// only: https goes through CONNECT)."""
    parts = line.split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return "not an HTTP/1.x request"
    method, target, _ = parts
    if method == "CONNECT":
        host, sep, port = target.rpartition(":")
        if not sep or not port.isdigit() or not host:
            return "CONNECT needs host:port"
        return method, host.strip("[]"), int(port), ""
    if method not in ("GET", "HEAD"):
        return f"{method} is not served (CONNECT, GET and HEAD are)"
    try:
        parts_ = urlsplit(target)
        port_ = parts_.port
    except ValueError:
        return "a bad URL"
    if parts_.scheme != "http" or not parts_.hostname:
        return "a proxy request needs an absolute http:// URL"
    path = parts_.path or "/"
    if parts_.query:
        path += f"?{parts_.query}"
    return method, parts_.hostname, port_ or 80, path


# -- the acting shell -----------------------------------------------------------------


async def _answer(writer: asyncio.StreamWriter, status: str, why: str) -> None:
    body = f"tfkube package proxy: {why}\n".encode()
    writer.write(
        f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n".encode()
        + body
    )
    with contextlib.suppress(OSError, RuntimeError):
        await writer.drain()
    writer.close()


async def _open(policy: Policy, host: str, port: int) -> tuple[socket.socket | None, str]:
    """A connected socket (host's namespace) to an allowed address of host, or why not."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        return None, f"cannot resolve {host}: {exc}"
    why = f"{host} has no address"
    for family, type_, proto, _, address in infos:
        problem = address_problem(policy, host, str(ipaddress.ip_address(address[0])))
        if problem is not None:
            why = problem
            continue
        sock = socket.socket(family, type_, proto)
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            why = f"cannot connect to {host}:{port}: {exc}"
            continue
        return sock, ""
    return None, why


async def serve_one(
    policy: Policy, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_SECONDS)
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, OSError):
        writer.close()
        return
    lines = head.decode("latin-1").split("\r\n")
    parsed = parse_request_line(lines[0])
    if isinstance(parsed, str):
        await _answer(writer, "400 Bad Request", parsed)
        return
    method, host, port, path = parsed
    problem = target_problem(policy, host, port)
    if problem is not None:
        await _answer(writer, "403 Forbidden", problem)
        return
    sock, why = await _open(policy, host, port)
    if sock is None:
        await _answer(writer, "403 Forbidden" if "refused" in why else "502 Bad Gateway", why)
        return
    if method == "CONNECT":
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
    else:
        kept = [
            h
            for h in lines[1:]
            if h and not h.lower().startswith(("proxy-", "connection:", "keep-alive:"))
        ]
        request = [f"{method} {path} HTTP/1.1", *kept, "Connection: close", "", ""]
        try:
            await asyncio.get_running_loop().sock_sendall(
                sock, "\r\n".join(request).encode("latin-1")
            )
        except OSError as exc:
            sock.close()
            await _answer(writer, "502 Bad Gateway", f"{host}:{port}: {exc}")
            return
    await splice(reader, writer, sock)


def _options(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tfkube.engines.local._egress")
    p.add_argument("--netns-fd", type=int, required=True)
    p.add_argument("--port", type=int, default=PORT)
    p.add_argument("--index", action="append", default=[], help="a package index URL")
    p.add_argument("--allow-range", action="append", default=[], metavar="CIDR")
    return p.parse_args(argv)


async def _serve(o: argparse.Namespace) -> None:
    policy = policy_for(o.index, parse_ranges(o.allow_range))
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, done.set)
    listening = Namespaces(o.netns_fd).inside()
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listening.bind(("127.0.0.1", o.port))
    listening.listen(64)

    async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await serve_one(policy, r, w)

    server = await asyncio.start_server(serve, sock=listening)
    print("ready", flush=True)
    try:
        await done.wait()
    finally:
        server.close()


def main(argv: Sequence[str]) -> int:
    asyncio.run(_serve(_options(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))


__all__ = [
    "DEFAULT_INDEX",
    "PORT",
    "Policy",
    "address_problem",
    "package_env",
    "parse_ranges",
    "parse_request_line",
    "policy_for",
    "serve_one",
    "target_problem",
]
