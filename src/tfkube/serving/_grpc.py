"""The model server's gRPC door: TensorFlow Serving's `tensorflow.serving.PredictionService`
(Predict, Classify, Regress, GetModelMetadata) and `ModelService.GetModelStatus`, so a
client written with the `tensorflow-serving-api` package works unchanged; and the
standard `grpc.health.v1.Health/Check` (Kubernetes' gRPC readiness probe; it tells only
whether a version is available, and needs no secret).

grpcio's server with one generic handler: messages arrive and leave as bytes, read and
written by `_protowire` (no generated code). The thread that handles a call also runs
its model call when no batch is running (`Calls.run(here=True)`), so a lone call makes no
hop to a batch thread and back. (grpcio's asyncio server was measured slower here: its
poller thread hands each call to the event loop, a hop of its own.) Every other call
needs the model server's secret as `authorization: Bearer <secret>` metadata, which only
the platform's proxy adds.
Errors are TensorFlow Serving's: the TensorFlow error code as the gRPC status code, its
message as the details.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import numpy as np

from tfkube.serving._calls import CLASSIFY, REGRESS, Calls, checked_inputs, examples_signature
from tfkube.serving._calls import signature_of as _signature_of
from tfkube.serving._protowire import (
    decode_examples_request,
    decode_inputs,
    decode_metadata_request,
    decode_status_request,
    encode_classify_response,
    encode_metadata_response,
    encode_predict_response,
    encode_regress_response,
    encode_status_response,
    filtered,
    predict_parts,
)
from tfkube.serving._rest import (
    DEFAULT_SIGNATURE,
    Code,
    ServingError,
    check_input_names,
    not_found,
    shortened,
)

log = logging.getLogger("tfkube.serving")

PREDICTION_SERVICE = "tensorflow.serving.PredictionService"
MODEL_SERVICE = "tensorflow.serving.ModelService"
HEALTH_CHECK = "/grpc.health.v1.Health/Check"
SERVING = b"\x08\x01"
"""grpc.health.v1's HealthCheckResponse {status: SERVING}."""

STATUS: dict[Code, grpc.StatusCode] = {
    Code.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    Code.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Code.FAILED_PRECONDITION: grpc.StatusCode.FAILED_PRECONDITION,
    Code.UNIMPLEMENTED: grpc.StatusCode.UNIMPLEMENTED,
    Code.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    Code.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    Code.RESOURCE_EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Code.INTERNAL: grpc.StatusCode.INTERNAL,
    Code.UNKNOWN: grpc.StatusCode.UNKNOWN,
}

Method = Callable[[bytes], bytes]


class Service:
    """The methods, each bytes -> bytes (pure but for the model call)."""

    def __init__(self, calls: Calls) -> None:
        self.calls = calls
        self.methods: dict[str, Method] = {
            f"/{PREDICTION_SERVICE}/Predict": self.predict,
            f"/{PREDICTION_SERVICE}/Classify": self.classify,
            f"/{PREDICTION_SERVICE}/Regress": self.regress,
            f"/{PREDICTION_SERVICE}/GetModelMetadata": self.metadata,
            f"/{MODEL_SERVICE}/GetModelStatus": self.status,
        }

    def predict(self, request: bytes) -> bytes:
        # the tensors stay bytes until the signature has said how large each may be
        call = predict_parts(request)
        spec = call.spec
        version, servable = self.calls.servable(spec.name, spec.version, spec.label or None)
        name = spec.signature_name or DEFAULT_SIGNATURE
        signature = _signature_of(servable, name)
        check_input_names(call.tensors, signature, name)
        arrays = decode_inputs(call.tensors, self.calls.max_elements, self.calls.bounds(signature))
        inputs = checked_inputs(arrays, signature, name)
        outputs = self.calls.run(version, servable, name, inputs, here=True).result()
        return encode_predict_response(
            spec.name, version, name, filtered(outputs, call.output_filter)
        )

    def _examples(self, request: bytes, method: str) -> tuple[str, int, str, dict[str, Any]]:
        # the model_spec first: the signature bounds how many examples are read
        spec = decode_status_request(request)
        version, servable = self.calls.servable(spec.name, spec.version, spec.label or None)
        name = spec.signature_name or DEFAULT_SIGNATURE
        input_name, signature = examples_signature(servable, name, method)
        limit = min(
            self.calls.max_elements,
            self.calls.bounds(signature).get(input_name, self.calls.max_elements),
        )
        call = decode_examples_request(request, limit, self.calls.max_request_bytes)
        strings = np.empty(len(call.examples), dtype=object)
        strings[:] = call.examples
        outputs = self.calls.run(version, servable, name, {input_name: strings}, here=True).result()
        return spec.name, version, name, outputs

    def classify(self, request: bytes) -> bytes:
        model, version, name, outputs = self._examples(request, CLASSIFY)
        classes, scores = outputs.get("classes"), outputs.get("scores")
        if classes is None and scores is None:
            raise ServingError(
                Code.INVALID_ARGUMENT, "the signature answers neither 'classes' nor 'scores'"
            )
        for found in (classes, scores):
            if found is not None and found.ndim != 2:
                raise ServingError(
                    Code.INVALID_ARGUMENT,
                    f"Expected Tensor shape: [batch_size num_classes] but got {list(found.shape)}",
                )
        return encode_classify_response(model, version, name, classes, scores)

    def regress(self, request: bytes) -> bytes:
        model, version, name, outputs = self._examples(request, REGRESS)
        values = outputs.get("outputs")
        if values is None:
            raise ServingError(Code.INVALID_ARGUMENT, "the signature answers no 'outputs'")
        return encode_regress_response(model, version, name, values)

    def metadata(self, request: bytes) -> bytes:
        spec, wanted = decode_metadata_request(request)
        if not spec.name:
            raise ServingError(Code.INVALID_ARGUMENT, "Missing model_spec")
        if wanted != ["signature_def"]:
            raise ServingError(
                Code.INVALID_ARGUMENT,
                "Metadata field signature_def is the only one supported; "
                f"requested: {', '.join(wanted) or 'none'}",
            )
        version, servable = self.calls.servable(spec.name, spec.version, spec.label or None)
        return encode_metadata_response(spec.name, version, servable.info.signatures)

    def status(self, request: bytes) -> bytes:
        spec = decode_status_request(request)
        store = self.calls.store
        if spec.name != store.name:
            raise not_found(spec.name, spec.version)
        version = spec.version
        if spec.label:
            version = store.resolve(None, spec.label)
        chosen = [s for s in store.statuses() if version is None or s.version == version]
        if not chosen:
            what = "any versions" if version is None else f"version {version}"
            raise ServingError(Code.NOT_FOUND, f"Could not find {what} of model {spec.name}")
        return encode_status_response(chosen)


class _Handler(grpc.GenericRpcHandler):  # type: ignore[misc]
    def __init__(self, service: Service, token: str | None) -> None:
        self._service = service
        self.expected = f"Bearer {token}".encode() if token is not None else None

    def service_name(self) -> str:  # pragma: no cover - grpcio's reflection only
        return PREDICTION_SERVICE

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method = details.method
        if method == HEALTH_CHECK:
            return grpc.unary_unary_rpc_method_handler(self._health)
        found = self._service.methods.get(method)
        if found is None:
            return None  # UNIMPLEMENTED
        if self.expected is not None:
            sent = dict(details.invocation_metadata or ()).get("authorization", "")
            if not hmac.compare_digest(str(sent).encode(), self.expected):
                return grpc.unary_unary_rpc_method_handler(_unauthenticated)
        return grpc.unary_unary_rpc_method_handler(_guarded(found))

    def _health(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        # HealthCheckResponse {1: status}: SERVING = 1, NOT_SERVING = 2
        return SERVING if self._service.calls.store.serving_version is not None else b"\x08\x02"


def _unauthenticated(request: bytes, context: grpc.ServicerContext) -> bytes:
    context.abort(grpc.StatusCode.UNAUTHENTICATED, "a valid token is required")
    raise AssertionError  # pragma: no cover - abort raises


def _guarded(method: Method) -> Callable[[bytes, grpc.ServicerContext], bytes]:
    def handle(request: bytes, context: grpc.ServicerContext) -> bytes:
        try:
            return method(request)
        except ServingError as exc:
            context.abort(STATUS[exc.code], exc.message)
        except Exception as exc:  # never a crash without TensorFlow Serving's shape
            log.exception("gRPC call failed")
            context.abort(grpc.StatusCode.INTERNAL, shortened(f"{type(exc).__name__}: {exc}"))
        raise AssertionError  # pragma: no cover - abort raises

    return handle


def start_server(
    calls: Calls, host: str, port: int, token: str | None, threads: int = 32
) -> grpc.Server:
    """gRPC on host:port (TensorFlow Serving's `--port`), started. A message larger than
    `calls.max_request_bytes` is refused by grpcio before it is handed over
    (RESOURCE_EXHAUSTED); answers are not bounded (their size is the model's)."""
    server = grpc.server(
        ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tfkube-grpc"),
        handlers=[_Handler(Service(calls), token)],
        options=[
            ("grpc.max_receive_message_length", calls.max_request_bytes),
            ("grpc.max_send_message_length", -1),
            ("grpc.so_reuseport", 0),
        ],
    )
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    server.add_insecure_port(address)
    server.start()
    return server


def loopback(host: str) -> str:
    """How this machine reaches a door listening on `host` (pure): the wildcard addresses
    by loopback, IPv6 in brackets."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host in ("::", "[::]"):
        return "[::1]"
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


class HealthProbe:
    """The gRPC door's own health check, asked through the network from inside the model
    server (the REST door's readiness): None when it answers SERVING, else why not."""

    def __init__(self, host: str, port: int, timeout: float = 2.0) -> None:
        self.target = f"{loopback(host)}:{port}"
        self.timeout = timeout
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None

    def _check(self) -> str | None:
        with self._lock:
            if self._channel is None:
                self._channel = grpc.insecure_channel(self.target)
            check = self._channel.unary_unary(HEALTH_CHECK)
        try:
            answer = check(b"", timeout=self.timeout)
        except grpc.RpcError as exc:
            return f"gRPC at {self.target}: {exc.code().name}"
        return None if answer == SERVING else f"gRPC at {self.target}: not serving"

    async def __call__(self) -> str | None:
        return await asyncio.to_thread(self._check)

    def close(self) -> None:
        with self._lock:
            if self._channel is not None:
                self._channel.close()
                self._channel = None
