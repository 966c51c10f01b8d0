"""The launcher's process: one per replica, the leader of the replica's process group.

    engine --starts--> launcher --fetches/verifies--> code/
                          |--installs requirements.txt (Kubernetes; locally done at submit)
                          |--runs--> entrypoint (+ everything it starts), same group
                          |<-- SIGTERM/SIGINT: forwarded to the whole group; after the
                          |    grace period, SIGKILL
                          '-- exits with the entrypoint's code (128+N if killed by N)

When the launcher itself fails (bad code, missing entrypoint, broken set-up: the exit
codes in `tfkube.contract`), it writes why to $TFKUBE_TERMINATION_LOG, so an engine can
tell its permanent failures from the training code's own exit codes and never retry them.

When the engine that started it dies (TFKUBE_PARENT_PID no longer its parent), the
launcher ends its group: a replica never outlives its supervisor.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tfkube import contract as c
from tfkube.launcher._data import fetch_data
from tfkube.launcher._deps import DepsError, activate, ensure_venv
from tfkube.launcher._fetch import FetchError, fetch_code
from tfkube.launcher._progress import start_heartbeat
from tfkube.launcher._settings import ContractError, ReplicaContract, contract_from_env
from tfkube.launcher._ship import start_shipper
from tfkube.launcher._tee import open_attempt, replica_log_dir, start_tee

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


class LauncherFailure(Exception):
    """One of the launcher's own failures: its exit code and the reason."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code


def _write_termination_message(path: str | None, reason: str) -> None:
    if not path:
        return
    with contextlib.suppress(OSError):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(c.launcher_message(reason))


def _python_env(
    contract: ReplicaContract, code: Path | None, env: dict[str, str]
) -> dict[str, str]:
    """`env` with the code's requirements.txt installed and first on PATH, if it has one."""
    if contract.venv:  # made by the engine at submit (local)
        if not Path(contract.venv, "bin").is_dir():
            raise LauncherFailure(c.EX_CONFIG, f"the job's environment {contract.venv} is gone")
        return activate(env, contract.venv)
    if code is None:
        return env
    requirements = code / c.REQUIREMENTS_FILE
    if not requirements.is_file():
        return env
    if not contract.venv_cache:
        _say(f"{c.REQUIREMENTS_FILE} is not installed: the engine set no {c.VENV_CACHE}")
        return env
    _say(f"installing {c.REQUIREMENTS_FILE} into {contract.venv_cache} (or reusing it)")
    try:
        venv = ensure_venv(requirements, Path(contract.venv_cache), uv=shutil.which("uv"))
    except DepsError as exc:
        raise LauncherFailure(c.EX_CONFIG, f"cannot install {c.REQUIREMENTS_FILE}: {exc}") from None
    return activate(env, str(venv))


def _fetch(contract: ReplicaContract) -> Path | None:
    """Fetch, verify and unpack the code, if the job has any."""
    if contract.code_url is None:
        return None
    _say(f"{contract.job} {contract.key}: fetching {contract.code_url}")
    try:
        return fetch_code(
            contract.code_url, contract.code_sha256, Path(contract.work_dir), contract.code_token
        )
    except FetchError as exc:
        if exc.permanent:
            raise LauncherFailure(c.EX_DATAERR, f"bad code: {exc}") from None
        raise LauncherFailure(c.EX_TEMPFAIL, f"cannot fetch the code: {exc}") from None


def _fetch_data(contract: ReplicaContract) -> None:
    """The replica's data from the server into its data folder, when the engine asked
    for it (TFKUBE_DATA_URL and its token): before anything of the job runs."""
    url, token = os.environ.get(c.DATA_URL), os.environ.get(c.DATA_TOKEN)
    if not url or not token or not contract.data_dir:
        return
    text = os.environ.get(c.DATA_WAIT_SECONDS, "")
    try:
        wait = float(text) if text else c.DEFAULT_DATA_WAIT_SECONDS
    except ValueError:
        raise LauncherFailure(c.EX_CONFIG, f"{c.DATA_WAIT_SECONDS} is not seconds") from None
    _say(f"{contract.job} {contract.key}: fetching its data into {contract.data_dir}")
    try:
        size = fetch_data(
            url,
            token,
            contract.key,
            Path(contract.data_dir),
            Path(contract.work_dir),
            wait,
            _say,
            cache_url=os.environ.get(c.DATA_CACHE_URL) or None,
        )
    except FetchError as exc:
        if exc.permanent:
            raise LauncherFailure(c.EX_DATAERR, f"bad data: {exc}") from None
        raise LauncherFailure(c.EX_TEMPFAIL, f"cannot fetch the data: {exc}") from None
    _say(f"{contract.job} {contract.key}: data ready ({size:,} bytes fetched)")


def _prepare(contract: ReplicaContract) -> tuple[Path, Path | None, dict[str, str]]:
    """Fetch, verify and unpack the code; build the program's environment.
    Returns (where it runs: the code folder, else the launcher's working directory; the
    entrypoint, None when the role runs its own command; environment).
    Raises LauncherFailure."""
    _fetch_data(contract)
    code = _fetch(contract)
    entry = None
    if contract.command is None:
        assert code is not None  # the contract has code or a command
        entry = (code / contract.entrypoint).resolve()
        if not entry.is_file() or not entry.is_relative_to(code.resolve()):
            raise LauncherFailure(
                c.EX_NOINPUT, f"the entrypoint {contract.entrypoint!r} is not in the code"
            )
    where = code if code is not None else Path.cwd()
    env = contract.environment(os.environ)
    try:
        env.update(_computed_env(contract.env_commands, env, where))
    except (ContractError, subprocess.TimeoutExpired) as exc:
        raise LauncherFailure(c.EX_CONFIG, f"cannot build the environment: {exc}") from None
    return where, entry, _python_env(contract, code, env)


PYTHONS = ("python", "python3")


def resolve_program(argv: list[str], env: dict[str, str]) -> list[str]:
    """`python`/`python3` that the replica's PATH does not have is the interpreter running
    this launcher (stock images often lack a bare `python`; locally it is tfkube's own).
    Every other program runs as given."""
    if argv and argv[0] in PYTHONS and shutil.which(argv[0], path=env.get("PATH")) is None:
        return [sys.executable, *argv[1:]]
    return argv


def _start(
    argv: list[str], code: Path, env: dict[str, str], *, piped: bool
) -> subprocess.Popen[bytes]:
    """Start the entrypoint (its output piped, for the tee, when `piped`)."""
    try:
        return subprocess.Popen(
            argv,
            cwd=code,
            env=env,
            stdout=subprocess.PIPE if piped else None,
            stderr=subprocess.STDOUT if piped else None,
        )
    except OSError as exc:
        missing = exc.errno == errno.ENOENT
        raise LauncherFailure(
            c.EX_NOTFOUND if missing else c.EX_NOEXEC,
            f"cannot run {' '.join(argv[:2])}: {exc.strerror or exc}",
        ) from None


def main() -> int:
    termination_log = os.environ.get(c.TERMINATION_LOG)
    try:
        return _supervise()
    except LauncherFailure as failure:
        _say(str(failure))
        _write_termination_message(termination_log, str(failure))
        return failure.code


def _supervise() -> int:
    try:
        contract = contract_from_env(os.environ)
    except ContractError as exc:
        raise LauncherFailure(c.EX_CONFIG, f"cannot start: {exc}") from None
    if os.environ.get(c.PREPARE_ONLY) == "1":
        _python_env(contract, _fetch(contract), dict(os.environ))
        _say(f"{contract.job}: prepared (the code fetched, its {c.REQUIREMENTS_FILE} installed)")
        return 0
    grace = float(os.environ.get(c.GRACE_SECONDS, "5"))
    # Stall detection on Kubernetes: a file kept fresh while there is progress (_progress).
    heartbeat = start_heartbeat(os.environ.get(c.HEARTBEAT_FILE), contract.log_dir)
    code, entry, env = _prepare(contract)

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

    argv = resolve_program(contract.argv(str(entry) if entry is not None else None), env)
    if stopping.is_set():  # stopped while setting up: start nothing
        return c.signal_exit_code(signal.SIGTERM)
    _say(f"running {' '.join(argv)}")
    # The output also goes to the job's shared log folder, one file per start (_tee).
    opened = open_attempt(contract.log_dir, contract.key)
    # With a heartbeat the output is piped even without a log file: it is the progress.
    child = _start(argv, code, env, piped=opened is not None or heartbeat is not None)
    if stopping.is_set():  # the signal came while it started: pass it on now
        _signal_group(pgid, signal.SIGTERM)
    # Where the server cannot read the log folder, what it keeps is sent to it (_ship).
    own_log = (
        replica_log_dir(contract.log_dir, contract.key) / f"{opened[0]}.log" if opened else None
    )
    shipper = start_shipper(os.environ, contract.log_dir, contract.key, own_log)
    tee = None
    if child.stdout is not None:
        beat = heartbeat.beat if heartbeat is not None else None
        tee = start_tee(child.stdout, opened[1] if opened else None, on_output=beat)
        if opened is not None:
            tee.note(f"{contract.job} {contract.key} attempt {opened[0]}: {argv[0]}")
    if heartbeat is not None:
        heartbeat.program_started()

    parent = os.environ.get(c.PARENT_PID)
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
    if heartbeat is not None:
        heartbeat.stop()
    status = c.exit_status(code_)
    if tee is not None:
        tee.finish(f"entrypoint exited with {status}")
    if shipper is not None:
        shipper.close()
    _say(f"entrypoint exited with {status}")
    return status
