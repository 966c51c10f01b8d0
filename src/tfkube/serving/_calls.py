"""What both doors (REST, `_app`; gRPC, `_grpc`) ask of the model: the version a request
means (`ModelStore.resolve`), its signature, inputs checked against it, the call run
through the batcher (or a thread of its own when batching is off), outputs back.

    Calls.servable(model, version, label) -> (version, Servable)
    Calls.run(version, servable, signature, inputs, here) -> Future[outputs]
    LoopCalls(calls).run(version, servable, signature, inputs) -> outputs  (awaited)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from tfkube.serving._batching import Batcher
from tfkube.serving._rest import (
    DEFAULT_MAX_ELEMENTS,
    DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_SIGNATURE,
    DTYPES,
    Code,
    ServingError,
    Signature,
    check_input_names,
    check_shape,
    not_found,
)
from tfkube.serving._store import ModelStore, Servable

CLASSIFY = "tensorflow/serving/classify"
REGRESS = "tensorflow/serving/regress"
QUICK_CALL_SECONDS = 0.002
"""A model call this short may run on the REST door's event loop when it is the only
request waiting (`_app`): the loop is then blocked no longer than a request's own
parsing takes, and the request makes no thread hop."""


def signature_of(servable: Servable, name: str) -> Signature:
    found = servable.info.signatures.get(name or DEFAULT_SIGNATURE)
    if found is None:
        known = ", ".join(sorted(servable.info.signatures)) or "none"
        raise ServingError(
            Code.INVALID_ARGUMENT,
            f"Serving signature name: {name or DEFAULT_SIGNATURE!r} not found in signature "
            f"def (it has {known})",
        )
    return found


def checked_inputs(
    inputs: Mapping[str, np.ndarray], signature: Signature, name: str
) -> dict[str, np.ndarray]:
    """Tensors as a gRPC request sends them, against the signature: the same names, each
    of the input's dtype and a shape that fits (INVALID_ARGUMENT, TensorFlow's words)."""
    check_input_names(inputs, signature, name)
    out = {}
    for key, array in inputs.items():
        info = signature.inputs[key]
        got = "string" if array.dtype == object else array.dtype.name
        if got != info.dtype:
            raise ServingError(
                Code.INVALID_ARGUMENT,
                f"Expects arg {key!r} to be {DTYPES.get(info.dtype, info.dtype)} but "
                f"{DTYPES.get(got, got)} is provided",
            )
        out[key] = check_shape(key, array, info)
    return out


def examples_signature(servable: Servable, name: str, method: str) -> tuple[str, Signature]:
    """A Classify or Regress signature: its method is `method` and it takes one string
    tensor of serialized tf.Examples (TensorFlow Serving's rule)."""
    signature = signature_of(servable, name)
    if signature.method_name != method:
        raise ServingError(
            Code.INVALID_ARGUMENT,
            f"Expected {method.rsplit('/', 1)[-1]} signature method_name to be {method}. "
            f"Was: {signature.method_name}",
        )
    if len(signature.inputs) != 1:
        raise ServingError(Code.INVALID_ARGUMENT, "Expected one input Tensor.")
    ((input_name, info),) = signature.inputs.items()
    if info.dtype != "string":
        raise ServingError(Code.INVALID_ARGUMENT, "the signature's input is not a string tensor")
    return input_name, signature


def element_bounds(signature: Signature, max_batch_size: int | None) -> dict[str, int]:
    """The most elements each input of a signature can take in one request (pure): its
    whole shape's when the shape is known; `max_batch_size` rows when only the first
    dimension is unknown and batching is on (a request of more rows is refused anyway).
    Inputs of another shape are bounded only by the request's `max_elements`."""
    bounds = {}
    for name, info in signature.inputs.items():
        if info.shape is None or not info.shape:
            continue
        first, rest = info.shape[0], info.shape[1:]
        if any(d is None for d in rest):
            continue
        row = 1
        for d in rest:
            row *= d or 0
        if first is not None:
            bounds[name] = first * row
        elif max_batch_size is not None:
            bounds[name] = max_batch_size * row
    return bounds


@dataclass
class Calls:
    store: ModelStore
    batcher: Batcher | None
    """None: batching is off; each call runs on a thread of `pool`."""
    pool: ThreadPoolExecutor
    took: dict[tuple[int, int, str], float] = field(default_factory=dict)
    """How long each model call (version, servable, signature) last ran, in seconds."""
    max_elements: int = DEFAULT_MAX_ELEMENTS
    """The most numbers or strings one request may bring (`--max_request_elements`)."""
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    """The largest request body or gRPC message (`--max_request_bytes`)."""

    def bounds(self, signature: Signature) -> dict[str, int]:
        """Each input's bound in elements by the signature (`element_bounds`)."""
        batch = self.batcher.params.max_batch_size if self.batcher is not None else None
        return element_bounds(signature, batch)

    def servable(self, model: str, version: int | None, label: str | None) -> tuple[int, Servable]:
        if model != self.store.name:
            raise not_found(model, version)
        chosen = self.store.resolve(version, label)
        return chosen, self.store.servable(chosen)

    def run(
        self,
        version: int,
        servable: Servable,
        signature: str,
        inputs: Mapping[str, np.ndarray],
        here: bool = False,
    ) -> Future[dict[str, np.ndarray]]:
        """The model call, batched with others of the same version and signature.

        `here`: the caller's thread may run it (with whatever is queued beside it) when
        no batch is running, instead of handing it to a batch thread and waiting: a
        thread hop less (`Batcher.submit`). Without batching it then simply runs here."""
        key = (version, id(servable), signature)

        def call(batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
            started = time.perf_counter()
            try:
                return servable.run(signature, batch)
            finally:
                self.took[key] = time.perf_counter() - started

        if self.batcher is None:
            if not here:
                return self.pool.submit(call, inputs)
            done: Future[dict[str, np.ndarray]] = Future()
            try:
                done.set_result(call(inputs))
            except Exception as exc:
                done.set_exception(exc)
            return done
        return self.batcher.submit(key, call, inputs, here=here)

    def quick(self, version: int, servable: Servable, signature: str) -> bool:
        """Whether this model call's last run took under `QUICK_CALL_SECONDS` (False
        before its first): short enough to run on an event loop's thread."""
        took = self.took.get((version, id(servable), signature))
        return took is not None and took < QUICK_CALL_SECONDS

    def close(self) -> None:
        if self.batcher is not None:
            self.batcher.close()
        self.pool.shutdown(wait=False, cancel_futures=True)


CONCURRENCY_WEIGHT = 0.125
"""How much one request moves a door's running mean of requests in flight."""
LONE_BELOW = 1.5
"""A door whose running mean of requests in flight is below this serves one client at a
time: its requests may run on its loop's thread."""


def next_concurrency(mean: float, in_flight: int) -> float:
    """The running mean of requests in flight after a request that found `in_flight`."""
    return mean + CONCURRENCY_WEIGHT * (in_flight - mean)


def runs_here(in_flight: int, mean: float, quick: bool) -> bool:
    """Whether a request runs on its loop's thread at once (pure): it is the only one in
    flight, the door has lately served one at a time, and the model call is quick. When
    clients overlap, the loop must stay free to read them while a batch thread runs their
    merged batch: that is what batching is for."""
    return quick and in_flight == 1 and mean < LONE_BELOW


class LoopCalls:
    """One event loop's way to the model (each door has one): the call handed to the
    batcher and awaited, or (`runs_here`) run on the loop's thread at once: no thread hop
    there and back, which on a busy machine costs more than a small model's call."""

    def __init__(self, calls: Calls) -> None:
        self.calls = calls
        self.in_flight = 0
        self.concurrency = 1.0
        """The running mean of requests in flight as requests arrive."""

    async def run(
        self, version: int, servable: Servable, signature: str, inputs: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        self.in_flight += 1
        try:
            # one turn of the loop: requests that arrived together all count as in flight
            await asyncio.sleep(0)
            self.concurrency = next_concurrency(self.concurrency, self.in_flight)
            here = runs_here(
                self.in_flight, self.concurrency, self.calls.quick(version, servable, signature)
            )
            future = self.calls.run(version, servable, signature, inputs, here=here)
            if future.done():
                return future.result()
            return await asyncio.wrap_future(future)
        finally:
            self.in_flight -= 1
