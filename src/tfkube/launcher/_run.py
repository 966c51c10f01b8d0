"""The launcher's process: one per replica, the leader of the replica's process group.

    engine --starts--> launcher --fetches/verifies--> code/
                          |--runs--> entrypoint (+ everything it starts), same group
                          |<-- SIGTERM/SIGINT: forwarded to the whole group; after the
                          |    grace period, SIGKILL
                          '-- exits with the entrypoint's code (128+N if killed by N)

When the engine that started it dies (TFKUBE_PARENT_PID no longer its parent), the
launcher ends its group: a replica never outlives its supervisor.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tfkube.launcher._contract import (
    EX_CONFIG,
    EX_DATAERR,
    EX_NOINPUT,
    EX_TEMPFAIL,
    ContractError,
    contract_from_env,
)
from tfkube.launcher._fetch import FetchError, fetch_code
from tfkube.launcher._tee import open_attempt, start_tee

ENV_COMMAND_TIMEOUT = 60.0


def _say(message: str) -> None:
    print(f"[tfkube-launcher] {message}", file=sys.stderr, flush=True)


PR_SET_CHILD_SUBREAPER = 36


def _become_subreaper() -> None:
    """Make orphaned descendants (daemons, `setsid` children) re-parent to this process
    instead of init, so they stay in reach when the replica is stopped (Linux only)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _processes() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, process group, state) of every process, read from /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # Fields after the command name (which may hold spaces) start past the last ')'.
        fields = stat[stat.rfind(")") + 2 :].split()
        table[int(entry)] = (int(fields[1]), int(fields[2]), fields[0])
    return table


def _group_members(pgid: int) -> list[int]:
    """Live processes in our group `pgid` or descended from us, other than us."""
    me = os.getpid()
    table = _processes()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found = {pid for pid, (_, group, _) in table.items() if group == pgid}
    stack = [me]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
            stack.append(child)
    found.discard(me)
    return [pid for pid in found if table[pid][2] != "Z"]


def _signal_group(pgid: int, sig: int) -> None:
    for pid in _group_members(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _reap_adopted() -> None:
    """Collect exited processes re-parented to us (we are a subreaper), so that no zombie
    is handed on to init when we exit."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _end_group(pgid: int, grace: float) -> None:
    """SIGTERM everything else in the group, then SIGKILL what is left after `grace`."""
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while _group_members(pgid) and time.monotonic() < deadline:
        _reap_adopted()
        time.sleep(0.02)
    _signal_group(pgid, signal.SIGKILL)
    deadline = time.monotonic() + 1
    while _group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.01)
    _reap_adopted()


def _computed_env(commands: dict[str, str], env: dict[str, str], cwd: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, command in commands.items():
        result = subprocess.run(
            ["/bin/sh", "-c", command],
            cwd=cwd,
            env={**env, **out},
            capture_output=True,
            text=True,
            timeout=ENV_COMMAND_TIMEOUT,
            check=False,
        )
        if result.returncode != 0:
            raise ContractError(
                f"env {name}: command {command!r} exited {result.returncode}: "
                f"{result.stderr.strip()[-500:]}"
            )
        out[name] = result.stdout.strip()
    return out


def main() -> int:
    try:
        contract = contract_from_env(os.environ)
    except ContractError as exc:
        _say(f"cannot start: {exc}")
        return EX_CONFIG
    grace = float(os.environ.get("TFKUBE_GRACE_SECONDS", "5"))
    work = Path(contract.work_dir)
    _say(f"{contract.job} {contract.role}-{contract.index}: fetching {contract.code_url}")
    try:
        code = fetch_code(contract.code_url, contract.code_sha256, work, contract.code_token)
    except FetchError as exc:
        _say(f"cannot fetch the code: {exc}")
        return EX_DATAERR if exc.permanent else EX_TEMPFAIL
    entry = (code / contract.entrypoint).resolve()
    if not entry.is_file() or not entry.is_relative_to(code.resolve()):
        _say(f"the entrypoint {contract.entrypoint!r} is not in the code")
        return EX_NOINPUT
    env = contract.environment(os.environ)
    try:
        env.update(_computed_env(contract.env_commands, env, code))
    except (ContractError, subprocess.TimeoutExpired) as exc:
        _say(f"cannot build the environment: {exc}")
        return EX_CONFIG

    # Become the group leader if the engine did not already make us one (in a container
    # we are often PID 1 of our own namespace; locally the engine starts a new session).
    if os.getpgrp() != os.getpid():
        os.setpgid(0, 0)
    _become_subreaper()
    pgid = os.getpgrp()
    stopping = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        if not stopping.is_set():
            stopping.set()
            _say(f"got signal {signum}: stopping the replica")
            _signal_group(pgid, signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)

    argv = contract.argv(str(entry))
    _say(f"running {' '.join(argv)}")
    # The output also goes to the job's shared log folder, one file per start (_tee).
    opened = open_attempt(contract.log_dir, f"{contract.role}-{contract.index}")
    child = subprocess.Popen(
        argv,
        cwd=code,
        env=env,
        stdout=subprocess.PIPE if opened else None,
        stderr=subprocess.STDOUT if opened else None,
    )
    tee = None
    if opened is not None and child.stdout is not None:
        tee = start_tee(child.stdout, opened[1])
        tee.note(f"{contract.job} {contract.role}-{contract.index} attempt {opened[0]}: {argv[0]}")

    parent = os.environ.get("TFKUBE_PARENT_PID")
    if parent and parent.isdigit():
        watched = int(parent)

        def watch_parent() -> None:
            while child.poll() is None:
                if os.getppid() != watched:
                    _say("the engine that started this replica is gone: stopping")
                    on_signal(signal.SIGTERM, None)
                    return
                time.sleep(0.5)

        threading.Thread(target=watch_parent, daemon=True).start()

    while True:
        try:
            code_ = child.wait(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            if stopping.is_set():
                try:
                    code_ = child.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    _signal_group(pgid, signal.SIGKILL)
                    code_ = child.wait()
                break
    # Nothing the entrypoint started may outlive it.
    _end_group(pgid, grace=min(grace, 2.0))
    status = code_ if code_ >= 0 else 128 - code_
    if tee is not None:
        tee.finish(f"entrypoint exited with {status}")
    _say(f"entrypoint exited with {status}")
    return status
