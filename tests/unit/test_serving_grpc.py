"""TensorFlow Serving's gRPC messages as `tfkube.serving._protowire` reads and writes them,
each shape checked against the `tensorflow-serving-api` package's own classes (the client
a user writes): what the package serializes is decoded right, what tfkube encodes the
package parses back to the same values. Pure: no model server, no channel."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from tfkube.serving._protowire import (
    decode_examples_request,
    decode_metadata_request,
    decode_predict,
    decode_spec,
    decode_status_request,
    decode_tensor,
    encode_classify_response,
    encode_predict_response,
    encode_regress_response,
    encode_tensor,
)
from tfkube.serving._rest import ServingError


@pytest.fixture(scope="module")
def api() -> Any:
    """TensorFlow's and TensorFlow Serving's generated classes (they load TensorFlow)."""
    import tensorflow as tf
    from tensorflow.core.framework import tensor_pb2, types_pb2
    from tensorflow_serving.apis import (
        classification_pb2,
        get_model_metadata_pb2,
        get_model_status_pb2,
        input_pb2,
        model_pb2,
        predict_pb2,
        regression_pb2,
    )

    return SimpleNamespace(
        tf=tf,
        tensor_pb2=tensor_pb2,
        types_pb2=types_pb2,
        classification_pb2=classification_pb2,
        metadata_pb2=get_model_metadata_pb2,
        status_pb2=get_model_status_pb2,
        input_pb2=input_pb2,
        model_pb2=model_pb2,
        predict_pb2=predict_pb2,
        regression_pb2=regression_pb2,
    )


ARRAYS = [
    pytest.param(np.arange(6, dtype=np.float32).reshape(2, 3), id="float32"),
    pytest.param(np.array([[0.5], [-1.25]], np.float64), id="float64"),
    pytest.param(np.array([1, -2, 3], np.int32), id="int32"),
    pytest.param(np.array([[2**40, -(2**40)]], np.int64), id="int64"),
    pytest.param(np.array([True, False, True]), id="bool"),
    pytest.param(np.array([0.5, 2.0], np.float16), id="float16"),
    pytest.param(np.array([200, 7], np.uint8), id="uint8"),
    pytest.param(np.zeros((0, 4), np.float32), id="empty"),
    pytest.param(np.array(3.5, np.float32), id="scalar"),
]


@pytest.mark.parametrize("array", ARRAYS)
def test_a_tensor_made_by_tensorflow_is_read_back(api: Any, array: np.ndarray) -> None:
    proto = api.tf.make_tensor_proto(array)
    got = decode_tensor(proto.SerializeToString())
    assert got.dtype == array.dtype
    np.testing.assert_array_equal(got, array)


@pytest.mark.parametrize("array", ARRAYS)
def test_a_tensor_tfkube_writes_is_read_by_tensorflow(api: Any, array: np.ndarray) -> None:
    proto = api.tensor_pb2.TensorProto.FromString(encode_tensor(array))
    got = api.tf.make_ndarray(proto)
    assert got.dtype == array.dtype
    np.testing.assert_array_equal(got, array)


@pytest.mark.parametrize("offset", [0, 1, 3])
def test_tensor_content_at_any_place_in_the_request_is_an_aligned_array(
    api: Any, offset: int
) -> None:
    """`tensor_content` lands wherever the request's bytes put it; TensorFlow reads a
    misaligned array slowly, so such a view is copied (an aligned one is not)."""
    array = np.arange(128, dtype=np.float32).reshape(2, 64)
    raw = b"\0" * offset + api.tf.make_tensor_proto(array).SerializeToString()
    got = decode_tensor(memoryview(raw)[offset:])
    assert got.flags.aligned
    np.testing.assert_array_equal(got, array)


@pytest.mark.parametrize(
    ("values", "dtype", "field", "expected"),
    [
        ([1.5, 2.5], "DT_FLOAT", "float_val", np.array([1.5, 2.5], np.float32)),
        ([0.25], "DT_DOUBLE", "double_val", np.array([0.25], np.float64)),
        ([-7, 9], "DT_INT32", "int_val", np.array([-7, 9], np.int32)),
        ([-(2**50), 3], "DT_INT64", "int64_val", np.array([-(2**50), 3], np.int64)),
        ([True, False], "DT_BOOL", "bool_val", np.array([True, False])),
    ],
)
def test_values_in_repeated_fields(
    api: Any, values: list[Any], dtype: str, field: str, expected: np.ndarray
) -> None:
    """A client that fills `float_val` and friends rather than `tensor_content`."""
    proto = api.tensor_pb2.TensorProto(dtype=api.types_pb2.DataType.Value(dtype))
    proto.tensor_shape.dim.add(size=len(values))
    getattr(proto, field).extend(values)
    np.testing.assert_array_equal(decode_tensor(proto.SerializeToString()), expected)


def test_one_value_stands_for_all(api: Any) -> None:
    proto = api.tensor_pb2.TensorProto(dtype=api.types_pb2.DT_FLOAT, float_val=[2.0])
    proto.tensor_shape.dim.add(size=2)
    proto.tensor_shape.dim.add(size=2)
    np.testing.assert_array_equal(decode_tensor(proto.SerializeToString()), np.full((2, 2), 2.0))


def test_strings(api: Any) -> None:
    array = np.array([b"a", b"\xffbytes"], dtype=object)
    proto = api.tf.make_tensor_proto(array)
    assert decode_tensor(proto.SerializeToString()).tolist() == [b"a", b"\xffbytes"]
    back = api.tensor_pb2.TensorProto.FromString(encode_tensor(array))
    assert list(back.string_val) == [b"a", b"\xffbytes"]


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda p: p.TensorProto(dtype=p.DT_FLOAT), "unknown rank"),
        (lambda p: p.TensorProto(dtype=p.DT_VARIANT), "unsupported dtype"),
    ],
    ids=["no-shape", "variant"],
)
def test_refused_tensors(api: Any, make: Any, words: str) -> None:
    classes = SimpleNamespace(
        TensorProto=api.tensor_pb2.TensorProto,
        DT_FLOAT=api.types_pb2.DT_FLOAT,
        DT_VARIANT=api.types_pb2.DT_VARIANT,
    )
    proto = make(classes)
    if words == "unknown rank":
        proto.tensor_shape.unknown_rank = True
    with pytest.raises(ServingError, match=words):
        decode_tensor(proto.SerializeToString())


def test_content_of_the_wrong_size_is_refused(api: Any) -> None:
    proto = api.tf.make_tensor_proto(np.zeros((2, 2), np.float32))
    proto.tensor_content = proto.tensor_content[:-4]
    with pytest.raises(ServingError, match="tensor_content holds 12 bytes"):
        decode_tensor(proto.SerializeToString())


@pytest.mark.parametrize(
    ("version", "label", "expected"),
    [(None, "", None), (0, "", 0), (7, "", 7), (None, "canary", None)],
)
def test_predict_request(api: Any, version: int | None, label: str, expected: int | None) -> None:
    request = api.predict_pb2.PredictRequest()
    request.model_spec.name = "digits"
    request.model_spec.signature_name = "serving_default"
    if version is not None:
        request.model_spec.version.value = version
    if label:
        request.model_spec.version_label = label
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    request.inputs["x"].CopyFrom(api.tf.make_tensor_proto(x))
    request.output_filter.extend(["classes"])
    call = decode_predict(request.SerializeToString())
    assert call.spec.name == "digits"
    assert call.spec.signature_name == "serving_default"
    assert call.spec.version == expected
    assert call.spec.label == label
    assert call.output_filter == ("classes",)
    np.testing.assert_array_equal(call.inputs["x"], x)


def test_predict_response(api: Any) -> None:
    outputs = {
        "probabilities": np.array([[0.25, 0.75]], np.float32),
        "classes": np.array([1], np.int64),
    }
    answer = api.predict_pb2.PredictResponse.FromString(
        encode_predict_response("digits", 3, "serving_default", outputs)
    )
    assert answer.model_spec.name == "digits"
    assert answer.model_spec.version.value == 3
    assert answer.model_spec.signature_name == "serving_default"
    assert set(answer.outputs) == set(outputs)
    for key, array in outputs.items():
        np.testing.assert_array_equal(api.tf.make_ndarray(answer.outputs[key]), array)


def _examples(api: Any, values: list[float]) -> Any:
    listed = api.input_pb2.Input()
    for v in values:
        example = listed.example_list.examples.add()
        example.features.feature["x"].float_list.value.append(v)
    return listed


def test_classify_request_and_response(api: Any) -> None:
    request = api.classification_pb2.ClassificationRequest(input=_examples(api, [0.5, 1.0]))
    request.model_spec.name = "m"
    request.model_spec.signature_name = "classify"
    call = decode_examples_request(request.SerializeToString())
    assert call.spec.name == "m"
    assert call.spec.signature_name == "classify"
    assert call.examples == [e.SerializeToString() for e in request.input.example_list.examples]
    classes = np.array([[b"yes", b"no"]], dtype=object)
    scores = np.array([[0.25, 0.75]], np.float32)
    answer = api.classification_pb2.ClassificationResponse.FromString(
        encode_classify_response("m", 2, "classify", classes, scores)
    )
    (row,) = answer.result.classifications
    assert [(c.label, c.score) for c in row.classes] == [("yes", 0.25), ("no", 0.75)]
    assert answer.model_spec.version.value == 2


def test_examples_with_a_context(api: Any) -> None:
    """example_list_with_context: the context's features join each example's."""
    request = api.regression_pb2.RegressionRequest()
    listed = request.input.example_list_with_context
    listed.context.features.feature["c"].float_list.value.append(1.0)
    listed.examples.add().features.feature["x"].float_list.value.append(2.0)
    (merged,) = decode_examples_request(request.SerializeToString()).examples
    example = type(listed.context).FromString(merged)
    assert set(example.features.feature) == {"c", "x"}


def test_an_empty_input_is_refused(api: Any) -> None:
    request = api.regression_pb2.RegressionRequest()
    request.model_spec.name = "m"
    with pytest.raises(ServingError, match="Input is empty"):
        decode_examples_request(request.SerializeToString())


def test_regress_response(api: Any) -> None:
    answer = api.regression_pb2.RegressionResponse.FromString(
        encode_regress_response("m", 1, "regress", np.array([[3.0], [6.0]], np.float32))
    )
    assert [r.value for r in answer.result.regressions] == [3.0, 6.0]
    with pytest.raises(ServingError, match="batch_size, 1"):
        encode_regress_response("m", 1, "regress", np.zeros((2, 2), np.float32))


def test_metadata_and_status_requests(api: Any) -> None:
    metadata = api.metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    metadata.model_spec.name = "m"
    metadata.model_spec.version.value = 2
    spec, wanted = decode_metadata_request(metadata.SerializeToString())
    assert (spec.name, spec.version, wanted) == ("m", 2, ["signature_def"])
    status = api.status_pb2.GetModelStatusRequest()
    status.model_spec.name = "m"
    status.model_spec.version_label = "stable"
    spec = decode_status_request(status.SerializeToString())
    assert (spec.name, spec.version, spec.label) == ("m", None, "stable")
    assert decode_spec(api.model_pb2.ModelSpec(name="n").SerializeToString()).name == "n"
