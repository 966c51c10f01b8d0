"""Where tfkube's operator's memory goes before it does any work: the resident set (VmRSS)
after each library the operator loads, imported one after the other in a fresh interpreter,
in the order the operator's start loads them.

    .venv/bin/python benchmarks/vs_kubeflow/import_memory.py [--rounds 3]

Each round runs in a new process; the table gives each step's added MiB (median of the
rounds) and the total after it. What the operator adds at rest and per replica on top of
this is in docs/benchmarks.md (vs_kubeflow's peak RSS column).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

STEPS = [
    ("yaml", "PyYAML"),
    ("pydantic", "pydantic (tfkube's job models)"),
    ("kubernetes.client", "the official Kubernetes client (its generated API and model classes)"),
    ("kopf", "kopf (with aiohttp, its HTTP and watch layer)"),
    ("tfkube.spec", "tfkube's job models"),
    ("tfkube.render", "tfkube's renderer"),
    ("tfkube.operator._operator", "tfkube's operator"),
]

PROBE = """
import importlib, json, sys
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
out = [rss()]
for mod in sys.argv[1:]:
    importlib.import_module(mod)
    out.append(rss())
print(json.dumps(out))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    runs = []
    for _ in range(args.rounds):
        argv = [sys.executable, "-c", PROBE, *(m for m, _ in STEPS)]
        runs.append(json.loads(subprocess.run(argv, check=True, capture_output=True).stdout))
    totals = [statistics.median(r[i] for r in runs) for i in range(len(STEPS) + 1)]
    print("| step | added MiB | total MiB |")
    print("| --- | --- | --- |")
    print(f"| the interpreter | {totals[0]:.1f} | {totals[0]:.1f} |")
    for i, (_, what) in enumerate(STEPS, start=1):
        print(f"| {what} | {totals[i] - totals[i - 1]:+.1f} | {totals[i]:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
