"""A network namespace per confined job: its replicas reach each other and nothing else.

A confined job's replicas share one network namespace that holds only a loopback
interface. Their TensorFlow servers (whose gRPC has no authentication) listen on it, so
no process outside the job can connect to them, and the replicas cannot connect to
anything outside: other teams' TensorFlow servers, notebooks, model servers and
TensorBoards on the host's loopback, the server's API, the machine's other services or
the network. What a replica needs from outside comes in as files, prepared before it
starts: its code (downloaded by the supervisor, verified, shown read-only) and its
`requirements.txt` (installed by a confined step on the host's network, `_supervisor`).

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

import contextlib
import os
import select
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


__all__ = ["NSENTER", "NetnsError", "create", "enter_path"]
