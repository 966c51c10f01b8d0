"""The model server's pure parts: TensorFlow Serving's REST API (paths, bodies, answers,
errors), the export layout and version choice, and the store's version logic with a
stand-in loader (no TensorFlow here; tests/tf/test_serving.py serves real models)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tfkube.serving._rest import (
    Call,
    Code,
    ModelInfo,
    ServingError,
    Signature,
    TensorInfo,
    VersionStatus,
    metadata_answer,
    parse_predict,
    predict_answer,
    route,
    status_answer,
)
from tfkube.serving._store import ModelStore, tf_error
from tfkube.serving._versions import VersionPolicy, choose_version, exported_versions, version_of

DIGITS = Signature(
    inputs={"x": TensorInfo("float32", (None, 64), "x:0")},
    outputs={
        "probabilities": TensorInfo("float32", (None, 10)),
        "classes": TensorInfo("int64", (None,)),
    },
)
TWO_INPUTS = Signature(
    inputs={"a": TensorInfo("int64", (None,)), "b": TensorInfo("string", (None,))},
    outputs={"y": TensorInfo("float32", (None,))},
)
SIGS = {"serving_default": DIGITS, "two": TWO_INPUTS}
ROW = [0.5] * 64


# -- paths --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "call"),
    [
        pytest.param("GET", "/v1/models/digits", Call("status", "digits"), id="status"),
        pytest.param(
            "GET", "/v1/models/digits/versions/12", Call("status", "digits", 12), id="status-v"
        ),
        pytest.param(
            "GET", "/v1/models/digits/metadata", Call("metadata", "digits"), id="metadata"
        ),
        pytest.param(
            "GET",
            "/v1/models/digits/versions/3/metadata",
            Call("metadata", "digits", 3),
            id="metadata-v",
        ),
        pytest.param("POST", "/v1/models/digits:predict", Call("predict", "digits"), id="predict"),
        pytest.param(
            "POST",
            "/v1/models/digits/versions/1001:predict",
            Call("predict", "digits", 1001),
            id="predict-v",
        ),
        pytest.param("POST", "/v1/models/digits:PREDICT", Call("predict", "digits"), id="case"),
        pytest.param(
            "POST",
            "/v1/models/digits/labels/canary:predict",
            Call("predict", "digits", None, "canary"),
            id="predict-label",
        ),
        pytest.param(
            "GET",
            "/v1/models/digits/labels/stable",
            Call("status", "digits", None, "stable"),
            id="status-label",
        ),
        pytest.param(
            "GET",
            "/v1/models/digits/labels/stable/metadata",
            Call("metadata", "digits", None, "stable"),
            id="metadata-label",
        ),
    ],
)
def test_route(method: str, path: str, call: Call) -> None:
    assert route(method, path) == call


@pytest.mark.parametrize(
    ("method", "path", "code", "words"),
    [
        pytest.param(
            "GET", "/v1/models/digits:predict", Code.INVALID_ARGUMENT, "Malformed", id="get-predict"
        ),
        pytest.param(
            "POST", "/v1/models/digits", Code.INVALID_ARGUMENT, "Malformed", id="post-status"
        ),
        pytest.param("PUT", "/v1/models/digits", Code.INVALID_ARGUMENT, "Malformed", id="put"),
        pytest.param(
            "GET",
            "/v1/models/digits/versions/x",
            Code.INVALID_ARGUMENT,
            "Malformed",
            id="bad-version",
        ),
        pytest.param(
            "POST", "/v1/models/digits:classify", Code.UNIMPLEMENTED, ":predict", id="classify"
        ),
        pytest.param(
            "GET", "/v1/models/digits/labels/", Code.INVALID_ARGUMENT, "Malformed", id="no-label"
        ),
    ],
)
def test_route_errors(method: str, path: str, code: Code, words: str) -> None:
    with pytest.raises(ServingError) as caught:
        route(method, path)
    assert caught.value.code is code
    assert words in caught.value.message
    assert caught.value.body() == {"error": caught.value.message}


def test_http_status_follows_tensorflow_serving() -> None:
    assert ServingError(Code.INVALID_ARGUMENT, "").http_status == 400
    assert ServingError(Code.FAILED_PRECONDITION, "").http_status == 400
    assert ServingError(Code.NOT_FOUND, "").http_status == 404
    assert ServingError(Code.UNIMPLEMENTED, "").http_status == 501
    assert ServingError(Code.UNAVAILABLE, "").http_status == 503
    assert ServingError(Code.UNAUTHENTICATED, "").http_status == 401
    assert ServingError(Code.INTERNAL, "").http_status == 500


# -- predict bodies -------------------------------------------------------------------------


def _body(value: object) -> bytes:
    return json.dumps(value).encode()


def test_rows_with_one_input() -> None:
    request = parse_predict(_body({"instances": [ROW, ROW, ROW]}), SIGS)
    assert request.signature_name == "serving_default"
    assert request.row_format
    assert request.inputs["x"].shape == (3, 64)
    assert request.inputs["x"].dtype == np.float32


def test_rows_as_objects_and_columns() -> None:
    rows = parse_predict(_body({"instances": [{"x": ROW}, {"x": ROW}]}), SIGS)
    assert rows.inputs["x"].shape == (2, 64)
    columns = parse_predict(_body({"inputs": {"x": [ROW]}}), SIGS)
    assert not columns.row_format
    assert columns.inputs["x"].shape == (1, 64)
    bare = parse_predict(_body({"inputs": [ROW, ROW]}), SIGS)
    assert bare.inputs["x"].shape == (2, 64)


def test_named_signature_two_inputs_and_b64() -> None:
    request = parse_predict(
        _body(
            {
                "signature_name": "two",
                "instances": [{"a": 1, "b": "cat"}, {"a": 2.0, "b": {"b64": "ZG9n"}}],
            }
        ),
        SIGS,
    )
    assert request.inputs["a"].tolist() == [1, 2]
    assert request.inputs["a"].dtype == np.int64
    assert request.inputs["b"].tolist() == [b"cat", b"dog"]
    columns = parse_predict(
        _body({"signature_name": "two", "inputs": {"a": [1, 2, 3], "b": ["x"]}}), SIGS
    )
    assert columns.inputs["a"].shape == (3,)  # columns need not share the batch size


@pytest.mark.parametrize(
    ("body", "words"),
    [
        pytest.param(b"{not json", "JSON Parse error", id="json"),
        pytest.param(_body([1, 2]), "JSON object", id="not-object"),
        pytest.param(_body({"instances": [ROW], "inputs": [ROW]}), "only one of", id="both"),
        pytest.param(_body({"signature_name": "serving_default"}), "Missing", id="neither"),
        pytest.param(_body({"instances": []}), "non-empty", id="empty"),
        pytest.param(
            _body({"instances": [[1, 2, 3]]}), "expected shape [?,64], got [1,3]", id="shape"
        ),
        pytest.param(_body({"instances": ROW}), "expected shape [?,64], got [64]", id="rank"),
        pytest.param(_body({"instances": [ROW, ROW[:10]]}), "ragged", id="ragged"),
        pytest.param(_body({"instances": [["a"] * 64]}), "DT_FLOAT", id="strings"),
        pytest.param(_body({"instances": [[True] * 64]}), "DT_FLOAT", id="booleans"),
        pytest.param(_body({"instances": [{"y": ROW}]}), "unknown input(s) y", id="unknown"),
        pytest.param(_body({"instances": [{"x": ROW}, ROW]}), "mixes", id="mixed"),
        pytest.param(
            _body({"instances": [{"x": ROW}, {"x": ROW, "z": 1}]}), "same inputs", id="keys"
        ),
        pytest.param(
            _body({"signature_name": "nope", "instances": [ROW]}), "'nope' not found", id="sig"
        ),
        pytest.param(
            _body({"signature_name": "two", "instances": [1, 2]}), "2 inputs", id="rows-need-names"
        ),
        pytest.param(
            _body({"signature_name": "two", "inputs": [1, 2]}), "2 inputs", id="columns-need-names"
        ),
        pytest.param(
            _body({"signature_name": "two", "instances": [{"a": 1.5, "b": "x"}]}),
            "DT_INT64",
            id="fraction",
        ),
        pytest.param(
            _body({"signature_name": "two", "inputs": {"a": [1]}}),
            "missing input(s) b",
            id="missing",
        ),
        pytest.param(
            _body({"signature_name": "two", "instances": [{"a": 1, "b": {"b64": "%%"}}]}),
            "base64",
            id="b64",
        ),
        pytest.param(
            _body({"signature_name": "two", "instances": [{"a": 1, "b": {"k": 1}}]}),
            "object",
            id="object-value",
        ),
        pytest.param(
            _body({"signature_name": "two", "instances": [{"a": [1, 2], "b": "x"}]}),
            "expected shape [?]",
            id="row-shape",
        ),
    ],
)
def test_bad_predict_bodies(body: bytes, words: str) -> None:
    with pytest.raises(ServingError) as caught:
        parse_predict(body, SIGS)
    assert caught.value.code is Code.INVALID_ARGUMENT
    assert words in caught.value.message
    assert caught.value.http_status == 400


# -- answers ----------------------------------------------------------------------------------


def test_predictions_rows_and_columns() -> None:
    outputs = {
        "classes": np.array([3, 7], dtype=np.int64),
        "probabilities": np.array([[0.5, 0.5], [0.25, 0.75]], dtype=np.float32),
    }
    rows = predict_answer(outputs, row_format=True)
    assert rows == {
        "predictions": [
            {"classes": 3, "probabilities": [0.5, 0.5]},
            {"classes": 7, "probabilities": [0.25, 0.75]},
        ]
    }
    columns = predict_answer(outputs, row_format=False)
    assert columns == {"outputs": {"classes": [3, 7], "probabilities": [[0.5, 0.5], [0.25, 0.75]]}}
    single = {"y": np.array([1.5, np.nan], dtype=np.float32)}
    assert predict_answer(single, True)["predictions"][0] == 1.5
    assert json.dumps(predict_answer(single, False)) == '{"outputs": [1.5, NaN]}'


def test_string_outputs_and_bytes_suffix() -> None:
    outputs = {
        "label": np.array([b"cat"], dtype=object),
        "image_bytes": np.array([b"\x00\x01"], dtype=object),
    }
    assert predict_answer(outputs, True) == {
        "predictions": [{"image_bytes": {"b64": "AAE="}, "label": "cat"}]
    }


def test_rows_need_a_shared_batch_dimension() -> None:
    outputs = {"a": np.zeros((2,)), "b": np.zeros((3,))}
    with pytest.raises(ServingError, match="'inputs'"):
        predict_answer(outputs, True)
    assert predict_answer(outputs, False)["outputs"]["b"] == [0.0, 0.0, 0.0]


def test_status_answer() -> None:
    versions = [VersionStatus(1, "END"), VersionStatus(2, "AVAILABLE")]
    assert status_answer("m", versions) == {
        "model_version_status": [
            {
                "version": "2",
                "state": "AVAILABLE",
                "status": {"error_code": "OK", "error_message": ""},
            },
            {"version": "1", "state": "END", "status": {"error_code": "OK", "error_message": ""}},
        ]
    }
    assert len(status_answer("m", versions, 1)["model_version_status"]) == 1
    with pytest.raises(ServingError, match="version 9 of model m") as caught:
        status_answer("m", versions, 9)
    assert caught.value.http_status == 404
    with pytest.raises(ServingError, match="any versions"):
        status_answer("m", [])


def test_metadata_answer() -> None:
    answer = metadata_answer("digits", ModelInfo(7, {"serving_default": DIGITS}))
    assert answer["model_spec"] == {"name": "digits", "signature_name": "", "version": "7"}
    sig = answer["metadata"]["signature_def"]["signature_def"]["serving_default"]
    assert sig["method_name"] == "tensorflow/serving/predict"
    assert sig["inputs"]["x"] == {
        "dtype": "DT_FLOAT",
        "tensor_shape": {
            "dim": [{"size": "-1", "name": ""}, {"size": "64", "name": ""}],
            "unknown_rank": False,
        },
        "name": "x:0",
    }
    assert sig["outputs"]["classes"]["dtype"] == "DT_INT64"
    unknown = TensorInfo("float32", None).proto()
    assert unknown["tensor_shape"] == {"dim": [], "unknown_rank": True}


def test_tensorflow_errors_keep_their_code() -> None:
    class InvalidArgumentError(Exception):
        message = "Matrix size-incompatible"

    assert tf_error(InvalidArgumentError()).code is Code.INVALID_ARGUMENT
    assert tf_error(InvalidArgumentError()).message == "Matrix size-incompatible"
    assert tf_error(RuntimeError("boom")).http_status == 500


# -- export layout and versions --------------------------------------------------------------


def _export(base: Path, version: str, complete: bool = True) -> None:
    folder = base / version
    folder.mkdir(parents=True)
    if complete:
        (folder / "saved_model.pb").write_bytes(b"")


def test_exported_versions(tmp_path: Path) -> None:
    assert exported_versions(tmp_path / "missing") == []
    _export(tmp_path, "100")
    _export(tmp_path, "20")
    _export(tmp_path, ".partial-300-1")  # an export being written
    _export(tmp_path, "400", complete=False)  # no saved_model.pb yet
    _export(tmp_path, "latest")
    (tmp_path / "7").write_text("a file, not a folder")
    assert exported_versions(tmp_path) == [20, 100]


@pytest.mark.parametrize(
    ("name", "version"),
    [("1", 1), ("0012", 12), ("-1", None), ("1.5", None), ("²", None), ("9" * 30, None)],
)
def test_version_of(name: str, version: int | None) -> None:
    assert version_of(name) == version


@pytest.mark.parametrize(
    ("available", "requested", "version", "words"),
    [
        ([], None, None, "exported no model"),
        ([5, 9], None, 9, None),
        ([5, 9], 5, 5, None),
        ([5, 9], 7, None, "has 5, 9"),
    ],
)
def test_choose_version(
    available: list[int], requested: int | None, version: int | None, words: str | None
) -> None:
    chosen, why = choose_version(available, requested)
    assert chosen == version
    assert (why is None) if words is None else (why is not None and words in why)


@pytest.mark.parametrize(
    ("policy", "available", "wanted"),
    [
        (VersionPolicy(), [], None),
        (VersionPolicy(), [1, 3, 2], 3),
        (VersionPolicy.one(2), [1, 3, 2], 2),
        (VersionPolicy.one(4), [1, 3, 2], None),
        (VersionPolicy(latest=2), [1, 3, 2], 3),
    ],
)
def test_policy(policy: VersionPolicy, available: list[int], wanted: int | None) -> None:
    assert policy.wanted(available) == wanted


# -- the store's version logic ------------------------------------------------------------------


@dataclass
class FakeServable:
    info: ModelInfo

    def run(self, signature: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"version": np.array([self.info.version])}


def _loader(broken: set[int]) -> object:
    loaded: list[int] = []

    def load(path: Path, version: int) -> FakeServable:
        loaded.append(version)
        if version in broken:
            raise ValueError(f"bad export {path.name}")
        return FakeServable(ModelInfo(version, {"serving_default": DIGITS}))

    load.loaded = loaded  # type: ignore[attr-defined]
    return load


def test_store_follows_the_latest_export(tmp_path: Path) -> None:
    load = _loader(broken={3})
    store = ModelStore("m", tmp_path, VersionPolicy(), loader=load)  # type: ignore[arg-type]
    store.poll()
    with pytest.raises(ServingError, match=r"Latest\(m\)"):
        store.servable(None)
    _export(tmp_path, "1")
    store.poll()
    store.poll()
    assert load.loaded == [1]  # type: ignore[attr-defined]
    assert store.serving_version == 1
    _export(tmp_path, "2")
    store.poll()
    assert store.serving_version == 2
    assert {(s.version, s.state) for s in store.statuses()} == {(1, "END"), (2, "AVAILABLE")}
    with pytest.raises(ServingError, match=r"Specific\(m, 1\)"):
        store.servable(1)
    _export(tmp_path, "3")  # fails to load: version 2 stays served, 3 is not tried again
    store.poll()
    store.poll()
    assert load.loaded == [1, 2, 3]  # type: ignore[attr-defined]
    assert store.serving_version == 2
    failed = next(s for s in store.statuses() if s.version == 3)
    assert (failed.state, failed.error_code) == ("END", "UNKNOWN")
    assert "bad export 3" in failed.error_message
    assert store.predict(None, "serving_default", {})["version"].tolist() == [2]


def test_store_serves_one_specific_version(tmp_path: Path) -> None:
    load = _loader(broken=set())
    store = ModelStore("m", tmp_path, VersionPolicy.one(1), loader=load)  # type: ignore[arg-type]
    _export(tmp_path, "1")
    _export(tmp_path, "2")
    store.poll()
    assert store.serving_version == 1
    assert store.servable(1).info.version == 1
