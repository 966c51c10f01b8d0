"""The model's versions in memory: which one is served, loading a newer export without a
restart (a thread polls the base path, as TensorFlow Serving's file-system source does),
and running a signature. TensorFlow is imported by the loader only; the store takes the
loader as a parameter, so its version logic is tested without TensorFlow.

    poll (every --file_system_poll_wait_seconds):
        exported_versions(base) -> policy.wanted(...) -> new? load it (LOADING), then
        AVAILABLE and every other version unloaded (END); a version that fails to load
        is END with its error and not tried again, the served one stays
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from tfkube.serving._rest import (
    Code,
    ModelInfo,
    ServingError,
    Signature,
    TensorInfo,
    VersionStatus,
    not_found,
)
from tfkube.serving._versions import VersionPolicy, exported_versions

log = logging.getLogger("tfkube.serving")


class Servable(Protocol):
    """One loaded version."""

    info: ModelInfo

    def run(self, signature: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]: ...


Loader = Callable[[Path, int], Servable]


_TF_CODES = {
    "InvalidArgumentError": Code.INVALID_ARGUMENT,
    "OutOfRangeError": Code.INVALID_ARGUMENT,
    "FailedPreconditionError": Code.FAILED_PRECONDITION,
    "NotFoundError": Code.NOT_FOUND,
    "UnimplementedError": Code.UNIMPLEMENTED,
    "UnavailableError": Code.UNAVAILABLE,
    "ResourceExhaustedError": Code.UNAVAILABLE,
    "InternalError": Code.INTERNAL,
}


def tf_error(exc: BaseException) -> ServingError:
    """A TensorFlow exception as TensorFlow Serving reports it (its code, its message)."""
    code = _TF_CODES.get(type(exc).__name__, Code.UNKNOWN)
    message = getattr(exc, "message", None) or str(exc)
    return ServingError(code, str(message).strip())


def _info(spec: Any, fallback: str) -> TensorInfo:
    shape = None if spec.shape.rank is None else tuple(spec.shape.as_list())
    name = getattr(spec, "name", None) or fallback
    return TensorInfo(spec.dtype.name, shape, name)


@dataclass
class TFServable:
    """A SavedModel version loaded with TensorFlow (`tf.saved_model.load`)."""

    info: ModelInfo
    functions: dict[str, Any]
    keep: Any
    """The loaded object: its signatures' variables live as long as it does."""

    def run(self, signature: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        import tensorflow as tf

        fn = self.functions[signature]
        try:
            out = fn(**{k: tf.constant(v) for k, v in inputs.items()})
        except (tf.errors.OpError, ValueError, TypeError) as exc:
            raise tf_error(exc) from None
        return {k: v.numpy() for k, v in out.items()}


def load_saved_model(path: Path, version: int) -> TFServable:
    import tensorflow as tf

    loaded = tf.saved_model.load(str(path), tags=["serve"])
    signatures: dict[str, Signature] = {}
    functions: dict[str, Any] = {}
    for name, fn in loaded.signatures.items():
        _, kwargs = fn.structured_input_signature
        outputs = fn.structured_outputs
        if not isinstance(outputs, Mapping):
            continue  # not a predict signature: TensorFlow Serving skips these as well
        signatures[name] = Signature(
            inputs={k: _info(s, k) for k, s in kwargs.items()},
            outputs={k: _info(t, k) for k, t in outputs.items()},
        )
        functions[name] = fn
    return TFServable(ModelInfo(version, signatures), functions, loaded)


class ModelStore:
    def __init__(
        self,
        name: str,
        base_path: Path,
        policy: VersionPolicy,
        loader: Loader = load_saved_model,
    ) -> None:
        self.name = name
        self.base_path = base_path
        self.policy = policy
        self.loader = loader
        self._lock = threading.Lock()
        self._served: dict[int, Servable] = {}
        self._states: dict[int, VersionStatus] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the poll ---------------------------------------------------------------------

    def poll(self) -> None:
        """Look at the base path once; load the wanted version if it is new."""
        wanted = self.policy.wanted(exported_versions(self.base_path))
        with self._lock:
            if wanted is None or wanted in self._served or wanted in self._states:
                return  # nothing new (a failed version is not tried again)
            self._states[wanted] = VersionStatus(wanted, "LOADING")
        try:
            servable = self.loader(self.base_path / str(wanted), wanted)
        except Exception as exc:  # a broken export must not stop the served one
            log.warning("version %s of %s failed to load: %s", wanted, self.name, exc)
            with self._lock:
                self._states[wanted] = VersionStatus(wanted, "END", "UNKNOWN", str(exc)[:2000])
            return
        with self._lock:
            self._served = {wanted: servable}
            for version in list(self._states):
                if version != wanted and self._states[version].state == "AVAILABLE":
                    self._states[version] = VersionStatus(version, "END")
            self._states[wanted] = VersionStatus(wanted, "AVAILABLE")
        log.info("serving version %s of %s", wanted, self.name)

    def start(self, poll_seconds: float) -> None:
        self.poll()
        self._thread = threading.Thread(
            target=self._loop, args=(poll_seconds,), name="tfkube-model-poll", daemon=True
        )
        self._thread.start()

    def _loop(self, poll_seconds: float) -> None:
        while not self._stop.wait(poll_seconds):
            try:
                self.poll()
            except Exception:
                log.exception("polling %s failed", self.base_path)

    def close(self) -> None:
        self._stop.set()

    # -- reads --------------------------------------------------------------------------

    def statuses(self) -> list[VersionStatus]:
        with self._lock:
            return list(self._states.values())

    def servable(self, version: int | None) -> Servable:
        """The latest served version, or the one asked for (NOT_FOUND otherwise)."""
        with self._lock:
            if version is None:
                if not self._served:
                    raise not_found(self.name, None)
                return self._served[max(self._served)]
            found = self._served.get(version)
        if found is None:
            raise not_found(self.name, version)
        return found

    def predict(
        self, version: int | None, signature: str, inputs: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        return self.servable(version).run(signature, inputs)

    @property
    def serving_version(self) -> int | None:
        with self._lock:
            return max(self._served) if self._served else None
