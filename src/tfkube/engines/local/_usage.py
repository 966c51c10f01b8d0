"""What each replica uses, sampled by the job's supervisor and kept with the job's logs.

    confined replica (its own cgroups, `_cgroups.py`):
        memory  v1 memory.usage_in_bytes, v2 memory.current (page cache and tmpfs included,
                what its limit counts)
        cpu     v2 cpu.stat `usage_usec`; v1 (whose cpu controller counts no usage, and
                cpuacct is not joined) the CPU time of the processes in its cgroup.procs
    plain process (no confinement): its launcher's process tree, CPU time and RSS (psutil)

CPU is the CPU time used between two samples over the time between them, in cores.
Samples go to `$TFKUBE_LOG_DIR/.tfkube/usage/<role>-<index>.jsonl` (contract.USAGE_SUBDIR),
one `[time, cores, bytes]` per line, where the server reads them (`server/outputs/usage.py`)
during the job and after it. That folder is the job's own (a confined job's team owns it),
so it is written as the logs are read: opened below the log folder without following a
link, appended only to a regular file with one link (`append_line`); a replica that
planted anything else there has its usage not kept, nothing more.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import psutil

from tfkube import contract
from tfkube.engines.local._cgroups import CgroupLayout
from tfkube.safefs import closing, open_root

SAMPLE_EVERY = 2.0
"""Seconds between two samples of a running replica."""
MAX_FILE_BYTES = 8 * 1024 * 1024
"""A replica's usage file stops growing here (about 200,000 samples: 4 days at 2 s)."""


@dataclass(frozen=True)
class Reading:
    """A replica's counters at one moment."""

    time: float
    cpu_seconds: float
    """CPU time used so far (user + system, its processes and their waited-for children)."""
    memory: int
    """Bytes in use now."""


def cpu_cores(before: Reading, after: Reading) -> float:
    """Cores used between two readings (0 when time did not move or a counter went back,
    as after a restart). Pure."""
    elapsed = after.time - before.time
    used = after.cpu_seconds - before.cpu_seconds
    if elapsed <= 0 or used < 0:
        return 0.0
    return used / elapsed


def v2_usage_seconds(cpu_stat: str) -> float | None:
    """`usage_usec` of a v2 cpu.stat, in seconds. Pure."""
    for line in cpu_stat.splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec" and value.strip().isdigit():
            return int(value) / 1e6
    return None


def sample_line(time: float, cores: float, memory: int) -> bytes:
    """One line of a usage file. Pure."""
    return f"[{time:.1f},{cores:.3f},{memory}]\n".encode()


# -- acting ----------------------------------------------------------------------------


def _tree_cpu_and_memory(procs: list[psutil.Process]) -> tuple[float, int]:
    cpu, memory = 0.0, 0
    for proc in procs:
        with contextlib.suppress(psutil.Error), proc.oneshot():
            times = proc.cpu_times()
            cpu += times.user + times.system + times.children_user + times.children_system
            memory += proc.memory_info().rss
    return cpu, memory


def read_tree(pid: int, now: float) -> Reading | None:
    """A plain replica: its launcher's whole process tree."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    cpu, memory = _tree_cpu_and_memory(procs)
    return Reading(now, cpu, memory)


def read_cgroup(layout: CgroupLayout, name: str, now: float) -> Reading | None:
    """A confined replica: its cgroups (None once they are gone)."""
    folder = layout.folder("memory", name)
    try:
        if layout.version == 2:
            memory = int((folder / "memory.current").read_text())
            cpu = v2_usage_seconds((layout.folder("cpu", name) / "cpu.stat").read_text())
            if cpu is not None:
                return Reading(now, cpu, memory)
        else:
            memory = int((folder / "memory.usage_in_bytes").read_text())
        pids = [int(p) for p in (folder / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return None
    procs = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            procs.append(psutil.Process(pid))
    cpu, _ = _tree_cpu_and_memory(procs)
    return Reading(now, cpu, memory)


def append_line(log_dir: str, replica: str, line: bytes) -> bool:
    """Append to the replica's usage file below `log_dir` without following links; the
    folders and the file it makes belong to the log folder's owner (a confined job's team,
    whose launchers make `.tfkube/logs` beside it: everything in its outputs is the
    team's). False when it could not (or is full)."""
    try:
        with closing(open_root(log_dir)) as root:
            owner = os.fstat(root)
            folder = root
            opened: list[int] = []
            try:
                for part in contract.USAGE_SUBDIR:
                    try:
                        os.mkdir(part, 0o755, dir_fd=folder)
                        os.chown(
                            part, owner.st_uid, owner.st_gid, dir_fd=folder, follow_symlinks=False
                        )
                    except FileExistsError:
                        pass
                    folder = os.open(
                        part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=folder
                    )
                    opened.append(folder)
                fd = os.open(
                    f"{replica}.jsonl",
                    os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK,
                    0o644,
                    dir_fd=folder,
                )
            finally:
                for fd_opened in opened:
                    os.close(fd_opened)
            with closing(fd):
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                    return False
                if st.st_size + len(line) > MAX_FILE_BYTES:
                    return False
                if (st.st_uid, st.st_gid) != (owner.st_uid, owner.st_gid):
                    os.fchown(fd, owner.st_uid, owner.st_gid)  # the team's, as its logs
                os.write(fd, line)
        return True
    except OSError:
        return False


class Sampler:
    """The supervisor's sampler: one reading per running replica every SAMPLE_EVERY
    seconds, a line per replica once two readings give a CPU rate."""

    def __init__(self, log_dir: str) -> None:
        self.log_dir = log_dir
        self.last: dict[str, Reading] = {}
        self.sampled_at = 0.0

    def due(self, now: float) -> bool:
        return now - self.sampled_at >= SAMPLE_EVERY

    def record(self, key: str, reading: Reading | None) -> None:
        """Keep a replica's new reading; write a sample when there was one before."""
        if reading is None:
            self.last.pop(key, None)
            return
        before = self.last.get(key)
        self.last[key] = reading
        if before is not None:
            line = sample_line(reading.time, cpu_cores(before, reading), reading.memory)
            append_line(self.log_dir, key, line)

    def forget(self, key: str) -> None:
        """The replica ended or restarted: its next start counts from nothing."""
        self.last.pop(key, None)


def usage_folder(log_dir: str) -> Path:
    return Path(log_dir, *contract.USAGE_SUBDIR)
