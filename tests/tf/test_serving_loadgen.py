"""benchmarks/serving's Go client (benchmarks/serving/loadgen, built by
benchmarks/serving/build-loadgen.sh) against the native model server serving the
benchmark's own model, with the request bytes benchmarks/serving/run.py makes: gofmt and
go vet clean, it calls over REST and gRPC (through run.py's GoClient, as the benchmark
runs it) and checks the answers, and a wrong request stops it: exit 1 with the server's
error in its output."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

pytestmark = pytest.mark.tf

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "benchmarks" / "serving" / "build-loadgen.sh"


def _missing(what: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} is missing")
    pytest.skip(f"{what} is missing")


def _bench() -> ModuleType:
    """benchmarks/serving/run.py (not a package) as a module."""
    if "serving_bench_run" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "serving_bench_run", ROOT / "benchmarks" / "serving" / "run.py"
        )
        assert spec is not None
        assert spec.loader is not None
        sys.modules["serving_bench_run"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["serving_bench_run"])
    return sys.modules["serving_bench_run"]


@pytest.fixture(scope="module")
def loadgen() -> Path:
    if shutil.which("go") is None and not Path("/usr/local/go/bin/go").exists():
        _missing("the Go toolchain")
    checked = subprocess.run(
        ["bash", str(BUILD), "--test"], capture_output=True, text=True, timeout=600, check=False
    )
    assert checked.returncode == 0, (checked.stdout + checked.stderr)[-4000:]
    built = subprocess.run(
        ["bash", str(BUILD)], capture_output=True, text=True, timeout=600, check=False
    )
    assert built.returncode == 0, built.stderr[-4000:]
    binary = Path(built.stdout.strip().splitlines()[-1])
    assert os.access(binary, os.X_OK), binary
    return binary


@pytest.fixture(scope="module")
def native_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int]]:
    """The native model server of the benchmark's model "digits", batching on, as run.py
    starts it: its REST and gRPC ports."""
    from tfkube.modelserver import native_binary

    if native_binary() is None:
        _missing("tfkube-modelserver (make install)")
    bench = _bench()
    export = tmp_path_factory.mktemp("loadgen") / "export"
    bench.write_model(export)
    proc, rest_port, grpc_port = bench.start_server(export, True, [], {}, "native")
    try:
        yield rest_port, grpc_port
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.parametrize("kind", ["rest", "grpc"])
def test_calls_and_checks_answers(
    loadgen: Path, native_server: tuple[int, int], tmp_path: Path, kind: str
) -> None:
    bench = _bench()
    client = bench.GoClient(loadgen, tmp_path)
    x = np.random.default_rng(0).random((64, 64), dtype=np.float32)
    rest_port, grpc_port = native_server
    measure = client.rest if kind == "rest" else client.grpc
    result = measure(rest_port if kind == "rest" else grpc_port, x, 2, 1.0)
    assert result["requests"] > 0, result
    assert result["rps"] > 0, result
    assert 0 < result["p50_ms"] <= result["p99_ms"], result
    assert result["cpu_us"] > 0, result


@pytest.mark.parametrize("kind", ["rest", "grpc"])
def test_a_wrong_request_stops_it_with_the_servers_error(
    loadgen: Path, native_server: tuple[int, int], tmp_path: Path, kind: str
) -> None:
    """Model "nope" is not served: the first answer (404 / NOT_FOUND) stops the run."""
    bench = _bench()
    x = np.ones((1, 64), np.float32)
    rest_port, grpc_port = native_server
    request = tmp_path / "request"
    if kind == "rest":
        request.write_bytes(bench.rest_body(x))
        port, where = rest_port, "-path=/v1/models/nope:predict"
    else:
        message = bench.grpc_request(x)
        message.model_spec.name = "nope"
        request.write_bytes(message.SerializeToString())
        port, where = grpc_port, f"-method={bench.GRPC_METHOD}"
    done = subprocess.run(
        [
            str(loadgen),
            f"-kind={kind}",
            f"-addr=127.0.0.1:{port}",
            "-clients=2",
            "-seconds=1",
            f"-request={request}",
            where,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == ""
    status = "HTTP 404" if kind == "rest" else "NotFound"
    assert status in done.stderr, done.stderr
    assert "Servable not found for request: Latest(nope)" in done.stderr, done.stderr


def test_prints_one_json_line(
    loadgen: Path, native_server: tuple[int, int], tmp_path: Path
) -> None:
    """The line run.py reads, with every field (the CPU is the client's own, over the
    measurement)."""
    bench = _bench()
    request = tmp_path / "request"
    request.write_bytes(bench.rest_body(np.ones((1, 64), np.float32)))
    done = subprocess.run(
        [
            str(loadgen),
            "-kind=rest",
            f"-addr=127.0.0.1:{native_server[0]}",
            "-clients=1",
            "-seconds=0.3",
            "-warmup=0",
            f"-request={request}",
            f"-path={bench.REST_PATH}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    out = json.loads(line)
    assert set(out) == {
        "kind",
        "clients",
        "requests",
        "seconds",
        "rps",
        "p50_ms",
        "p99_ms",
        "cpu_s",
        "cpu_us_per_request",
    }
    assert (out["kind"], out["clients"]) == ("rest", 1), out
    assert out["requests"] > 0, out
    assert out["seconds"] >= 0.3, out
