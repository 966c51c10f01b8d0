"""From a trained job to a served model, with real TensorFlow, through a real server:
both examples are trained (local engine), export a SavedModel, are served, and answer the
held-out digits through TensorFlow Serving's REST API (behind the server's proxy) with
the accuracy the job reported. Bad requests get TensorFlow Serving's error shape and
status and the model server keeps serving; a newer export is picked up without a
restart; the model servers come back after a restart of `tfkube server`; stop ends the
process. Before that, the between-graph job through the platform: its replicas' end, the
worker's log after the end, the accuracy series, the final checkpoint, TensorBoard behind
the proxy. Both examples are trained once for the module (`trained`), by one member, and
each test reads the jobs. On SQLite only: training is slow on two cores."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil
import pytest
import yaml

import tfkube
from conftest import tagged_processes  # tests/conftest.py
from tfkube.modelserver import is_model_server
from tfkube.wire import JobOut

from ._server import Api, ServerProc, api_for, free_port, through_grpc
from .conftest import start_server, stop_server

pytestmark = pytest.mark.tf
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def held_out_digits() -> tuple[np.ndarray, np.ndarray]:
    """The examples' test split (their documented seed): 64 pixels in [0, 1], labels."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(x))
    x, y = (x[order] / 16.0).astype(np.float32), y[order]
    n_test = len(x) // 5
    return x[:n_test], y[:n_test]


@pytest.fixture(scope="module")
def served_platform(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProc, Api, str]]:
    extra = ["--grpc-port", str(free_port())]
    server, admin, tag = start_server(tmp_path_factory.mktemp("serving"), "sqlite", None, extra)
    try:
        yield server, admin, tag
    finally:
        stop_server(server, admin, tag)


@dataclass
class Trained:
    """Both examples trained through the module's server by one member."""

    api: Api
    """The member's API client (the jobs are theirs)."""
    mnist_version: int
    """The version of the uploaded between-graph code."""
    between: JobOut
    strategy: JobOut


@pytest.fixture(scope="module")
def trained(served_platform: tuple[ServerProc, Api, str]) -> Iterator[Trained]:
    """The between-graph example (1 PS + 2 workers, 300 steps) and the ps-strategy example
    (300 steps), submitted at once and waited for: the tests only read them (the serving
    test adds an export after the others have read the job's outputs)."""
    server, admin, _ = served_platform
    member = admin.new_user()
    admin.add_member("default", member, "member")
    api = api_for(server.url, member)
    try:
        with tfkube.Client(server.url, api.token, team="default") as c:
            art = c.upload(EXAMPLES / "mnist-between-graph", "mnist")
            c.upload(EXAMPLES / "ps-strategy", "ps")
            between = c.submit(
                name="mnist", workers=2, ps=1, code="mnist", args=["--train_steps=300"]
            )
            manifest = yaml.safe_load((EXAMPLES / "ps-strategy" / "job.yaml").read_text())
            manifest["spec"]["code"]["source"] = "artifact:ps"
            manifest["spec"]["replicas"]["chief"]["args"] = ["--train_steps=300"]
            strategy = c.submit(manifest)
            done = [c.wait(job.id, timeout=900, poll=1.0) for job in (between, strategy)]
        yield Trained(api, art.version, *done)
    finally:
        api.close()


def test_between_graph_example_through_the_server(
    served_platform: tuple[ServerProc, Api, str], trained: Trained, tmp_path: Path
) -> None:
    server, admin, _ = served_platform
    api, done = trained.api, trained.between
    assert done.phase == "Succeeded", (done.reason, done.message)
    assert done.code == f"mnist:{trained.mnist_version}"
    ps = next(r for r in done.replicas or [] if r.key == "ps-0")
    assert ps.state == "Stopped"  # ended by the platform, not waited for
    with tfkube.Client(server.url, api.token, team="default") as c:
        log = "\n".join(c.logs(done.id, "worker-1"))
        assert "worker 1:" in log
        assert "steps in" in log
        scalars = c.scalars(done.id)
        accuracy = next(s for s in scalars.series if s.tag == "accuracy")
        assert accuracy.points
        assert all(0.0 <= p.value <= 1.0 for p in accuracy.points)
        assert scalars.progress.total == 300
        assert scalars.progress.fraction is not None
        files = {f.path for f in c.outputs(done.id)}
        assert "checkpoint" in files
        index = c.download(done.id, "checkpoint", tmp_path / "checkpoint").read_text()
        latest = Path(index.split('"')[1]).name  # e.g. model.ckpt-301
        assert any(f.startswith(latest) for f in files)
        bundle = c.download(done.id, "", tmp_path / "outputs.tar.gz")
        with tarfile.open(bundle) as tar:
            names = tar.getnames()
        assert f"{latest}.index" in names
        assert ".tfkube/logs/worker-1/0.log" in names
    # TensorBoard through the server's authenticating proxy, started on demand.
    base = f"/proxy/tensorboard/{done.id}"
    page = api.get(f"{base}/", timeout=120)
    assert page.status_code == 200
    assert "<tf-tensorboard" in page.text or "tensorboard" in page.text.lower()
    tags = api.get(f"{base}/data/plugin/scalars/tags", timeout=120)
    assert tags.status_code == 200
    assert "accuracy" in tags.text
    assert httpx.get(f"{server.url}{base}/").status_code == 401
    stranger = api_for(server.url, admin.new_user())
    try:
        assert stranger.get(f"{base}/").status_code == 404
    finally:
        stranger.close()


def _model_servers(tag: str) -> list[int]:
    return [p.pid for p in tagged_processes(tag) if is_model_server(p.cmdline())]


def _ports_alone_reach_nothing(pids: list[int]) -> None:
    """Where a model server has a network of its own (confined), its REST and gRPC ports
    are not even reachable from the host: only the server's proxy gets in (its relay)."""
    import socket

    for pid in pids:
        if os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net"):
            continue  # unconfined: on the host's loopback, answering nothing without its secret
        argv = psutil.Process(pid).cmdline()
        for flag in ("--rest_api_port=", "--port="):
            port = int(next(a.removeprefix(flag) for a in argv if a.startswith(flag)))
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", port), timeout=5).close()


def _result(c: tfkube.Client, job_id: str, tmp: Path) -> dict[str, Any]:
    """What the job reported (`result.json`): its accuracy and final global step."""
    return dict(json.loads(c.download(job_id, "result.json", tmp / f"{job_id}.json").read_text()))


def _accuracy(http: httpx.Client, url: str, x: np.ndarray, y: np.ndarray) -> float:
    """Half the digits as rows (`instances`), half as columns (`inputs`)."""
    half = len(x) // 2
    rows = http.post(f"{url}:predict", json={"instances": x[:half].tolist()})
    assert rows.status_code == 200, rows.text
    predictions = rows.json()["predictions"]
    assert set(predictions[0]) == {"classes", "probabilities"}
    assert len(predictions[0]["probabilities"]) == 10
    columns = http.post(f"{url}:predict", json={"inputs": {"x": x[half:].tolist()}})
    assert columns.status_code == 200, columns.text
    classes = [p["classes"] for p in predictions] + columns.json()["outputs"]["classes"]
    return float(np.mean(np.array(classes) == y))


def _wrong_requests_answer_like_tensorflow_serving(http: httpx.Client, url: str) -> None:
    cases: list[tuple[str, dict[str, Any], int, str]] = [
        (f"{url}:predict", {"json": {"instances": [[1.0, 2.0, 3.0]]}}, 400, "shape"),
        (
            f"{url}:predict",
            {"json": {"instances": [[0.5] * 64], "inputs": [[0.5] * 64]}},
            400,
            "only one",
        ),
        (f"{url}:predict", {"content": b"{not json"}, 400, "JSON"),
        (f"{url}:predict", {"json": {"instances": [["a"] * 64]}}, 400, "DT_FLOAT"),
        (f"{url}/versions/999999:predict", {"json": {"instances": [[0.5] * 64]}}, 404, "Servable"),
        (
            url.rsplit("/", 1)[0] + "/nope:predict",
            {"json": {"instances": [[0.5] * 64]}},
            404,
            "Servable",
        ),
    ]
    for target, body, status, words in cases:
        answer = http.post(target, **body)
        assert answer.status_code == status, (target, answer.text)
        assert set(answer.json()) == {"error"}
        assert words in answer.json()["error"]


def test_train_serve_predict_both_examples(
    served_platform: tuple[ServerProc, Api, str], trained: Trained, tmp_path: Path
) -> None:
    server, admin, tag = served_platform
    viewer, outsider = admin.new_user(), admin.new_user()
    admin.add_member("default", viewer, "viewer")
    apis = [api_for(server.url, u) for u in (viewer, outsider)]
    viewer_api, outsider_api = apis
    api, between, strategy = trained.api, trained.between, trained.strategy
    x, y = held_out_digits()
    try:
        c = tfkube.Client(server.url, api.token, team="default")
        servers = {}
        for job in (between, strategy):
            done = job
            assert done.phase == "Succeeded", (done.name, done.reason, done.message)
            # One export, named by the global step (async workers may pass the last step).
            assert c.exports(job.id) == [_result(c, job.id, tmp_path)["global_step"]]
            servers[job.name] = c.serve(job.id, name=f"{job.name}-digits")
        with httpx.Client(headers={"Authorization": f"Bearer {api.token}"}, timeout=60) as http:
            for job in (between, strategy):
                ready = c.wait_ready(servers[job.name].id, timeout=240)
                assert ready.serving_version == c.exports(job.id)[-1]
                reported = float(_result(c, job.id, tmp_path)["test_accuracy"])
                served = _accuracy(http, ready.url, x, y)
                assert abs(served - reported) <= 0.005, (job.name, served, reported)
            url = servers["mnist"].url
            first = c.exports(between.id)[0]
            status = http.get(url).json()
            assert status["model_version_status"][0] == {
                "version": str(first),
                "state": "AVAILABLE",
                "status": {"error_code": "OK", "error_message": ""},
            }
            metadata = http.get(f"{url}/metadata").json()
            signature = metadata["metadata"]["signature_def"]["signature_def"]["serving_default"]
            assert signature["inputs"]["x"]["tensor_shape"]["dim"][1]["size"] == "64"

            pids = _model_servers(tag)
            _ports_alone_reach_nothing(pids)
            _wrong_requests_answer_like_tensorflow_serving(http, url)
            assert http.get(url).status_code == 200  # still serving: nothing crashed
            assert _model_servers(tag) == pids

            # Team isolation: no credentials, another team, a viewer.
            assert httpx.get(url).json() == {"error": "sign in first"}
            stranger = outsider_api.post(f"{url}:predict", json={"instances": [[0.5] * 64]})
            assert stranger.status_code == 404
            assert "error" in stranger.json()
            assert (
                viewer_api.post(f"{url}:predict", json={"instances": [[0.5] * 64]}).status_code
                == 200
            )
            refused = viewer_api.post(f"/api/v1/jobs/{between.id}/model-servers", json={})
            assert refused.status_code == 403

            # TensorFlow Serving's gRPC API through the server, with the member's token.
            grpc_port = int(server.extra[server.extra.index("--grpc-port") + 1])
            model = url.rsplit("/", 1)[1]
            args = (servers["mnist"].id, model, api.token, outsider_api.token, x)
            classes = through_grpc(f"127.0.0.1:{grpc_port}", *args)
            reported = float(_result(c, between.id, tmp_path)["test_accuracy"])
            assert abs(float(np.mean(classes == y)) - reported) <= 0.005

            # A newer export is served without a restart.
            export = Path(server.data_dir) / "teams" / "default" / "outputs" / between.id / "export"
            newer = first + 1
            shutil.copytree(export / str(first), export / f".partial-{newer}")
            (export / f".partial-{newer}").rename(export / str(newer))

            def serving(version: int) -> bool:
                return c.model_server(servers["mnist"].id).serving_version == version

            _wait(f"version {newer} to be served", lambda: serving(newer), 60)
            assert _model_servers(tag) == pids
            assert http.get(url).json()["model_version_status"][0]["version"] == str(newer)

            # Rolled to a pinned version and back to the latest (`PATCH`, and the CLI's
            # `tfkube serving roll`): locally the process is restarted with it.
            rolled = subprocess.run(
                [sys.executable, "-m", "tfkube", "serving", "roll", "mnist-digits",
                 "--version", str(first)],
                env={**os.environ, "TFKUBE_URL": server.url, "TFKUBE_TOKEN": api.token},
                capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            assert rolled.returncode == 0, rolled.stderr
            assert c.model_server(servers["mnist"].id).version == first
            _wait(f"version {first} to be served again", lambda: serving(first), 120)
            assert http.get(url).json()["model_version_status"][0]["version"] == str(first)
            unknown = api.patch(f"/api/v1/model-servers/{servers['mnist'].id}",
                                json={"version": 123456})  # fmt: skip
            assert unknown.status_code == 422, unknown.text
            assert "version" in unknown.text
            assert api.patch(f"/api/v1/model-servers/{servers['mnist'].id}",
                             json={}).status_code == 422  # fmt: skip
            assert viewer_api.patch(f"/api/v1/model-servers/{servers['mnist'].id}",
                                    json={"version": None}).status_code == 403  # fmt: skip
            assert c.roll_model_server(servers["mnist"].id, None).version is None
            _wait(f"version {newer} to be served again", lambda: serving(newer), 120)
            assert len(_model_servers(tag)) == 2  # the rolled process and the other

        listed = {s.name: s for s in c.model_servers()}
        assert listed["mnist-digits"].requests >= 10
        assert listed["mnist-digits"].errors >= 6
        assert listed["mnist-digits"].status == "Ready"
        shown = subprocess.run(
            [sys.executable, "-m", "tfkube", "serving", "list"],
            env={**os.environ, "TFKUBE_URL": server.url, "TFKUBE_TOKEN": api.token},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert shown.returncode == 0, shown.stderr
        assert "mnist-digits" in shown.stdout
        assert "ps-strategy-digits" in shown.stdout

        # The model servers survive a restart of the server: the same URL answers again.
        server.stop()
        _wait("the model servers to stop with the server", lambda: not _model_servers(tag), 30)
        server.start()
        c.close()
        c = tfkube.Client(server.url, api.token, team="default")
        for name, first in servers.items():
            again = c.wait_ready(first.id, timeout=240)
            assert again.url == first.url
            answer = c.predict(first.id, x[:5].tolist())
            assert len(answer["predictions"]) == 5, name
        assert c.model_server(servers["mnist"].id).serving_version == newer

        stopped = c.stop_model_server(servers["mnist"].id)
        assert stopped.status == "Stopped"
        gone = api.post(f"{servers['mnist'].url}:predict", json={"instances": [[0.5] * 64]})
        assert gone.status_code == 404
        assert len(_model_servers(tag)) == 1
        c.close()
    finally:
        for a in apis:
            a.close()


def _wait(what: str, check: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")
