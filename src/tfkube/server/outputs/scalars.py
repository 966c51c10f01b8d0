"""Scalars from a job's TensorBoard event files, as JSON series for charts, plus progress
and ETA.

Event files are TFRecord files of TensorBoard's `Event` protos (`tensorboard.compat.proto`),
read incrementally: each poll reads only the records appended since the last one (the
offset of each file is kept, and a file replaced under the same name is read anew). The
job wrote the folder, so files are found and opened through `tfkube.safefs` (no link
followed, no FIFO opened, nothing outside the folder), one record at a time with the
length and data checksums TensorFlow writes (a record still being written waits for the
next poll). Caches are per job and bounded (least recently used jobs are dropped).

Progress: the step is the largest step among the scalars; the total comes from
`$TFKUBE_LOG_DIR/progress.json` (`{"step": N, "total": M}`, written by the job: the
convention for code that knows better) or else from a `--train_steps=M` (or
`--train-steps`) argument of the chief or workers. The rate and ETA come from the wall
times of the newest points.
"""

from __future__ import annotations

import json
import re
import struct
import sys
import threading
import types
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tfkube import contract
from tfkube.server.outputs.folder import LocalFolder, OutputsFolder, Pread
from tfkube.spec import TFJob
from tfkube.wire import Progress, ScalarPoint, ScalarSeries


def _tensorboard_without_tensorflow() -> None:
    """Make TensorBoard's event reader use its own TensorFlow stub in this process.

    Reading event files needs no TensorFlow, but TensorBoard imports the real one when it
    is installed (as it is beside the examples), which cost the server seconds and
    hundreds of MB at the first chart anyone opened. TensorBoard skips it when its marker
    module `tensorboard.compat.notf` exists. (The TensorBoard processes the proxy starts
    are separate processes and keep the real one.)"""
    name = "tensorboard.compat.notf"
    sys.modules.setdefault(name, types.ModuleType(name))


_tensorboard_without_tensorflow()
MAX_POINTS = 2000
"""Per series; older points are thinned (every other one) past this."""
MAX_JOBS = 64
_STEPS_ARG = re.compile(r"^--train[_-]steps=(\d+)$")


def total_steps(job: TFJob) -> int | None:
    for role in ("chief", "worker"):
        spec = getattr(job.spec.replicas, role)
        for arg in spec.args if spec else []:
            if m := _STEPS_ARG.match(arg):
                return int(m.group(1))
    return None


def progress_of(series: list[ScalarSeries], total: int | None, hint: dict[str, Any]) -> Progress:
    """Progress from the series' newest points (pure)."""
    points = [p for s in series for p in s.points]
    step = max((p.step for p in points), default=None)
    if isinstance(hint.get("step"), int):
        step = hint["step"]
    if isinstance(hint.get("total"), int) and hint["total"] > 0:
        total = hint["total"]
    rate = None
    if points:
        by_step = sorted(points, key=lambda p: (p.step, p.wall_time))
        first, last = by_step[max(0, len(by_step) // 2)], by_step[-1]
        if last.wall_time > first.wall_time and last.step > first.step:
            rate = (last.step - first.step) / (last.wall_time - first.wall_time)
    fraction = min(step / total, 1.0) if step is not None and total else None
    eta = (total - step) / rate if rate and step is not None and total and step < total else None
    if fraction == 1.0:
        eta = 0.0
    return Progress(
        step=step, total=total, fraction=fraction, steps_per_second=rate, eta_seconds=eta
    )


@dataclass
class _FileState:
    identity: tuple[int, int] = (0, 0)
    """(device, inode) of the file read so far: another one under the name starts over."""
    offset: int = 0
    series: dict[str, list[ScalarPoint]] = field(default_factory=dict)


MAX_RECORD = 256 * 2**20
"""A record longer than this is taken as a damaged file (it is not read further)."""
MAX_EVENT_FILES = 10_000
"""Entries looked at when finding a job's event files (a job writing millions of files
makes the charts partial, not the server slow)."""


def records(pread: Pread, offset: int) -> Iterator[tuple[bytes, int]]:
    """The complete records of a TFRecord file (read with `pread`: the local file's, or
    the archived member's in windows) from `offset` on, each with the offset after it.
    Stops at the end, at a partial record (still being written) and at a bad checksum
    (that file is not read past it), as TensorFlow's own reader does."""
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    while True:
        header = pread(offset, 12)
        if len(header) < 12:
            return
        (length,) = struct.unpack("<Q", header[:8])
        (length_crc,) = struct.unpack("<I", header[8:])
        if masked_crc32c(header[:8]) != length_crc or length > MAX_RECORD:
            return
        body = pread(offset + 12, length + 4)
        if len(body) < length + 4:
            return
        data = body[:length]
        (data_crc,) = struct.unpack("<I", body[length:])
        if masked_crc32c(data) != data_crc:
            return
        offset += 12 + length + 4
        yield data, offset


def _event_files(folder: OutputsFolder) -> list[tuple[str, ...]]:
    found = []
    own = (contract.OWN_SUBDIR,)
    for seen, (rel, entry) in enumerate(folder.walk(skip=lambda rel: rel == own)):
        if seen >= MAX_EVENT_FILES:
            break
        if entry.kind == "file" and entry.name.startswith("events.out.tfevents."):
            found.append(rel)
    return found


class ScalarReader:
    """Incremental, cached scalar series per job output folder (or archive: an archive's
    files never grow, so once read they are answered from here without a ranged read)."""

    def __init__(self) -> None:
        self._jobs: OrderedDict[str, dict[tuple[str, ...], _FileState]] = OrderedDict()
        self._lock = threading.Lock()

    def read(self, output_dir: str | OutputsFolder) -> list[ScalarSeries]:
        folder = LocalFolder(output_dir) if isinstance(output_dir, str) else output_dir
        with self._lock:
            files = self._jobs.pop(folder.key, {})
            self._jobs[folder.key] = files
            while len(self._jobs) > MAX_JOBS:
                self._jobs.popitem(last=False)
        try:
            found = _event_files(folder)
        except OSError:
            return []
        for rel in found:
            state = files.setdefault(rel, _FileState())
            try:
                self._load(folder, rel, state)
            except OSError:
                continue  # removed or replaced by something that is not a file
        out = []
        for rel, state in sorted(files.items()):
            run = "/".join(rel[:-1]) or "."
            for tag, points in sorted(state.series.items()):
                out.append(ScalarSeries(tag=tag, run=run, points=list(points)))
        return _merge(out)

    @staticmethod
    def _load(folder: OutputsFolder, rel: tuple[str, ...], state: _FileState) -> None:
        from tensorboard.compat.proto.event_pb2 import Event

        with folder.open(rel) as f:
            if f.identity != state.identity or f.size < state.offset:
                state.identity, state.offset, state.series = f.identity, 0, {}
            for data, after in records(f.pread, state.offset):
                state.offset = after
                try:
                    event = Event.FromString(data)
                except Exception:  # a record that is no Event (DecodeError): skipped
                    continue
                for value in event.summary.value:
                    number = _number(value)
                    if number is None:
                        continue
                    points = state.series.setdefault(value.tag, [])
                    points.append(
                        ScalarPoint(step=int(event.step), value=number, wall_time=event.wall_time)
                    )
                    if len(points) > MAX_POINTS:
                        del points[::2]


def _merge(series: list[ScalarSeries]) -> list[ScalarSeries]:
    """One series per (run, tag) across event files (a restarted chief starts a new one)."""
    merged: dict[tuple[str, str], list[ScalarPoint]] = {}
    for s in series:
        merged.setdefault((s.run, s.tag), []).extend(s.points)
    return [
        ScalarSeries(run=run, tag=tag, points=sorted(points, key=lambda p: (p.step, p.wall_time)))
        for (run, tag), points in sorted(merged.items())
    ]


def _number(value: Any) -> float | None:
    if value.HasField("simple_value"):
        return float(value.simple_value)
    if value.HasField("tensor") and value.metadata.plugin_data.plugin_name == "scalars":
        from tensorboard.util import tensor_util

        array = tensor_util.make_ndarray(value.tensor)
        if array.size == 1:
            return float(array.reshape(()))
    return None


def progress_hint(output_dir: str | OutputsFolder) -> dict[str, Any]:
    folder = LocalFolder(output_dir) if isinstance(output_dir, str) else output_dir
    try:
        data = json.loads(folder.read_bytes(["progress.json"], 65536))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
