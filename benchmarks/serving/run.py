"""Benchmark: tfkube's model server over REST and over gRPC against calling the loaded model
in-process (the limit), side by side in one run: 1, 4 and 16 concurrent clients, batch 1
and 64, batching on (the model server's measured default parameters).

A SavedModel shaped like the examples' exports (64 pixels -> a 64-unit hidden layer -> 10
classes; `serving_default` answers `probabilities` and `classes`) is written to a
temporary export folder; each model server serves it on two loopback ports of its own (REST
and gRPC, `--enable_batching`): `python -m tfkube.serving` ("python") and the native
`tfkube-modelserver` ("native", where installed: make install), both running the whole
time; then, alternating per round, batch size and client count:
  in-process  N threads calling the SavedModel's signature the way TensorFlow offers it
              in-process (`tf.saved_model.load(path).signatures["serving_default"](x=...)`,
              outputs `.numpy()`), on a numpy batch: the limit the issue set. Shown beside
              it, not compared: the model server's own call path in-process
              (`tfkube.serving._store.load_saved_model(...).run(...)`: the session's run
              on the SignatureDef's feeds and fetches, as TensorFlow Serving runs one);
  REST        N keep-alive connections in one asyncio client, each sending `POST
              /v1/models/digits:predict` with `{"instances": ...}` (the body encoded once:
              a client's own encoding is not the server's cost) and reading the JSON answer
              with orjson;
  gRPC        N concurrent calls on one channel (grpc.aio) of `tensorflow-serving-api`'s
              PredictionService stub: a PredictRequest made once with `tensor_content`,
              the PredictResponse parsed and its outputs read as arrays.
With `--client go` (or `both`, the default where Go is available), REST and gRPC are
(also) measured by the Go client, benchmarks/serving/loadgen (built into ~/.cache/tfkube
by benchmarks/serving/build-loadgen.sh, a no-op when current), a subprocess per
measurement in the same alternation and rounds (kinds `NAME rest (go client)`, `NAME grpc
(go client)`): N callers sending the very bytes the Python clients send (the JSON body;
the PredictRequest's `SerializeToString()`), written to a file; REST over N keep-alive
connections, gRPC as N concurrent calls on one channel; every answer checked, not
parsed. Why: on 2 cores the client's CPU is taken from the server's, and at batch 64 a
Python client's CPU per call weighs as much as the model's time; the Go client's is a
fraction of it.
Reported: requests/s, p50 and p99 latency per kind and model server, the ratios to
in-process with the same number of clients (and, for batch 1, to one sequential
in-process caller), and each client's CPU per request in µs: for the Python clients this
process's CPU time (`time.process_time()`, all its threads) over the measurement divided
by its requests, nothing subtracted (the process does nothing else meanwhile; its
warm-up is outside); for the Go client its own getrusage over the measurement (its
start and warm-up outside).

    .venv/bin/python benchmarks/serving/run.py [--seconds 3] [--rounds 3] [--json FILE]
        [--servers python,native] [--client python|go|both]
        [--server-flag=--FLAG=VALUE ...] [--server-env NAME=VALUE ...]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import httpx
import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = (1, 4, 16)
BATCHES = (1, 64)
REST_PATH = "/v1/models/digits:predict"
GRPC_METHOD = "/tensorflow.serving.PredictionService/Predict"


def write_model(export: Path) -> None:
    import tensorflow as tf

    class Digits(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            rng = np.random.default_rng(0)
            self.w1 = tf.Variable(rng.normal(size=(64, 64)).astype(np.float32))
            self.b1 = tf.Variable(np.zeros(64, np.float32))
            self.w2 = tf.Variable(rng.normal(size=(64, 10)).astype(np.float32))
            self.b2 = tf.Variable(np.zeros(10, np.float32))

        @tf.function(input_signature=[tf.TensorSpec([None, 64], tf.float32, name="x")])
        def serve(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            logits = tf.matmul(tf.nn.relu(tf.matmul(x, self.w1) + self.b1), self.w2) + self.b2
            return {"probabilities": tf.nn.softmax(logits), "classes": tf.argmax(logits, 1)}

    model = Digits()
    tf.saved_model.save(model, str(export / "1"), signatures={"serving_default": model.serve})


def summary(latencies: list[float], seconds: float) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "requests": len(latencies),
        "rps": len(latencies) / seconds,
        "p50_ms": 1000 * statistics.median(ordered),
        "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
    }


class Reference:
    """The SavedModel called in-process as TensorFlow offers it (the comparison's limit)."""

    def __init__(self, path: Path) -> None:
        import tensorflow as tf

        self.tf = tf
        self.loaded = tf.saved_model.load(str(path))
        self.fn = self.loaded.signatures["serving_default"]

    def run(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = self.fn(**{k: self.tf.constant(v) for k, v in inputs.items()})
        return {k: v.numpy() for k, v in out.items()}


def in_process(servable: Any, x: np.ndarray, clients: int, seconds: float) -> dict[str, float]:
    servable.run("serving_default", {"x": x})  # warm
    latencies: list[list[float]] = [[] for _ in range(clients)]
    stop = time.perf_counter() + seconds

    def work(i: int) -> None:
        mine = latencies[i]
        while (t := time.perf_counter()) < stop:
            servable.run("serving_default", {"x": x})
            mine.append(time.perf_counter() - t)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return summary([v for one in latencies for v in one], time.perf_counter() - started)


async def _rest_client(
    port: int, request: bytes, clients: int, seconds: float, batch: int
) -> dict[str, float]:
    latencies: list[float] = []

    async def one() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            stop = time.perf_counter() + seconds
            while (t := time.perf_counter()) < stop:
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                status = head[9:12]
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                body = await reader.readexactly(length)
                if status != b"200":
                    raise RuntimeError(body.decode())
                answer = orjson.loads(body)
                assert len(answer["predictions"]) == batch
                latencies.append(time.perf_counter() - t)
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(clients)))
    return summary(latencies, time.perf_counter() - started)


def rest_body(x: np.ndarray) -> bytes:
    """The REST request's JSON body, as both clients send it."""
    return orjson.dumps({"instances": x.tolist()})


def rest(port: int, x: np.ndarray, clients: int, seconds: float) -> dict[str, float]:
    body = rest_body(x)
    request = (
        f"POST {REST_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode()
        + b"Content-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )
    asyncio.run(_rest_client(port, request, 1, 0.2, len(x)))  # warm
    return with_cpu(lambda: asyncio.run(_rest_client(port, request, clients, seconds, len(x))))


def with_cpu(measure: Callable[[], dict[str, float]]) -> dict[str, float]:
    """`measure()`'s result and the CPU this process spent over it per request, in µs: all
    of the process's threads (the event loop, gRPC's own), nothing subtracted."""
    cpu = time.process_time()
    result = measure()
    spent = time.process_time() - cpu
    return {**result, "cpu_us": 1e6 * spent / max(1, result["requests"])}


async def _grpc_client(
    port: int, request: Any, clients: int, seconds: float, batch: int
) -> dict[str, float]:
    import grpc
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    latencies: list[float] = []
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)

        async def one() -> None:
            stop = time.perf_counter() + seconds
            while (t := time.perf_counter()) < stop:
                answer = await stub.Predict(request, timeout=60)
                classes = answer.outputs["classes"]
                got = np.frombuffer(classes.tensor_content, np.int64)
                assert got.size == batch
                latencies.append(time.perf_counter() - t)

        started = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(clients)))
        return summary(latencies, time.perf_counter() - started)


def grpc_request(x: np.ndarray) -> Any:
    """The gRPC PredictRequest (`tensor_content`), as both clients send it."""
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.name = "digits"
    tensor = request.inputs["x"]
    tensor.dtype = 1  # DT_FLOAT
    for d in x.shape:
        tensor.tensor_shape.dim.add(size=d)
    tensor.tensor_content = x.tobytes()
    return request


def grpc_bench(port: int, x: np.ndarray, clients: int, seconds: float) -> dict[str, float]:
    request = grpc_request(x)
    asyncio.run(_grpc_client(port, request, 1, 0.2, len(x)))  # warm
    return with_cpu(lambda: asyncio.run(_grpc_client(port, request, clients, seconds, len(x))))


class GoClient:
    """benchmarks/serving/loadgen (built by build-loadgen.sh): one subprocess per
    measurement, sending the very bytes the Python clients send (`rest_body`, the
    PredictRequest's `SerializeToString()`), written to files in `folder`."""

    def __init__(self, binary: Path, folder: Path) -> None:
        self.binary, self.folder = binary, folder

    def _file(self, name: str, content: bytes) -> Path:
        path = self.folder / f"{name}-{hashlib.sha256(content).hexdigest()[:16]}"
        if not path.exists():
            path.write_bytes(content)
        return path

    def measure(
        self, kind: str, port: int, request: bytes, clients: int, seconds: float
    ) -> dict[str, float]:
        done = subprocess.run(
            [
                str(self.binary),
                f"-kind={kind}",
                f"-addr=127.0.0.1:{port}",
                f"-clients={clients}",
                f"-seconds={seconds}",
                f"-request={self._file(kind, request)}",
                f"-path={REST_PATH}",
                f"-method={GRPC_METHOD}",
            ],
            capture_output=True,
            text=True,
            timeout=seconds + 120,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"the Go client failed ({done.returncode}): {done.stderr[-3000:]}")
        out = json.loads(done.stdout)
        return {
            "requests": out["requests"],
            "rps": out["rps"],
            "p50_ms": out["p50_ms"],
            "p99_ms": out["p99_ms"],
            "cpu_us": out["cpu_us_per_request"],
        }

    def rest(self, port: int, x: np.ndarray, clients: int, seconds: float) -> dict[str, float]:
        return self.measure("rest", port, rest_body(x), clients, seconds)

    def grpc(self, port: int, x: np.ndarray, clients: int, seconds: float) -> dict[str, float]:
        return self.measure("grpc", port, grpc_request(x).SerializeToString(), clients, seconds)


def go_client_binary(required: bool) -> Path | None:
    """The Go client, built when needed (a no-op when current); None when there is no Go
    toolchain and it is not `required`."""
    have_go = shutil.which("go") is not None or Path("/usr/local/go/bin/go").exists()
    if not have_go and not required:
        return None
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "serving" / "build-loadgen.sh")],
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit("benchmarks/serving/build-loadgen.sh failed (its log is above)")
    return Path(done.stdout.strip().splitlines()[-1])


def start_server(
    export: Path, batching: bool, flags: list[str], env: dict[str, str], kind: str
) -> tuple[subprocess.Popen[bytes], int, int]:
    from tfkube.engines.local import free_ports
    from tfkube.modelserver import model_server_command

    rest_port, grpc_port = free_ports(2)
    proc = subprocess.Popen(
        [
            *model_server_command("native" if kind == "native" else "python"),
            "--model_name=digits",
            f"--model_base_path={export}",
            f"--rest_api_port={rest_port}",
            f"--port={grpc_port}",
            f"--enable_batching={'true' if batching else 'false'}",
            *flags,
        ],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{rest_port}/v1/models/digits").status_code == 200:
                return proc, rest_port, grpc_port
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise SystemExit("the model server did not start")
        time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--no-batching", action="store_true", help="the model server's batching off"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the medians here")
    parser.add_argument(
        "--servers",
        default=None,
        help="the model servers to measure, comma-separated: python, native (default: both, "
        "native where installed)",
    )
    parser.add_argument(
        "--server-flag",
        action="append",
        default=[],
        help="one more flag for the model server (repeat), e.g. "
        "--server-flag=--tensorflow_intra_op_parallelism=1",
    )
    parser.add_argument(
        "--server-env",
        action="append",
        default=[],
        help="NAME=VALUE in the model server's environment (repeat), e.g. TF_ENABLE_ONEDNN_OPTS=0",
    )
    parser.add_argument(
        "--client",
        choices=("python", "go", "both"),
        default=None,
        help="the REST and gRPC clients: Python (in this process), Go (benchmarks/serving/"
        "loadgen, a subprocess per measurement) or both side by side (default: both where "
        "Go is available, else python)",
    )
    args = parser.parse_args()
    server_env: dict[str, str] = {}
    for pair in args.server_env:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            parser.error(f"--server-env {pair!r}: expected NAME=VALUE")
        server_env[name] = value
    from tfkube.modelserver import native_binary
    from tfkube.serving._store import load_saved_model

    if args.servers is None:
        servers = ["python", "native"] if native_binary() is not None else ["python"]
    else:
        servers = [s.strip() for s in args.servers.split(",") if s.strip()]
        if not servers or set(servers) - {"python", "native"}:
            parser.error("--servers: python, native or both")
    go_binary = (
        None if args.client == "python" else go_client_binary(required=args.client is not None)
    )
    client_kinds = (
        [args.client]
        if args.client in ("python", "go")
        else ["python", "go"]
        if go_binary is not None
        else ["python"]
    )
    load_before = os.getloadavg()
    results: dict[tuple[int, int, str], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="tfkube-serving-bench-") as tmp:
        export = Path(tmp) / "export"
        write_model(export)
        go = GoClient(go_binary, Path(tmp)) if go_binary is not None else None
        reference = Reference(export / "1")
        servable = load_saved_model(export / "1", 1)
        started = {
            name: start_server(export, not args.no_batching, args.server_flag, server_env, name)
            for name in servers
        }
        kinds: list[tuple[str, Any]] = []
        for name, (_, rest_port, grpc_port) in started.items():
            for door, port in (("rest", rest_port), ("grpc", grpc_port)):
                if "python" in client_kinds:
                    measure = rest if door == "rest" else grpc_bench
                    kinds.append(
                        (
                            f"{name} {door}",
                            lambda c, x, p=port, m=measure: m(p, x, c, args.seconds),
                        )
                    )
                if go is not None and "go" in client_kinds:
                    measure = go.rest if door == "rest" else go.grpc
                    kinds.append(
                        (
                            f"{name} {door} (go client)",
                            lambda c, x, p=port, m=measure: m(p, x, c, args.seconds),
                        )
                    )
        try:
            rng = np.random.default_rng(1)
            for _ in range(args.rounds):
                for batch in BATCHES:
                    x = rng.random((batch, 64), dtype=np.float32)
                    for clients in CLIENTS:
                        for kind, run in (
                            ("in-process", lambda c, x: in_process(reference, x, c, args.seconds)),
                            ("tfkube-call", lambda c, x: in_process(servable, x, c, args.seconds)),
                            *kinds,
                        ):
                            results.setdefault((batch, clients, kind), []).append(run(clients, x))
        finally:
            for proc, _, _ in started.values():
                proc.terminate()
                proc.wait(30)
    load_after = os.getloadavg()

    def median(batch: int, clients: int, kind: str, key: str) -> float:
        return statistics.median(r[key] for r in results[(batch, clients, kind)])

    print(
        f"load average before {load_before[0]:.1f} / {load_before[1]:.1f}, after "
        f"{load_after[0]:.1f} / {load_after[1]:.1f}; {args.rounds} rounds of {args.seconds:g} s; "
        f"batching {'off' if args.no_batching else 'on'}"
        + "".join(f"; {f}" for f in args.server_flag)
        + "".join(f"; {e}" for e in args.server_env)
        + f"; clients: {', '.join(client_kinds)}"
        + "\n"
    )
    doors = [kind for kind, _ in kinds]
    label = {"rest": "REST", "grpc": "gRPC", "(go": "(Go", "client)": "client)"}
    print(
        "| batch | clients | in-process req/s (p50 / p99 ms) | "
        + " | ".join(" ".join(label.get(w, w) for w in d.split()) for d in doors)
        + " | tfkube's call in-process req/s |"
    )
    print("| --- " * (4 + len(doors)) + "|")
    print(
        "| | | | "
        + " | ".join("req/s (**ratio**; p50 / p99 ms; p99 ratio; client CPU µs/req)" for _ in doors)
        + " | |"
    )
    table = []
    for batch in BATCHES:
        for clients in CLIENTS:
            row = {
                kind: {
                    k: median(batch, clients, kind, k)
                    for k in ("rps", "p50_ms", "p99_ms", "cpu_us")
                    if k in results[(batch, clients, kind)][0]
                }
                for kind in ("in-process", "tfkube-call", *doors)
            }
            a = row["in-process"]
            table.append({"batch": batch, "clients": clients, **row})
            cells = [
                f"{row[d]['rps']:.0f} (**{row[d]['rps'] / a['rps']:.2f}**; "
                f"{row[d]['p50_ms']:.2f} / {row[d]['p99_ms']:.2f}; "
                f"{row[d]['p99_ms'] / a['p99_ms']:.1f}x; {row[d]['cpu_us']:.0f})"
                for d in doors
            ]
            print(
                f"| {batch} | {clients} | {a['rps']:.0f} ({a['p50_ms']:.2f} / {a['p99_ms']:.2f}) | "
                + " | ".join(cells)
                + f" | {row['tfkube-call']['rps']:.0f} |"
            )
    seq = median(1, 1, "in-process", "rps")
    print(
        f"\nbatch 1, 16 clients against one sequential in-process caller ({seq:.0f} req/s): "
        + ", ".join(f"{d} {median(1, 16, d, 'rps') / seq:.2f}x" for d in doors)
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {"load": [load_before, load_after], "clients": client_kinds, "rows": table},
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
