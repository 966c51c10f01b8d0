"""Benchmark: the model server's REST API against calling the loaded model in-process (the
limit), side by side in one run, for batch 1 and batch 64.

A SavedModel shaped like the examples' exports (64 pixels -> a 64-unit hidden layer -> 10
classes; `serving_default` answers `probabilities` and `classes`) is written to a
temporary export folder, then, alternating rounds:
  A. in-process: `tfkube.serving._store.load_saved_model(...).run(...)` on a numpy batch
     (what the model server does per request, without HTTP or JSON);
  B. REST: `python -m tfkube.serving` on a loopback port, one keep-alive client sending
     `POST /v1/models/digits:predict` with `{"instances": ...}` and reading the JSON;
  C. REST with 4 concurrent clients (throughput only).
Reported: requests/s, p50 and p99 latency, and the ratios B/A.

    .venv/bin/python benchmarks/serving/run.py [--seconds 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[2]


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


def timed(call: Any, seconds: float) -> dict[str, float]:
    call()  # warm
    latencies: list[float] = []
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        t = time.perf_counter()
        call()
        latencies.append(time.perf_counter() - t)
    return summary(latencies, time.perf_counter() - started)


def concurrent(url: str, body: dict[str, Any], seconds: float, clients: int) -> float:
    counts = [0] * clients
    stop = time.perf_counter() + seconds

    def work(i: int) -> None:
        with httpx.Client(timeout=60) as http:
            while time.perf_counter() < stop:
                http.post(url, json=body).raise_for_status()
                counts[i] += 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0, help="per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from tfkube.engines.local import free_ports
    from tfkube.serving._store import load_saved_model

    with tempfile.TemporaryDirectory(prefix="tfkube-serving-bench-") as tmp:
        export = Path(tmp) / "export"
        write_model(export)
        servable = load_saved_model(export / "1", 1)
        (port,) = free_ports(1)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tfkube.serving",
                "--model_name=digits",
                f"--model_base_path={export}",
                f"--rest_api_port={port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}/v1/models/digits"
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if httpx.get(url).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("the model server did not start")
                time.sleep(0.2)
            rng = np.random.default_rng(1)
            results: dict[tuple[int, str], list[dict[str, float]]] = {}
            with httpx.Client(timeout=60) as http:
                for _ in range(args.rounds):
                    for batch in (1, 64):
                        x = rng.random((batch, 64), dtype=np.float32)
                        body = {"instances": x.tolist()}

                        def local(x: np.ndarray = x) -> None:
                            servable.run("serving_default", {"x": x})

                        def rest(body: dict[str, Any] = body) -> None:
                            r = http.post(f"{url}:predict", json=body)
                            r.raise_for_status()
                            r.json()

                        results.setdefault((batch, "in-process"), []).append(
                            timed(local, args.seconds)
                        )
                        results.setdefault((batch, "rest"), []).append(timed(rest, args.seconds))
                        rps = concurrent(f"{url}:predict", body, args.seconds, 4)
                        results.setdefault((batch, "rest-4"), []).append({"rps": rps})
        finally:
            proc.terminate()
            proc.wait(30)

    def median(batch: int, kind: str, key: str) -> float:
        return statistics.median(r[key] for r in results[(batch, kind)])

    print(
        "| batch | in-process req/s | REST req/s | **req/s ratio** | REST, 4 clients req/s "
        "| in-process p50 / p99 (ms) | REST p50 / p99 (ms) | **p99 ratio** |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for batch in (1, 64):
        a_rps, b_rps = median(batch, "in-process", "rps"), median(batch, "rest", "rps")
        a_p50, a_p99 = median(batch, "in-process", "p50_ms"), median(batch, "in-process", "p99_ms")
        b_p50, b_p99 = median(batch, "rest", "p50_ms"), median(batch, "rest", "p99_ms")
        print(
            f"| {batch} | {a_rps:.0f} | {b_rps:.0f} | **{b_rps / a_rps:.3f}** | "
            f"{median(batch, 'rest-4', 'rps'):.0f} | {a_p50:.2f} / {a_p99:.2f} | "
            f"{b_p50:.2f} / {b_p99:.2f} | **{b_p99 / a_p99:.1f}** |"
        )


if __name__ == "__main__":
    main()
