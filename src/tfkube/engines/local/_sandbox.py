"""Confinement: a workload runs as its team's own OS user, in a sandbox that sees only
what it needs, in cgroups that hold it to its cpu and memory.

How a confined process starts (`launch`):

    caller (root) --creates--> cgroups with the limits (_cgroups)
                  --writes---> bubblewrap's options, environment included, to a memfd
                  --starts---> /bin/sh: writes its PID to each cgroup.procs, ignores
                               SIGTERM, execs
                  bwrap (root, no capabilities kept but setuid/setgid)
                      a fresh root (tmpfs) holding only: /usr, /bin, /lib*, /etc
                      read-only (secrets in /etc masked); the Python installation,
                      tfkube and the caller's read-only folders; the read-write folders;
                      a private /tmp and /dev/shm; a new /proc in a new PID namespace; a
                      minimal /dev (+ the workload's GPUs); new IPC, UTS and cgroup
                      namespaces; the network: the caller's, or (`netns`) a job's
                      own namespace, entered first by nsenter (_netns)
                  setpriv: the team's uid/gid, no groups, no capabilities (no_new_privs)
                  env --default-signal=TERM: the workload's command, stoppable again

The environment is the confinement's allow-list only (`--clearenv`), handed over in the
memfd so that no value shows in a process list. Paths are bound at their own paths, so
what the caller computed (TFKUBE_LOG_DIR...) means the same inside.

Stopping: bwrap ignores SIGTERM (its death would SIGKILL the sandbox at once), the
workload gets it, so `stop_trees`' SIGTERM to the whole tree stops it gracefully and its
final SIGKILL ends bwrap and with it everything inside (`--die-with-parent` below). A
SIGTERM to the started process alone (`proc.terminate()`) does nothing: stop the tree.

`die_with_parent` (default): the sandbox is SIGKILLed when bwrap or the thread that
started it ends. Linux's parent-death signal follows the starting *thread*, so start
confined processes from a thread that lives as long as they should (the main thread, the
event loop's, a dedicated one), never from a pool whose idle threads exit. Without it
(False) a SIGKILL of bwrap leaves the sandbox running: only `stop_trees` ends it.

Using it for a workload other than a job replica (a notebook, a model server), as root:

    tenant = ensure_identity(team_folder, team)          # the team's uid/gid, once
    conf = confinement_for(tenant, cgroup=f"{tenant.name}.notebook-{id}", cwd=folder,
                           read_write=[folder], read_only=[outputs], env={...},
                           limits=Limits(cpu=1, memory=2 * 2**30), hidden=[data_dir])
    with launch(["python", "-m", "..."], conf) as start:   # makes its cgroups
        proc = subprocess.Popen(start.argv, pass_fds=start.pass_fds, stdout=..., ...)
    ...  # stop: stop_trees([ref_of(proc.pid)], grace); after it exited (or failed to
    #      start):
    oom_killed = release(conf) > 0     # reads the OOM kills, removes its cgroups

`read_write` folders must already be the tenant's (`hand_over`); `cgroup` must be unique
among the processes running at once; `env` is all it gets (PATH, HOME, LANG, USER and
LOGNAME are added; `passed_environment` picks what it may keep of the server's);
`hidden` is the server's data dir.

`isolation_support()` says whether this machine can do all of it, and if not, why.
Deciding is pure (`bwrap_options`, `sandbox_command`, `covering`); the rest acts.
"""

from __future__ import annotations

import contextlib
import functools
import os
import site
import stat
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tfkube import contract
from tfkube.engines.local import _netns
from tfkube.engines.local._cgroups import CgroupLayout, Limits, create, this_machine
from tfkube.engines.local._cgroups import release as release_cgroup
from tfkube.engines.local._cgroups import sweep as sweep_cgroups
from tfkube.engines.local._netns import NSENTER
from tfkube.engines.local._tenants import TenantIdentity

BWRAP = "/usr/bin/bwrap"
SETPRIV = "/usr/bin/setpriv"
ENV = "/usr/bin/env"
SH = "/bin/sh"

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
"""Bound read-only (or re-created as the same symlinks, on merged-/usr systems)."""
ETC_SECRETS = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/security/opasswd",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/etc/ssl/private",
    "/etc/krb5.keytab",
    "/etc/apt/auth.conf",
    "/etc/apt/auth.conf.d",
    "/etc/kubernetes",
    "/etc/letsencrypt",
    "/etc/wireguard",
    "/etc/NetworkManager/system-connections",
    "/etc/ipsec.secrets",
    "/etc/ppp",
    "/etc/docker",
    "/etc/tfkube",
)
"""Masked inside /etc (an empty file or folder in their place): what holds keys and
passwords on a Debian machine. Most are root's only anyway; the mask also covers one
whose mode an administrator loosened."""
SYS_DIRS = ("/sys/devices/system/cpu", "/sys/devices/system/node")
"""The only part of /sys a workload sees (CPU and NUMA topology, read by BLAS and
TensorFlow); the rest names the host's devices and every cgroup, other teams' too."""
GPU_CONTROL = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
OWN_VARIABLES = frozenset({"PATH", "HOME", "USER", "LOGNAME"})
"""Set by the confinement itself, never taken from the caller's environment."""
OWN_MOUNTS = ("/proc", "/dev", "/dev/shm", "/tmp")
"""What the sandbox mounts anew (the private /tmp and /dev/shm are 1777)."""

# The first step of every confined process, as root, before anything runs: join the
# cgroups (by writing its own PID), ignore SIGTERM, become bwrap.
_JOIN = (
    'for f; do shift; [ "$f" = -- ] && break; '
    'echo $$ > "$f" || { echo "tfkube: cannot join the cgroup $f" >&2; exit 125; }; done; '
    "trap '' TERM; exec \"$@\""
)


@dataclass(frozen=True)
class Confinement:
    """Everything a confined process may see and use. Paths are host paths, bound at the
    same path inside; anything not named here (and not a system folder) is absent."""

    uid: int
    gid: int
    user: str
    """Its USER and LOGNAME."""
    cwd: str
    """Where it starts (must be visible: one of the folders below, or a system folder)."""
    cgroup: str
    """Its cgroups' name below tfkube's cgroup folder (unique per process started)."""
    read_only: tuple[str, ...] = ()
    """Folders and files it may read: the Python installation, its code, its data."""
    read_write: tuple[str, ...] = ()
    """Folders it may write: its work folder, its log/output folder. Owned by `uid`."""
    hidden: tuple[str, ...] = ()
    """Folders never visible, even where a read-only folder holds them (the server's
    data dir, when it lies below a system folder or the Python installation)."""
    env: tuple[tuple[str, str], ...] = ()
    """The whole environment (an allow-list: nothing of the caller's is inherited)."""
    limits: Limits = field(default_factory=Limits)
    devices: tuple[str, ...] = ()
    """Device files it may use (/dev/nvidiaN of its GPUs; the NVIDIA control devices are
    added when there is one)."""
    die_with_parent: bool = True
    """SIGKILL the sandbox when the starting thread's process dies."""
    netns: int | None = None
    """A descriptor of the network namespace it runs in (its job's own, held by the
    supervisor: `_netns.create`), passed to it alone; None: the caller's network."""

    @property
    def environ(self) -> dict[str, str]:
        return dict(self.env)


@dataclass(frozen=True)
class TenantIsolation:
    """What a `LocalBackend` needs to confine its jobs: whose identity they run as, and
    what must stay out of sight (the server's own data dir)."""

    identity: TenantIdentity
    folder: str
    """The tenant's folder: a confined job's data and log folders must lie in it (they
    are handed to the tenant)."""
    hidden: tuple[str, ...] = ()
    passed_env: tuple[str, ...] = ()
    """Variables of the server's environment its jobs keep (`passed_environment`)."""


# -- deciding (pure) ----------------------------------------------------------------------


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def passed_environment(environ: Mapping[str, str], names: Iterable[str]) -> dict[str, str]:
    """What a workload keeps of the server's environment: the variables `names` allows
    (the engine's allow-list and the administrator's additions) and the locale's LC_*;
    never PATH, HOME, USER, LOGNAME (the sandbox's own) nor tfkube's TFKUBE_*. Pure."""
    allowed = set(names) - OWN_VARIABLES
    return {
        k: v
        for k, v in environ.items()
        if (k in allowed or k.startswith("LC_")) and not k.startswith(contract.RESERVED_PREFIX)
    }


def sees(path: str, shown: Iterable[str]) -> bool:
    """Whether a sandbox that binds `shown` (and the system folders) has `path`."""
    path = os.path.normpath(path)
    return any(_under(path, p) for p in (*SYSTEM_DIRS, *shown))


def covering(paths: Iterable[str], already: Iterable[str] = ()) -> tuple[str, ...]:
    """The fewest of `paths` (normalized, absolute) that include all of them, leaving out
    those inside `already` (folders the sandbox has anyway). Sorted."""
    seen = sorted({os.path.normpath(p) for p in paths if os.path.isabs(p)})
    kept: list[str] = []
    for p in seen:
        if any(_under(p, k) for k in (*kept, *already)):
            continue
        kept.append(p)
    return tuple(kept)


def _leading_folders(targets: Iterable[str], bound: Sequence[str]) -> list[str]:
    """The folders bwrap creates on its way to the mount points `targets`: their
    ancestors that no bind mount holds (those are the host's own, with their own modes).
    Parents first."""
    found: set[str] = set()
    for target in targets:
        parent = os.path.dirname(os.path.normpath(target))
        while parent != "/":
            if parent not in OWN_MOUNTS and not any(_under(parent, b) for b in bound):
                found.add(parent)
            parent = os.path.dirname(parent)
    return sorted(found, key=lambda p: (p.count("/"), p))


Kind = Callable[[str], str | None]
"""A host path -> "dir", "file", "link" (a symlink), "dev" (a device), or None (absent)."""


def bwrap_options(c: Confinement, kind: Kind, readlink: Callable[[str], str]) -> list[str]:
    """bubblewrap's options (no command) for a confinement, given what exists on the
    host (`kind`, `readlink`: seams). Order matters: later mounts cover earlier ones."""
    out: list[str] = []
    for d in SYSTEM_DIRS:
        k = kind(d)
        if k == "link":
            out += ["--symlink", readlink(d), d]
        elif k == "dir":
            out += ["--ro-bind", d, d]
    for secret in ETC_SECRETS:
        k = kind(secret)
        if k == "dir":
            out += ["--tmpfs", secret]
        elif k in ("file", "link", "dev"):
            out += ["--ro-bind", "/dev/null", secret]
    # /etc/resolv.conf may point into /run (systemd-resolved): bring its target along.
    if kind("/etc/resolv.conf") == "link":
        target = os.path.normpath(os.path.join("/etc", readlink("/etc/resolv.conf")))
        if not any(_under(target, d) for d in SYSTEM_DIRS):
            out += ["--ro-bind-try", target, target]
    out += ["--proc", "/proc", "--dev", "/dev"]
    out += ["--perms", "1777", "--tmpfs", "/tmp", "--perms", "1777", "--tmpfs", "/dev/shm"]
    for d in SYS_DIRS:
        if kind(d) == "dir":
            out += ["--ro-bind", d, d]
    read_only = covering(c.read_only, SYSTEM_DIRS)
    for p in read_only:
        out += ["--ro-bind", p, p]
    for h in sorted(set(c.hidden)):
        # Only where something bound above would show it; elsewhere it is absent anyway.
        if any(_under(h, p) for p in (*SYSTEM_DIRS, *read_only)) and kind(h) == "dir":
            out += ["--tmpfs", h]
    for p in sorted(set(c.read_write)):
        out += ["--bind", p, p]
    devices = list(c.devices)
    if devices:
        devices += [d for d in GPU_CONTROL if kind(d) == "dev"]
    for d in devices:
        out += ["--dev-bind", d, d]
    # bwrap makes the folders leading to a mount point root's only (0700): open them, or
    # the team could not reach its own folders (nor the Python under /root).
    bound = [*SYSTEM_DIRS, *read_only, *c.read_write, *SYS_DIRS]
    for folder in _leading_folders([*read_only, *c.read_write, *SYS_DIRS], bound):
        out += ["--chmod", "0755", folder]
    out += ["--chdir", c.cwd]
    out += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    out += ["--new-session"]  # no controlling terminal: no TIOCSTI into the caller's
    if c.die_with_parent:
        out += ["--die-with-parent"]
    # Root without capabilities, but for the two that setpriv needs to become the team.
    out += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    out += ["--clearenv"]
    for name, value in c.env:
        out += ["--setenv", name, value]
    return out


def sandbox_command(
    c: Confinement, argv: Sequence[str], procs: Sequence[str], args_fd: int
) -> list[str]:
    """The argv that starts `argv` confined: join the cgroups (`procs`: their
    cgroup.procs files), enter its network namespace (if any), then bwrap with its
    options read from `args_fd`, setpriv, env."""
    drop = [
        SETPRIV,
        f"--reuid={c.uid}",
        f"--regid={c.gid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--",
    ]
    inner = [*drop, ENV, "--default-signal=TERM", *argv]
    enter = [] if c.netns is None else [NSENTER, f"--net={_netns.enter_path(c.netns)}", "--"]
    return [
        SH,
        "-c",
        _JOIN,
        "tfkube-sandbox",
        *procs,
        "--",
        *enter,
        BWRAP,
        "--args",
        str(args_fd),
        "--",
        *inner,
    ]


# -- acting -------------------------------------------------------------------------------


def _host_kind(path: str) -> str | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return "link"
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        return "dev"
    return "file"


def _pth_folders(site_dir: str) -> list[str]:
    """Folders named by a site folder's .pth files (editable installs: tfkube's src)."""
    found = []
    with contextlib.suppress(OSError):
        for pth in Path(site_dir).glob("*.pth"):
            for line in pth.read_text(errors="replace").splitlines():
                line = line.strip()
                if line and not line.startswith(("#", "import ")) and os.path.isdir(line):
                    found.append(line)
    return found


@functools.cache
def python_installation() -> tuple[str, ...]:
    """What running tfkube's Python needs to read: the interpreter's installation, the
    virtual environment, its site folders and the folders their .pth files add (an
    editable install's source), tfkube's own package. Never the working directory."""
    import tfkube

    sites = [*site.getsitepackages()]
    if site.ENABLE_USER_SITE and site.USER_SITE and os.path.isdir(site.USER_SITE):
        sites.append(site.USER_SITE)
    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *sites]
    for s in sites:
        paths += _pth_folders(s)
    paths.append(str(Path(tfkube.__file__).resolve().parents[1]))
    paths += [os.path.realpath(p) for p in paths]
    # Never the whole file system (a .pth naming "/" would), nor anything not a folder.
    return covering((p for p in paths if os.path.isdir(p) and p != "/"), SYSTEM_DIRS)


def confinement_for(
    tenant: TenantIdentity,
    *,
    cgroup: str,
    cwd: str,
    read_only: Iterable[str] = (),
    read_write: Iterable[str] = (),
    hidden: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    home: str | None = None,
    limits: Limits | None = None,
    devices: Iterable[str] = (),
    die_with_parent: bool = True,
    netns: int | None = None,
) -> Confinement:
    """A confinement for a Python workload of `tenant`: tfkube's Python installation is
    added to what it reads; PATH (that Python first), HOME (`home`, default `cwd`), LANG,
    USER and LOGNAME to its environment, under the caller's `env` (which holds whatever
    else it gets: see `passed_environment`)."""
    base = {
        "PATH": f"{Path(sys.executable).parent}:{SYSTEM_PATH}",
        "HOME": home or cwd,
        "LANG": "C.UTF-8",
        "USER": tenant.name,
        "LOGNAME": tenant.name,
    }
    return Confinement(
        uid=tenant.uid,
        gid=tenant.gid,
        user=tenant.name,
        cwd=cwd,
        cgroup=cgroup,
        read_only=(*python_installation(), *read_only),
        read_write=tuple(read_write),
        hidden=tuple(hidden),
        env=tuple(sorted({**base, **(env or {})}.items())),
        limits=limits or Limits(),
        devices=tuple(devices),
        die_with_parent=die_with_parent,
        netns=netns,
    )


class SandboxError(Exception):
    """The sandbox could not be prepared (its cgroups, most likely)."""


@dataclass(frozen=True)
class Launch:
    """What to pass to `subprocess.Popen`: `Popen(argv, pass_fds=pass_fds, ...)`."""

    argv: list[str]
    pass_fds: tuple[int, ...]


def _layout() -> CgroupLayout:
    layout = this_machine()
    if layout is None:
        raise SandboxError("no cgroup hierarchy is mounted on this machine")
    return layout


@contextlib.contextmanager
def launch(argv: Sequence[str], c: Confinement) -> Iterator[Launch]:
    """Make the process's cgroups and hand over how to start it; start it inside the
    `with` (the options' memfd is closed when it ends). Raises SandboxError."""
    layout = _layout()
    try:
        procs = create(layout, c.cgroup, c.limits)
    except OSError as exc:
        release_cgroup(layout, c.cgroup, wait=0)
        raise SandboxError(f"cannot make the cgroup {c.cgroup}: {exc}") from None
    options = bwrap_options(c, _host_kind, os.readlink)
    # Close-on-exec: only the child given it in `pass_fds` gets it (another thread's
    # child never does: the options hold this workload's environment).
    fd = os.memfd_create("tfkube-sandbox", os.MFD_CLOEXEC)
    try:
        os.write(fd, b"".join(o.encode() + b"\0" for o in options))
        os.lseek(fd, 0, os.SEEK_SET)
        passed = (fd,) if c.netns is None else (fd, c.netns)
        yield Launch(sandbox_command(c, argv, [str(p) for p in procs], fd), passed)
    finally:
        os.close(fd)


def release(c: Confinement) -> int:
    """After the process ended: how often the kernel OOM-killed in it (over its memory
    limit); its cgroups are removed."""
    layout = this_machine()
    return 0 if layout is None else release_cgroup(layout, c.cgroup)


def release_cgroup_named(cgroup: str) -> int:
    """`release` by the cgroup's name alone (what a workload's handle keeps)."""
    layout = this_machine()
    return 0 if layout is None else release_cgroup(layout, cgroup)


def sweep(prefix: str) -> None:
    """Remove what is left of the cgroups whose names start with `prefix` (empty ones:
    those of processes that ended without a `release`, e.g. when their starter died)."""
    layout = this_machine()
    if layout is not None:
        sweep_cgroups(layout, prefix)


# -- can this machine do it? ------------------------------------------------------------


@dataclass(frozen=True)
class Support:
    ok: bool
    reason: str = ""
    """Why not, in one sentence (empty when ok)."""


def _probe() -> str | None:
    """Run `true` confined as nobody, in a network namespace of its own: None when it
    worked, else what went wrong."""
    nobody = TenantIdentity("nobody", 65534, 65534)
    # With every kind of limit: a controller missing shows here, not at a job's start.
    limits = Limits(cpu=1.0, memory=256 * 2**20)
    try:
        netns = _netns.create()
    except _netns.NetnsError as exc:
        return f"a job cannot have a network of its own: {exc}"
    c = confinement_for(
        nobody, cgroup=f".probe-{os.getpid()}", cwd="/", env={}, limits=limits, netns=netns
    )
    try:
        with launch(["/bin/true"], c) as start:
            result = subprocess.run(
                start.argv,
                pass_fds=start.pass_fds,
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
                stdin=subprocess.DEVNULL,
            )
    except (SandboxError, OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    finally:
        release(c)
        os.close(netns)
    if result.returncode != 0:
        return (result.stderr.strip() or f"exit code {result.returncode}").splitlines()[-1]
    return None


@functools.cache
def isolation_support() -> Support:
    """Whether this machine can confine workloads (root; bubblewrap, setpriv and a
    coreutils env that resets signals; a writable cgroup hierarchy with memory, cpu and
    pids; PID, mount and network namespaces), and if not, why. Probed once per process."""
    if os.geteuid() != 0:
        return Support(
            False,
            "the server does not run as root, so it cannot run each team's "
            "workloads as the team's own OS user",
        )
    programs = (
        (BWRAP, "bubblewrap"),
        (SETPRIV, "util-linux"),
        (ENV, "coreutils"),
        (NSENTER, "util-linux"),
        (_netns.IP, "iproute2"),
        (_netns.UNSHARE, "util-linux"),
    )
    for program, package in programs:
        if not os.access(program, os.X_OK):
            return Support(
                False,
                f"{program} is missing (install Debian's {package}, e.g. with "
                "tools/sandbox/ensure-bwrap.sh as root)",
            )
    layout = this_machine()
    if layout is None:
        return Support(
            False, "no cgroup hierarchy is mounted, so no memory or cpu limit can hold a workload"
        )
    problem = _probe()
    if problem is not None:
        return Support(False, f"a confined test process failed: {problem}")
    return Support(True)


__all__ = [
    "Confinement",
    "Launch",
    "Limits",
    "SandboxError",
    "Support",
    "TenantIsolation",
    "bwrap_options",
    "confinement_for",
    "covering",
    "isolation_support",
    "launch",
    "passed_environment",
    "python_installation",
    "release",
    "sandbox_command",
    "sees",
    "sweep",
]
