"""What each replica used (CPU cores, memory bytes) over time, as the local engine's
supervisor keeps it with the job's logs (`$TFKUBE_LOG_DIR/.tfkube/usage/<replica>.jsonl`,
`tfkube.contract.USAGE_SUBDIR`, one `[time, cores, bytes]` per line): as series for the
job page's charts and the API, and each running replica's latest sample for `/metrics`.

The job's team can write that folder (its replicas write the logs beside it), so it is
read through `tfkube.safefs` (no link followed, plain files only), at most the newest
`TAIL_BYTES` of a file, and a line that is not three numbers is skipped."""

from __future__ import annotations

import json
import os
import re

from tfkube import contract
from tfkube.safefs import Refused, closing, entries, open_dir, open_file, open_root, pread_all
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


def _tails(output_dir: str, limit: int) -> dict[str, bytes]:
    """Replica -> the last `limit` bytes of its usage file."""
    out: dict[str, bytes] = {}
    try:
        with (
            closing(open_root(output_dir)) as root,
            closing(open_dir(root, contract.USAGE_SUBDIR)) as folder,
        ):
            for entry in entries(folder):
                m = FILE.match(entry.name)
                if not m or entry.kind != "file":
                    continue
                try:
                    with closing(open_file(folder, [entry.name])) as fd:
                        size = os.fstat(fd).st_size
                        start = max(0, size - limit)
                        out[m.group(1)] = pread_all(fd, start, size - start)
                except (Refused, OSError):
                    continue
    except (Refused, OSError):
        return {}
    return out


def read_usage(output_dir: str | None) -> list[UsageSeries]:
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
