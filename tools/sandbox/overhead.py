"""What confinement costs a replica's start: the time from the supervisor starting a
replica to the first line its run.sh prints, plain and confined, alternately in one run.

    sudo .venv/bin/python tools/sandbox/overhead.py [--rounds 10]

Both jobs are the same one-worker job whose run.sh prints the clock; the confined one
runs as a throwaway team's user (a LocalBackend with a TenantIsolation, as the server
makes it). Prints each round and the medians. Root only (as the server that confines).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tfkube.engines.local import LocalBackend, TenantIsolation, ensure_identity, isolation_support
from tfkube.engines.local._store import JobDir
from tfkube.spec import load_job_text

JOB = """\
apiVersion: tfkube.io/v1alpha1
kind: TFJob
metadata: {name: first-line}
spec:
  code: {source: code}
  replicas:
    worker: {replicas: 1, resources: {cpu: "1", memory: 512Mi}}
"""


def first_line_seconds(backend: LocalBackend, base: Path) -> float:
    """Run the job once: seconds from the replica's start to its first line."""
    job = load_job_text(JOB, "job")
    backend.submit(job, base, replace=True)
    view = backend.wait("first-line", timeout=120)
    assert view.phase.value == "Succeeded", (view.reason, view.message)
    record = JobDir(backend.home / "jobs" / "first-line").read()
    started = record.replicas[0].started_at
    assert started is not None
    printed = next(
        float(line) for line in backend.logs("first-line", "worker-0") if line[:1].isdigit()
    )
    backend.delete("first-line")
    return printed - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    support = isolation_support()
    if not support.ok:
        print(f"cannot confine here: {support.reason}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="tfkube-overhead-") as tmp:
        team = Path(tmp) / "team"
        code = team / "code"
        code.mkdir(parents=True)
        (code / "run.sh").write_text("#!/bin/sh\ndate +%s.%N\n")
        (code / "run.sh").chmod(0o755)
        tenant = TenantIsolation(ensure_identity(team, "overhead"), str(team), hidden=(tmp,))
        plain = LocalBackend(home=Path(tmp) / "plain")
        confined = LocalBackend(home=team / "engine", tenant=tenant)
        times: dict[str, list[float]] = {"plain": [], "confined": []}
        first_line_seconds(plain, team)  # warm the page cache for both
        for n in range(args.rounds):
            for name, backend in (("plain", plain), ("confined", confined)):
                started = time.monotonic()
                times[name].append(first_line_seconds(backend, team))
                wall = time.monotonic() - started
                print(f"round {n + 1} {name:8} first line {times[name][-1]:.3f}s (job {wall:.2f}s)")
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"median time to first line: plain {med['plain']:.3f}s, confined {med['confined']:.3f}s"
        f" (+{med['confined'] - med['plain']:.3f}s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
