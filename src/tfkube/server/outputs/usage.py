"""What each replica used (CPU cores, memory bytes) over time, as the local engine's
supervisor keeps it with the job's logs (`$TFKUBE_LOG_DIR/.tfkube/usage/<replica>.jsonl`,
`tfkube.contract.USAGE_SUBDIR`, one `[time, cores, bytes]` per line): as series for the
job page's charts and the API, and each running replica's latest sample for `/metrics`.

The job's team can write that folder (its replicas write the logs beside it), so it is
read through `tfkube.safefs` (no link followed, plain files only), at most the newest
`TAIL_BYTES` of a file, and a line that is not three numbers is skipped.

On an engine that does not keep usage itself (Kubernetes: `Features.polled_usage`), the
server keeps it: `UsagePoller` asks the job's backend for each replica's newest sample
(the kubelet's resource metrics) every `POLL_SECONDS` and appends the new ones to the same
files (`append_usage`: no link followed, plain files only, each at most `FILE_MAX_BYTES`),
so the job page's charts, the API and `/metrics` read them as they read the local
engine's."""

from __future__ import annotations

import json
import os
import re
import stat
import threading
from collections.abc import Callable, Mapping

from tfkube import contract
from tfkube.engines import UsageUnavailable
from tfkube.safefs import closing, open_dir, open_root
from tfkube.server.outputs.folder import LocalFolder, OutputsFolder
from tfkube.wire import UsageSeries

TAIL_BYTES = 1024 * 1024
"""Read of a replica's file for its series (about 30,000 samples, 16 hours at 2 s)."""
LAST_BYTES = 512
"""Read of a replica's file for its latest sample."""
MAX_POINTS = 1500
"""Per series; older points are thinned (every other one) past this."""
FILE = re.compile(r"^((?:chief|worker|ps|evaluator)-\d+)\.jsonl$")


def parse_samples(data: bytes) -> list[tuple[float, float, int]]:
    """Whole `[time, cores, bytes]` lines of a usage file's tail, oldest first (the first
    line may be cut by the tail: skipped like any line that is not three numbers). Pure."""
    out = []
    for line in data.decode(errors="replace").splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if (
            isinstance(value, list)
            and len(value) == 3
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
        ):
            out.append((float(value[0]), float(value[1]), int(value[2])))
    return out


def thin(
    points: list[tuple[float, float, int]], limit: int = MAX_POINTS
) -> list[tuple[float, float, int]]:
    """At most `limit` points, keeping the newest and every other older one. Pure."""
    while len(points) > limit:
        cut = len(points) - limit // 2
        points = points[:cut][::2] + points[cut:]
    return points


def _tails(output_dir: str | OutputsFolder, limit: int) -> dict[str, bytes]:
    """Replica -> the last `limit` bytes of its usage file (in the output folder or the
    job's archive: `folder.OutputsFolder`)."""
    folder = LocalFolder(output_dir) if isinstance(output_dir, str) else output_dir
    out: dict[str, bytes] = {}
    try:
        found = folder.entries(contract.USAGE_SUBDIR)
    except OSError:  # safefs.Refused included
        return {}
    for entry in found:
        m = FILE.match(entry.name)
        if not m or entry.kind != "file":
            continue
        try:
            with folder.open((*contract.USAGE_SUBDIR, entry.name)) as f:
                start = max(0, f.size - limit)
                out[m.group(1)] = f.pread(start, f.size - start)
        except OSError:
            continue
    return out


def read_usage(output_dir: str | OutputsFolder | None) -> list[UsageSeries]:
    """Every replica's samples, in replica order."""
    if not output_dir:
        return []
    series = []
    for replica, data in sorted(_tails(output_dir, TAIL_BYTES).items()):
        points = thin(parse_samples(data))
        series.append(UsageSeries(replica=replica, points=[list(p) for p in points]))
    return series


def latest_usage(output_dir: str | None) -> dict[str, tuple[float, float, int]]:
    """Replica -> its newest sample (time, cores, bytes)."""
    if not output_dir:
        return {}
    out = {}
    for replica, data in _tails(output_dir, LAST_BYTES).items():
        if samples := parse_samples(data):
            out[replica] = samples[-1]
    return out


# -- kept by the server (an engine with `Features.polled_usage`) ------------------------------

Sample = tuple[float, float, int]
POLL_SECONDS = 5.0
"""How often the server asks for a running job's samples (metrics-server scrapes every
10 s at the most often; a sample seen twice is kept once)."""
RETRY_SECONDS = 60.0
"""After the engine said it cannot (no metrics API), how long before asking again."""
FILE_MAX_BYTES = 16 * 1024 * 1024
"""A replica's file stops growing here (about 300,000 samples: a month at 10 s)."""
_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def new_samples(samples: Mapping[str, Sample], last: Mapping[str, float]) -> dict[str, Sample]:
    """The samples newer than each replica's last kept one (metrics-server answers the same
    sample until its next scrape), with a time, finite numbers and no negative use. Pure."""
    out = {}
    for key, (at, cores, used) in samples.items():
        if not FILE.match(f"{key}.jsonl"):
            continue
        if at <= last.get(key, float("-inf")) or cores < 0 or used < 0:
            continue
        if not all(map(_finite, (at, cores))):
            continue
        out[key] = (at, cores, used)
    return out


def _finite(x: float) -> bool:
    return x == x and x not in (float("inf"), float("-inf"))


def at_poll(samples: Mapping[str, Sample], now: float) -> dict[str, Sample]:
    """The samples timed when the server read them: the job page draws a line per replica
    through the times all replicas share (the local supervisor samples them at one moment),
    and each pod's kubelet sample has its own time; metrics-server scrapes every node at
    once, so the replicas' new samples arrive in the same poll. A sample is then at most
    the resolution plus POLL_SECONDS (about 15 s) later than the kubelet's window. Pure."""
    return {key: (now, cores, used) for key, (_, cores, used) in samples.items()}


def sample_line(sample: Sample) -> bytes:
    """One `[time, cores, bytes]` line, as the local supervisor writes it (cores to 0.1
    millicore: an idle parameter server uses a few millicores). Pure."""
    at, cores, used = sample
    return f"[{at:.1f},{cores:.4f},{int(used)}]\n".encode()


def append_usage(output_dir: str, samples: Mapping[str, Sample]) -> None:
    """Append each replica's sample to `<output_dir>/.tfkube/usage/<replica>.jsonl` (made
    where missing); a file that is a link, not a plain file or full is left alone."""
    if not samples:
        return
    os.makedirs(output_dir, mode=0o750, exist_ok=True)
    with (
        closing(open_root(output_dir)) as root,
        closing(open_dir(root, contract.USAGE_SUBDIR, make=0o750)) as folder,
    ):
        for key, sample in sorted(samples.items()):
            try:
                fd = os.open(f"{key}.jsonl", _APPEND, 0o640, dir_fd=folder)
            except OSError:  # a link (ELOOP), a FIFO's peer missing, ...
                continue
            with closing(fd):
                st = os.fstat(fd)
                if stat.S_ISREG(st.st_mode) and st.st_size < FILE_MAX_BYTES:
                    os.write(fd, sample_line(sample))


class UsagePoller:
    """Keeps the samples an engine's backend reports for running jobs (`poll`, from the
    job sync loop), and why there are none when the engine cannot say (`reason`). What is
    new is judged by the kubelet's time (remembered here); what is written carries the
    poll's (`at_poll`). A server started again judges by the written times: it may skip
    one sample per replica."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.reason = ""
        """Why the engine gives no samples now ("" when it does)."""
        self._last: dict[str, dict[str, float]] = {}
        self._asked: dict[str, float] = {}
        self._retry_at = 0.0
        self._lock = threading.Lock()

    def poll(self, job_id: str, output_dir: str, read: Callable[[], Mapping[str, Sample]]) -> None:
        """Ask (`read`: the backend's `usage(name)`) at most every POLL_SECONDS per job and
        keep what is new. Raises OSError when the folder cannot be written."""
        now = self.clock()
        with self._lock:
            if now < self._retry_at or now - self._asked.get(job_id, float("-inf")) < POLL_SECONDS:
                return
            self._asked[job_id] = now
        try:
            samples = read()
        except UsageUnavailable as exc:
            with self._lock:
                self.reason = str(exc)
                self._retry_at = now + RETRY_SECONDS
            return
        with self._lock:
            self.reason = ""
            last = self._last.get(job_id)
        if last is None:
            last = {key: s[0] for key, s in latest_usage(output_dir).items()}
        fresh = new_samples(samples, last)
        append_usage(output_dir, at_poll(fresh, now))
        last.update({key: s[0] for key, s in fresh.items()})
        with self._lock:
            self._last[job_id] = last

    def forget(self, job_id: str) -> None:
        with self._lock:
            self._last.pop(job_id, None)
            self._asked.pop(job_id, None)
