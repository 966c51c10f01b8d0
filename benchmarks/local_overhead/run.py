"""Benchmark: the cost of tfkube over hand-launched processes, side by side in one run.

The between-graph example (1 PS + 2 workers) is run alternately
  A. by `tfkube run examples/mnist-between-graph/job.yaml` (the whole CLI, as users run it);
  B. by `baseline.sh`, the same processes with hand-written flags and TF_CONFIG, the PS
     killed once the workers exit (what users did before tfkube).
It reports the median wall time and training speed (global steps per second, all workers
together) of each, and their ratios.

    .venv/bin/python benchmarks/local_overhead/run.py [--rounds 3] [--train-steps 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "mnist-between-graph"
STEPS_IN_EXAMPLE = 1000  # the example's job.yaml trains this many global steps


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def run_tfkube(tmp: Path, steps: int) -> tuple[float, dict[str, float]]:
    env = {**os.environ, "TFKUBE_HOME": str(tmp / "home")}
    tfkube = [sys.executable, "-m", "tfkube"]
    started, started_epoch = time.perf_counter(), time.time()
    subprocess.run(
        [*tfkube, "run", str(job_file(tmp, steps))],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - started
    ended_epoch = time.time()
    job_dir = tmp / "home/jobs/mnist-between-graph"
    result = json.loads((job_dir / "output/result.json").read_text())
    # tfkube's own share, from its event log: command start -> first replica started, and
    # the decisive replica's exit -> command exit (PS ended, supervisor gone, CLI returned).
    events = [json.loads(line) for line in (job_dir / "events.jsonl").read_text().splitlines()]
    first_start = min(e["time"] for e in events if e["message"].startswith("started "))
    decided = next(e["time"] for e in events if "worker-0 exited with code 0" in e["message"])
    result["start_latency"] = first_start - started_epoch
    result["end_latency"] = ended_epoch - decided
    subprocess.run(
        [*tfkube, "delete", "mnist-between-graph"], env=env, check=True, stdout=subprocess.DEVNULL
    )
    return wall, result


def job_file(tmp: Path, steps: int) -> Path:
    """The example's job.yaml, with its code folder made absolute and the steps set."""
    raw = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    raw["spec"]["code"]["source"] = str(EXAMPLE)
    raw["spec"]["replicas"]["worker"]["args"] = [f"--train_steps={steps}"]
    path = tmp / "job.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def run_baseline(tmp: Path, steps: int) -> tuple[float, dict[str, float]]:
    out = tmp / "baseline"
    out.mkdir()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    started = time.perf_counter()
    subprocess.run(
        [
            str(Path(__file__).with_name("baseline.sh")),
            str(EXAMPLE),
            str(out),
            *map(str, free_ports(3)),
            f"--train_steps={steps}",
        ],
        env=env,
        check=True,
    )
    wall = time.perf_counter() - started
    return wall, json.loads((out / "output/result.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--train-steps", type=int, default=STEPS_IN_EXAMPLE)
    args = parser.parse_args()
    walls: dict[str, list[float]] = {"tfkube": [], "baseline": []}
    latencies: dict[str, list[float]] = {"start_latency": [], "end_latency": []}
    rates: dict[str, list[float]] = {"tfkube": [], "baseline": []}
    for i in range(args.rounds):
        order = [("tfkube", run_tfkube), ("baseline", run_baseline)]
        if i % 2:
            order.reverse()  # alternate, so drift on a shared machine hits both alike
        for name, fn in order:
            with tempfile.TemporaryDirectory() as tmp:
                wall, result = fn(Path(tmp), args.train_steps)
            walls[name].append(wall)
            rates[name].append(result["global_steps_per_second"])
            for key, values in latencies.items():
                if key in result:
                    values.append(result[key])
            print(
                f"round {i + 1} {name:8s} wall {wall:6.2f}s  global steps/s "
                f"{result['global_steps_per_second']:6.1f}  accuracy {result['test_accuracy']}",
                flush=True,
            )
    wall = {k: statistics.median(v) for k, v in walls.items()}
    rate = {k: statistics.median(v) for k, v in rates.items()}
    print()
    print("| launcher | median wall time (s) | median training steps/s (all workers) |")
    print("|---|---|---|")
    for name in ("baseline", "tfkube"):
        print(f"| {name} | {wall[name]:.2f} | {rate[name]:.1f} |")
    print(
        f"| **ratio tfkube/baseline** | **{wall['tfkube'] / wall['baseline']:.3f}** | "
        f"**{rate['tfkube'] / rate['baseline']:.3f}** |"
    )
    fixed = {k: statistics.median(v) for k, v in latencies.items()}
    print()
    print(
        f"tfkube's fixed cost per job (median): {fixed['start_latency']:.2f}s from the command "
        f"to the first replica started, {fixed['end_latency']:.2f}s from worker-0's exit to "
        "the command's exit (PS ended)."
    )


if __name__ == "__main__":
    main()
