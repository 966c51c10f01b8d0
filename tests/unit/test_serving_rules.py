"""The model server's pure decisions, as tables: the version policy (latest N, all,
specific), which versions to load and unload, labels and the traffic split between them,
batching (when a batch runs, padding, TensorFlow Serving's parameter file), and the fast
REST parse (the same arrays as the full one, or a fall back to it). No TensorFlow."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tfkube.serving._batching import (
    Batcher,
    BatchingParameters,
    batch_key,
    check,
    padded_size,
    parse_parameters,
    plan_batch,
)
from tfkube.serving._calls import LONE_BELOW, next_concurrency, runs_here
from tfkube.serving._rest import (
    Code,
    ModelInfo,
    ServingError,
    Signature,
    TensorInfo,
    _fast_predict,
    parse_predict,
    predict_answer,
    predict_body,
)
from tfkube.serving._store import ModelStore, _direct_run
from tfkube.serving._versions import (
    VersionPolicy,
    parse_pairs,
    parse_policy,
    plan_versions,
    split_label,
)

# -- version policy -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "available", "served"),
    [
        pytest.param(VersionPolicy(), [], [], id="nothing-yet"),
        pytest.param(VersionPolicy(), [1, 3, 2], [3], id="latest"),
        pytest.param(VersionPolicy(latest=2), [1, 3, 2], [3, 2], id="latest-2"),
        pytest.param(VersionPolicy(latest=5), [1, 3], [3, 1], id="latest-more-than-there"),
        pytest.param(VersionPolicy(every=True), [2, 1, 3], [3, 2, 1], id="all"),
        pytest.param(VersionPolicy(specific=(1, 3)), [1, 2, 3, 4], [3, 1], id="specific"),
        pytest.param(VersionPolicy(specific=(7,)), [1, 2], [], id="specific-missing"),
        pytest.param(VersionPolicy.one(None), [4, 5], [5], id="one-latest"),
        pytest.param(VersionPolicy.one(4), [4, 5], [4], id="one-pinned"),
    ],
)
def test_policy_serves(policy: VersionPolicy, available: list[int], served: list[int]) -> None:
    assert policy.serve(available) == served


@pytest.mark.parametrize(
    ("text", "policy"),
    [
        ("latest", VersionPolicy()),
        ("latest:3", VersionPolicy(latest=3)),
        ("all", VersionPolicy(every=True)),
        ("specific:2,1,2", VersionPolicy(specific=(1, 2))),
        ("7", VersionPolicy(specific=(7,))),
        (" Latest : 2 ", VersionPolicy(latest=2)),
    ],
)
def test_parse_policy(text: str, policy: VersionPolicy) -> None:
    assert parse_policy(text) == policy


@pytest.mark.parametrize("text", ["latest:0", "specific:", "newest", "all:2", "specific:x"])
def test_parse_policy_refuses(text: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - argparse shows any ValueError's text
        parse_policy(text)


@pytest.mark.parametrize(
    ("wanted", "loaded", "failed", "load", "unload"),
    [
        pytest.param([1], [], [], [1], [], id="first"),
        pytest.param([2], [1], [], [2], [], id="newer-loads-first"),
        pytest.param([2], [1, 2], [], [], [1], id="then-the-older-goes"),
        pytest.param([3], [2], [3], [], [], id="broken-newest-keeps-served"),
        pytest.param([3, 2], [2, 1], [3], [], [1], id="latest-2-broken-newest"),
        pytest.param([3, 2], [1], [], [3, 2], [], id="two-new"),
        pytest.param([], [1, 2], [], [], [1], id="none-wanted-newest-stays"),
        pytest.param([1, 3], [1, 2, 3], [], [], [2], id="specific"),
        pytest.param([4], [1, 2], [4], [], [1], id="broken-keeps-only-the-newest"),
    ],
)
def test_plan_versions(
    wanted: list[int], loaded: list[int], failed: list[int], load: list[int], unload: list[int]
) -> None:
    assert plan_versions(wanted, loaded, failed) == (load, unload)


@pytest.mark.parametrize(
    ("text", "pairs"),
    [("stable=1,canary=2", {"stable": 1, "canary": 2}), ("", {}), (" a = 3 ,", {"a": 3})],
)
def test_parse_pairs(text: str, pairs: dict[str, int]) -> None:
    assert parse_pairs(text, "a label") == pairs


@pytest.mark.parametrize("text", ["stable", "stable=x", "=1", "a=1,a=2", "a=-1"])
def test_parse_pairs_refuses(text: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011
        parse_pairs(text, "a label")


LABELS = {"stable": 1, "canary": 2}


@pytest.mark.parametrize(
    ("weights", "available", "draw", "label"),
    [
        pytest.param({}, {1, 2}, 0.5, None, id="no-split"),
        pytest.param({"stable": 90, "canary": 10}, {1, 2}, 0.0, "canary", id="low-canary"),
        pytest.param({"stable": 90, "canary": 10}, {1, 2}, 0.09, "canary", id="canary-edge"),
        pytest.param({"stable": 90, "canary": 10}, {1, 2}, 0.1, "stable", id="stable"),
        pytest.param({"stable": 90, "canary": 10}, {1, 2}, 0.999, "stable", id="top"),
        pytest.param({"stable": 90, "canary": 10}, {1}, 0.0, "stable", id="canary-down"),
        pytest.param({"stable": 90, "canary": 10}, set(), 0.5, None, id="none-up"),
        pytest.param({"stable": 0, "canary": 5}, {1, 2}, 0.9, "canary", id="zero-weight"),
        pytest.param({"other": 5}, {1, 2}, 0.5, None, id="unknown-label"),
    ],
)
def test_split_label(
    weights: dict[str, int], available: set[int], draw: float, label: str | None
) -> None:
    assert split_label(weights, LABELS, available, draw) == label


# -- the store: several versions, labels, the split ------------------------------------------


@dataclass
class FakeServable:
    info: ModelInfo

    def run(self, signature: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"version": np.array([self.info.version])}


def _export(base: Path, version: int) -> None:
    (base / str(version)).mkdir(parents=True)
    (base / str(version) / "saved_model.pb").write_bytes(b"")


def _load(path: Path, version: int) -> FakeServable:
    return FakeServable(ModelInfo(version, {}))


def test_store_serves_labels_and_splits_traffic(tmp_path: Path) -> None:
    draws = iter([0.05, 0.5, 0.95])
    store = ModelStore(
        "m",
        tmp_path,
        VersionPolicy(latest=2),
        _load,
        labels={"stable": 1, "canary": 2},
        traffic={"stable": 80, "canary": 20},
        draw=lambda: next(draws),
    )
    for v in (1, 2):
        _export(tmp_path, v)
    store.poll()
    assert {(s.version, s.state) for s in store.statuses()} == {(1, "AVAILABLE"), (2, "AVAILABLE")}
    assert store.resolve(None, "stable") == 1
    assert store.resolve(None, "canary") == 2
    assert store.resolve(2) == 2
    assert [store.resolve(None) for _ in range(3)] == [2, 1, 1]  # 0.05 < 0.2: the canary
    with pytest.raises(ServingError, match="Unrecognized servable version label: beta") as e:
        store.resolve(None, "beta")
    assert e.value.code is Code.INVALID_ARGUMENT
    _export(tmp_path, 3)  # latest 2: version 1 goes; its label then finds nothing
    store.poll()
    assert store.serving_version == 3
    with pytest.raises(ServingError, match=r"Specific\(m, 1\)"):
        store.resolve(None, "stable")


def test_store_warms_up_before_answering(tmp_path: Path) -> None:
    seen: list[int] = []
    store = ModelStore(
        "m", tmp_path, VersionPolicy(), _load, warmer=lambda s, p: seen.append(s.info.version) or 3
    )
    _export(tmp_path, 5)
    store.poll()
    assert seen == [5]
    assert store.serving_version == 5


def test_store_warm_up_failure_fails_the_version(tmp_path: Path) -> None:
    def broken(servable: object, path: Path) -> int:
        raise ServingError(Code.INVALID_ARGUMENT, "warm-up request refused")

    store = ModelStore("m", tmp_path, VersionPolicy(), _load, warmer=broken)
    _export(tmp_path, 1)
    store.poll()
    (status,) = store.statuses()
    assert (status.state, status.error_code) == ("END", "UNKNOWN")
    assert "warm-up request refused" in status.error_message


# -- batching -----------------------------------------------------------------------------------

P = BatchingParameters(max_batch_size=8, batch_timeout_micros=1000)


@pytest.mark.parametrize(
    ("sizes", "waited", "params", "decision"),
    [
        pytest.param([], 0.0, P, float("inf"), id="empty"),
        pytest.param([1], 0.0, P, 0.001, id="wait-for-more"),
        pytest.param([1], 0.0004, P, 0.0006, id="wait-the-rest"),
        pytest.param([1], 0.001, P, 1, id="timed-out"),
        pytest.param([4, 4], 0.0, P, 2, id="exactly-full"),
        pytest.param([4, 3, 2], 0.0, P, 2, id="next-does-not-fit"),
        pytest.param([8, 1], 0.0, P, 1, id="one-full-request"),
        pytest.param([3, 3], 0.002, P, 2, id="timed-out-takes-all-that-fit"),
        pytest.param([1, 1, 1], 0.0, BatchingParameters(max_batch_size=8), 3, id="no-timeout"),
    ],
)
def test_plan_batch(
    sizes: list[int], waited: float, params: BatchingParameters, decision: float
) -> None:
    got = plan_batch(sizes, waited, params)
    assert type(got) is type(decision)
    assert got == pytest.approx(decision)


@pytest.mark.parametrize(
    ("rows", "allowed", "size"),
    [(3, (), 3), (3, (2, 4, 8), 4), (4, (2, 4, 8), 4), (1, (2, 4, 8), 2), (8, (2, 4, 8), 8)],
)
def test_padded_size(rows: int, allowed: tuple[int, ...], size: int) -> None:
    params = BatchingParameters(max_batch_size=8, allowed_batch_sizes=allowed)
    assert padded_size(rows, params) == size


@pytest.mark.parametrize(
    ("params", "words"),
    [
        (BatchingParameters(), None),
        (BatchingParameters(max_batch_size=0), "max_batch_size"),
        (BatchingParameters(num_batch_threads=0), "num_batch_threads"),
        (BatchingParameters(batch_timeout_micros=-1), "negative"),
        (BatchingParameters(max_batch_size=8, allowed_batch_sizes=(4, 2, 8)), "increasing"),
        (BatchingParameters(max_batch_size=8, allowed_batch_sizes=(2, 4)), "must equal"),
    ],
)
def test_check(params: BatchingParameters, words: str | None) -> None:
    problems = check(params)
    assert (not problems) if words is None else any(words in p for p in problems)


def test_parse_parameters() -> None:
    text = """
        # TensorFlow Serving's batching parameters file
        max_batch_size { value: 128 }
        batch_timeout_micros { value: 500 }
        num_batch_threads { value: 2 }
        max_enqueued_batches { value: 10 }
        allowed_batch_sizes: 32
        allowed_batch_sizes: 128
        pad_variable_length_inputs: true
    """
    assert parse_parameters(text) == BatchingParameters(
        max_batch_size=128,
        batch_timeout_micros=500,
        num_batch_threads=2,
        max_enqueued_batches=10,
        allowed_batch_sizes=(32, 128),
        pad_variable_length_inputs=True,
    )
    assert parse_parameters("") == BatchingParameters()


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("max_batch_size { value: 0 }", "max_batch_size"),
        ("batch_size { value: 4 }", "unknown"),
        ("max_batch_size { value: 8 } allowed_batch_sizes: 4", "must equal"),
        ("max_batch_size = 4", "cannot read"),
    ],
)
def test_parse_parameters_refuses(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_parameters(text)


@pytest.mark.parametrize(
    ("inputs", "batchable"),
    [
        ({"x": np.zeros((2, 3))}, True),
        ({"x": np.zeros((2, 3)), "y": np.zeros(2, np.int64)}, True),
        ({"x": np.zeros((2, 3)), "y": np.zeros(3)}, False),  # first dimensions differ
        ({"x": np.float32(1.0) * np.ones(())}, False),  # a scalar
    ],
)
def test_batch_key(inputs: dict[str, np.ndarray], batchable: bool) -> None:
    assert (batch_key(inputs) is not None) is batchable


def test_batcher_merges_pads_and_splits() -> None:
    """Concurrent requests become one padded call; each gets its own rows back."""
    calls: list[int] = []
    gate = threading.Event()

    def run(batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        gate.wait(5)
        calls.append(len(batch["x"]))
        return {"y": batch["x"] * 2, "n": np.arange(len(batch["x"]))}

    params = BatchingParameters(max_batch_size=8, allowed_batch_sizes=(4, 8))
    batcher = Batcher(params)
    try:
        first = batcher.submit("k", run, {"x": np.array([[1.0]])})
        time.sleep(0.2)  # the batch thread is now busy with `first`
        rest = [batcher.submit("k", run, {"x": np.array([[float(i)]] * i)}) for i in (2, 3)]
        other = batcher.submit("other", run, {"x": np.array([[9.0]])})  # another model call
        gate.set()
        assert first.result(5)["y"].tolist() == [[2.0]]
        assert rest[0].result(5)["y"].tolist() == [[4.0], [4.0]]
        assert rest[1].result(5)["y"].tolist() == [[6.0]] * 3
        assert other.result(5)["y"].tolist() == [[18.0]]
        assert sorted(calls) == [4, 4, 8]  # 1 row padded to 4; 2 + 3 rows to 8; the other: 4
        too_big = batcher.submit("k", run, {"x": np.zeros((9, 1))})
        with pytest.raises(ServingError, match="larger than maximum") as e:
            too_big.result(5)
        assert e.value.code is Code.INVALID_ARGUMENT
    finally:
        batcher.close()


def test_batcher_reports_a_failed_call_to_each_request() -> None:
    def run(batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise ServingError(Code.INVALID_ARGUMENT, "bad input")

    batcher = Batcher(BatchingParameters(max_batch_size=4))
    try:
        futures: list[Future[dict[str, np.ndarray]]] = [
            batcher.submit("k", run, {"x": np.zeros((1, 2))}) for _ in range(3)
        ]
        for f in futures:
            with pytest.raises(ServingError, match="bad input"):
                f.result(5)
    finally:
        batcher.close()


def test_a_lone_request_runs_on_the_callers_thread() -> None:
    """submit(here=True) with no batch running: the caller runs it, no batch thread."""
    ran_on: list[str] = []

    def run(batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        ran_on.append(threading.current_thread().name)
        return {"y": batch["x"] + 1}

    batcher = Batcher(BatchingParameters(max_batch_size=4))
    try:
        done = batcher.submit("k", run, {"x": np.array([[1.0]])}, here=True)
        assert done.done()
        assert done.result()["y"].tolist() == [[2.0]]
        assert ran_on == [threading.current_thread().name]
        handed = batcher.submit("k", run, {"x": np.array([[2.0]])})
        assert handed.result(5)["y"].tolist() == [[3.0]]
        assert ran_on[-1].startswith("tfkube-batch-")
    finally:
        batcher.close()


def test_a_caller_waits_for_the_running_batch_and_a_batch_thread_takes_its_request() -> None:
    """With num_batch_threads batches running, here=True only queues; the batch thread
    merges what queued meanwhile into one call once the running batch is done."""
    gate = threading.Event()
    sizes: list[int] = []

    def run(batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        gate.wait(5)
        sizes.append(len(batch["x"]))
        return {"y": batch["x"] * 2}

    batcher = Batcher(BatchingParameters(max_batch_size=8))
    try:
        first = batcher.submit("k", run, {"x": np.array([[1.0]])})
        time.sleep(0.2)  # the batch thread is busy with `first`
        queued = [batcher.submit("k", run, {"x": np.array([[2.0]])}, here=True) for _ in range(3)]
        assert not any(f.done() for f in queued)
        gate.set()
        assert first.result(5)["y"].tolist() == [[2.0]]
        assert [f.result(5)["y"].tolist() for f in queued] == [[[4.0]]] * 3
        assert sizes == [1, 3]
    finally:
        batcher.close()


@pytest.mark.parametrize(
    ("in_flight", "mean", "quick", "here"),
    [
        (1, 1.0, True, True),
        (1, 1.0, False, False),  # a slow (or not yet measured) model call: a batch thread
        (2, 1.0, True, False),  # another request waits: batch them
        (1, LONE_BELOW + 0.5, True, False),  # clients overlap lately: keep the loop free
    ],
)
def test_a_request_runs_on_the_loop_only_when_alone_and_quick(
    in_flight: int, mean: float, quick: bool, here: bool
) -> None:
    assert runs_here(in_flight, mean, quick) is here


def test_the_running_mean_of_requests_in_flight_follows_the_clients() -> None:
    mean = 1.0
    for _ in range(20):
        mean = next_concurrency(mean, 16)
    assert mean > LONE_BELOW  # 16 overlapping clients: batched
    for _ in range(40):
        mean = next_concurrency(mean, 1)
    assert mean < LONE_BELOW  # then one client at a time again: run at once


class _Dtype:
    def __init__(self, numpy: type) -> None:
        self.as_numpy_dtype = numpy


class _Tensor:
    def __init__(self, name: str, numpy: type = np.float32) -> None:
        self.name = name
        self.dtype = _Dtype(numpy)

    def _as_tf_output(self) -> str:
        return f"out:{self.name}"


class _Session:
    """A stand-in for TensorFlow's session: records what its run entry point is given."""

    def __init__(self) -> None:
        self.extended = 0
        self.runs: list[tuple[dict[str, np.ndarray], list[str]]] = []

    def _extend_graph(self) -> None:
        self.extended += 1

    def _call_tf_sessionrun(
        self,
        options: None,
        feeds: dict[str, np.ndarray],
        fetches: list[str],
        targets: list[str],
        meta: None,
    ) -> list[np.ndarray]:
        self.runs.append((feeds, fetches))
        return [np.zeros(1) for _ in fetches]


def test_the_direct_run_resolves_once_and_casts_feeds_as_session_run_does() -> None:
    session = _Session()
    call = _direct_run(session, [_Tensor("x"), _Tensor("ids", np.int64)], [_Tensor("y")])
    assert call is not None
    assert session.extended == 1
    out = call(np.array([[1.0]], np.float64), [3, 4])
    assert len(out) == 1
    feeds, fetches = session.runs[0]
    assert fetches == ["out:y"]
    assert feeds["out:x"].dtype == np.float32
    assert feeds["out:ids"].dtype == np.int64
    assert feeds["out:ids"].tolist() == [3, 4]


def test_without_the_entry_point_the_direct_run_steps_aside() -> None:
    assert _direct_run(object(), [_Tensor("x")], [_Tensor("y")]) is None
    assert _direct_run(_Session(), [object()], [_Tensor("y")]) is None


# -- the fast REST parse -------------------------------------------------------------------------

DIGITS = Signature(
    inputs={"x": TensorInfo("float32", (None, 64), "x:0")},
    outputs={"classes": TensorInfo("int64", (None,))},
)
INTS = Signature(inputs={"ids": TensorInfo("int32", (None,))}, outputs={})
SIGS = {"serving_default": DIGITS, "ids": INTS}
rng = np.random.default_rng(3)
ROWS = rng.random((5, 64)).tolist()


@pytest.mark.parametrize(
    ("body", "fast"),
    [
        pytest.param({"instances": ROWS}, True, id="rows"),
        pytest.param({"inputs": ROWS}, True, id="columns"),
        pytest.param({"signature_name": "serving_default", "instances": ROWS}, True, id="named"),
        pytest.param({"signature_name": "ids", "instances": [1, 2, 3]}, True, id="ints"),
        pytest.param({"signature_name": "ids", "instances": [1, 2.0]}, False, id="int-as-float"),
        pytest.param({"instances": [{"x": r} for r in ROWS]}, False, id="objects"),
        pytest.param({"inputs": {"x": ROWS}}, False, id="named-columns"),
        pytest.param({"instances": [ROWS[0], [*ROWS[1][:63], [1.0]]]}, False, id="nested-deeper"),
        pytest.param({"instances": [ROWS[0][:32] + ROWS[1][:32], ROWS[2]]}, True, id="regular"),
        pytest.param({"instances": [[1.0, 2.0], [3.0]]}, False, id="ragged"),
        pytest.param({"instances": [[True] * 64]}, False, id="booleans"),
        pytest.param({"instances": ROWS, "extra": 1}, False, id="unknown-key"),
    ],
)
def test_fast_parse_matches_the_full_one(body: dict[str, object], fast: bool) -> None:
    raw = json.dumps(body).encode()
    got = _fast_predict(raw, SIGS)
    assert (got is not None) is fast
    try:
        full = parse_predict(raw, SIGS)
    except ServingError:
        assert got is None
        return
    if got is not None:
        assert got.signature_name == full.signature_name
        assert got.row_format == full.row_format
        for k, v in full.inputs.items():
            assert got.inputs[k].dtype == v.dtype
            np.testing.assert_array_equal(got.inputs[k], v)


def test_fast_parse_keeps_the_shape_check() -> None:
    with pytest.raises(ServingError, match=r"expected shape \[\?,64\], got \[2,3\]"):
        parse_predict(json.dumps({"instances": [[1.0, 2.0, 3.0]] * 2}).encode(), SIGS)


@pytest.mark.parametrize(
    ("outputs", "rows"),
    [
        ({"classes": np.array([1, 2]), "p": np.array([[0.5, 0.25], [1.0, 0.0]], np.float32)}, True),
        ({"classes": np.array([1, 2])}, True),
        ({"classes": np.array([1, 2]), "p": np.array([[0.5], [0.25]], np.float32)}, False),
        ({"p": np.array([np.nan, np.inf], np.float32)}, True),
        ({"label": np.array([b"cat", b"dog"], dtype=object)}, True),
        ({"image_bytes": np.array([b"\x00\x01"], dtype=object)}, False),
    ],
)
def test_answer_bytes_equal_the_answer(outputs: dict[str, np.ndarray], rows: bool) -> None:
    """orjson writes a float32 in its shortest form: the same float32 when read."""
    fast = json.loads(predict_body(outputs, rows))
    slow = json.loads(json.dumps(predict_answer(outputs, rows), allow_nan=True))
    assert _close(fast, slow), (fast, slow)


def _close(a: object, b: object) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return bool(np.float32(a) == np.float32(b)) or (np.isnan(a) and np.isnan(b))
    return a == b


@pytest.mark.parametrize(
    ("host", "reached"),
    [
        ("0.0.0.0", "127.0.0.1"),
        ("", "127.0.0.1"),
        ("::", "[::1]"),
        ("127.0.0.1", "127.0.0.1"),
        ("::1", "[::1]"),
        ("[::1]", "[::1]"),
        ("10.1.2.3", "10.1.2.3"),
    ],
)
def test_the_readiness_reaches_its_grpc_door_by(host: str, reached: str) -> None:
    from tfkube.serving._grpc import loopback

    assert loopback(host) == reached
