"""tfkube's model server as a real process, with real SavedModels made here, asked the way
TensorFlow Serving's users ask: the `tensorflow-serving-api` package's own gRPC stubs and
messages (unchanged client code: only the address and the metadata are ours), and REST.

One model server serves two versions (`--model_version_policy=latest:2`) labelled
`stable` and `canary`, batches (`--enable_batching`), warms each version up from its
`assets.extra/tf_serving_warmup_requests`, and wants its secret on every call but the
health check. Each SavedModel has a predict signature (`serving_default`) and, made with
TensorFlow's v1 builder as an Estimator export would be, classify and regress ones.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest

pytestmark = pytest.mark.tf

SECRET = "s3cret-for-the-model-server"
AUTH = [("authorization", f"Bearer {SECRET}")]


def build_model(base: Path, version: int, warm_up: int = 0) -> None:
    """Version `version` of model "m": y = x * version (float32 [?, 2]) and the version
    (int64 [?]) from serving_default; classify and regress from serialized tf.Examples
    with one float feature "x"."""
    import tensorflow as tf

    partial = base / f".{version}.partial"
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 2], name="x")
        rows = tf.shape(x)[0]
        served = tf.fill(tf.expand_dims(rows, 0), tf.constant(version, tf.int64))
        examples = tf.compat.v1.placeholder(tf.string, [None], name="examples")
        feature = tf.io.parse_example(examples, {"x": tf.io.FixedLenFeature([1], tf.float32)})
        f = feature["x"]
        scores = tf.concat([f, 1.0 - f], axis=1)
        classes = tf.tile(tf.constant([["yes", "no"]]), tf.stack([tf.shape(f)[0], 1]))
        sigs = tf.compat.v1.saved_model.signature_def_utils
        with tf.compat.v1.Session(graph=graph) as sess:
            builder = tf.compat.v1.saved_model.Builder(str(partial))
            builder.add_meta_graph_and_variables(
                sess,
                ["serve"],
                signature_def_map={
                    "serving_default": sigs.predict_signature_def(
                        {"x": x}, {"y": x * float(version), "version": served}
                    ),
                    "classify": sigs.classification_signature_def(examples, classes, scores),
                    "regress": sigs.regression_signature_def(examples, f * 2.0),
                },
            )
            builder.save()
    if warm_up:
        from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

        extra = partial / "assets.extra"
        extra.mkdir()
        with tf.io.TFRecordWriter(str(extra / "tf_serving_warmup_requests")) as writer:
            for _ in range(warm_up):
                request = predict_pb2.PredictRequest()
                request.model_spec.name = "m"
                request.inputs["x"].CopyFrom(tf.make_tensor_proto(np.ones((1, 2), np.float32)))
                log = prediction_log_pb2.PredictionLog(
                    predict_log=prediction_log_pb2.PredictLog(request=request)
                )
                writer.write(log.SerializeToString())
    partial.rename(base / str(version))


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    rest: str
    grpc_address: str
    log: Path


IMPLEMENTATIONS = ["python", "native"]
"""Every test that starts a model server runs against each: `python -m tfkube.serving` and
the native `tfkube-modelserver` (the same flags, the same answers)."""


def _need_native() -> None:
    """Fail (under CI=true) or skip when the native model server is not installed."""
    from tfkube.modelserver import native_binary

    if native_binary() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("tfkube-modelserver is not installed (make install)")
        pytest.skip("tfkube-modelserver is not installed (make install)")


@pytest.fixture(scope="module", params=IMPLEMENTATIONS)
def impl(request: pytest.FixtureRequest) -> str:

    if request.param == "native":
        _need_native()
    return str(request.param)


def _start(base: Path, log: Path, *flags: str, versions: int = 2, impl: str = "python") -> Server:
    """A model server of model "m" from `base`, once `versions` versions are available."""
    from tfkube.engines.local import free_ports
    from tfkube.modelserver import model_server_command

    rest_port, grpc_port = free_ports(2)
    env = {**os.environ, "TFKUBE_SERVING_TOKEN": SECRET}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                *model_server_command("native" if impl == "native" else "python"),
                "--model_name=m",
                f"--model_base_path={base}",
                f"--rest_api_port={rest_port}",
                f"--port={grpc_port}",
                "--file_system_poll_wait_seconds=0.5",
                *flags,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    server = Server(proc, f"http://127.0.0.1:{rest_port}", f"127.0.0.1:{grpc_port}", log)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            r = httpx.get(f"{server.rest}/v1/models/m", headers=dict(AUTH), timeout=2)
            states = [v["state"] for v in r.json().get("model_version_status", [])]
            if r.status_code == 200 and states.count("AVAILABLE") >= versions:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise AssertionError(f"the model server did not start: {log.read_text()[-3000:]}")


@contextlib.contextmanager
def running(base: Path, *flags: str, versions: int = 2, impl: str = "python") -> Iterator[Server]:
    """`_start`ed for the block (its log beside `base`), then stopped."""
    started = _start(base, base.parent / "server.log", *flags, versions=versions, impl=impl)
    try:
        yield started
    finally:
        started.proc.terminate()
        started.proc.wait(30)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, impl: str) -> Iterator[Server]:
    base = tmp_path_factory.mktemp(f"models-{impl}")
    build_model(base, 1)
    build_model(base, 2, warm_up=3)
    with running(
        base,
        "--model_version_policy=latest:2",
        "--version_labels=stable=1,canary=2",
        "--enable_batching",
        impl=impl,
    ) as started:
        yield started


@pytest.fixture(scope="module")
def channel(server: Server) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.grpc_address) as ch:
        yield ch


def _predict_request(x: np.ndarray, version: int | None = None, label: str = "") -> object:
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.name = "m"
    request.model_spec.signature_name = "serving_default"
    if version is not None:
        request.model_spec.version.value = version
    if label:
        request.model_spec.version_label = label
    request.inputs["x"].CopyFrom(tf.make_tensor_proto(x))
    return request


def test_predict_with_tensorflow_serving_api(server: Server, channel: grpc.Channel) -> None:
    """A TensorFlow Serving client's code, unchanged: its stub, its messages, tf.make_ndarray."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    x = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    latest = stub.Predict(_predict_request(x), 10, metadata=AUTH)
    assert latest.model_spec.name == "m"
    assert latest.model_spec.version.value == 2
    assert latest.model_spec.signature_name == "serving_default"
    np.testing.assert_allclose(tf.make_ndarray(latest.outputs["y"]), x * 2)
    assert tf.make_ndarray(latest.outputs["version"]).tolist() == [2, 2]
    one = stub.Predict(_predict_request(x, version=1), 10, metadata=AUTH)
    np.testing.assert_allclose(tf.make_ndarray(one.outputs["y"]), x)
    stable = stub.Predict(_predict_request(x, label="stable"), 10, metadata=AUTH)
    assert stable.model_spec.version.value == 1
    canary = stub.Predict(_predict_request(x, label="canary"), 10, metadata=AUTH)
    assert canary.model_spec.version.value == 2
    filtered = _predict_request(x)
    filtered.output_filter.append("version")  # type: ignore[attr-defined]
    assert set(stub.Predict(filtered, 10, metadata=AUTH).outputs) == {"version"}
    # a tensor sent as float_val (not tensor_content) reads the same
    request = _predict_request(x)
    tensor = request.inputs["x"]  # type: ignore[attr-defined]
    tensor.ClearField("tensor_content")
    tensor.float_val.extend(x.reshape(-1).tolist())
    np.testing.assert_allclose(
        tf.make_ndarray(stub.Predict(request, 10, metadata=AUTH).outputs["y"]), x * 2
    )


@pytest.mark.parametrize(
    ("change", "code", "words"),
    [
        pytest.param("no-token", grpc.StatusCode.UNAUTHENTICATED, "token", id="no-token"),
        pytest.param("model", grpc.StatusCode.NOT_FOUND, "Servable not found", id="model"),
        pytest.param("version", grpc.StatusCode.NOT_FOUND, "Specific(m, 7)", id="version"),
        pytest.param("label", grpc.StatusCode.INVALID_ARGUMENT, "label: beta", id="label"),
        pytest.param("dtype", grpc.StatusCode.INVALID_ARGUMENT, "DT_FLOAT", id="dtype"),
        pytest.param("shape", grpc.StatusCode.INVALID_ARGUMENT, "shape", id="shape"),
        pytest.param("signature", grpc.StatusCode.INVALID_ARGUMENT, "nope", id="signature"),
    ],
)
def test_predict_errors_are_tensorflow_servings(
    channel: grpc.Channel, change: str, code: grpc.StatusCode, words: str
) -> None:
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    x = np.ones((1, 2), np.float32)
    request = _predict_request(x)
    metadata = AUTH
    if change == "no-token":
        metadata = []
    elif change == "model":
        request.model_spec.name = "other"  # type: ignore[attr-defined]
    elif change == "version":
        request = _predict_request(x, version=7)
    elif change == "label":
        request = _predict_request(x, label="beta")
    elif change == "dtype":
        request = _predict_request(x.astype(np.float64))
    elif change == "shape":
        request = _predict_request(np.ones((1, 3), np.float32))
    elif change == "signature":
        request.model_spec.signature_name = "nope"  # type: ignore[attr-defined]
    with pytest.raises(grpc.RpcError) as caught:
        stub.Predict(request, 10, metadata=metadata)
    assert caught.value.code() == code, caught.value.details()
    assert words in (caught.value.details() or "")


def test_metadata_and_status(channel: grpc.Channel) -> None:
    from tensorflow_serving.apis import (
        get_model_metadata_pb2,
        get_model_status_pb2,
        model_service_pb2_grpc,
        prediction_service_pb2_grpc,
    )

    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    request = get_model_metadata_pb2.GetModelMetadataRequest()
    request.model_spec.name = "m"
    request.metadata_field.append("signature_def")
    answer = stub.GetModelMetadata(request, 10, metadata=AUTH)
    assert answer.model_spec.version.value == 2
    signatures = get_model_metadata_pb2.SignatureDefMap()
    assert answer.metadata["signature_def"].Unpack(signatures)
    default = signatures.signature_def["serving_default"]
    assert default.method_name == "tensorflow/serving/predict"
    assert [d.size for d in default.inputs["x"].tensor_shape.dim] == [-1, 2]
    assert default.inputs["x"].dtype == 1  # DT_FLOAT
    assert default.inputs["x"].name == "x:0"
    assert signatures.signature_def["classify"].method_name == "tensorflow/serving/classify"

    models = model_service_pb2_grpc.ModelServiceStub(channel)
    status = get_model_status_pb2.GetModelStatusRequest()
    status.model_spec.name = "m"
    versions = models.GetModelStatus(status, 10, metadata=AUTH).model_version_status
    assert [(v.version, v.state, v.status.error_code) for v in versions] == [
        (2, get_model_status_pb2.ModelVersionStatus.AVAILABLE, 0),
        (1, get_model_status_pb2.ModelVersionStatus.AVAILABLE, 0),
    ]
    status.model_spec.version_label = "stable"
    (stable,) = models.GetModelStatus(status, 10, metadata=AUTH).model_version_status
    assert stable.version == 1


def _examples(values: list[float]) -> object:
    import tensorflow as tf
    from tensorflow_serving.apis import input_pb2

    examples = [
        tf.train.Example(
            features=tf.train.Features(
                feature={"x": tf.train.Feature(float_list=tf.train.FloatList(value=[v]))}
            )
        )
        for v in values
    ]
    return input_pb2.Input(example_list=input_pb2.ExampleList(examples=examples))


def test_classify_and_regress(channel: grpc.Channel) -> None:
    from tensorflow_serving.apis import (
        classification_pb2,
        prediction_service_pb2_grpc,
        regression_pb2,
    )

    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    request = classification_pb2.ClassificationRequest(input=_examples([0.25, 0.75]))
    request.model_spec.name = "m"
    request.model_spec.signature_name = "classify"
    result = stub.Classify(request, 10, metadata=AUTH).result
    got = [[(c.label, round(c.score, 3)) for c in row.classes] for row in result.classifications]
    assert got == [[("yes", 0.25), ("no", 0.75)], [("yes", 0.75), ("no", 0.25)]]
    regress = regression_pb2.RegressionRequest(input=_examples([1.5, 3.0]))
    regress.model_spec.name = "m"
    regress.model_spec.signature_name = "regress"
    values = [r.value for r in stub.Regress(regress, 10, metadata=AUTH).result.regressions]
    assert values == [3.0, 6.0]
    wrong = classification_pb2.ClassificationRequest(input=_examples([0.5]))
    wrong.model_spec.name = "m"  # serving_default is a predict signature
    with pytest.raises(grpc.RpcError) as caught:
        stub.Classify(wrong, 10, metadata=AUTH)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "tensorflow/serving/classify" in (caught.value.details() or "")


def test_health_needs_no_secret(channel: grpc.Channel) -> None:
    check = channel.unary_unary("/grpc.health.v1.Health/Check")
    assert check(b"", timeout=10) == b"\x08\x01"  # SERVING


def test_readiness_of_both_doors_needs_no_secret(server: Server) -> None:
    """The REST port's readiness path (a Kubernetes probe's) answers without the secret,
    and only after asking the gRPC door's health check itself; the rest still wants it."""
    ready = httpx.get(f"{server.rest}/tfkube/ready", timeout=10)
    assert ready.status_code == 200, ready.text
    assert ready.json() == {"ready": True}
    assert httpx.get(f"{server.rest}/v1/models/m", timeout=10).status_code == 401


def test_the_grpc_probe_says_why_a_closed_door_is_not_ready() -> None:
    """The readiness' gRPC half against a port where nothing listens: a reason, no hang."""
    import asyncio

    from tfkube.engines.local import free_ports
    from tfkube.serving._grpc import HealthProbe

    (port,) = free_ports(1)
    probe = HealthProbe("0.0.0.0", port, timeout=2)
    try:
        started = time.monotonic()
        assert asyncio.run(probe()) == f"gRPC at 127.0.0.1:{port}: UNAVAILABLE"
        assert time.monotonic() - started < 5
    finally:
        probe.close()


def test_rest_labels_and_fast_path(server: Server) -> None:
    x = [[1.0, 2.0]]
    with httpx.Client(headers=dict(AUTH), timeout=10) as http:
        canary = http.post(
            f"{server.rest}/v1/models/m/labels/canary:predict", json={"instances": x}
        )
        assert canary.status_code == 200, canary.text
        assert canary.json() == {"predictions": [{"version": 2, "y": [2.0, 4.0]}]}
        stable = http.post(f"{server.rest}/v1/models/m/labels/stable:predict", json={"inputs": x})
        assert stable.json() == {"outputs": {"version": [1], "y": [[1.0, 2.0]]}}
        status = http.get(f"{server.rest}/v1/models/m/labels/stable").json()
        assert [v["version"] for v in status["model_version_status"]] == ["1"]
        bad = http.post(f"{server.rest}/v1/models/m/labels/beta:predict", json={"instances": x})
        assert bad.status_code == 400
        assert bad.json() == {"error": "Unrecognized servable version label: beta"}
        ragged = http.post(
            f"{server.rest}/v1/models/m:predict", json={"instances": [[1.0], [1.0, 2.0]]}
        )
        assert ragged.status_code == 400
        assert set(ragged.json()) == {"error"}
        assert (
            httpx.post(f"{server.rest}/v1/models/m:predict", json={"instances": x}).status_code
            == 401
        )


def test_concurrent_requests_are_batched_and_answered_each_their_own(
    server: Server, channel: grpc.Channel
) -> None:
    """16 clients at once, over both doors: each gets its own rows back."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    failures: list[str] = []

    def client(i: int) -> None:
        with httpx.Client(headers=dict(AUTH), timeout=30) as http:
            for j in range(20):
                x = np.full((1 + (i + j) % 3, 2), float(i * 100 + j), np.float32)
                if i % 2:
                    got = tf.make_ndarray(
                        stub.Predict(_predict_request(x), 30, metadata=AUTH).outputs["y"]
                    )
                else:
                    answer = http.post(
                        f"{server.rest}/v1/models/m:predict", json={"inputs": x.tolist()}
                    )
                    got = np.array(answer.json()["outputs"]["y"])
                if not np.allclose(got, x * 2):
                    failures.append(f"client {i} request {j}: {got} for {x}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:3]


def test_warm_up_ran_before_the_version_answered(server: Server) -> None:
    assert "serving version 2 of m (warmed up with 3 requests)" in server.log.read_text()


def test_traffic_split_and_a_new_version_under_load(tmp_path: Path, impl: str) -> None:
    """`--label_traffic` shares unnamed requests between the labels; a third export is
    loaded while a client keeps asking, and no request fails."""
    build_model(tmp_path, 1)
    build_model(tmp_path, 2)
    server = _start(
        tmp_path,
        tmp_path / "split.log",
        "--model_version_policy=latest:2",
        "--version_labels=stable=1,canary=2",
        "--label_traffic=stable=50,canary=50",
        impl=impl,
    )
    try:
        seen: list[int] = []
        errors: list[str] = []
        with httpx.Client(headers=dict(AUTH), timeout=10) as http:
            for _ in range(60):
                r = http.post(
                    f"{server.rest}/v1/models/m:predict", json={"instances": [[1.0, 1.0]]}
                )
                seen.append(r.json()["predictions"][0]["version"])
            assert 10 < seen.count(1) < 50, seen  # 50/50: both answer
            assert seen.count(1) + seen.count(2) == 60, seen
            build_model(tmp_path, 3)
            deadline = time.monotonic() + 60
            versions: set[int] = set()
            while time.monotonic() < deadline and 3 not in versions:
                r = http.post(
                    f"{server.rest}/v1/models/m/versions/3:predict",
                    json={"instances": [[1.0, 1.0]]},
                )
                if r.status_code == 200:
                    versions.add(3)
                r = http.post(
                    f"{server.rest}/v1/models/m/labels/canary:predict",
                    json={"instances": [[1.0, 1.0]]},
                )
                if r.status_code != 200:
                    errors.append(r.text)
        assert 3 in versions
        assert not errors, errors[:3]
    finally:
        server.proc.terminate()
        server.proc.wait(30)


# The engine keeps a model server by PID, not by its Popen (it outlives a server restart),
# so Python warns when the discarded Popen is collected with its process still running.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_the_local_engines_model_server_answers_grpc_at_its_upstream(
    tmp_path: Path, impl: str
) -> None:
    """The local engine's model server (the one a server starts for a team): its handle
    keeps a gRPC port, its upstream names it, and a `tensorflow-serving-api` stub predicts
    there with the upstream's headers as metadata; without them it is refused."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    from tfkube.engines import Health, ModelServerWorkload, Tenant
    from tfkube.engines.local._services import LocalModelServers
    from tfkube.spec import load_job_text

    base = tmp_path / "export"
    base.mkdir()
    build_model(base, 1)
    job = load_job_text(
        "apiVersion: tfkube.io/v1alpha1\nkind: TFJob\nmetadata: {name: m}\n"
        "spec: {replicas: {worker: {replicas: 1}}, code: {source: 'https://example.invalid/c'}}\n",
        "job",
    )
    workload = ModelServerWorkload("model1", "m", job, base, secret=SECRET)
    tenant = Tenant("team-a", "team-a")
    runner = LocalModelServers(tmp_path / "data", {**os.environ, "TFKUBE_MODEL_SERVER": impl}, ())
    handle = runner.start(tenant, workload)
    try:
        deadline = time.monotonic() + 120
        while (status := runner.status(tenant, workload, handle)).health is not Health.READY:
            assert status.health is Health.STARTING, status
            assert time.monotonic() < deadline, runner.log(workload).read_text()[-3000:]
            time.sleep(0.3)
        upstream = runner.upstream(tenant, workload, handle)
        assert upstream.grpc == f"127.0.0.1:{handle.data['grpc_port']}"
        metadata = [(k.lower(), v) for k, v in upstream.headers.items()]
        with grpc.insecure_channel(upstream.grpc) as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            x = np.array([[1.0, 2.0]], np.float32)
            answer = stub.Predict(_predict_request(x), 10, metadata=metadata)
            np.testing.assert_allclose(tf.make_ndarray(answer.outputs["y"]), x)
            with pytest.raises(grpc.RpcError) as refused:
                stub.Predict(_predict_request(x), 10)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        runner.stop(tenant, workload, handle)
    assert not runner.running(handle)


@pytest.mark.parametrize("inter_op", [-1, 0, 2])
def test_each_inter_op_setting_answers_the_same(tmp_path: Path, inter_op: int) -> None:
    """`--tensorflow_inter_op_parallelism`: the default (-1) runs a call's ops on the
    calling thread; 0 (TensorFlow's pool) and N threads answer the same, predict and
    classify (a parse_example graph) alike."""
    from tfkube.serving._store import RUN_IN_CALLER, load_saved_model

    build_model(tmp_path, 3)
    servable = load_saved_model(tmp_path / "3", 3, inter_op)
    assert servable.session._config.inter_op_parallelism_threads == inter_op
    if inter_op == RUN_IN_CALLER:
        default = load_saved_model(tmp_path / "3", 3)
        assert default.session._config.inter_op_parallelism_threads == RUN_IN_CALLER
    x = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    out = servable.run("serving_default", {"x": x})
    np.testing.assert_array_equal(out["y"], x * 3)
    np.testing.assert_array_equal(out["version"], [3, 3])
    strings = np.empty(2, dtype=object)
    strings[:] = [e.SerializeToString() for e in _examples([0.25, 0.5]).example_list.examples]  # type: ignore[attr-defined]
    scores = servable.run("classify", {"inputs": strings})["scores"]
    np.testing.assert_allclose(scores, [[0.25, 0.75], [0.5, 0.5]])


def test_a_stopped_native_server_writes_the_answers_in_flight(tmp_path: Path) -> None:
    """SIGTERM while a request is in flight (its body still arriving): its answer is still
    written before the process ends. The native server used to end as soon as its HTTP
    server's shutdown began (Serve returns then), cutting such answers off."""
    _need_native()
    base = tmp_path / "models"
    build_model(base, 1)
    started = _start(base, tmp_path / "server.log", versions=1, impl="native")
    host, port = started.rest.removeprefix("http://").split(":")
    body = b'{"instances": [[1.0, 2.0]]}'
    head = (
        "POST /v1/models/m:predict HTTP/1.1\r\nHost: m\r\n"
        + "".join(f"{k}: {v}\r\n" for k, v in AUTH)
        + f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    try:
        with socket.create_connection((host, int(port)), timeout=30) as conn:
            conn.sendall(head.encode() + body[:5])
            time.sleep(0.5)  # the handler is reading the body
            started.proc.terminate()
            time.sleep(0.5)
            assert started.proc.poll() is None, "ended with an answer in flight"
            conn.sendall(body[5:])
            answer = b""
            while b'"predictions"' not in answer:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200 "), answer
        assert b'"predictions"' in answer, answer
        assert started.proc.wait(30) is not None
    finally:
        if started.proc.poll() is None:
            started.proc.kill()
            started.proc.wait(10)
