"""Hostile inputs against a real model server (`python -m tfkube.serving`, a real SavedModel,
batching on, its secret known: the attacker is a member the platform's proxy lets through,
or a pod that reaches the model server's Service). Each attack must end as TensorFlow
Serving's INVALID_ARGUMENT (RESOURCE_EXHAUSTED for a message over the size bound) with a
clear message, the peak resident memory of the server process while it is answered must
stay within a generous bound (the kernel's high-water mark, `VmHWM`, reset before each
attack through `/proc/<pid>/clear_refs`), and the next good request must be answered.

On the code before this test (the `servsec` branch's first commit says which failed how):
gRPC messages had no size bound; TensorFlow's fill rule (one `float_val` for a shape of
2^27 x 2) allocated the whole array before the batch bound refused it; a shape whose
product passes int64, 100,000 dimensions, a 70-bit dimension and a fixed64 `float_val`
answered INTERNAL (numpy's and Python's own exceptions); two million tiny strings, a
Classify context copied before each of thousands of examples and REST rows as objects
allocated hundreds of megabytes before anything was refused; REST bodies had no size
bound; a JSON body nested 100,000 deep answered 500 (a RecursionError); and
GetModelMetadata echoed every `metadata_field` it was sent in its error, which the client
dropped ("Stream removed"). The malformed-wire cases at the end of GRPC_ATTACKS were
refused rightly before too: they are kept so they stay so.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest

from tf.test_model_server import AUTH, Server, build_model, impl, running
from tfkube.serving._protowire import (
    BYTES,
    FIXED64,
    encode_spec,
    encode_tensor,
    length_delimited,
    tag,
    text_field,
    varint,
    varint_field,
)

pytestmark = pytest.mark.tf
__all__ = ["impl"]  # the fixture: every attack against both model servers

MAX_BYTES = 4 * 2**20
"""The server's --max_request_bytes here (grpcio's own default, so the test is cheap)."""
PEAK_GROWTH = 96 * 2**20
"""The most the server's resident memory may rise while it answers one attack: generous
(a request of MAX_BYTES, copied a few times, fits), far below what each attack made the
old code allocate."""
PREDICT = "/tensorflow.serving.PredictionService/Predict"
CLASSIFY = "/tensorflow.serving.PredictionService/Classify"
METADATA = "/tensorflow.serving.PredictionService/GetModelMetadata"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, impl: str) -> Iterator[Server]:
    base = tmp_path_factory.mktemp(f"models-{impl}")
    build_model(base, 1)
    with running(
        base, "--enable_batching", f"--max_request_bytes={MAX_BYTES}", versions=1, impl=impl
    ) as started:
        yield started


@pytest.fixture(scope="module")
def channel(server: Server) -> Iterator[grpc.Channel]:
    options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    with grpc.insecure_channel(server.grpc_address, options=options) as ch:
        yield ch


# -- building messages by hand (what a hostile client sends) --------------------------------


def shape(*dims: int) -> bytes:
    return b"".join(length_delimited(2, varint_field(1, d)) for d in dims)


def tensor(dtype: int, dims: bytes, values: bytes = b"") -> bytes:
    return varint_field(1, dtype) + length_delimited(2, dims) + values


def predict(x: bytes, spec: bytes | None = None) -> bytes:
    spec = encode_spec("m", None, "serving_default") if spec is None else spec
    return length_delimited(1, spec) + length_delimited(
        2, text_field(1, "x") + length_delimited(2, x)
    )


FLOAT, STRING = 1, 7
ONE_FLOAT = tag(5, 5) + b"\x00\x00\x80\x3f"  # float_val: 1.0
GOOD = predict(encode_tensor(np.ones((1, 2), np.float32)))


def examples_request(context: bytes, count: int) -> bytes:
    """ClassificationRequest of `count` one-byte examples after one `context`."""
    listed = length_delimited(1, b"e") * count + length_delimited(2, context)
    spec = encode_spec("m", None, "classify")
    return length_delimited(1, spec) + length_delimited(2, length_delimited(2, listed))


GRPC_ATTACKS: dict[str, tuple[Callable[[], bytes], grpc.StatusCode, str]] = {
    # old: np.full made 2^28 float32 (1 GiB) before the batcher refused 2^27 rows
    "fill-rule": (
        lambda: predict(tensor(FLOAT, shape(2**27, 2), ONE_FLOAT)),
        grpc.StatusCode.INVALID_ARGUMENT,
        "at most 512",
    ),
    # old: INTERNAL ("Unable to allocate 32.0 TiB")
    "fill-rule-beyond-memory": (
        lambda: predict(tensor(FLOAT, shape(2**40, 2), ONE_FLOAT)),
        grpc.StatusCode.INVALID_ARGUMENT,
        "elements",
    ),
    # old: the product wrapped to 0 in int64, matched the empty content; INTERNAL
    "product-past-int64": (
        lambda: predict(tensor(FLOAT, shape(2**32, 2**32, 2), length_delimited(4, b""))),
        grpc.StatusCode.INVALID_ARGUMENT,
        "elements",
    ),
    # old: INTERNAL (numpy's 32- or 64-dimension bound, a ValueError)
    "100k-dimensions": (
        lambda: predict(tensor(FLOAT, shape(*[1] * 100_000), ONE_FLOAT)),
        grpc.StatusCode.INVALID_ARGUMENT,
        "more than 32 dimensions",
    ),
    # old: INTERNAL (OverflowError: a 70-bit dimension into int64)
    "70-bit-dimension": (
        lambda: predict(
            tensor(FLOAT, length_delimited(2, tag(1, 0) + b"\xff" * 9 + b"\x7f"), ONE_FLOAT)
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "varint over 64 bits",
    ),
    # old: INTERNAL (OverflowError: a fixed64 float_val into 4 bytes)
    "float-val-as-fixed64": (
        lambda: predict(
            tensor(FLOAT, shape(1, 2), tag(5, FIXED64) + (2**40).to_bytes(8, "little"))
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "wire type 1",
    ),
    # old: 1.9 million memoryviews and bytes (~400 MB) before the dtype was refused
    "millions-of-tiny-strings": (
        lambda: predict(tensor(STRING, shape(1_900_000), (tag(8, BYTES) + b"\x00") * 1_900_000)),
        grpc.StatusCode.INVALID_ARGUMENT,
        "at most 512",
    ),
    # old: the 64 KiB context copied before each of 4,000 examples (256 MB)
    "classify-context-copies": (
        lambda: examples_request(b"c" * 2**16, 4000),
        grpc.StatusCode.INVALID_ARGUMENT,
        "at most 256",
    ),
    # old: 1.3 million Python strings made before the names were refused
    "metadata-millions-of-fields": (
        lambda: length_delimited(1, encode_spec("m", None)) + text_field(2, "a") * 1_300_000,
        grpc.StatusCode.INVALID_ARGUMENT,
        "more than 1024 names",
    ),
    # old: the names echoed whole in the status details (3.9 MB): the client refused
    # them, "Stream removed" (RESOURCE_EXHAUSTED), never seeing the error
    "metadata-long-names": (
        lambda: length_delimited(1, encode_spec("m", None)) + text_field(2, "a" * 2**20) * 3,
        grpc.StatusCode.INVALID_ARGUMENT,
        "characters left out",
    ),
    # old: read whole (no bound on a message), refused only by the batch bound
    "over-max-message": (
        lambda: predict(encode_tensor(np.ones((MAX_BYTES // 8 + 1, 2), np.float32))),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "larger than max",
    ),
    # these were already refused rightly; kept so they stay so
    "negative-length": (
        lambda: tag(1, BYTES) + varint(-1) + b"x",
        grpc.StatusCode.INVALID_ARGUMENT,
        "truncated",
    ),
    "truncated-varint": (lambda: GOOD + b"\x80", grpc.StatusCode.INVALID_ARGUMENT, "truncated"),
    "length-past-the-end": (
        lambda: GOOD + length_delimited(9, b"abc")[:-1],
        grpc.StatusCode.INVALID_ARGUMENT,
        "truncated",
    ),
    "group": (
        lambda: GOOD + tag(9, 3) + tag(9, 4),
        grpc.StatusCode.INVALID_ARGUMENT,
        "wire type 3",
    ),
    "spec-as-a-number": (
        lambda: varint_field(1, 5) + GOOD,
        grpc.StatusCode.INVALID_ARGUMENT,
        "a number where a message",
    ),
    "content-size-mismatch": (
        lambda: predict(tensor(FLOAT, shape(1, 2), length_delimited(4, b"\x00" * 7))),
        grpc.StatusCode.INVALID_ARGUMENT,
        "tensor_content holds 7 bytes",
    ),
}


def _rss(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for {pid}")


class Peak:
    """The server's peak resident memory while a block runs, above its memory before."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def __enter__(self) -> Peak:
        Path(f"/proc/{self.pid}/clear_refs").write_text("5")  # resets VmHWM to VmRSS
        self.before = _rss(self.pid, "VmRSS")
        return self

    def __exit__(self, *exc: object) -> None:
        self.growth = _rss(self.pid, "VmHWM") - self.before


def _good_grpc(channel: grpc.Channel) -> None:
    answer = channel.unary_unary(PREDICT)(GOOD, timeout=30, metadata=AUTH)
    assert b"y" in answer


@pytest.mark.parametrize("attack", list(GRPC_ATTACKS))
def test_grpc_attack_is_refused_in_bounded_memory(
    server: Server, channel: grpc.Channel, attack: str
) -> None:
    make, code, words = GRPC_ATTACKS[attack]
    request = make()
    method = {"classify": CLASSIFY, "metadata": METADATA}.get(attack.split("-")[0], PREDICT)
    _good_grpc(channel)
    with Peak(server.proc.pid) as peak, pytest.raises(grpc.RpcError) as caught:
        channel.unary_unary(method)(request, timeout=60, metadata=AUTH)
    seen = f"{caught.value.code()}: {caught.value.details()} (peak +{peak.growth >> 20} MiB)"
    assert caught.value.code() == code, seen
    assert words in (caught.value.details() or ""), seen
    assert peak.growth < PEAK_GROWTH, seen
    assert server.proc.poll() is None
    _good_grpc(channel)


def test_duplicate_input_keys_the_last_wins(server: Server, channel: grpc.Channel) -> None:
    """protobuf's rule for a map given a key twice; the first may not cost its size (old:
    its 1 GiB was made, then dropped)."""
    first = predict(tensor(FLOAT, shape(2**27, 2), ONE_FLOAT))
    with Peak(server.proc.pid) as peak:
        answer = channel.unary_unary(PREDICT)(first + GOOD, timeout=30, metadata=AUTH)
    assert b"y" in answer
    assert peak.growth < PEAK_GROWTH, f"{peak.growth / 2**20:.0f} MiB"


# -- REST -----------------------------------------------------------------------------------


def _post(server: Server, content: object, **headers: str) -> httpx.Response:
    return httpx.post(
        f"{server.rest}/v1/models/m:predict",
        content=content,  # type: ignore[arg-type]
        headers={**dict(AUTH), **headers},
        timeout=60,
    )


def _good_rest(server: Server) -> None:
    r = _post(server, b'{"instances": [[1.0, 2.0]]}')
    assert r.status_code == 200, r.text
    assert r.json()["predictions"][0]["y"] == [1.0, 2.0]


def _rows_as_objects() -> bytes:
    # old: 200,000 rows parsed into dicts, lists and floats before the batch bound
    return b'{"instances": [' + b",".join([b'{"x": [0.5, 0.5]}'] * 200_000) + b"]}"


def _over_the_bound() -> bytes:
    rows = b",".join([b"[0.25,0.25]"] * (MAX_BYTES // 11 + 1))
    return b'{"inputs": [' + rows + b"]}"


def _streamed() -> Iterator[bytes]:
    yield b'{"inputs": ['
    for _ in range(MAX_BYTES // 2**16 + 2):
        yield b"[0.25,0.25]," * (2**16 // 12)
    yield b"[0.25,0.25]]}"


REST_ATTACKS: dict[str, tuple[Callable[[], object], int, str]] = {
    "rows-as-objects": (_rows_as_objects, 400, "over 512 values"),
    "declared-over-max": (_over_the_bound, 413, f"over {MAX_BYTES} bytes"),
    "streamed-over-max": (_streamed, 413, f"over {MAX_BYTES} bytes"),
    # old: 500, "RecursionError" (orjson refuses, the standard library recursed)
    "nested-100k-deep": (
        lambda: b'{"instances": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        400,
        "nested too deeply",
    ),
    "b64-where-numbers": (
        lambda: b'{"inputs": {"b64": "' + b"QUFB" * 2**18 + b'"}}',
        400,
        "expected DT_FLOAT",
    ),
    "too-many-rows": (
        lambda: b'{"instances": ' + str([[1.0, 2.0]] * 300).encode() + b"}",
        400,
        "at most 512",
    ),
}


@pytest.mark.parametrize("attack", list(REST_ATTACKS))
def test_rest_attack_is_refused_in_bounded_memory(server: Server, attack: str) -> None:
    make, status, words = REST_ATTACKS[attack]
    content = make()
    _good_rest(server)
    with Peak(server.proc.pid) as peak:
        r = _post(server, content)
    seen = f"{r.status_code}: {r.text[:500]} (peak +{peak.growth >> 20} MiB)"
    assert r.status_code == status, seen
    assert words in r.json()["error"], seen
    assert peak.growth < PEAK_GROWTH, seen
    assert server.proc.poll() is None
    _good_rest(server)


def test_attacks_in_parallel_leave_the_server_answering(
    server: Server, channel: grpc.Channel
) -> None:
    """Several threads at once, each attack a few times: the bounds hold per request, and
    the server answers good requests after."""
    errors: list[BaseException] = []
    requests = [GRPC_ATTACKS[k][0]() for k in ("fill-rule", "millions-of-tiny-strings")]

    def attack(request: bytes) -> None:
        try:
            for _ in range(3):
                with pytest.raises(grpc.RpcError):
                    channel.unary_unary(PREDICT)(request, timeout=60, metadata=AUTH)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=attack, args=(r,)) for r in requests * 2]
    with Peak(server.proc.pid) as peak:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    assert not errors, errors
    assert peak.growth < 2 * PEAK_GROWTH, f"{peak.growth / 2**20:.0f} MiB"
    _good_grpc(channel)
    _good_rest(server)
    assert os.path.exists(f"/proc/{server.proc.pid}")


def _until(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.05)


def test_rest_bodies_held_at_once_are_bounded(server: Server) -> None:
    """Clients that each send most of a body of the bound and stall before its end made
    the old server hold all of them, however many (no bound over requests; and there was
    no PENDING_BODIES to import). Now the REST door takes a body's declared size from a
    budget of PENDING_BODIES bounds before reading it, a request past the budget is told
    RESOURCE_EXHAUSTED (429) at once, and when those clients go requests are answered."""
    from tfkube.serving._app import PENDING_BODIES

    host, port = server.rest.removeprefix("http://").split(":")
    head = (
        f"POST /v1/models/m:predict HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: {dict(AUTH)['authorization']}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {MAX_BYTES}\r\n\r\n"
    ).encode()
    slow = []
    try:
        for _ in range(PENDING_BODIES):
            sock = socket.create_connection((host, int(port)), timeout=30)
            slow.append(sock)
            sock.sendall(head + b'{"instances": [')

        def refused() -> bool:
            r = _post(server, b'{"instances": [[1.0, 2.0]]}')
            if r.status_code == 429:
                assert "request bodies already" in r.json()["error"], r.text
                return True
            assert r.status_code == 200, r.text
            return False

        _until(refused, "a request refused while slow bodies hold the budget")
    finally:
        for sock in slow:
            sock.close()
    _until(lambda: _post(server, b'{"instances": [[1.0, 2.0]]}').status_code == 200, "answered")
    _good_rest(server)
