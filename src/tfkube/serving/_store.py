"""The model's versions in memory: which one is served, loading a newer export without a
restart (a thread polls the base path, as TensorFlow Serving's file-system source does),
and running a signature. TensorFlow is imported by the loader only; the store takes the
loader as a parameter, so its version logic is tested without TensorFlow.

    poll (every --file_system_poll_wait_seconds):
        exported_versions(base) -> policy.serve(...) (latest N, all, specific) ->
        plan_versions: each new one loaded (LOADING), warmed up from its
        assets.extra/tf_serving_warmup_requests, AVAILABLE; then the versions no longer
        wanted unloaded (END). A version that fails to load is END with its error and
        not tried again; the served ones stay.
    a request: a version, a label (version_labels: stable, canary) or neither (the
        traffic split between labels, else the newest) -> `resolve` -> that version
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from tfkube.serving._rest import (
    DEFAULT_SIGNATURE,
    Code,
    ModelInfo,
    ServingError,
    Signature,
    TensorInfo,
    VersionStatus,
    not_found,
)
from tfkube.serving._versions import (
    VersionPolicy,
    exported_versions,
    plan_versions,
    split_label,
)

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


def tensor_info(proto: Any) -> TensorInfo | None:
    """A SignatureDef's TensorInfo (TensorFlow's proto) as tfkube's; None for a sparse or
    composite tensor (TensorFlow Serving's Predict takes dense tensors only) and for no
    tensor at all (`__saved_model_init_op`)."""
    if proto.WhichOneof("encoding") != "name" or not proto.dtype:
        return None
    import tensorflow as tf

    shape_proto = proto.tensor_shape
    shape = (
        None
        if shape_proto.unknown_rank
        else tuple(None if d.size < 0 else int(d.size) for d in shape_proto.dim)
    )
    return TensorInfo(tf.dtypes.as_dtype(proto.dtype).name, shape, proto.name)


@dataclass
class TFServable:
    """A SavedModel version in a TensorFlow session, as TensorFlow Serving holds one: its
    MetaGraph tagged `serve`, each SignatureDef run by feeding and fetching the tensors it
    names. The shortest path from numpy arrays to TensorFlow and back: the session's own
    run call with the feeds and fetches resolved once per signature (what
    `Session.make_callable` does for a step without feeds; with feeds it falls back to
    `Session.run`, whose per-call Python bookkeeping cost as much as the graph of a small
    model, measured in docs/benchmarks.md); it lets go of the GIL while the graph runs.
    Without that entry point (another TensorFlow) it uses `make_callable`."""

    info: ModelInfo
    session: Any
    graph: Any
    _callables: dict[str, tuple[list[str], list[str], Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _callable(self, signature: str) -> tuple[list[str], list[str], Any]:
        found = self._callables.get(signature)
        if found is not None:
            return found
        with self._lock:
            sig = self.info.signatures[signature]
            feeds = sorted(sig.inputs)
            fetches = sorted(sig.outputs)
            feed_tensors = [self.graph.get_tensor_by_name(sig.inputs[k].tensor_name) for k in feeds]
            fetch_tensors = [
                self.graph.get_tensor_by_name(sig.outputs[k].tensor_name) for k in fetches
            ]
            found = self._callables[signature] = (
                feeds,
                fetches,
                _direct_run(self.session, feed_tensors, fetch_tensors)
                or self.session.make_callable(fetch_tensors, feed_list=feed_tensors),
            )
        return found

    def run(self, signature: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        import tensorflow as tf

        feeds, fetches, call = self._callable(signature)
        try:
            out = call(*[inputs[k] for k in feeds])
        except (tf.errors.OpError, ValueError, TypeError) as exc:
            raise tf_error(exc) from None
        return dict(zip(fetches, out, strict=True))


def _direct_run(session: Any, feeds: list[Any], fetches: list[Any]) -> Any | None:
    """A callable(*arrays) -> [arrays] on the session's run entry point, the feeds and
    fetches resolved once; the arrays cast to the feeds' dtypes as `Session.run` does.
    None when this TensorFlow has no such entry point."""
    run = getattr(session, "_call_tf_sessionrun", None)
    extend = getattr(session, "_extend_graph", None)
    try:
        feed_outputs = [t._as_tf_output() for t in feeds]
        fetch_outputs = [t._as_tf_output() for t in fetches]
        dtypes = [t.dtype.as_numpy_dtype for t in feeds]
    except (AttributeError, TypeError):  # not TensorFlow's, or a dtype numpy cannot hold
        return None
    if run is None or extend is None:
        return None
    extend()
    pairs = list(zip(feed_outputs, dtypes, strict=True))

    def call(*arrays: np.ndarray) -> list[np.ndarray]:
        feed = {out: np.asarray(a, dtype=dt) for (out, dt), a in zip(pairs, arrays, strict=True)}
        return run(None, feed, fetch_outputs, [], None)  # type: ignore[no-any-return]

    return call


RUN_IN_CALLER = -1
"""`inter_op_threads` that runs a model call's ops on the calling thread (TensorFlow's
ConfigProto: a negative `inter_op_parallelism_threads`), the model server's default: for
a small model the handoff to TensorFlow's inter-op pool and back cost more than the ops
(batch 64: 96-105 against 182-219 µs of CPU a call, docs/benchmarks.md). A model whose
graph has branches worth running in parallel may want 0 (TensorFlow's shared pool)."""


def load_saved_model(path: Path, version: int, inter_op_threads: int = RUN_IN_CALLER) -> TFServable:
    """A SavedModel (TensorFlow 1 or 2) loaded into a session of its own, with the
    process's TensorFlow threading settings but `inter_op_threads` (TensorFlow Serving's
    `--tensorflow_inter_op_parallelism`: 0 TensorFlow's choice, N a pool of N threads,
    negative the caller's thread)."""
    import tensorflow as tf
    from tensorflow.python.eager import context

    config = tf.compat.v1.ConfigProto()
    config.CopyFrom(context.context().config)
    config.inter_op_parallelism_threads = inter_op_threads
    graph = tf.Graph()
    session = tf.compat.v1.Session(graph=graph, config=config)
    quiet = tf.get_logger().level
    tf.get_logger().setLevel("ERROR")  # the v1 loader's deprecation notice, every load
    try:
        with graph.as_default():
            meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], str(path))
    finally:
        tf.get_logger().setLevel(quiet)
    signatures: dict[str, Signature] = {}
    for name, sig in meta.signature_def.items():
        inputs = {k: tensor_info(v) for k, v in sig.inputs.items()}
        outputs = {k: tensor_info(v) for k, v in sig.outputs.items()}
        if not outputs or any(v is None for v in (*inputs.values(), *outputs.values())):
            continue  # sparse or composite tensors: not served (nor by TensorFlow Serving)
        signatures[name] = Signature(
            inputs={k: v for k, v in inputs.items() if v is not None},
            outputs={k: v for k, v in outputs.items() if v is not None},
            method_name=sig.method_name or "tensorflow/serving/predict",
        )
    return TFServable(ModelInfo(version, signatures), session, graph)


def warm_up(servable: Servable, path: Path, limit: int = 1000) -> int:
    """Replay `assets.extra/tf_serving_warmup_requests` (a TFRecord file of
    PredictionLog records, TensorFlow Serving's warm-up) against a freshly loaded
    version before it answers; returns how many requests ran. A record that fails
    fails the load, as in TensorFlow Serving."""
    from tfkube.serving._protowire import (
        decode_examples_request,
        decode_predict,
        prediction_log,
        tfrecords,
    )

    file = path / "assets.extra" / "tf_serving_warmup_requests"
    if not file.is_file():
        return 0
    ran = 0
    for record in tfrecords(file.read_bytes()):
        if ran >= limit:
            break
        found = prediction_log(record)
        if found is None:
            continue
        kind, request = found
        if kind == "predict":
            call = decode_predict(request)
            signature = call.spec.signature_name or DEFAULT_SIGNATURE
            servable.run(signature, call.inputs)
        else:
            examples = decode_examples_request(request)
            signature = examples.spec.signature_name or DEFAULT_SIGNATURE
            info = servable.info.signatures.get(signature)
            if info is None or len(info.inputs) != 1:
                raise ServingError(
                    Code.INVALID_ARGUMENT, f"warm-up: no {kind} signature {signature!r}"
                )
            (name,) = info.inputs
            strings = np.empty(len(examples.examples), dtype=object)
            strings[:] = examples.examples
            servable.run(signature, {name: strings})
        ran += 1
    return ran


Warmer = Callable[[Servable, Path], int]


class ModelStore:
    def __init__(
        self,
        name: str,
        base_path: Path,
        policy: VersionPolicy,
        loader: Loader = load_saved_model,
        *,
        labels: Mapping[str, int] | None = None,
        traffic: Mapping[str, int] | None = None,
        warmer: Warmer | None = warm_up,
        draw: Callable[[], float] = random.random,
    ) -> None:
        self.name = name
        self.base_path = base_path
        self.policy = policy
        self.loader = loader
        self.labels = dict(labels or {})
        """label -> version (TensorFlow Serving's version_labels: stable, canary...)."""
        self.traffic = dict(traffic or {})
        """label -> weight: how requests that name no version or label are shared."""
        self.warmer = warmer
        self.draw = draw
        self._lock = threading.Lock()
        self._served: dict[int, Servable] = {}
        self._states: dict[int, VersionStatus] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the poll ---------------------------------------------------------------------

    def poll(self) -> None:
        """Look at the base path once: load the wanted versions that are new (newest
        first), then unload those no longer wanted (a served one stays until a wanted
        one is up; a version that failed is not tried again)."""
        wanted = self.policy.serve(exported_versions(self.base_path))
        with self._lock:
            failed = {v for v, s in self._states.items() if s.state == "END" and s.error_message}
            load, _ = plan_versions(wanted, set(self._served), failed)
        for version in load:
            self._load(version)
        with self._lock:
            failed = {v for v, s in self._states.items() if s.state == "END" and s.error_message}
            _, unload = plan_versions(wanted, set(self._served), failed)
            for version in unload:
                del self._served[version]
                self._states[version] = VersionStatus(version, "END")
                log.info("unloaded version %s of %s", version, self.name)

    def _load(self, version: int) -> None:
        with self._lock:
            if version in self._served:
                return
            self._states[version] = VersionStatus(version, "LOADING")
        path = self.base_path / str(version)
        try:
            servable = self.loader(path, version)
            warmed = self.warmer(servable, path) if self.warmer is not None else 0
        except Exception as exc:  # a broken export must not stop the served ones
            log.warning("version %s of %s failed to load: %s", version, self.name, exc)
            with self._lock:
                self._states[version] = VersionStatus(version, "END", "UNKNOWN", str(exc)[:2000])
            return
        with self._lock:
            self._served[version] = servable
            self._states[version] = VersionStatus(version, "AVAILABLE")
        log.info(
            "serving version %s of %s%s",
            version,
            self.name,
            f" (warmed up with {warmed} requests)" if warmed else "",
        )

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

    def resolve(self, version: int | None, label: str | None = None) -> int:
        """The served version a request means: the one it names, its label's, or (naming
        neither) the traffic split's label or the newest (NOT_FOUND, INVALID_ARGUMENT)."""
        with self._lock:
            served = set(self._served)
        if label:
            if label not in self.labels:
                raise ServingError(
                    Code.INVALID_ARGUMENT, f"Unrecognized servable version label: {label}"
                )
            version = self.labels[label]
        elif version is None:
            chosen = split_label(self.traffic, self.labels, served, self.draw())
            if chosen is not None:
                version = self.labels[chosen]
            elif served:
                return max(served)
            else:
                raise not_found(self.name, None)
        if version not in served:
            raise not_found(self.name, version)
        return version

    def servable(self, version: int | None, label: str | None = None) -> Servable:
        """The version a request means (`resolve`), loaded."""
        chosen = self.resolve(version, label)
        with self._lock:
            found = self._served.get(chosen)
        if found is None:  # unloaded in between
            raise not_found(self.name, chosen)
        return found

    def predict(
        self, version: int | None, signature: str, inputs: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        return self.servable(version).run(signature, inputs)

    @property
    def serving_version(self) -> int | None:
        with self._lock:
            return max(self._served) if self._served else None
