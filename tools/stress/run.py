"""`make test-stress`: the local and TensorFlow tests while CPU burners compete for the
cores (what CI on a busy machine looks like), then the Ctrl-C / kill tests (marker
`faults`) repeated, still under load. Any failure fails the run.

Standard library only. The burners are started here and stopped here, by PID (and get
PR_SET_PDEATHSIG, so they die with this process even if it is killed).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PR_SET_PDEATHSIG = 1
BURN = "while True: pass"


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def start_burners(count: int) -> list[subprocess.Popen[bytes]]:
    burners = [
        subprocess.Popen(
            [sys.executable, "-c", BURN],
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
        for _ in range(count)
    ]
    print(f"stress: {count} CPU burners: pids {[b.pid for b in burners]}", flush=True)
    return burners


def stop_burners(burners: list[subprocess.Popen[bytes]]) -> None:
    for burner in burners:
        if burner.poll() is None:
            os.kill(burner.pid, signal.SIGKILL)
        burner.wait()
    print(f"stress: burners {[b.pid for b in burners]} stopped", flush=True)


def pytest(*args: str) -> int:
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    print("stress: " + " ".join(argv[1:]), flush=True)
    started = time.monotonic()
    code = subprocess.call(argv, cwd=ROOT)
    print(f"stress: exit {code} after {time.monotonic() - started:.0f}s", flush=True)
    return code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burners", type=int, default=2, help="CPU-burning processes")
    parser.add_argument("--repeat", type=int, default=10, help="rounds of the fault tests")
    parser.add_argument("--faults-only", action="store_true", help="skip the full local + TF suite")
    args = parser.parse_args()
    # SIGTERM (a CI timeout, `kill`) ends the run like Ctrl-C: the current pytest and
    # the burners are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    burners = start_burners(args.burners)
    failed: list[str] = []
    try:
        if not args.faults_only and pytest("tests/local", "tests/tf") != 0:
            failed.append("local + TF suite")
        for round_ in range(1, args.repeat + 1):
            print(f"stress: fault tests, round {round_} of {args.repeat}", flush=True)
            if pytest("-m", "faults", "tests/local", "tests/tf") != 0:
                failed.append(f"fault tests round {round_}")
    finally:
        stop_burners(burners)
    took = time.monotonic() - started
    if failed:
        print(f"stress: FAILED ({', '.join(failed)}) in {took:.0f}s", flush=True)
        return 1
    print(f"stress: passed in {took:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
