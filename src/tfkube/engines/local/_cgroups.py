"""cgroups for confined workloads: one per replica start, with the job's cpu and memory as
limits, and the kernel's OOM kills read back after it ends. v1 and v2.

    where (`layout`):  v1: <memory|cpu|pids mount>/<this process's own cgroup>/tfkube/<name>
                           (below the server's own cgroup, so the limits of a systemd unit
                           or a container that runs it still hold over the sum)
                       v2: /sys/fs/cgroup/tfkube/<name> (the no-internal-processes rule
                           forbids controllers below the server's own, non-leaf, cgroup;
                           Docker's cgroupfs driver does the same)
    what (`plan`):     v1 memory.limit_in_bytes (+ memsw: no swapping past it),
                          cpu.cfs_quota_us over cpu.cfs_period_us, cpu.shares, pids.max
                       v2 memory.max, memory.swap.max 0, memory.oom.group 1 (an OOM kill
                          takes the whole replica, as the kubelet sets it), cpu.max,
                          cpu.weight, pids.max
    OOM (`oom_kills`): v1 memory.oom_control, v2 memory.events: the `oom_kill` count

The process joins its cgroups itself, before it executes anything (the sandbox's first
step writes its PID to each `cgroup.procs`), so nothing it starts is ever outside them.
Deciding is pure (`detect_layout`, `plan`, `oom_kills`); `create`, `release` act.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from dataclasses import dataclass
from pathlib import Path

from tfkube.spec import Resources, cpu_cores, memory_bytes

V1_CONTROLLERS = ("memory", "cpu", "pids")
V2_CONTROLLERS = ("memory", "cpu", "pids")
GROUP = "tfkube"
"""The folder below which every confined workload's cgroup is made."""
CFS_PERIOD_US = 100_000
MIN_QUOTA_US = 1_000
"""The kernel refuses a CFS quota under 1 ms."""
DEFAULT_PIDS = 4096
"""Processes and threads a replica may have at once (a fork bomb stops there);
TensorFlow's thread pools on a 128-core machine need a few hundred."""


@dataclass(frozen=True)
class Limits:
    """What one confined workload may use. None: no limit."""

    cpu: float | None = None
    """Cores: a CFS quota (a hard cap) and a share of contended CPU in proportion."""
    memory: int | None = None
    """Bytes, page cache and tmpfs (/tmp, /dev/shm) included; past it the kernel kills."""
    pids: int | None = DEFAULT_PIDS


@dataclass(frozen=True)
class CgroupLayout:
    """Where confined workloads' cgroups are made on this machine."""

    version: int
    """1 or 2."""
    parents: tuple[tuple[str, str], ...]
    """(controller, folder that holds tfkube's cgroups): v1 one per controller; v2 one
    pair with the controller "" (one folder for all)."""

    def folders(self, name: str) -> list[Path]:
        """The workload's cgroup folders (one per v1 controller; one on v2)."""
        return [Path(parent, name) for _, parent in self.parents]

    def folder(self, controller: str, name: str) -> Path:
        for ctl, parent in self.parents:
            if ctl in (controller, ""):
                return Path(parent, name)
        raise KeyError(controller)


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def _own_paths(self_cgroup: str) -> dict[str, str]:
    """controller (or "" for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    paths = {}
    for line in self_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(",") if parts[1] else [""]:
            paths[controller] = parts[2]
    return paths


def detect_layout(mountinfo: str, self_cgroup: str) -> CgroupLayout | None:
    """v1 when memory, cpu and pids each have a v1 hierarchy; else v2 when a cgroup2 is
    mounted (its controllers are checked when used); None: no cgroups to use. Pure."""
    own = _own_paths(self_cgroup)
    v1: dict[str, str] = {}
    v2: str | None = None
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        root, mountpoint = _unescape(fields[3]), _unescape(fields[4])
        fstype, options = tail[0], tail[2].split(",")
        if fstype == "cgroup2" and v2 is None:
            v2 = mountpoint
        elif fstype == "cgroup":
            for controller in V1_CONTROLLERS:
                if controller in options and controller not in v1:
                    path = own.get(controller, "/")
                    # A container's mount shows its own cgroup as the root.
                    if root != "/" and (path == root or path.startswith(root + "/")):
                        path = path[len(root) :] or "/"
                    v1[controller] = os.path.join(mountpoint, path.lstrip("/"), GROUP)
    if all(c in v1 for c in V1_CONTROLLERS):
        return CgroupLayout(1, tuple((c, v1[c]) for c in V1_CONTROLLERS))
    if v2 is not None:
        return CgroupLayout(2, (("", os.path.join(v2, GROUP)),))
    return None


def cpu_weight(cores: float) -> int:
    """v2's cpu.weight for a CPU request, as the kubelet converts shares (1..10000)."""
    shares = max(2, int(cores * 1024))
    return max(1, min(10_000, 1 + ((shares - 2) * 9999) // 262_142))


def plan(limits: Limits, version: int, swap_accounting: bool = False) -> list[tuple[str, str, str]]:
    """(controller, file, value) to write into a new cgroup, in order. Pure.
    `swap_accounting`: v1 has memory.memsw.* (then swap counts against the limit too)."""
    out: list[tuple[str, str, str]] = []
    quota = None
    if limits.cpu is not None:
        quota = max(MIN_QUOTA_US, int(limits.cpu * CFS_PERIOD_US))
    if version == 1:
        if limits.memory is not None:
            out.append(("memory", "memory.limit_in_bytes", str(limits.memory)))
            if swap_accounting:
                out.append(("memory", "memory.memsw.limit_in_bytes", str(limits.memory)))
        if quota is not None and limits.cpu is not None:
            out.append(("cpu", "cpu.cfs_period_us", str(CFS_PERIOD_US)))
            out.append(("cpu", "cpu.cfs_quota_us", str(quota)))
            out.append(("cpu", "cpu.shares", str(max(2, int(limits.cpu * 1024)))))
        if limits.pids is not None:
            out.append(("pids", "pids.max", str(limits.pids)))
        return out
    if limits.memory is not None:
        out.append(("memory", "memory.max", str(limits.memory)))
        out.append(("memory", "memory.swap.max", "0"))
    out.append(("memory", "memory.oom.group", "1"))
    if quota is not None and limits.cpu is not None:
        out.append(("cpu", "cpu.max", f"{quota} {CFS_PERIOD_US}"))
        out.append(("cpu", "cpu.weight", str(cpu_weight(limits.cpu))))
    if limits.pids is not None:
        out.append(("pids", "pids.max", str(limits.pids)))
    return out


OPTIONAL_FILES = frozenset({"memory.swap.max", "memory.oom.group", "cpu.shares", "cpu.weight"})
"""Written where the kernel has them (no swap accounting: no memory.swap.max, and no
swap to limit); every other file of the plan must exist, or no limit would hold."""


def oom_kills(text: str) -> int:
    """The `oom_kill` count of a v1 memory.oom_control or a v2 memory.events. Pure."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return 0


# -- acting ----------------------------------------------------------------------------


def this_machine() -> CgroupLayout | None:
    """The layout for this process (None: no cgroup hierarchy is mounted)."""
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text()
        own = Path("/proc/self/cgroup").read_text()
    except OSError:
        return None
    return detect_layout(mountinfo, own)


def _enable_v2_controllers(folder: Path) -> None:
    """Let `folder`'s children have the memory, cpu and pids controllers (v2)."""
    try:
        enabled = set((folder / "cgroup.subtree_control").read_text().split())
    except OSError:
        enabled = set()
    wanted = [c for c in V2_CONTROLLERS if c not in enabled]
    if wanted:
        (folder / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))


def _make_parent(layout: CgroupLayout, parent: Path) -> None:
    if layout.version == 2:
        _enable_v2_controllers(parent.parent)
    parent.mkdir(parents=layout.version == 1, exist_ok=True)
    if layout.version == 2:
        _enable_v2_controllers(parent)


def create(layout: CgroupLayout, name: str, limits: Limits) -> list[Path]:
    """Make the workload's cgroups with their limits; -> the `cgroup.procs` files it
    joins. A cgroup of that name left over (empty) is reused. Raises OSError."""
    folders = layout.folders(name)
    for (_, parent), folder in zip(layout.parents, folders, strict=True):
        for attempt in range(3):
            _make_parent(layout, Path(parent))
            try:
                folder.mkdir(exist_ok=True)
                break
            except FileNotFoundError:
                # A release removed the empty parent just now: make it again.
                if attempt == 2:
                    raise
    swap = (layout.folder("memory", name) / "memory.memsw.limit_in_bytes").exists()
    for controller, file, value in plan(limits, layout.version, swap_accounting=swap):
        target = layout.folder(controller, name) / file
        if file in OPTIONAL_FILES and not target.exists():
            continue
        target.write_text(value)
    return [folder / "cgroup.procs" for folder in folders]


def read_oom_kills(layout: CgroupLayout, name: str) -> int:
    events = "memory.oom_control" if layout.version == 1 else "memory.events"
    try:
        return oom_kills((layout.folder("memory", name) / events).read_text())
    except OSError:
        return 0


def release(layout: CgroupLayout, name: str, wait: float = 2.0) -> int:
    """After the workload ended: its OOM kill count; then its cgroups are removed (the
    kernel may take a moment to empty them: its last processes are still exiting)."""
    kills = read_oom_kills(layout, name)
    deadline = time.monotonic() + wait
    for folder in layout.folders(name):
        while True:
            try:
                folder.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                    break  # left for `sweep`
                time.sleep(0.02)
        with contextlib.suppress(OSError):
            folder.parent.rmdir()  # the shared parent, once nothing else uses it
    return kills


def sweep(layout: CgroupLayout, prefix: str) -> None:
    """Remove the empty cgroups whose names start with `prefix` (a job's, after it)."""
    for _, parent in layout.parents:
        with contextlib.suppress(OSError), os.scandir(parent) as entries:
            for entry in entries:
                if entry.name.startswith(prefix) and entry.is_dir(follow_symlinks=False):
                    with contextlib.suppress(OSError):
                        os.rmdir(entry.path)
        with contextlib.suppress(OSError):
            os.rmdir(parent)


def limits_of(resources: Resources) -> Limits:
    """A role's `resources` as a confined replica's cgroup limits (requests equal limits,
    as tfkube renders them for Kubernetes). Pure."""
    cpu = cpu_cores(resources.cpu) if resources.cpu else 0.0
    memory = memory_bytes(resources.memory) if resources.memory else 0
    return Limits(cpu=cpu or None, memory=memory or None)  # "0": no limit, not none at all
