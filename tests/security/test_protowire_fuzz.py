"""`tfkube.serving._protowire`'s parsers fuzzed (pure, no model server): valid requests of
every kind the model server reads, mutated at random (seeded, so a failure is repeatable:
bytes flipped, cut, duplicated, spliced, varints planted), must each decode or raise
ServingError, never another exception, and never make more elements than the bound they
are given. (hypothesis is not a dependency of the project, so this is a seeded loop.)

Found on the old code by this loop (its seeds, 20,000 rounds): OverflowError (a fixed64
`float_val` or a varint over 64 bits, as a dimension or a value: 25 rounds) and ValueError
(a packed `float_val` whose length is not a multiple of 4: 3 rounds), each of which the
model server answered INTERNAL; the tests of tests/security/test_model_server_inputs.py
found the rest.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
import pytest

from tfkube.serving import _protowire as pw
from tfkube.serving._rest import ServingError

BOUND = 4096
"""The elements each parse may make here: small, so a mutated shape is refused quickly."""
ROUNDS = 20000
"""Mutations per parser, shared among its seed messages (about 2 s for all of them)."""


def _tensor_by_values(number: int, kind: int, values: list[int], dtype: int) -> bytes:
    shape = pw.length_delimited(2, pw.length_delimited(2, pw.varint_field(1, len(values))))
    if kind == pw.VARINT:
        packed = b"".join(pw.varint(v) for v in values)
    elif kind == pw.FIXED32:
        packed = b"".join(v.to_bytes(4, "little") for v in values)
    else:
        packed = b"".join(v.to_bytes(8, "little") for v in values)
    return pw.varint_field(1, dtype) + shape + pw.length_delimited(number, packed)


def _predict(*tensors: tuple[str, bytes]) -> bytes:
    out = pw.length_delimited(1, pw.encode_spec("m", 3, "serving_default"))
    for key, t in tensors:
        out += pw.length_delimited(2, pw.text_field(1, key) + pw.length_delimited(2, t))
    return out + pw.text_field(3, "y")


def _examples() -> bytes:
    listed = pw.length_delimited(1, b"\x0a\x02ab") * 3 + pw.length_delimited(2, b"ctx")
    return pw.length_delimited(1, pw.encode_spec("m", None, "classify")) + pw.length_delimited(
        2, pw.length_delimited(2, listed)
    )


TENSORS = [
    pw.encode_tensor(np.arange(6, dtype=np.float32).reshape(2, 3)),
    pw.encode_tensor(np.array([[1, -2]], np.int64)),
    pw.encode_tensor(np.array([b"a", b"bc"], dtype=object)),
    pw.encode_tensor(np.array(2.5, np.float64)),
    _tensor_by_values(5, pw.FIXED32, [0x3F800000, 0], 1),  # packed float_val
    _tensor_by_values(7, pw.VARINT, [1, 2**64 - 1, 3], 3),  # int_val, a negative one
    _tensor_by_values(10, pw.VARINT, [2**63, 5], 9),  # int64_val
    _tensor_by_values(11, pw.VARINT, [1, 0], 10),  # bool_val
    _tensor_by_values(13, pw.VARINT, [0x3C00], 19),  # half_val
    _tensor_by_values(17, pw.VARINT, [2**64 - 1], 23),  # uint64_val
    _tensor_by_values(6, pw.FIXED64, [0], 2),  # double_val
]

PARSERS: dict[str, Callable[[bytes], object]] = {
    "tensor": lambda b: pw.decode_tensor(b, BOUND),
    "predict": lambda b: pw.decode_predict(b, BOUND),
    "examples": lambda b: pw.decode_examples_request(b, BOUND, 2**16),
    "metadata": pw.decode_metadata_request,
    "status": pw.decode_status_request,
    "spec": pw.decode_spec,
    "pw.prediction_log": pw.prediction_log,
}

SEEDS: dict[str, list[bytes]] = {
    "tensor": TENSORS,
    "predict": [_predict(("x", t)) for t in TENSORS[:4]]
    + [_predict(("a", TENSORS[0]), ("b", TENSORS[1]))],
    "examples": [_examples()],
    "metadata": [
        pw.length_delimited(1, pw.encode_spec("m", 1)) + pw.text_field(2, "signature_def")
    ],
    "status": [pw.length_delimited(1, pw.encode_spec("m", 2, "s"))],
    "spec": [pw.encode_spec("m", 2, "s") + pw.text_field(4, "stable")],
    "pw.prediction_log": [
        pw.length_delimited(6, pw.length_delimited(1, _predict(("x", TENSORS[0]))))
    ],
}

PLANTS = [
    pw.varint(2**64 - 1),
    b"\xff" * 10 + b"\x7f",  # a pw.varint past 64 bits
    b"\x80",  # truncated
    pw.varint(2**32) + pw.varint(2**32),
    pw.tag(2, pw.BYTES) + pw.varint(2**40),  # a length far past the end
    pw.tag(1, pw.FIXED64),
    pw.tag(5, pw.FIXED64) + b"\xff" * 8,  # float_val as fixed64
    pw.tag(9, 3),  # a group
    pw.tag(2, pw.BYTES) + b"\x04" + pw.length_delimited(2, pw.varint(2**62)),  # a huge dim
]


def _mutate(data: bytes, rng: random.Random) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        choice = rng.randrange(6)
        at = rng.randint(0, len(buf))
        if choice == 0 and buf:  # flip a byte
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        elif choice == 1:  # cut
            del buf[at:]
        elif choice == 2 and buf:  # duplicate a slice
            start = rng.randrange(len(buf))
            buf[at:at] = buf[start : start + rng.randint(1, 16)]
        elif choice == 3:  # plant a hostile piece
            buf[at:at] = rng.choice(PLANTS)
        elif choice == 4:  # a length byte made larger or smaller
            if buf:
                i = rng.randrange(len(buf))
                buf[i] = (buf[i] + rng.choice((-2, -1, 1, 2, 64))) % 256
        else:  # random bytes
            buf[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    return bytes(buf)


def _size(found: object) -> int:
    if isinstance(found, np.ndarray):
        return int(found.size)
    inputs = getattr(found, "inputs", None)
    if isinstance(inputs, dict):
        return sum(int(a.size) for a in inputs.values())
    return 0


@pytest.mark.parametrize("parser", list(PARSERS))
def test_mutated_messages_parse_or_raise_serving_error(parser: str) -> None:
    parse = PARSERS[parser]
    rng = random.Random(f"tfkube-protowire-{parser}")
    for seed in SEEDS[parser]:
        parse(seed)  # each seed is valid
    rounds = ROUNDS // len(SEEDS[parser]) + 1
    for seed in SEEDS[parser]:
        for i in range(rounds):
            data = _mutate(seed, rng)
            try:
                found = parse(data)
            except ServingError:
                continue
            except Exception as exc:  # the finding: report the exact bytes
                raise AssertionError(
                    f"{parser} round {i}: {type(exc).__name__}: {exc}; {data!r}"
                ) from exc
            assert _size(found) <= BOUND, data


@pytest.mark.parametrize(
    ("number", "kind"),
    [
        (5, pw.FIXED64),
        (6, pw.FIXED32),
        (7, pw.FIXED32),
        (8, pw.VARINT),
        (10, pw.FIXED64),
        (16, pw.FIXED32),
    ],
)
def test_values_of_the_wrong_wire_type_are_malformed(number: int, kind: int) -> None:
    shape = pw.length_delimited(2, pw.length_delimited(2, pw.varint_field(1, 1)))
    value = {pw.VARINT: pw.varint(2**40), pw.FIXED32: b"\x01\x00\x00\x00", pw.FIXED64: b"\xff" * 8}[
        kind
    ]
    with pytest.raises(ServingError, match="malformed request"):
        pw.decode_tensor(pw.varint_field(1, 1) + shape + pw.tag(number, kind) + value)


def test_the_fill_rule_and_strings_are_bounded_before_they_are_made() -> None:
    one = pw.tag(5, pw.FIXED32) + b"\x00\x00\x80\x3f"
    huge = pw.varint_field(1, 1) + pw.length_delimited(
        2,
        pw.length_delimited(2, pw.varint_field(1, 2**40))
        + pw.length_delimited(2, pw.varint_field(1, 2)),
    )
    with pytest.raises(ServingError, match="at most 100 in one request"):
        pw.decode_tensor(huge + one, 100)
    strings = pw.varint_field(1, 7) + (pw.tag(8, pw.BYTES) + b"\x00") * 101
    with pytest.raises(ServingError, match="at most 100"):
        pw.decode_tensor(strings, 100)
    full = pw.decode_tensor(
        pw.varint_field(1, 1)
        + pw.length_delimited(2, pw.length_delimited(2, pw.varint_field(1, 100)))
        + one,
        100,
    )
    assert full.shape == (100,)
    assert (full == 1.0).all()


def test_packed_varints_read_as_one_by_one() -> None:
    rng = random.Random("tfkube-packed")
    values = [0, 1, 127, 128, 2**63, 2**64 - 1] + [rng.randrange(2**64) for _ in range(200)]
    shape = pw.length_delimited(2, pw.length_delimited(2, pw.varint_field(1, len(values))))
    packed = pw.length_delimited(17, b"".join(pw.varint(v) for v in values))
    array = pw.decode_tensor(pw.varint_field(1, 23) + shape + packed)
    assert array.tolist() == values
    too_wide = pw.length_delimited(17, b"\xff" * 9 + b"\x02")  # bit 64 set
    with pytest.raises(ServingError, match="over 64 bits"):
        pw.decode_tensor(pw.varint_field(1, 23) + shape + too_wide)
