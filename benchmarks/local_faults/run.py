"""Fault scenarios of the local engine, measured: what docs/reliability.md reports.

Each scenario injects one fault into a real job and reports the time to recover (or to
end cleanly), the processes left behind, and the training lost. TensorFlow scenarios run
the between-graph example (1 PS + 2 workers, checkpoints every 100 steps).

    .venv/bin/python benchmarks/local_faults/run.py [--only NAME ...] [--json]

Every process a scenario starts is tagged (an environment variable) and counted after
it; the job's home is a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil
import yaml

from tfkube.engines.local import LocalBackend
from tfkube.engines.local._store import JobDir
from tfkube.spec import parse_job

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "mnist-between-graph"
SLOW = ["--train_steps=3000", "--step_sleep=0.01", "--checkpoint_steps=100"]
TAG = "TFKUBE_FAULTS_TAG"
WAIT = 600.0


@dataclass
class Result:
    scenario: str
    expected: str
    recovered_s: float | None
    """Time from the fault to recovery (or to a clean end)."""
    left: int
    """Processes of the job still running after it (and after the job ended)."""
    lost: str
    outcome: str


def tagged(tag: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(TAG) == tag and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def wait_for(check: Callable[[], Any], what: str, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)
    return value


def events(home: Path, name: str) -> list[dict[str, Any]]:
    return JobDir(home / "jobs" / name).read_events()


def event_time(evs: list[dict[str, Any]], text: str, after: float = 0.0) -> float:
    return next(float(e["time"]) for e in evs if text in str(e["message"]) and e["time"] > after)


def example(**policy: Any) -> Any:
    raw = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    raw["spec"]["replicas"]["worker"]["args"] = SLOW
    raw["spec"]["runPolicy"].update({"backoff": {"baseSeconds": 0.5}, **policy})
    return parse_job(raw)


def shell_job(name: str, script: str, **policy: Any) -> tuple[Any, Path]:
    folder = Path(tempfile.mkdtemp(prefix="tfkube-faults-code-"))
    (folder / "run.sh").write_text("#!/usr/bin/env bash\n" + script)
    raw = {
        "apiVersion": "tfkube.io/v1alpha1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {
            "replicas": {"ps": {"replicas": 1}, "worker": {"replicas": 2}},
            "code": {"source": str(folder)},
            "runPolicy": {"terminationGraceSeconds": 2, **policy},
        },
    }
    return parse_job(raw), folder


def training_process(backend: LocalBackend, name: str, replica: str) -> psutil.Process:
    pid = backend.get(name).pids.get(replica)
    assert pid is not None
    for child in psutil.Process(pid).children(recursive=True):
        if any(part.endswith("train.py") for part in child.cmdline()):
            return child
    raise RuntimeError(f"no train.py below {replica}")


def step_of(backend: LocalBackend, name: str, replica: str) -> int:
    steps = [
        int(m.group(1))
        for line in backend.logs(name, replica)
        if (m := re.search(r"global_step=(\d+)", line))
    ]
    return steps[-1] if steps else -1


def latest_checkpoint(log_dir: str) -> int:
    index = Path(log_dir, "checkpoint")
    m = (
        re.search(r'model_checkpoint_path: ".*?(\d+)"', index.read_text())
        if index.exists()
        else None
    )
    return int(m.group(1)) if m else -1


# -- scenarios ----------------------------------------------------------------------------


def supervisor_killed(home: Path, tag: str) -> Result:
    backend = LocalBackend(home)
    job = example()
    backend.submit(job, EXAMPLE)
    wait_for(lambda: step_of(backend, job.name, "worker-1") > 0, "training")
    wait_for(lambda: latest_checkpoint(backend.get(job.name).log_dir or "") >= 100, "a ckpt")
    procs = []
    for pid in backend.get(job.name).pids.values():
        launcher = psutil.Process(pid)
        procs += [launcher, *launcher.children(recursive=True)]
    sup = backend._dir(job.name).read().supervisor
    assert sup is not None
    killed = time.monotonic()
    os.kill(sup.pid, signal.SIGKILL)
    _, alive = psutil.wait_procs(procs, timeout=WAIT)
    took = time.monotonic() - killed
    ckpt = latest_checkpoint(backend.get(job.name).log_dir or "")
    view = backend.get(job.name)
    return Result(
        "supervisor SIGKILLed mid-training (TF, 1 PS + 2 workers)",
        "every replica ends; job Failed (SupervisorLost); checkpoints stay",
        took,
        len(alive) + len(tagged(tag)),
        f"none on disk: checkpoint {ckpt} stays in the log folder (with spec.storage.logs"
        ".path set, running the job again resumes from it)",
        f"{view.phase.value} ({view.reason}); {len(procs)} processes gone",
    )


def ctrl_c_running(home: Path, tag: str) -> Result:
    job, folder = shell_job("ctrlc", "sleep 600\n")
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(job.model_dump(by_alias=True, mode="json")))
    env = {**os.environ, "TFKUBE_HOME": str(home)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfkube", "run", str(path)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    backend = LocalBackend(home)
    wait_for(
        lambda: (
            (home / "jobs/ctrlc/state.json").exists()
            and all(r.state.value == "Running" for r in backend.get("ctrlc").replicas)
        ),
        "running",
    )
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    code = proc.wait(WAIT)
    took = time.monotonic() - sent
    view = backend.get("ctrlc")
    return Result(
        "Ctrl-C on `tfkube run` while running (1 PS + 2 workers)",
        "exit 130; every replica stopped; job Failed (Stopped)",
        took,
        len(tagged(tag)),
        "none (nothing to train)",
        f"exit {code}; {view.phase.value} ({view.reason})",
    )


def ctrl_c_sweep(home: Path, tag: str) -> Result:
    job, folder = shell_job("sweep", "sleep 600\n")
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(job.model_dump(by_alias=True, mode="json")))
    codes, slowest, left = [], 0.0, 0
    for i, delay in enumerate([0.1 * k for k in range(20)]):
        env = {**os.environ, "TFKUBE_HOME": str(home / f"h{i}")}
        proc = subprocess.Popen(
            [sys.executable, "-m", "tfkube", "run", str(path)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(delay)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        codes.append(proc.wait(WAIT))
        slowest = max(slowest, time.monotonic() - sent)
        time.sleep(0.5)
        left += len(tagged(tag))
    ok = sum(c in (130, -signal.SIGINT) for c in codes)
    return Result(
        "Ctrl-C at 20 moments of the first 2 s of `tfkube run` (staging, start, running)",
        "exit 130 each time; nothing left",
        slowest,
        left,
        "none",
        f"{ok}/20 exited 130 (slowest shown)",
    )


def worker_killed(home: Path, tag: str) -> Result:
    backend = LocalBackend(home)
    job = example()
    backend.submit(job, EXAMPLE)
    wait_for(lambda: step_of(backend, job.name, "worker-1") > 0, "training")
    killed_at = time.time()
    training_process(backend, job.name, "worker-1").send_signal(signal.SIGKILL)
    wait_for(
        lambda: any(
            "started worker-1" in str(e["message"]) and e["time"] > killed_at
            for e in events(home, job.name)
        ),
        "the restart",
    )
    restarted = event_time(events(home, job.name), "started worker-1", killed_at)
    view = backend.wait(job.name, timeout=WAIT)
    result = json.loads(Path(view.log_dir or "", "result.json").read_text())
    return Result(
        "a worker's TensorFlow process SIGKILLed (TF)",
        "that worker restarts after its backoff; the job succeeds",
        restarted - killed_at,
        len(tagged(tag)),
        "none: the variables live on the PS; the step count goes on",
        f"{view.phase.value}; global_step={result['global_step']}, "
        f"accuracy={result['test_accuracy']}",
    )


def ps_killed(home: Path, tag: str) -> Result:
    backend = LocalBackend(home)
    job = example()
    backend.submit(job, EXAMPLE)
    log_dir = backend.get(job.name).log_dir or ""
    wait_for(lambda: latest_checkpoint(log_dir) >= 300, "a checkpoint")
    before = latest_checkpoint(log_dir)
    killed_at = time.time()
    training_process(backend, job.name, "ps-0").send_signal(signal.SIGKILL)

    def resumed() -> int | None:
        found = [
            int(m.group(1))
            for line in backend.logs(job.name, "worker-0")
            if (m := re.search(r"restoring model.ckpt-(\d+)", line))
        ]
        return found[-1] if found else None

    restored = wait_for(resumed, "the chief to restore")
    recovered = time.time() - killed_at
    view = backend.wait(job.name, timeout=WAIT)
    return Result(
        "the PS's TensorFlow process SIGKILLed (TF)",
        "PS, chief and workers restart; training resumes from the last checkpoint",
        recovered,
        len(tagged(tag)),
        f"none saved: resumed from checkpoint {restored} (the latest when killed: {before}); "
        "the steps since it, under one checkpoint interval (100), are trained again",
        f"{view.phase.value}; restarts {view.restarts}",
    )


def crash_loop(home: Path, tag: str) -> Result:
    backend = LocalBackend(home)
    job, folder = shell_job(
        "crashloop",
        'if [ "$TFKUBE_ROLE" = ps ]; then exec sleep 600; fi\nexit 3\n',
        backoffLimit=3,
        backoff={"baseSeconds": 0.2},
    )
    started = time.monotonic()
    backend.submit(job, folder)
    view = backend.wait(job.name, timeout=WAIT)
    starts = sum(str(e["message"]).startswith("started ") for e in events(home, job.name))
    return Result(
        "a crash-looping job (workers exit 3; backoffLimit 3)",
        "exactly backoffLimit restarts, then Failed; no process left, PS included",
        time.monotonic() - started,
        len(tagged(tag)),
        "n/a",
        f"{view.phase.value} ({view.reason}) after {view.restarts} restarts; "
        f"{starts} process starts in all",
    )


def bad_archive(home: Path, tag: str) -> Result:
    job, folder = shell_job("badcode", "exit 0\n")
    os.symlink("/etc", folder / "etc")
    started = time.monotonic()
    env = {**os.environ, "TFKUBE_HOME": str(home)}
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(job.model_dump(by_alias=True, mode="json")))
    code = subprocess.run(
        [sys.executable, "-m", "tfkube", "run", str(path)], env=env, capture_output=True
    ).returncode
    jobs = list((home / "jobs").iterdir()) if (home / "jobs").exists() else []
    return Result(
        "bad code (a symlink to /etc in the folder)",
        "refused at submit: exit 2, the reason printed, nothing created or started",
        time.monotonic() - started,
        len(tagged(tag)),
        "n/a",
        f"exit {code}; {len(jobs)} job folders",
    )


def launcher_failure(home: Path, tag: str) -> Result:
    backend = LocalBackend(home)
    job, folder = shell_job("setup", "exit 0\n", backoffLimit=5)
    raw = job.model_dump(by_alias=True)
    raw["spec"]["replicas"]["worker"]["env"] = {"BROKEN": {"command": "exit 3"}}
    started = time.monotonic()
    backend.submit(parse_job(raw), folder)
    view = backend.wait(job.name, timeout=WAIT)
    return Result(
        "the launcher fails in a replica (its env command exits 3)",
        "the job fails at once (SetupFailed), never retried, the reason in status",
        time.monotonic() - started,
        len(tagged(tag)),
        "n/a",
        f"{view.phase.value} ({view.reason}) after {view.restarts} restarts",
    )


def stall(home: Path, tag: str) -> Result:
    backend = LocalBackend(home)
    job, folder = shell_job(
        "stall",
        'if [ "$TFKUBE_ROLE" = ps ]; then exec sleep 600; fi\necho hello\nexec sleep 600\n',
        stallSeconds=5,
        stallAction="Restart",
        backoffLimit=1,
    )
    backend.submit(job, folder)
    view = backend.wait(job.name, timeout=WAIT)
    evs = events(home, job.name)
    first_start = event_time(evs, "started worker-0")
    detected = event_time(evs, "is stalled")
    return Result(
        "a replica alive but silent (stallSeconds 5, stallAction Restart, backoffLimit 1)",
        "Stalled shown and an event after ~5 s; restarted; then Failed past backoffLimit",
        detected - first_start,
        len(tagged(tag)),
        "n/a",
        f"{view.phase.value} ({view.reason}); detected {detected - first_start:.1f}s after start",
    )


SCENARIOS: dict[str, Callable[[Path, str], Result]] = {
    "supervisor-killed": supervisor_killed,
    "ctrl-c-running": ctrl_c_running,
    "ctrl-c-sweep": ctrl_c_sweep,
    "worker-killed": worker_killed,
    "ps-killed": ps_killed,
    "crash-loop": crash_loop,
    "bad-archive": bad_archive,
    "launcher-failure": launcher_failure,
    "stall": stall,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=sorted(SCENARIOS), default=None)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    results = []
    for name in args.only or SCENARIOS:
        tag = uuid.uuid4().hex
        os.environ[TAG] = tag
        with tempfile.TemporaryDirectory(prefix="tfkube-faults-") as tmp:
            result = SCENARIOS[name](Path(tmp), tag)
            time.sleep(1)  # let the last processes be reaped before counting again
            result.left = max(result.left, len(tagged(tag)))
        results.append(result)
        if not args.json:
            took = "-" if result.recovered_s is None else f"{result.recovered_s:.1f} s"
            print(
                f"| {result.scenario} | {result.expected} | {took} | {result.left} | "
                f"{result.lost} | {result.outcome} |",
                flush=True,
            )
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=1))
    return 0 if all(r.left == 0 for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
