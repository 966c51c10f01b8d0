"""A network namespace per confined job: its replicas reach each other and nothing else.

A confined job's replicas share one network namespace that holds only a loopback
interface. Their TensorFlow servers (whose gRPC has no authentication) listen on it, so
no process outside the job can connect to them, and the replicas cannot connect to
anything outside: other teams' TensorFlow servers, notebooks, model servers and
TensorBoards on the host's loopback, the server's API, the machine's other services or
the network. What a replica needs from outside comes in as files, prepared before it
starts: its code (downloaded by the supervisor, verified, shown read-only) and its
`requirements.txt` (installed by a confined step on the host's network, `_supervisor`).

The namespace is named like `ip netns` names them (`/run/netns/tfkube-<job uid>`), made
and removed with iproute2's `ip`, and entered by `nsenter` before bubblewrap
(`_sandbox.sandbox_command`).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

IP = "/usr/sbin/ip"
NSENTER = "/usr/bin/nsenter"
NETNS_DIR = Path("/run/netns")
PREFIX = "tfkube-"


class NetnsError(Exception):
    """A network namespace could not be made."""


def name_for(job_uid: str) -> str:
    """The namespace of a job (by its record's uid). Pure."""
    return f"{PREFIX}{job_uid[:12]}"


def path_of(name: str) -> str:
    return str(NETNS_DIR / name)


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [IP, *args], capture_output=True, text=True, timeout=30, check=False,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def create(name: str) -> str:
    """Make the namespace `name` with its loopback up (one left by an earlier supervisor
    of the same job is replaced); returns its path. Raises NetnsError."""
    delete(name)
    made = _ip("netns", "add", name)
    if made.returncode != 0:
        raise NetnsError(f"cannot make the network namespace {name}: {made.stderr.strip()}")
    up = _ip("-n", name, "link", "set", "lo", "up")
    if up.returncode != 0:
        delete(name)
        raise NetnsError(f"cannot bring up loopback in {name}: {up.stderr.strip()}")
    return path_of(name)


def delete(name: str) -> None:
    """Remove the namespace `name` if it exists (the processes still in it keep it alive
    until they end; nothing can enter it any more)."""
    if os.path.exists(path_of(name)):
        _ip("netns", "delete", name)


__all__ = ["NetnsError", "create", "delete", "name_for", "path_of"]
