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
Reported: requests/s, p50 and p99 latency per kind and model server, and the ratios to
in-process with the same number of clients (and, for batch 1, to one sequential
in-process caller).

    .venv/bin/python benchmarks/serving/run.py [--seconds 3] [--rounds 3] [--json FILE]
        [--servers python,native] [--server-flag=--FLAG=VALUE ...] [--server-env NAME=VALUE ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import httpx
import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = (1, 4, 16)
BATCHES = (1, 64)


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


def rest(port: int, x: np.ndarray, clients: int, seconds: float) -> dict[str, float]:
    body = orjson.dumps({"instances": x.tolist()})
    request = (
        b"POST /v1/models/digits:predict HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )
    asyncio.run(_rest_client(port, request, 1, 0.2, len(x)))  # warm
    return asyncio.run(_rest_client(port, request, clients, seconds, len(x)))


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


def grpc_bench(port: int, x: np.ndarray, clients: int, seconds: float) -> dict[str, float]:
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.name = "digits"
    tensor = request.inputs["x"]
    tensor.dtype = 1  # DT_FLOAT
    for d in x.shape:
        tensor.tensor_shape.dim.add(size=d)
    tensor.tensor_content = x.tobytes()
    asyncio.run(_grpc_client(port, request, 1, 0.2, len(x)))  # warm
    return asyncio.run(_grpc_client(port, request, clients, seconds, len(x)))


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
    load_before = os.getloadavg()
    results: dict[tuple[int, int, str], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="tfkube-serving-bench-") as tmp:
        export = Path(tmp) / "export"
        write_model(export)
        reference = Reference(export / "1")
        servable = load_saved_model(export / "1", 1)
        started = {
            name: start_server(export, not args.no_batching, args.server_flag, server_env, name)
            for name in servers
        }
        kinds: list[tuple[str, Any]] = []
        for name, (_, rest_port, grpc_port) in started.items():
            kinds.append((f"{name} rest", lambda c, x, p=rest_port: rest(p, x, c, args.seconds)))
            kinds.append(
                (f"{name} grpc", lambda c, x, p=grpc_port: grpc_bench(p, x, c, args.seconds))
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
        + "\n"
    )
    doors = [f"{name} {door}" for name in servers for door in ("rest", "grpc")]
    label = {"rest": "REST", "grpc": "gRPC"}
    print(
        "| batch | clients | in-process req/s (p50 / p99 ms) | "
        + " | ".join(f"{d.split()[0]} {label[d.split()[1]]}" for d in doors)
        + " | tfkube's call in-process req/s |"
    )
    print("| --- " * (4 + len(doors)) + "|")
    print(
        "| | | | "
        + " | ".join("req/s (**ratio**; p50 / p99 ms; p99 ratio)" for _ in doors)
        + " | |"
    )
    table = []
    for batch in BATCHES:
        for clients in CLIENTS:
            row = {
                kind: {k: median(batch, clients, kind, k) for k in ("rps", "p50_ms", "p99_ms")}
                for kind in ("in-process", "tfkube-call", *doors)
            }
            a = row["in-process"]
            table.append({"batch": batch, "clients": clients, **row})
            cells = [
                f"{row[d]['rps']:.0f} (**{row[d]['rps'] / a['rps']:.2f}**; "
                f"{row[d]['p50_ms']:.2f} / {row[d]['p99_ms']:.2f}; "
                f"{row[d]['p99_ms'] / a['p99_ms']:.1f}x)"
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
            json.dumps({"load": [load_before, load_after], "rows": table}, indent=1)
        )


if __name__ == "__main__":
    main()
