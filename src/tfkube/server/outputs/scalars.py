"""Scalars from a job's TensorBoard event files, as JSON series for charts, plus progress
and ETA.

Read with TensorBoard's own reader (`tensorboard.backend.event_processing`
`EventFileLoader`), incrementally: one loader per event file is kept, and each poll reads
only the records appended since the last one (the loader remembers its file position).
Caches are per job and bounded (least recently used jobs are dropped).

Progress: the step is the largest step among the scalars; the total comes from
`$TFKUBE_LOG_DIR/progress.json` (`{"step": N, "total": M}`, written by the job: the
convention for code that knows better) or else from a `--train_steps=M` (or
`--train-steps`) argument of the chief or workers. The rate and ETA come from the wall
times of the newest points.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import types
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    loader: Any
    series: dict[str, list[ScalarPoint]] = field(default_factory=dict)


class ScalarReader:
    """Incremental, cached scalar series per job output folder."""

    def __init__(self) -> None:
        self._jobs: OrderedDict[str, dict[Path, _FileState]] = OrderedDict()
        self._lock = threading.Lock()

    def read(self, output_dir: str) -> list[ScalarSeries]:
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

        root = Path(output_dir)
        with self._lock:
            files = self._jobs.pop(output_dir, {})
            self._jobs[output_dir] = files
            while len(self._jobs) > MAX_JOBS:
                self._jobs.popitem(last=False)
        for path in sorted(root.rglob("events.out.tfevents.*")) if root.is_dir() else []:
            if ".tfkube" in path.parts:
                continue
            state = files.get(path)
            if state is None:
                state = files[path] = _FileState(EventFileLoader(str(path)))
            for event in state.loader.Load():
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
        out = []
        for path, state in sorted(files.items()):
            run = path.parent.relative_to(root).as_posix() if path.parent != root else "."
            for tag, points in sorted(state.series.items()):
                out.append(ScalarSeries(tag=tag, run=run, points=list(points)))
        return _merge(out)


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


def progress_hint(output_dir: str) -> dict[str, Any]:
    try:
        data = json.loads(Path(output_dir, "progress.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
