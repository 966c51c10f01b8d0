"""A network namespace per confined job: its replicas reach each other and nothing else.

A confined job's replicas share one network namespace that holds only a loopback
interface. Their TensorFlow servers (whose gRPC has no authentication) listen on it, so
no process outside the job can connect to them, and the replicas cannot connect to
anything outside: other teams' TensorFlow servers, notebooks, model servers and
TensorBoards on the host's loopback, the server's API, the machine's other services or
the network. What a replica needs from outside comes in as files, prepared before it
starts: its code (downloaded by the supervisor, verified, shown read-only) and its
`requirements.txt` (installed by a confined step inside the namespace whose one way out
is a proxy to the package index, `_egress`; `_supervisor`).

The namespace has no name and no mount: it is held by a file descriptor of the job's
supervisor (`create`) and by the replicas inside it, so it goes when they have all ended,
whatever ended them (a supervisor killed by SIGKILL included): nothing is left behind.
A replica enters it with `nsenter --net=/proc/self/fd/N` before bubblewrap
(`_sandbox.sandbox_command`), the descriptor passed to that process only.

A confined notebook, model server or TensorBoard gets one of its own the same way
(`_services`), held by the engine only while it starts the service and its relay
(`_relay`, the proxy's way in), then by those two.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import select
import socket
import subprocess

IP = "/usr/sbin/ip"
NSENTER = "/usr/bin/nsenter"
UNSHARE = "/usr/bin/unshare"
SH = "/bin/sh"
READY_SECONDS = 30.0


class NetnsError(Exception):
    """A network namespace could not be made."""


def enter_path(fd: int) -> str:
    """What `nsenter --net=` is given in the process that inherited `fd`. Pure."""
    return f"/proc/self/fd/{fd}"


def create() -> int:
    """A new network namespace with its loopback up, held by the returned descriptor
    (close-on-exec: pass it to the processes that enter it; close it to let go). A
    short-lived `unshare` process makes it; this process opens it and ends that one.
    Raises NetnsError."""
    try:
        holder = subprocess.Popen(
            [UNSHARE, "--net", "--", SH, "-c", f"{IP} link set lo up && echo up && exec sleep 60"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    except OSError as exc:
        raise NetnsError(f"cannot make a network namespace: {exc}") from None
    assert holder.stdout is not None
    assert holder.stderr is not None
    try:
        ready, _, _ = select.select([holder.stdout], [], [], READY_SECONDS)
        line = holder.stdout.readline() if ready else b""
        if line.strip() != b"up":
            holder.kill()
            why = holder.stderr.read().decode(errors="replace").strip() or "it did not start"
            raise NetnsError(f"cannot make a network namespace: {why}")
        return os.open(f"/proc/{holder.pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        with contextlib.suppress(ProcessLookupError):
            holder.kill()
        holder.wait()
        holder.stdout.close()
        holder.stderr.close()


# -- a process that holds sockets on both sides (`_relay`, `_egress`) ------------------

CLONE_NEWNET = 0x40000000
CHUNK = 65536


class Namespaces:
    """This process's own network namespace and a service's, and the switch between
    them for the making of one socket (this thread only; the relay has no other)."""

    def __init__(self, inner_fd: int) -> None:
        self.inner = inner_fd
        self.host = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        self._libc = ctypes.CDLL(None, use_errno=True)

    def _enter(self, fd: int) -> None:
        if self._libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns: {os.strerror(err)}")

    def inside(self, family: int = socket.AF_INET) -> socket.socket:
        """A new TCP socket in the service's namespace."""
        self._enter(self.inner)
        try:
            return socket.socket(family, socket.SOCK_STREAM)
        finally:
            try:
                self._enter(self.host)
            except OSError:  # never carry on in the wrong namespace
                os._exit(3)


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until end of stream, then pass the end on (half-close)."""
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (OSError, RuntimeError):
        writer.close()


async def splice(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, sock: socket.socket
) -> None:
    """Copy both ways between an accepted connection and a connected socket until both
    ends have closed; then close both."""
    up_reader, up_writer = await asyncio.open_connection(sock=sock)
    try:
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
    finally:
        for w in (up_writer, writer):
            w.close()
            with contextlib.suppress(OSError, RuntimeError):
                await w.wait_closed()


__all__ = ["NSENTER", "Namespaces", "NetnsError", "create", "enter_path", "pipe", "splice"]
