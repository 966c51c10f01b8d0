"""TensorFlow Serving's gRPC messages on the wire, as pure functions: request bytes in,
numpy arrays out; outputs back to response bytes. No TensorFlow, no grpcio and no generated
code here, so it is table-tested (tests/unit/test_serving_grpc.py checks each message
against the `tensorflow-serving-api` package's own classes).

Why by hand rather than with generated classes: the messages are few and small (their
field numbers are the interface; protobuf's wire format is public), a tensor's
`tensor_content` becomes an array without a copy (`np.frombuffer`, where aligned), and
the package that holds the generated classes, `tensorflow-serving-api`, requires `tensorflow`, which
would install TensorFlow a second time beside `tensorflow-cpu`. The tests use that
package (installed without its dependencies) as the client a user would write.

    PredictRequest        {1 model_spec, 2 inputs: map<string, TensorProto>, 3 output_filter}
    PredictResponse       {1 outputs: map<string, TensorProto>, 2 model_spec}
    ModelSpec             {1 name, 2 version: Int64Value{1}, 3 signature_name, 4 version_label}
    ClassificationRequest {1 model_spec, 2 input: Input}       (RegressionRequest the same)
    Input                 {1 example_list: {1 examples}, 2 example_list_with_context:
                           {1 examples, 2 context}}
    TensorProto           {1 dtype, 2 tensor_shape: {2 dim: {1 size}, 3 unknown_rank},
                           4 tensor_content, 5 float_val, 6 double_val, 7 int_val,
                           8 string_val, 10 int64_val, 11 bool_val, 13 half_val,
                           16 uint32_val, 17 uint64_val}
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from tfkube.serving._rest import (
    DEFAULT_MAX_ELEMENTS,
    DEFAULT_MAX_REQUEST_BYTES,
    Code,
    ServingError,
    Signature,
    TensorInfo,
    VersionStatus,
)

# -- the wire format ------------------------------------------------------------------------

VARINT, FIXED64, BYTES, FIXED32 = 0, 1, 2, 5


def _malformed(what: str) -> ServingError:
    return ServingError(Code.INVALID_ARGUMENT, f"malformed request: {what}")


def read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """The varint at `pos` -> (value, the position after it); at most 64 bits (ten
    bytes), as protobuf's own parsers read them."""
    end = len(buf)
    if pos < end and buf[pos] < 0x80:  # one byte: most tags and lengths
        return buf[pos], pos + 1
    result = shift = 0
    while True:
        if pos >= end:
            raise _malformed("a truncated varint")
        if shift > 63:
            raise _malformed("a varint longer than ten bytes")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if result >> 64:
                raise _malformed("a varint over 64 bits")
            return result, pos
        shift += 7


def fields(buf: bytes | memoryview) -> Iterator[tuple[int, int, int | memoryview]]:
    """Each (field number, wire type, value) of a message: an int for varints and fixed
    numbers (their raw bits), a memoryview for length-delimited ones."""
    view = memoryview(buf)
    pos, end = 0, len(view)
    while pos < end:
        key, pos = read_varint(view, pos)
        number, kind = key >> 3, key & 7
        if number == 0:
            raise _malformed("field number 0")
        if kind == VARINT:
            value, pos = read_varint(view, pos)
            yield number, kind, value
        elif kind == BYTES:
            size, pos = read_varint(view, pos)
            if pos + size > end:
                raise _malformed("a truncated field")
            yield number, kind, view[pos : pos + size]
            pos += size
        elif kind == FIXED64:
            if pos + 8 > end:
                raise _malformed("a truncated field")
            yield number, kind, int.from_bytes(view[pos : pos + 8], "little")
            pos += 8
        elif kind == FIXED32:
            if pos + 4 > end:
                raise _malformed("a truncated field")
            yield number, kind, int.from_bytes(view[pos : pos + 4], "little")
            pos += 4
        else:  # 3 and 4 (groups: in no message served here), 6 and 7 (none)
            raise _malformed(f"wire type {kind}")


def _bytes(value: int | memoryview) -> memoryview:
    if not isinstance(value, memoryview):
        raise _malformed("a number where a message or string was expected")
    return value


def _int(value: int | memoryview) -> int:
    if isinstance(value, memoryview):
        raise _malformed("a message where a number was expected")
    return value


def _text(value: int | memoryview) -> str:
    try:
        return str(_bytes(value), "utf-8")
    except UnicodeDecodeError:
        raise _malformed("a string that is not UTF-8") from None


def _signed64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


_ONE_BYTE = [bytes([v]) for v in range(0x80)]
"""The varints of 0-127 (most tags, lengths and dims of a small message): made once."""


def varint(value: int) -> bytes:
    """`value` as a varint (a negative one as its 64-bit two's complement: 10 bytes)."""
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def tag(number: int, kind: int) -> bytes:
    return varint((number << 3) | kind)


def length_delimited(number: int, payload: bytes) -> bytes:
    return tag(number, BYTES) + varint(len(payload)) + payload


def varint_field(number: int, value: int) -> bytes:
    return tag(number, VARINT) + varint(value) if value else b""


def text_field(number: int, value: str) -> bytes:
    return length_delimited(number, value.encode()) if value else b""


# -- ModelSpec --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpec:
    """Which model, version (or label) and signature a request names."""

    name: str = ""
    version: int | None = None
    label: str = ""
    signature_name: str = ""


def decode_spec(buf: bytes | memoryview) -> ModelSpec:
    name, version, label, signature = "", None, "", ""
    for number, _, value in fields(buf):
        if number == 1:
            name = _text(value)
        elif number == 2:  # google.protobuf.Int64Value {1: value}
            version = 0
            for inner, _, v in fields(_bytes(value)):
                if inner == 1:
                    version = _signed64(_int(v))
        elif number == 3:
            signature = _text(value)
        elif number == 4:
            label = _text(value)
    return ModelSpec(name, version, label, signature)


def encode_spec(name: str, version: int | None, signature_name: str = "") -> bytes:
    out = text_field(1, name)
    if version is not None:
        out += length_delimited(2, varint_field(1, version))
    return out + text_field(3, signature_name)


# -- tensors ----------------------------------------------------------------------------------

DT: Mapping[int, str] = {
    1: "float32",
    2: "float64",
    3: "int32",
    4: "uint8",
    5: "int16",
    6: "int8",
    7: "string",
    9: "int64",
    10: "bool",
    17: "uint16",
    19: "float16",
    22: "uint32",
    23: "uint64",
}
"""TensorFlow's DataType enum -> the dtype name tfkube uses (TensorInfo.dtype)."""
DT_OF: Mapping[str, int] = {v: k for k, v in DT.items()}

MAX_RANK = 32
"""The most dimensions a tensor may have here (numpy's own bound of old; TensorFlow's is
254): a shape with more is refused before anything is made of it."""

_FIXED_VALUES = {5: 4, 6: 8}
"""float_val and double_val: fixed32 and fixed64 numbers (packed or one by one)."""
_VARINT_VALUES = (7, 10, 11, 13, 16, 17)
"""int_val, int64_val, bool_val, half_val, uint32_val, uint64_val: varints."""


def _varints(buf: memoryview) -> np.ndarray:
    """Packed varints -> uint64 (numpy throughout: no Python int per number; one over 64
    bits is malformed, as `read_varint` says)."""
    raw = np.frombuffer(buf, dtype=np.uint8)
    if raw.size == 0:
        return np.zeros(0, np.uint64)
    if raw[-1] >= 0x80:
        raise _malformed("a truncated varint")
    ends = np.flatnonzero(raw < 0x80)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = ends - starts + 1
    if int(lengths.max()) > 10:
        raise _malformed("a varint longer than ten bytes")
    if np.any(raw[ends[lengths == 10]] > 1):
        raise _malformed("a varint over 64 bits")
    out = np.zeros(ends.size, np.uint64)
    for k in range(int(lengths.max())):
        has = lengths > k
        part = (raw[starts[has] + k] & 0x7F).astype(np.uint64)
        out[has] |= part << np.uint64(7 * k)
    return out


def _count_varints(buf: memoryview) -> int:
    return int(np.count_nonzero(np.frombuffer(buf, dtype=np.uint8) < 0x80))


@dataclass
class _Tensor:
    dtype: int = 0
    shape: list[int] | None = None
    content: memoryview | None = None
    varints: dict[int, list[memoryview | int]] = field(default_factory=dict)
    fixed: dict[int, list[memoryview | int]] = field(default_factory=dict)
    strings: list[bytes] = field(default_factory=list)
    counted: int = 0
    """Values seen so far in the repeated fields (packed ones counted without reading)."""


def _too_many(elements: int, limit: int, what: str) -> ServingError:
    return ServingError(
        Code.INVALID_ARGUMENT,
        f"{what} holds {elements} elements; this model server takes at most {limit} in one "
        "request (--max_request_elements, and the signature's batch bound)",
    )


def _read_shape(buf: memoryview) -> list[int] | None:
    dims: list[int] = []
    unknown = False
    for inner, _, v in fields(buf):
        if inner == 2:  # Dim {1: size}; a size of 0 is not on the wire
            if len(dims) >= MAX_RANK:
                raise ServingError(
                    Code.INVALID_ARGUMENT,
                    f"a tensor of more than {MAX_RANK} dimensions",
                )
            size = 0
            for dim_field, _, d in fields(_bytes(v)):
                if dim_field == 1:
                    size = _signed64(_int(d))
            dims.append(size)
        elif inner == 3:
            unknown = bool(_int(v))
    return None if unknown else dims


def decode_tensor(buf: bytes | memoryview, max_elements: int = DEFAULT_MAX_ELEMENTS) -> np.ndarray:
    """A TensorProto -> an array (numbers without a copy where it came as
    `tensor_content` at an address aligned for its dtype; strings as an object array of
    bytes). INVALID_ARGUMENT for a malformed tensor or one of more than `max_elements`
    elements (its shape's or its values'), checked before any array is made: TensorFlow's
    rule that one value stands for all (a shape of a billion and one `float_val`) cannot
    allocate more, nor a shape whose product passes int64."""
    t = _Tensor()

    def count(more: int) -> None:
        t.counted += more
        if t.counted > max_elements:
            raise _too_many(t.counted, max_elements, "a tensor's values")

    for number, kind, value in fields(buf):
        if number == 1:
            t.dtype = _int(value)
        elif number == 2:
            t.shape = _read_shape(_bytes(value))
        elif number == 4:
            t.content = _bytes(value)
        elif number == 8:
            count(1)
            t.strings.append(bytes(_bytes(value)))
        elif number in _FIXED_VALUES:
            width = _FIXED_VALUES[number]
            if kind == BYTES:
                assert isinstance(value, memoryview)
                if len(value) % width:
                    raise _malformed(f"packed field {number} of {len(value)} bytes")
                count(len(value) // width)
            elif kind != (FIXED32 if width == 4 else FIXED64):
                raise _malformed(f"field {number} of wire type {kind}")
            else:
                count(1)
            t.fixed.setdefault(number, []).append(value)
        elif number in _VARINT_VALUES:
            if kind == BYTES:
                assert isinstance(value, memoryview)
                count(_count_varints(value))
            elif kind != VARINT:
                raise _malformed(f"field {number} of wire type {kind}")
            else:
                count(1)
            t.varints.setdefault(number, []).append(value)
    return _tensor_array(t, max_elements)


def _fixed(t: _Tensor, number: int, item: str) -> np.ndarray:
    """A repeated fixed-width field's values (packed or not) as an array."""
    width = np.dtype(item).itemsize
    chunks = [
        bytes(p) if isinstance(p, memoryview) else p.to_bytes(width, "little")
        for p in t.fixed.get(number, [])
    ]
    return np.frombuffer(b"".join(chunks), dtype=np.dtype(item).newbyteorder("<"))


def _repeated(t: _Tensor, number: int) -> np.ndarray:
    """A repeated varint field's values (packed or not) as uint64."""
    parts = [
        _varints(p) if isinstance(p, memoryview) else np.array([p], np.uint64)
        for p in t.varints.get(number, [])
    ]
    return np.concatenate(parts) if parts else np.zeros(0, np.uint64)


def _tensor_array(t: _Tensor, max_elements: int) -> np.ndarray:
    dtype = DT.get(t.dtype)
    if dtype is None:
        raise ServingError(Code.INVALID_ARGUMENT, f"a tensor of an unsupported dtype ({t.dtype})")
    if t.shape is None:
        raise ServingError(Code.INVALID_ARGUMENT, "a tensor of unknown rank")
    if any(d < 0 for d in t.shape):
        raise ServingError(Code.INVALID_ARGUMENT, "a tensor with a negative dimension")
    size = 1
    for d in t.shape:  # Python's integers: a product past int64 is seen, not wrapped
        size *= d
    if size > max_elements:
        raise _too_many(size, max_elements, f"a tensor of shape {t.shape}")
    flat: np.ndarray
    if dtype == "string":
        flat = np.empty(len(t.strings), dtype=object)
        flat[:] = t.strings
    elif t.content is not None:
        item = np.dtype(dtype).newbyteorder("<")
        if len(t.content) != size * item.itemsize:
            raise ServingError(
                Code.INVALID_ARGUMENT,
                f"tensor_content holds {len(t.content)} bytes; a {dtype} tensor of shape "
                f"{t.shape} needs {size * item.itemsize}",
            )
        array = np.frombuffer(t.content, dtype=item).reshape(t.shape)
        # bytes at an odd place in the request: TensorFlow reads a misaligned array a
        # number at a time (batch 64 of float32: 110 against 74 µs a model call); a
        # copy costs a microsecond
        return array if array.flags.aligned else array.copy()
    elif dtype == "float32":
        flat = _fixed(t, 5, "float32")
    elif dtype == "float64":
        flat = _fixed(t, 6, "float64")
    elif dtype == "float16":
        flat = _repeated(t, 13).astype(np.uint16).view(np.float16)
    elif dtype == "int64":
        flat = _repeated(t, 10).view(np.int64)
    elif dtype == "bool":
        flat = _repeated(t, 11).astype(bool)
    elif dtype == "uint32":
        flat = _repeated(t, 16).astype(np.uint32)
    elif dtype == "uint64":
        flat = _repeated(t, 17)
    else:  # int32, int16, int8, uint8, uint16 travel in int_val
        flat = _repeated(t, 7).astype(np.uint32).view(np.int32).astype(dtype)
    if flat.size == size:
        return flat.reshape(t.shape)
    if flat.size == 1 and size > 1:  # one value stands for all (TensorFlow's rule)
        return np.full(t.shape, flat[0], dtype=flat.dtype)
    raise ServingError(
        Code.INVALID_ARGUMENT,
        f"a {dtype} tensor of shape {t.shape} holds {flat.size} values",
    )


def encode_shape(shape: Sequence[int | None] | None) -> bytes:
    if shape is None:
        return varint_field(3, 1)
    return b"".join(length_delimited(2, varint_field(1, -1 if d is None else d)) for d in shape)


def encode_tensor(array: np.ndarray) -> bytes:
    """An array -> TensorProto bytes (numbers as `tensor_content`, strings as
    `string_val`)."""
    if array.dtype == object or array.dtype.kind in "SU":
        dtype = DT_OF["string"]
        values = b"".join(
            length_delimited(8, v if isinstance(v, bytes) else str(v).encode())
            for v in array.reshape(-1)
        )
    else:
        name = array.dtype.name
        if name not in DT_OF:
            raise ServingError(Code.INTERNAL, f"an output of dtype {name} cannot be answered")
        dtype = DT_OF[name]
        data = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
        values = length_delimited(4, data)
    return varint_field(1, dtype) + length_delimited(2, encode_shape(array.shape)) + values


# -- Predict ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PredictCall:
    spec: ModelSpec
    inputs: dict[str, np.ndarray]
    output_filter: tuple[str, ...] = ()


MAX_NAMES = 1024
"""The most distinct input names, and output_filter entries, one request may give."""


@dataclass(frozen=True)
class PredictParts:
    """A PredictRequest read but for its tensors: each input's TensorProto still as bytes,
    so the model's signature can bound them before any array is made."""

    spec: ModelSpec
    tensors: dict[str, memoryview]
    """Input name -> its TensorProto (a name given twice: the last wins, protobuf's rule
    for a map)."""
    output_filter: tuple[str, ...] = ()


def _map_entry(buf: memoryview) -> tuple[str, memoryview]:
    key, value = "", memoryview(b"")
    for number, _, v in fields(buf):
        if number == 1:
            key = _text(v)
        elif number == 2:
            value = _bytes(v)
    return key, value


def predict_parts(buf: bytes | memoryview) -> PredictParts:
    spec = ModelSpec()
    tensors: dict[str, memoryview] = {}
    wanted: list[str] = []
    for number, _, value in fields(buf):
        if number == 1:
            spec = decode_spec(_bytes(value))
        elif number == 2:
            key, tensor = _map_entry(_bytes(value))
            if key not in tensors and len(tensors) >= MAX_NAMES:
                raise ServingError(
                    Code.INVALID_ARGUMENT, f"a request naming more than {MAX_NAMES} inputs"
                )
            tensors[key] = tensor
        elif number == 3:
            if len(wanted) >= MAX_NAMES:
                raise ServingError(
                    Code.INVALID_ARGUMENT,
                    f"an output_filter of more than {MAX_NAMES} names",
                )
            wanted.append(_text(value))
    return PredictParts(spec, tensors, tuple(wanted))


def decode_inputs(
    tensors: Mapping[str, memoryview],
    max_elements: int = DEFAULT_MAX_ELEMENTS,
    bounds: Mapping[str, int] | None = None,
) -> dict[str, np.ndarray]:
    """The inputs as arrays: all of them together at most `max_elements` elements, and
    each at most its bound in `bounds` (what the signature allows: max batch x a row)."""
    inputs: dict[str, np.ndarray] = {}
    left = max_elements
    for key, tensor in tensors.items():
        limit = left if bounds is None or key not in bounds else min(left, bounds[key])
        inputs[key] = decode_tensor(tensor, limit)
        left -= inputs[key].size
    return inputs


def decode_predict(
    buf: bytes | memoryview, max_elements: int = DEFAULT_MAX_ELEMENTS
) -> PredictCall:
    parts = predict_parts(buf)
    return PredictCall(parts.spec, decode_inputs(parts.tensors, max_elements), parts.output_filter)


def encode_predict_response(
    name: str, version: int, signature_name: str, outputs: Mapping[str, np.ndarray]
) -> bytes:
    body = b"".join(
        length_delimited(1, text_field(1, k) + length_delimited(2, encode_tensor(v)))
        for k, v in sorted(outputs.items())
    )
    return body + length_delimited(2, encode_spec(name, version, signature_name))


def filtered(outputs: Mapping[str, np.ndarray], wanted: Sequence[str]) -> dict[str, np.ndarray]:
    """The outputs a request's `output_filter` names (all of them when it names none)."""
    if not wanted:
        return dict(outputs)
    unknown = sorted(set(wanted) - set(outputs))
    if unknown:
        raise ServingError(
            Code.INVALID_ARGUMENT,
            f"output tensor alias not found in signature: {', '.join(unknown)}",
        )
    return {k: outputs[k] for k in wanted}


# -- Classify and Regress ---------------------------------------------------------------------


@dataclass(frozen=True)
class ExamplesCall:
    spec: ModelSpec
    examples: list[bytes]
    """Each tf.Example serialized; with a context, the context's bytes before each
    example's (protobuf merges concatenated messages: the example's features win)."""


def decode_examples_request(
    buf: bytes | memoryview,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
    max_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
) -> ExamplesCall:
    """INVALID_ARGUMENT past `max_elements` examples, or when the examples with their
    context copied before each would make more than `max_bytes` (a context is one field
    on the wire but a copy per example: a megabyte's context and a million empty
    examples would make a terabyte)."""
    spec = ModelSpec()
    examples: list[bytes] = []
    budget = max_bytes
    made = 0
    for number, _, value in fields(buf):
        if number == 1:
            spec = decode_spec(_bytes(value))
        elif number == 2:
            for kind, _, listed in fields(_bytes(value)):
                context = b""
                found: list[bytes] = []  # bytes, not views: a view costs 184 bytes
                for inner, _, v in fields(_bytes(listed)):
                    if inner == 1:
                        found.append(bytes(_bytes(v)))
                        if len(examples) + len(found) > max_elements:
                            raise _too_many(len(examples) + len(found), max_elements, "Input")
                    elif inner == 2 and kind == 2:
                        context = bytes(_bytes(v))
                made += len(context) * len(found) + sum(len(e) for e in found)
                if made > budget:
                    raise ServingError(
                        Code.INVALID_ARGUMENT,
                        f"the examples with their context make over {budget} bytes (the "
                        "context is copied before each example); send fewer examples or "
                        "a smaller context",
                    )
                examples.extend([context + e for e in found] if context else found)
    if not examples:
        raise ServingError(Code.INVALID_ARGUMENT, "Input is empty")
    return ExamplesCall(spec, examples)


def encode_classify_response(
    name: str,
    version: int,
    signature_name: str,
    classes: np.ndarray | None,
    scores: np.ndarray | None,
) -> bytes:
    """ClassificationResponse: one Classifications per example, a Class per column
    (a label from `classes`, a score from `scores`; either may be missing)."""
    rows = (classes if classes is not None else scores).shape[0]  # type: ignore[union-attr]
    out = []
    for i in range(rows):
        cols = (classes if classes is not None else scores).shape[1]  # type: ignore[union-attr]
        parts = []
        for j in range(cols):
            one = b""
            if classes is not None:
                label = classes[i, j]
                one += text_field(1, label.decode() if isinstance(label, bytes) else str(label))
            if scores is not None:
                one += tag(2, FIXED32) + struct.pack("<f", float(scores[i, j]))
            parts.append(length_delimited(1, one))
        out.append(length_delimited(1, b"".join(parts)))
    result = length_delimited(1, b"".join(out))
    return result + length_delimited(2, encode_spec(name, version, signature_name))


def encode_regress_response(
    name: str, version: int, signature_name: str, values: np.ndarray
) -> bytes:
    flat = values.reshape(values.shape[0], -1)
    if flat.shape[1] != 1:
        raise ServingError(
            Code.INVALID_ARGUMENT,
            f"Expected output Tensor shape to be either [batch_size] or [batch_size, 1] "
            f"but got {list(values.shape)}",
        )
    rows = b"".join(
        length_delimited(1, tag(1, FIXED32) + struct.pack("<f", float(v))) for v in flat[:, 0]
    )
    return length_delimited(1, rows) + length_delimited(
        2, encode_spec(name, version, signature_name)
    )


# -- metadata and status -----------------------------------------------------------------------


def decode_metadata_request(buf: bytes | memoryview) -> tuple[ModelSpec, list[str]]:
    spec, wanted = ModelSpec(), list[str]()
    for number, _, value in fields(buf):
        if number == 1:
            spec = decode_spec(_bytes(value))
        elif number == 2:
            if len(wanted) >= MAX_NAMES:
                raise ServingError(
                    Code.INVALID_ARGUMENT, f"a metadata_field of more than {MAX_NAMES} names"
                )
            wanted.append(_text(value))
    return spec, wanted


def decode_status_request(buf: bytes | memoryview) -> ModelSpec:
    for number, _, value in fields(buf):
        if number == 1:
            return decode_spec(_bytes(value))
    return ModelSpec()


def _tensor_info(info: TensorInfo) -> bytes:
    return (
        text_field(1, info.tensor_name)
        + varint_field(2, DT_OF.get(info.dtype, 0))
        + length_delimited(3, encode_shape(info.shape))
    )


def _signature_def(signature: Signature) -> bytes:
    def entries(number: int, infos: Mapping[str, TensorInfo]) -> bytes:
        return b"".join(
            length_delimited(number, text_field(1, k) + length_delimited(2, _tensor_info(v)))
            for k, v in sorted(infos.items())
        )

    return (
        entries(1, signature.inputs)
        + entries(2, signature.outputs)
        + text_field(3, signature.method_name)
    )


SIGNATURE_DEF_MAP = "type.googleapis.com/tensorflow.serving.SignatureDefMap"


def encode_metadata_response(name: str, version: int, signatures: Mapping[str, Signature]) -> bytes:
    """GetModelMetadataResponse with `signature_def` (an Any holding a SignatureDefMap)."""
    sig_map = b"".join(
        length_delimited(1, text_field(1, k) + length_delimited(2, _signature_def(s)))
        for k, s in sorted(signatures.items())
    )
    any_value = text_field(1, SIGNATURE_DEF_MAP) + length_delimited(2, sig_map)
    entry = text_field(1, "signature_def") + length_delimited(2, any_value)
    return length_delimited(1, encode_spec(name, version)) + length_delimited(2, entry)


STATES = {"START": 10, "LOADING": 20, "AVAILABLE": 30, "UNLOADING": 40, "END": 50}
ERROR_CODES = {
    "OK": 0,
    "CANCELLED": 1,
    "UNKNOWN": 2,
    "INVALID_ARGUMENT": 3,
    "DEADLINE_EXCEEDED": 4,
    "NOT_FOUND": 5,
    "ALREADY_EXISTS": 6,
    "PERMISSION_DENIED": 7,
    "RESOURCE_EXHAUSTED": 8,
    "FAILED_PRECONDITION": 9,
    "ABORTED": 10,
    "OUT_OF_RANGE": 11,
    "UNIMPLEMENTED": 12,
    "INTERNAL": 13,
    "UNAVAILABLE": 14,
    "DATA_LOSS": 15,
    "UNAUTHENTICATED": 16,
}
"""tensorflow.error.Code (a version status's error_code)."""


def encode_status_response(statuses: Sequence[VersionStatus]) -> bytes:
    out = b""
    for v in sorted(statuses, key=lambda v: v.version, reverse=True):
        status = varint_field(1, ERROR_CODES.get(v.error_code, 2)) + text_field(2, v.error_message)
        one = varint_field(1, v.version) + varint_field(2, STATES.get(v.state, 0))
        out += length_delimited(1, one + length_delimited(3, status))
    return out


# -- warm-up records ---------------------------------------------------------------------------


def prediction_log(buf: bytes | memoryview) -> tuple[str, memoryview] | None:
    """A PredictionLog -> (its kind: predict, classify or regress; its request's bytes),
    or None for a kind warm-up does not replay."""
    kinds = {6: "predict", 2: "classify", 3: "regress"}
    for number, _, value in fields(buf):
        if number in kinds:
            for inner, _, request in fields(_bytes(value)):
                if inner == 1:
                    return kinds[number], _bytes(request)
            return kinds[number], memoryview(b"")
    return None


def tfrecords(data: bytes) -> Iterator[memoryview]:
    """The records of a TFRecord file (length, its CRC, data, its CRC: the CRCs are not
    checked; a truncated tail ends the file)."""
    view = memoryview(data)
    pos = 0
    while pos + 12 <= len(view):
        (size,) = struct.unpack_from("<Q", view, pos)
        start = pos + 12
        if start + size + 4 > len(view):
            return
        yield view[start : start + size]
        pos = start + size + 4
