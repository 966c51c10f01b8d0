"""Batching as TensorFlow Serving does it (`--enable_batching`, `--batching_parameters_file`):
requests to the same version and signature wait in one queue; a batch thread takes the
oldest ones together, up to `max_batch_size` rows, as soon as the batch is full or its
oldest request waited `batch_timeout_micros`; the rows are padded up to the next of the
`allowed_batch_sizes`, run as one call, and each request gets its own rows back.

    decide   plan_batch(queued sizes, waited, params) -> how many to take now, or wait
             padded_size(rows, params); check(params); parse_parameters(text) (pure)
    act      Batcher: the queues, `num_batch_threads` threads, each request's Future;
             at most `num_batch_threads` batches run at once, on batch threads or on a
             caller's own thread (`submit(here=True)`: a lone request makes no hop)

The default (`BatchingParameters()`) is measured (docs/benchmarks.md, serving): on a CPU,
a batch thread that takes whatever is queued the moment it is free (timeout 0) loses no
latency to a lone client and merges concurrent clients' requests by itself.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tfkube.serving._rest import Code, ServingError


@dataclass(frozen=True)
class BatchingParameters:
    """TensorFlow Serving's BatchingParameters (the fields tfkube honours)."""

    max_batch_size: int = 256
    """Rows in one batch at most; a request with more is refused (INVALID_ARGUMENT)."""
    batch_timeout_micros: int = 0
    """How long the oldest request of an unfull batch may wait for others (0: a free
    batch thread takes what is queued at once)."""
    num_batch_threads: int = 1
    """Batches run at once."""
    max_enqueued_batches: int = 64
    """Queued rows beyond this many full batches are refused (UNAVAILABLE)."""
    allowed_batch_sizes: tuple[int, ...] = ()
    """Sizes a batch is padded up to (increasing; the last one is max_batch_size)."""
    pad_variable_length_inputs: bool = False
    """Accepted for compatibility; inputs of different shapes are never merged."""


def check(params: BatchingParameters) -> list[str]:
    """What is wrong with the parameters (TensorFlow Serving's rules), [] when fine."""
    problems = []
    if params.max_batch_size < 1:
        problems.append("max_batch_size must be at least 1")
    if params.batch_timeout_micros < 0:
        problems.append("batch_timeout_micros may not be negative")
    if params.num_batch_threads < 1:
        problems.append("num_batch_threads must be at least 1")
    if params.max_enqueued_batches < 1:
        problems.append("max_enqueued_batches must be at least 1")
    sizes = params.allowed_batch_sizes
    if sizes:
        if any(b <= a for a, b in itertools.pairwise(sizes)) or sizes[0] < 1:
            problems.append("allowed_batch_sizes must be positive and increasing")
        if sizes[-1] != params.max_batch_size:
            problems.append(
                "the last entry in allowed_batch_sizes must equal max_batch_size "
                f"({sizes[-1]} != {params.max_batch_size})"
            )
    return problems


def plan_batch(sizes: Sequence[int], waited: float, params: BatchingParameters) -> int | float:
    """The batch to run from a queue whose requests (oldest first) have `sizes` rows and
    whose oldest has waited `waited` seconds: an int is how many requests to take now;
    a float is how many seconds more to wait (the batch is neither full nor timed out)."""
    if not sizes:
        return float("inf")
    rows = taken = 0
    for size in sizes:
        if rows + size > params.max_batch_size:
            return taken  # full: the next one would not fit
        rows += size
        taken += 1
    if rows == params.max_batch_size:
        return taken
    left = params.batch_timeout_micros / 1e6 - waited
    return taken if left <= 0 else left


def padded_size(rows: int, params: BatchingParameters) -> int:
    """The smallest allowed batch size that holds `rows` (the rows when none is set)."""
    for size in params.allowed_batch_sizes:
        if size >= rows:
            return size
    return rows


_FIELD = re.compile(
    r"\s*(?P<name>[A-Za-z_]+)\s*(?:\{\s*value\s*:\s*(?P<boxed>[^}\s]+)\s*\}|:\s*(?P<plain>[^\s{}]+))"
)


def parse_parameters(text: str) -> BatchingParameters:
    """A `--batching_parameters_file` (protobuf text format, e.g. `max_batch_size {
    value: 128 }`, `allowed_batch_sizes: 32`) -> the parameters; ValueError naming what
    is unknown or wrong."""
    known = set(BatchingParameters.__dataclass_fields__)
    values: dict[str, Any] = {}
    allowed: list[int] = []
    body = re.sub(r"#[^\n]*", "", text)
    pos = 0
    while pos < len(body.rstrip()):
        found = _FIELD.match(body, pos)
        if found is None:
            raise ValueError(f"cannot read the batching parameters at {body[pos : pos + 40]!r}")
        pos = found.end()
        name, raw = found["name"], found["boxed"] or found["plain"]
        if name not in known:
            if name in ("thread_pool_name",):
                continue
            raise ValueError(f"unknown batching parameter {name!r}")
        if name == "allowed_batch_sizes":
            allowed.append(int(raw))
        elif name == "pad_variable_length_inputs":
            values[name] = raw.lower() == "true"
        else:
            values[name] = int(raw)
    params = replace(BatchingParameters(), **values, allowed_batch_sizes=tuple(allowed))
    problems = check(params)
    if problems:
        raise ValueError("; ".join(problems))
    return params


# -- the shell --------------------------------------------------------------------------------

Run = Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]


@dataclass
class Task:
    inputs: Mapping[str, np.ndarray]
    rows: int
    future: Future[dict[str, np.ndarray]]
    queued: float = field(default_factory=time.monotonic)


@dataclass
class _Queue:
    run: Run
    tasks: deque[Task] = field(default_factory=deque)
    rows: int = 0


def batch_key(inputs: Mapping[str, np.ndarray]) -> tuple[Any, ...] | None:
    """What requests must share to be merged: input names, dtypes and every dimension
    but the first (None: not batchable, e.g. a scalar input or inputs whose first
    dimensions differ)."""
    firsts = set()
    key = []
    for name in sorted(inputs):
        a = inputs[name]
        if a.ndim == 0:
            return None
        firsts.add(a.shape[0])
        key.append((name, a.dtype.str, a.shape[1:]))
    if len(firsts) != 1:
        return None
    return tuple(key)


def merge(tasks: Sequence[Task], size: int) -> dict[str, np.ndarray]:
    """The tasks' inputs as one batch of `size` rows (padded with copies of the first)."""
    merged = {}
    for name in tasks[0].inputs:
        parts = [t.inputs[name] for t in tasks]
        rows = sum(p.shape[0] for p in parts)
        if size > rows:
            first = parts[0][:1]
            parts.append(np.repeat(first, size - rows, axis=0))
        merged[name] = parts[0] if len(parts) == 1 else np.concatenate(parts)
    return merged


def split(outputs: Mapping[str, np.ndarray], tasks: Sequence[Task], size: int) -> None:
    """Each task's rows of the batch's outputs into its Future."""
    for name, out in outputs.items():
        if out.ndim == 0 or out.shape[0] != size:
            error = ServingError(
                Code.FAILED_PRECONDITION,
                f"Batched output tensor {name!r} has 0th dimension "
                f"{out.shape[0] if out.ndim else 'none'}, not the batch's {size}",
            )
            for t in tasks:
                t.future.set_exception(error)
            return
    start = 0
    for t in tasks:
        end = start + t.rows
        t.future.set_result({k: v[start:end] for k, v in outputs.items()})
        start = end


class Batcher:
    """Queues per (version, signature, input shapes) and the threads that run them."""

    def __init__(self, params: BatchingParameters) -> None:
        self.params = params
        self._queues: dict[Any, _Queue] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._running = 0
        """Batches running now, on batch threads or on callers' (`submit(here=True)`)."""
        self._threads = [
            threading.Thread(target=self._work, name=f"tfkube-batch-{i}", daemon=True)
            for i in range(params.num_batch_threads)
        ]
        for t in self._threads:
            t.start()

    def submit(
        self, key: Any, run: Run, inputs: Mapping[str, np.ndarray], here: bool = False
    ) -> Future[dict[str, np.ndarray]]:
        """Queue a request; its Future gets its own rows of the outputs. `key` names the
        model call (version, signature): only requests with the same key are merged.

        `here`: when fewer than `num_batch_threads` batches are running and a batch is
        ready now (this request and whatever else is queued, by `plan_batch`), the caller
        runs it on its own thread before this returns, so a lone request makes no hop to
        a batch thread and back; otherwise a batch thread runs it as usual."""
        future: Future[dict[str, np.ndarray]] = Future()
        shape_key = batch_key(inputs)
        if shape_key is None:  # not batchable: runs alone, still on a batch thread
            shape_key = ("alone", id(future))
        rows = next(iter(inputs.values())).shape[0] if shape_key[0] != "alone" else 0
        if rows > self.params.max_batch_size:
            future.set_exception(
                ServingError(
                    Code.INVALID_ARGUMENT,
                    f"Task size {rows} is larger than maximum input batch size "
                    f"{self.params.max_batch_size}",
                )
            )
            return future
        capacity = self.params.max_enqueued_batches * self.params.max_batch_size
        with self._cond:
            queue = self._queues.get((key, shape_key))
            if queue is None:
                queue = self._queues[(key, shape_key)] = _Queue(run)
            if queue.rows + rows > capacity:
                future.set_exception(
                    ServingError(
                        Code.UNAVAILABLE,
                        "The batch scheduling queue to which this task was submitted is full",
                    )
                )
                return future
            queue.tasks.append(Task(inputs, max(rows, 1), future))
            queue.rows += rows
            found = self._take() if here else None
            if found is None:
                self._cond.notify()
                return future
        self._run_counted(*found)
        return future

    def _take(self) -> tuple[Run, list[Task]] | None:
        """Under the lock: a batch to run now (the oldest ready queue first) if a batch may
        start (fewer than `num_batch_threads` running), counted as running; else None."""
        if self._running >= self.params.num_batch_threads:
            return None
        now = time.monotonic()
        for key, queue in sorted(self._queues.items(), key=lambda kv: kv[1].tasks[0].queued):
            decision = plan_batch(
                [t.rows for t in queue.tasks], now - queue.tasks[0].queued, self.params
            )
            if isinstance(decision, int):
                taken = [queue.tasks.popleft() for _ in range(max(decision, 1))]
                queue.rows -= sum(t.rows for t in taken)
                if not queue.tasks:
                    del self._queues[key]
                self._running += 1
                return queue.run, taken
        return None

    def _wait_time(self) -> float:
        """Under the lock: how long until a queued batch may be ready (at most 1 s)."""
        now = time.monotonic()
        wait = 1.0
        for queue in self._queues.values():
            decision = plan_batch(
                [t.rows for t in queue.tasks], now - queue.tasks[0].queued, self.params
            )
            if not isinstance(decision, int):
                wait = min(wait, decision)
        return wait

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (
                    not self._queues or self._running >= self.params.num_batch_threads
                ):
                    self._cond.wait()
                if self._closed:
                    return
                found = self._take()
                if found is None:
                    self._cond.wait(self._wait_time())
                    continue
            self._run_counted(*found)

    def _run_counted(self, run: Run, tasks: list[Task]) -> None:
        try:
            self._run(run, tasks)
        finally:
            with self._cond:
                self._running -= 1
                if self._queues:
                    self._cond.notify()

    def _run(self, run: Run, tasks: list[Task]) -> None:
        try:
            if len(tasks) == 1 and self.params.allowed_batch_sizes == ():
                tasks[0].future.set_result(run(tasks[0].inputs))
                return
            rows = sum(t.rows for t in tasks)
            size = padded_size(rows, self.params)
            outputs = run(merge(tasks, size))
        except BaseException as exc:
            for t in tasks:
                if not t.future.done():
                    t.future.set_exception(exc)
            return
        split(outputs, tasks, size)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            for queue in self._queues.values():
                for t in queue.tasks:
                    t.future.set_exception(
                        ServingError(Code.UNAVAILABLE, "the model server is stopping")
                    )
            self._queues.clear()
            self._cond.notify_all()
