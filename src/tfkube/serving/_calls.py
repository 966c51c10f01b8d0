"""What both doors (REST, `_app`; gRPC, `_grpc`) ask of the model: the version a request
means (`ModelStore.resolve`), its signature, inputs checked against it, the call run
through the batcher (or a thread of its own when batching is off), outputs back.

    Calls.predict(version, label, signature, inputs) -> Future[(version, outputs)]
    Calls.examples(kind, spec, serialized tf.Examples) -> Future[(version, outputs)]
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from tfkube.serving._batching import Batcher
from tfkube.serving._rest import (
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


@dataclass
class Calls:
    store: ModelStore
    batcher: Batcher | None
    """None: batching is off; each call runs on a thread of `pool`."""
    pool: ThreadPoolExecutor

    def servable(self, model: str, version: int | None, label: str | None) -> tuple[int, Servable]:
        if model != self.store.name:
            raise not_found(model, version)
        chosen = self.store.resolve(version, label)
        return chosen, self.store.servable(chosen)

    def run(
        self, version: int, servable: Servable, signature: str, inputs: Mapping[str, np.ndarray]
    ) -> Future[dict[str, np.ndarray]]:
        """The model call, batched with others of the same version and signature."""
        if self.batcher is None:
            return self.pool.submit(servable.run, signature, inputs)

        def call(batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
            return servable.run(signature, batch)

        return self.batcher.submit((version, id(servable), signature), call, inputs)

    def close(self) -> None:
        if self.batcher is not None:
            self.batcher.close()
        self.pool.shutdown(wait=False, cancel_futures=True)
