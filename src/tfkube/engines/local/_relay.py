"""A service's relay: the one way in and the one way out of its network namespace.

A confined notebook runs in a network namespace of its own holding only loopback (made
and held as a job's is, `_netns`): it reaches no port of the host's loopback (another
team's TensorBoard, model server or notebook, the machine's PostgreSQL...), and nothing
on the host reaches its ports. Two paths cross that wall, both through this relay, a
small process of the server's (root, unconfined, tfkube's own code: it copies bytes and
parses nothing):

    server's proxy ──unix socket──> relay ──127.0.0.1:<port> inside──> JupyterLab
    notebook's tfkube.Client ──127.0.0.1:<api port> inside──> relay ──> server's API

- In (the proxy): the relay listens on a Unix socket in a folder only root can open
  (`/run/tfkube-relays/<the server's key>`, 0700, hidden from every sandbox,
  `_services.relays_for`). A path socket
  ignores network namespaces, so the server reaches it from its own; file permissions,
  not ports, say who may connect. Each connection is joined to a TCP connection made
  inside the namespace. HTTP, streaming answers and WebSockets are byte streams: they
  pass unchanged, and the service sees a connection from its own 127.0.0.1 (JupyterLab's
  host checks hold).
- Out (the notebook's `tfkube.Client()`): the relay listens on 127.0.0.1:<the server
  URL's port> inside the namespace and joins each connection to the server's address,
  made in the host's namespace. This is the API (every call with the user's token), not
  the host's loopback: nothing else is forwarded.
- Out to the package index (a notebook's `pip install`, `--package-port`): the package
  proxy of `_egress` on 127.0.0.1:<port> inside, joining HTTP CONNECT / GET only to the
  package index's hosts (the admin's `--index` URLs, else PyPI's), 403 otherwise.

How it holds both: it starts in the host's namespace with a descriptor of the service's,
and makes each socket meant for the inside between two `setns` calls (`_netns.Namespaces`). It
runs its sockets on one thread (asyncio), so no other socket is made while it is inside
(it makes a socket and returns, nothing else); the package proxy resolves names in
asyncio's resolver threads, which never enter the namespace (`setns` moves only the
thread that calls it). A socket
stays in the namespace it was made in.

Why this and not another way: a Unix socket behind file permissions is the simplest door
a proxy written for TCP can take (httpx's `uds`, websockets' `unix_connect`, gRPC's
`unix:` target), it keeps streaming and WebSockets as they are, and it leaves no port
anyone on the host may dial (a TCP relay on the host's loopback would: any process of
the host's network, an unconfined `tfkube run` job included, could). Passing descriptors
connected inside (SCM_RIGHTS) would need a helper in the namespace per connection or a
protocol of our own; moving a thread of the server between namespaces risks the server's
other sockets being made in the wrong one.

Lifetime: it watches the service's first process (a pidfd) and ends with it, removing
its socket; it holds the namespace's descriptor too, so the namespace goes when both
have ended. The engine stops it with the service (`stop_tree` by PID) and removes the
socket file if a SIGKILL left it.

Run: `python -m tfkube.engines.local._relay --netns-fd N --watch PID --forward SOCKET=PORT
[--forward ...] [--api-port P --api-host ADDR --api-to-port Q]` (a model server has two
doors, REST and gRPC: one socket each).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from typing import Any

from tfkube.engines.local import _egress
from tfkube.engines.local._netns import Namespaces, splice


async def _join(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    make: Callable[[], socket.socket],
    address: tuple[str, int],
) -> None:
    """Join an accepted connection to a new one made by `make` to `address`."""
    loop = asyncio.get_running_loop()
    try:
        sock = make()
    except OSError:
        writer.close()
        return
    sock.setblocking(False)
    try:
        await loop.sock_connect(sock, address)
    except OSError:
        sock.close()
        writer.close()
        return
    await splice(reader, writer, sock)


async def _package_proxy(ns: Namespaces, o: argparse.Namespace) -> asyncio.Server:
    """The package-index proxy (`_egress`) on 127.0.0.1:<package port> inside."""
    policy = _egress.policy_for(o.index, _egress.parse_ranges(o.allow_range))
    listening = ns.inside()
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listening.bind(("127.0.0.1", o.package_port))
    listening.listen(64)

    async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await _egress.serve_one(policy, r, w)

    return await asyncio.start_server(serve, sock=listening)


def _options(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tfkube.engines.local._relay")
    p.add_argument("--netns-fd", type=int, required=True)
    p.add_argument("--watch", type=int, required=True, help="the service's PID")
    p.add_argument(
        "--forward",
        action="append",
        required=True,
        metavar="SOCKET=PORT",
        help="a Unix socket the proxy connects to = the service's port inside (repeatable)",
    )
    p.add_argument("--api-port", type=int, help="where the API is offered inside")
    p.add_argument("--api-host", help="the server's address (numeric) in the host's namespace")
    p.add_argument("--api-to-port", type=int, help="the server's port")
    p.add_argument("--package-port", type=int, help="where the package proxy listens inside")
    p.add_argument("--index", action="append", default=[], help="a package index URL")
    p.add_argument("--allow-range", action="append", default=[], metavar="CIDR")
    return p.parse_args(argv)


async def _serve(o: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    ns = Namespaces(o.netns_fd)
    done = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, done.set)
    try:
        pidfd = os.pidfd_open(o.watch)
    except OSError:
        return  # the service is gone already
    loop.add_reader(pidfd, done.set)

    def inward(port: int) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any]:
        async def join(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            await _join(r, w, ns.inside, ("127.0.0.1", port))

        return join

    forwards = [(path, int(port)) for path, port in (f.rsplit("=", 1) for f in o.forward)]
    servers = []
    try:
        for path, port in forwards:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            old = os.umask(0o177)
            try:
                servers.append(await asyncio.start_unix_server(inward(port), path=path))
            finally:
                os.umask(old)
        if o.api_port:
            family = socket.AF_INET6 if ":" in o.api_host else socket.AF_INET

            async def outward(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
                await _join(
                    r,
                    w,
                    lambda: socket.socket(family, socket.SOCK_STREAM),
                    (o.api_host, o.api_to_port),
                )

            listening = ns.inside()
            listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listening.bind(("127.0.0.1", o.api_port))
            listening.listen(64)
            servers.append(await asyncio.start_server(outward, sock=listening))
        if o.package_port:
            servers.append(await _package_proxy(ns, o))
        await done.wait()
    finally:
        for server in servers:
            server.close()
        for path, _ in forwards:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def main(argv: Sequence[str]) -> int:
    asyncio.run(_serve(_options(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
