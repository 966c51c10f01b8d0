"""TensorFlow Serving's REST API, as pure functions: request paths and bodies in, numpy
arrays out; outputs and errors back to the JSON TensorFlow Serving answers with. No
TensorFlow and no HTTP here (`_app.py` is the shell), so every branch is table-tested.

    GET  /v1/models/<name>[/versions/<v>]             -> {"model_version_status": [...]}
    GET  /v1/models/<name>[/versions/<v>]/metadata    -> {"model_spec", "metadata"}
    POST /v1/models/<name>[/versions/<v>]:predict     {"instances": rows} -> {"predictions"}
                                                      {"inputs": columns} -> {"outputs"}
    any error                                         -> {"error": "<message>"}, status by
                                                         the TensorFlow error code

The shapes follow TensorFlow Serving's documentation (api_rest.md) so that a client
written against it works here unchanged.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

import numpy as np
import orjson

try:
    import simdjson
except ImportError:  # pragma: no cover - the serving extra installs it
    simdjson = None  # type: ignore[assignment]


class Code(StrEnum):
    """TensorFlow's error codes (the subset a model server answers with)."""

    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    NOT_FOUND = "NOT_FOUND"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    UNIMPLEMENTED = "UNIMPLEMENTED"
    UNAVAILABLE = "UNAVAILABLE"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    INTERNAL = "INTERNAL"
    UNKNOWN = "UNKNOWN"


HTTP_STATUS: Mapping[Code, int] = {
    Code.INVALID_ARGUMENT: 400,
    Code.FAILED_PRECONDITION: 400,
    Code.NOT_FOUND: 404,
    Code.UNIMPLEMENTED: 501,
    Code.UNAVAILABLE: 503,
    Code.UNAUTHENTICATED: 401,
    Code.RESOURCE_EXHAUSTED: 429,
    Code.INTERNAL: 500,
    Code.UNKNOWN: 500,
}
"""TensorFlow Serving's mapping from error code to HTTP status (http_server.cc)."""


DEFAULT_MAX_REQUEST_BYTES = 64 * 2**20
"""The largest request either door reads unless told otherwise (`--max_request_bytes`):
a gRPC message (grpcio's `max_receive_message_length`; TensorFlow Serving sets 2 GiB, tfkube
used to set no bound at all) and a REST body. The platform's proxy takes as much
(`server/core/inputs.MAX_PROXY_BODY_BYTES`)."""
DEFAULT_MAX_ELEMENTS = 2**22
"""The most numbers (or strings) one request may bring, over all its inputs, unless the
model server is told otherwise (`--max_request_elements`): 16 MiB of float32. Where a
signature's input has a known row shape and batching is on, the bound for that input is
`max_batch_size` rows of it, when smaller."""


MAX_MESSAGE = 2048
"""The longest error message sent: messages name what a request sent (input names,
metadata fields), and a gRPC client refuses status details over its metadata bound
(16 KiB: "Stream removed", RESOURCE_EXHAUSTED, instead of the error)."""


def shortened(message: str) -> str:
    """The message, its middle cut out past MAX_MESSAGE characters (pure)."""
    if len(message) <= MAX_MESSAGE:
        return message
    cut = len(message) - MAX_MESSAGE
    half = MAX_MESSAGE // 2
    return f"{message[:half]} ... ({cut} characters left out) ... {message[-half:]}"


class ServingError(Exception):
    def __init__(self, code: Code, message: str, http_status: int | None = None) -> None:
        message = shortened(message)
        super().__init__(message)
        self.code = code
        self.message = message
        self._http_status = http_status

    @property
    def http_status(self) -> int:
        """TensorFlow Serving's status for the code, unless this error names its own (413
        for a body over the bound, as the platform's proxy answers)."""
        return self._http_status or HTTP_STATUS[self.code]

    def body(self) -> dict[str, str]:
        return {"error": self.message}


# -- paths ----------------------------------------------------------------------------------

_PREDICT = re.compile(
    r"/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>\d+)|/labels/(?P<label>[^/:]+))?"
    r":(?P<verb>classify|regress|predict)",
    re.IGNORECASE,
)
_STATUS = re.compile(
    r"/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>\d+)|/labels/(?P<label>[^/:]+))?"
    r"(?P<metadata>/metadata)?",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Call:
    """What a request asks for."""

    kind: str
    """`status`, `metadata` or `predict`."""
    model: str
    version: int | None = None
    """None: every version (status) or the latest (metadata, predict)."""
    label: str | None = None
    """A version label (`/labels/<label>`: stable, canary) instead of a version."""


def route(method: str, path: str) -> Call:
    """The call a request path makes. Raises ServingError (TensorFlow Serving's wording:
    a path under /v1 that fits no API is a malformed request)."""
    malformed = ServingError(Code.INVALID_ARGUMENT, f"Malformed request: {method} {path}")
    if method == "POST":
        found = _PREDICT.fullmatch(path)
    elif method == "GET":
        found = _STATUS.fullmatch(path)
    else:
        raise malformed
    if found is None:
        raise malformed
    version = int(found["version"]) if found["version"] else None
    label = found["label"] or None
    if method == "POST":
        if found["verb"].lower() != "predict":
            raise ServingError(
                Code.UNIMPLEMENTED,
                f"only :predict is served over REST here, not :{found['verb']} "
                "(Classify and Regress are served over gRPC)",
            )
        return Call("predict", found["name"], version, label)
    return Call("metadata" if found["metadata"] else "status", found["name"], version, label)


def not_found(model: str, version: int | None) -> ServingError:
    """TensorFlow Serving's answer for a model or version it does not serve."""
    spec = f"Latest({model})" if version is None else f"Specific({model}, {version})"
    return ServingError(Code.NOT_FOUND, f"Servable not found for request: {spec}")


# -- signatures -----------------------------------------------------------------------------

DTYPES: Mapping[str, str] = {
    "float16": "DT_HALF",
    "float32": "DT_FLOAT",
    "float64": "DT_DOUBLE",
    "int8": "DT_INT8",
    "int16": "DT_INT16",
    "int32": "DT_INT32",
    "int64": "DT_INT64",
    "uint8": "DT_UINT8",
    "uint16": "DT_UINT16",
    "uint32": "DT_UINT32",
    "uint64": "DT_UINT64",
    "bool": "DT_BOOL",
    "string": "DT_STRING",
}
"""numpy (TensorFlow) dtype name -> the name in a SignatureDef."""


@dataclass(frozen=True)
class TensorInfo:
    """One input or output of a signature."""

    dtype: str
    """TensorFlow's dtype name: `float32`, `int64`, `string`, ... (a key of DTYPES)."""
    shape: tuple[int | None, ...] | None
    """None per unknown dimension; None for an unknown rank."""
    tensor_name: str = ""
    """The graph tensor it binds to (shown in the metadata)."""

    def shape_text(self) -> str:
        if self.shape is None:
            return "<unknown>"
        return "[" + ",".join("?" if d is None else str(d) for d in self.shape) + "]"

    def proto(self) -> dict[str, Any]:
        """TensorInfo as TensorFlow Serving prints it in JSON."""
        shape: dict[str, Any]
        if self.shape is None:
            shape = {"dim": [], "unknown_rank": True}
        else:
            dims = [{"size": str(-1 if d is None else d), "name": ""} for d in self.shape]
            shape = {"dim": dims, "unknown_rank": False}
        return {
            "dtype": DTYPES.get(self.dtype, "DT_INVALID"),
            "tensor_shape": shape,
            "name": self.tensor_name,
        }


@dataclass(frozen=True)
class Signature:
    inputs: dict[str, TensorInfo]
    outputs: dict[str, TensorInfo]
    method_name: str = "tensorflow/serving/predict"

    def proto(self) -> dict[str, Any]:
        return {
            "inputs": {k: v.proto() for k, v in sorted(self.inputs.items())},
            "outputs": {k: v.proto() for k, v in sorted(self.outputs.items())},
            "method_name": self.method_name,
            "defaults": {},
        }


DEFAULT_SIGNATURE = "serving_default"


# -- predict requests ---------------------------------------------------------------------


@dataclass(frozen=True)
class Predict:
    signature_name: str
    inputs: dict[str, np.ndarray]
    row_format: bool
    """`instances` (answer `predictions`) rather than `inputs` (answer `outputs`)."""


def _decode_value(value: Any) -> Any:
    """{"b64": ...} -> bytes, recursively (TensorFlow Serving's binary encoding)."""
    if isinstance(value, dict):
        if set(value) == {"b64"} and isinstance(value["b64"], str):
            try:
                return base64.b64decode(value["b64"], validate=True)
            except ValueError:
                raise ServingError(
                    Code.INVALID_ARGUMENT, "a b64 value is not valid base64"
                ) from None
        raise ServingError(Code.INVALID_ARGUMENT, "an input value may not be an object here")
    if isinstance(value, list):
        return [_decode_value(v) for v in value]
    return value


def _array(name: str, value: Any, info: TensorInfo) -> np.ndarray:
    """A JSON value as the input's dtype and shape, or INVALID_ARGUMENT naming the input."""
    value = _decode_value(value)
    try:
        if info.dtype == "string":
            array = np.array(value, dtype=object)
            if array.dtype != object or any(
                not isinstance(v, str | bytes) for v in array.reshape(-1)
            ):
                raise ValueError("not strings")
            array = np.vectorize(
                lambda v: v if isinstance(v, bytes) else v.encode(), otypes=[object]
            )(array)
        else:
            raw = np.array(value)
            if raw.dtype == object or raw.dtype.kind in "USV":
                raise ValueError("not numbers")
            if info.dtype != "bool" and raw.dtype.kind == "b":
                raise ValueError("booleans")
            whole = raw.dtype.kind != "f" or bool(
                np.all(np.isfinite(raw)) and np.all(raw == np.round(raw))
            )
            if info.dtype.startswith(("int", "uint")) and not whole:
                raise ValueError("fractions")
            array = raw.astype(info.dtype)
    except (ValueError, TypeError, OverflowError) as exc:
        raise ServingError(
            Code.INVALID_ARGUMENT,
            f"input {name!r}: expected {DTYPES.get(info.dtype, info.dtype)} values in a "
            f"regular (not ragged) nested list ({exc})",
        ) from None
    return check_shape(name, array, info)


def check_shape(name: str, array: np.ndarray, info: TensorInfo) -> np.ndarray:
    """The array, or INVALID_ARGUMENT when its shape does not fit the input's."""
    if info.shape is not None:
        fits = len(array.shape) == len(info.shape) and all(
            want is None or want == got for want, got in zip(info.shape, array.shape, strict=True)
        )
        if not fits:
            got = "[" + ",".join(str(d) for d in array.shape) + "]"
            raise ServingError(
                Code.INVALID_ARGUMENT,
                f"input {name!r}: expected shape {info.shape_text()}, got {got}",
            )
    return array


def _rows(instances: Any, signature: Signature) -> dict[str, Any]:
    if not isinstance(instances, list) or not instances:
        raise ServingError(Code.INVALID_ARGUMENT, "'instances' must be a non-empty list")
    names = sorted(signature.inputs)
    objects = [isinstance(i, dict) for i in instances]
    if all(objects):
        keys = set(instances[0])
        if any(set(i) != keys for i in instances):
            raise ServingError(
                Code.INVALID_ARGUMENT, "every object in 'instances' must name the same inputs"
            )
        return {k: [i[k] for i in instances] for k in keys}
    if any(objects):
        raise ServingError(
            Code.INVALID_ARGUMENT, "'instances' mixes objects and plain values; use one form"
        )
    if len(names) != 1:
        raise ServingError(
            Code.INVALID_ARGUMENT,
            f"the signature has {len(names)} inputs ({', '.join(names)}): give each "
            "instance as an object of input name -> value",
        )
    return {names[0]: instances}


def _columns(inputs: Any, signature: Signature) -> dict[str, Any]:
    names = sorted(signature.inputs)
    if isinstance(inputs, dict) and set(inputs) != {"b64"}:
        return dict(inputs)
    if len(names) != 1:
        raise ServingError(
            Code.INVALID_ARGUMENT,
            f"the signature has {len(names)} inputs ({', '.join(names)}): give 'inputs' as "
            "an object of input name -> value",
        )
    return {names[0]: inputs}


_SCALARS: dict[str, Literal["d", "i", "u"]] = {"f": "d", "i": "i", "u": "u"}
"""numpy kind -> the simdjson buffer type its numbers are read as."""
_parsers = threading.local()


def _fast_predict(body: bytes, signatures: Mapping[str, Signature]) -> Predict | None:
    """The common request, straight to an array: one numeric input, its rows a regular
    list of numbers of rank 1 or 2, read by simdjson into a buffer without a Python
    number in between. None for anything else (then `parse_predict` reads it fully,
    with every check and error message)."""
    if simdjson is None:
        return None
    parser = getattr(_parsers, "parser", None)
    if parser is None:
        parser = _parsers.parser = simdjson.Parser()
    try:
        doc = parser.parse(body)
        if not isinstance(doc, simdjson.Object) or not set(doc.keys()) <= _PREDICT_KEYS:
            return None
        name = doc.get("signature_name") or DEFAULT_SIGNATURE
        if not isinstance(name, str):
            return None
        signature = signatures.get(name)
        rows = "instances" in doc
        if signature is None or len(signature.inputs) != 1 or rows == ("inputs" in doc):
            return None
        ((input_name, info),) = signature.inputs.items()
        kind = np.dtype(info.dtype).kind if info.dtype in DTYPES and info.dtype != "string" else ""
        value = doc["instances" if rows else "inputs"]
        if kind not in _SCALARS or not isinstance(value, simdjson.Array) or not len(value):
            return None
        first = value[0]
        if isinstance(first, simdjson.Array):
            width = len(first)
            shape: tuple[int, ...] = (len(value), width)
            # each row an array of `width` and no deeper nesting (a bracket per row)
            if body.count(b"[") != len(value) + 1 or any(
                not isinstance(r, simdjson.Array) or len(r) != width for r in value
            ):
                return None
        else:
            shape = (len(value),)
            if body.count(b"[") != 1:
                return None
        flat = value.as_buffer(of_type=_SCALARS[kind])
        del value, first, doc
    except (ValueError, TypeError, RuntimeError, KeyError):
        _parsers.parser = None  # a fresh parser: nothing may still point into the old one
        return None
    raw = np.frombuffer(
        flat, dtype={"d": np.float64, "i": np.int64, "u": np.uint64}[_SCALARS[kind]]
    )
    if raw.size != int(np.prod(shape)):
        return None
    array = raw.reshape(shape).astype(info.dtype, copy=raw.dtype.name != info.dtype)
    return Predict(name, {input_name: check_shape(input_name, array, info)}, rows)


_PREDICT_KEYS = frozenset({"signature_name", "instances", "inputs"})


def loads(body: bytes) -> Any:
    """JSON -> Python (orjson; the standard library for what orjson refuses but
    TensorFlow Serving reads: NaN and Infinity)."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ServingError(Code.INVALID_ARGUMENT, f"JSON Parse error: {exc}") from None
    except RecursionError:  # orjson refuses past 1024 levels, then the standard library
        raise ServingError(Code.INVALID_ARGUMENT, "JSON Parse error: nested too deeply") from None


def check_input_names(given: Mapping[str, object], signature: Signature, name: str) -> None:
    """The inputs a request names are the signature's, no more, no fewer (INVALID_ARGUMENT,
    naming what is unknown, what is missing and what the signature takes)."""
    unknown = sorted(set(given) - set(signature.inputs))
    missing = sorted(set(signature.inputs) - set(given))
    if unknown or missing:
        parts = []
        if unknown:
            parts.append(f"unknown input(s) {', '.join(unknown)}")
        if missing:
            parts.append(f"missing input(s) {', '.join(missing)}")
        raise ServingError(
            Code.INVALID_ARGUMENT,
            f"{'; '.join(parts)}; signature {name!r} takes {', '.join(sorted(signature.inputs))}",
        )


Bounds = Callable[[Signature], Mapping[str, int]]
"""A signature -> the most elements each of its inputs may have (those it bounds)."""


def check_elements(
    arrays: Mapping[str, np.ndarray], max_elements: int, bounds: Mapping[str, int]
) -> None:
    """INVALID_ARGUMENT when the arrays hold more than `max_elements` together, or one more
    than its bound."""
    total = sum(a.size for a in arrays.values())
    if total > max_elements:
        raise ServingError(
            Code.INVALID_ARGUMENT,
            f"the request holds {total} elements; this model server takes at most "
            f"{max_elements} in one request (--max_request_elements)",
        )
    for name, array in arrays.items():
        bound = bounds.get(name)
        if bound is not None and array.size > bound:
            raise ServingError(
                Code.INVALID_ARGUMENT,
                f"input {name!r} holds {array.size} elements; the signature takes at most "
                f"{bound} (max_batch_size rows of its shape)",
            )


def parse_predict(
    body: bytes,
    signatures: Mapping[str, Signature],
    max_elements: int = DEFAULT_MAX_ELEMENTS,
    bounds: Bounds | None = None,
) -> Predict:
    """A :predict body -> the arrays to feed, checked against the signature and the
    element bounds. A body with twice as many commas as any signature may take values
    (`max_elements`, or the sum of a signature's bounds) is refused unread: parsed, each
    number would cost a Python object (32 bytes) before it is counted."""
    limit = max_elements
    if bounds is not None and signatures:  # the most any signature takes, if all bound
        most = 0
        for signature in signatures.values():
            each = bounds(signature)
            if set(each) != set(signature.inputs):
                most = max_elements
                break
            most = max(most, sum(each.values()))
        limit = min(limit, most)
    # a value per comma, rows as objects one more a row, and the envelope's few
    if body.count(b",") > 2 * limit + 2:
        raise ServingError(
            Code.INVALID_ARGUMENT,
            f"the request holds over {limit} values; this model server takes at most that "
            "many in one request (--max_request_elements, the signature's batch bound)",
        )
    try:
        found = _parse_predict(body, signatures)
    except RecursionError:
        raise ServingError(Code.INVALID_ARGUMENT, "the request is nested too deeply") from None
    check_elements(
        found.inputs, max_elements, bounds(signatures[found.signature_name]) if bounds else {}
    )
    return found


def _parse_predict(body: bytes, signatures: Mapping[str, Signature]) -> Predict:
    fast = _fast_predict(body, signatures)
    if fast is not None:
        return fast
    data = loads(body)
    if not isinstance(data, dict):
        raise ServingError(Code.INVALID_ARGUMENT, "the request body must be a JSON object")
    name = data.get("signature_name") or DEFAULT_SIGNATURE
    if not isinstance(name, str) or name not in signatures:
        known = ", ".join(sorted(signatures)) or "none"
        raise ServingError(
            Code.INVALID_ARGUMENT,
            f"Serving signature name: {name!r} not found in signature def (it has {known})",
        )
    signature = signatures[name]
    has_rows, has_columns = "instances" in data, "inputs" in data
    if has_rows and has_columns:
        raise ServingError(
            Code.INVALID_ARGUMENT,
            "Not formatted correctly, expecting only one of 'inputs' or 'instances' keys",
        )
    if not has_rows and not has_columns:
        raise ServingError(Code.INVALID_ARGUMENT, "Missing 'inputs' or 'instances' key")
    given = _rows(data["instances"], signature) if has_rows else _columns(data["inputs"], signature)
    check_input_names(given, signature, name)
    arrays = {k: _array(k, v, signature.inputs[k]) for k, v in given.items()}
    if has_rows:
        sizes = {a.shape[0] if a.ndim else None for a in arrays.values()}
        if len(sizes) != 1 or None in sizes:
            raise ServingError(
                Code.INVALID_ARGUMENT,
                "in 'instances' every input must have the same 0-th dimension; "
                "use 'inputs' (the columnar format) otherwise",
            )
    return Predict(name, arrays, has_rows)


# -- predict answers ------------------------------------------------------------------------


def _json_value(name: str, array: np.ndarray) -> Any:
    if array.dtype == object or array.dtype.kind == "S":
        binary = name.endswith("_bytes")

        def one(v: Any) -> Any:
            raw = v if isinstance(v, bytes) else str(v).encode()
            if binary:
                return {"b64": base64.b64encode(raw).decode()}
            return raw.decode("utf-8", errors="replace")

        return np.vectorize(one, otypes=[object])(array).tolist()
    return array.tolist()


def predict_answer(outputs: Mapping[str, np.ndarray], row_format: bool) -> dict[str, Any]:
    """Outputs -> `{"predictions": ...}` (rows) or `{"outputs": ...}` (columns); a single
    output loses its name, as in TensorFlow Serving."""
    names = sorted(outputs)
    if not row_format:
        if len(names) == 1:
            return {"outputs": _json_value(names[0], outputs[names[0]])}
        return {"outputs": {k: _json_value(k, outputs[k]) for k in names}}
    sizes = {outputs[k].shape[0] if outputs[k].ndim else None for k in names}
    if len(sizes) != 1 or None in sizes:
        raise ServingError(
            Code.INVALID_ARGUMENT,
            "the outputs do not share a 0-th (batch) dimension, so they cannot be answered "
            "as rows; send 'inputs' (the columnar format) instead",
        )
    if len(names) == 1:
        return {"predictions": _json_value(names[0], outputs[names[0]])}
    columns = {k: _json_value(k, outputs[k]) for k in names}
    (size,) = sizes
    return {"predictions": [{k: columns[k][i] for k in names} for i in range(size or 0)]}


def _fast_value(name: str, array: np.ndarray) -> Any:
    if array.dtype == object or array.dtype.kind in "SU":
        return _json_value(name, array)
    return np.ascontiguousarray(array)


def dumps(body: Any) -> bytes:
    """An answer as JSON bytes (orjson; numpy arrays written straight from memory)."""
    return orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)


def dumps_slow(body: Any) -> bytes:
    """TensorFlow Serving writes NaN and Infinity as bare tokens (api_rest.md, "JSON
    conformance"); orjson would write null, so such answers take the standard library."""
    return json.dumps(body, allow_nan=True, separators=(",", ":")).encode()


def predict_body(outputs: Mapping[str, np.ndarray], row_format: bool) -> bytes:
    """`predict_answer` as bytes, without Python numbers in between for numeric outputs."""
    if any(a.dtype.kind in "fc" and not np.isfinite(a).all() for a in outputs.values()):
        return dumps_slow(predict_answer(outputs, row_format))
    names = sorted(outputs)
    if not row_format:
        if len(names) == 1:
            return dumps({"outputs": _fast_value(names[0], outputs[names[0]])})
        return dumps({"outputs": {k: _fast_value(k, outputs[k]) for k in names}})
    sizes = {outputs[k].shape[0] if outputs[k].ndim else None for k in names}
    if len(sizes) != 1 or None in sizes:
        predict_answer(outputs, row_format)  # raises its error
    if len(names) == 1:
        return dumps({"predictions": _fast_value(names[0], outputs[names[0]])})
    columns = {k: _fast_value(k, outputs[k]) for k in names}
    (size,) = sizes
    return dumps({"predictions": [{k: columns[k][i] for k in names} for i in range(size or 0)]})


# -- status and metadata ---------------------------------------------------------------------


@dataclass(frozen=True)
class VersionStatus:
    version: int
    state: str
    """START, LOADING, AVAILABLE, UNLOADING or END (TensorFlow Serving's states)."""
    error_code: str = "OK"
    error_message: str = ""


def status_answer(
    model: str, versions: list[VersionStatus], wanted: int | None = None
) -> dict[str, Any]:
    """GetModelStatusResponse as JSON: every version, or the one asked for."""
    chosen = [v for v in versions if wanted is None or v.version == wanted]
    if not chosen:
        if wanted is None:
            raise ServingError(Code.NOT_FOUND, f"Could not find any versions of model {model}")
        raise ServingError(Code.NOT_FOUND, f"Could not find version {wanted} of model {model}")
    return {
        "model_version_status": [
            {
                "version": str(v.version),
                "state": v.state,
                "status": {"error_code": v.error_code, "error_message": v.error_message},
            }
            for v in sorted(chosen, key=lambda v: v.version, reverse=True)
        ]
    }


@dataclass(frozen=True)
class ModelInfo:
    """A loaded version as the metadata answer shows it."""

    version: int
    signatures: dict[str, Signature] = field(default_factory=dict)


def metadata_answer(model: str, info: ModelInfo) -> dict[str, Any]:
    """GetModelMetadataResponse as JSON (the `signature_def` metadata)."""
    return {
        "model_spec": {"name": model, "signature_name": "", "version": str(info.version)},
        "metadata": {
            "signature_def": {
                "signature_def": {k: s.proto() for k, s in sorted(info.signatures.items())}
            }
        },
    }
