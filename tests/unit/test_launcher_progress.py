"""The launcher's heartbeat for stall detection on Kubernetes (`tfkube.launcher._progress`)
and the tee's hook that feeds it: real files in tmp_path, real pipes and a real launcher
process for the end to end row."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfkube import contract
from tfkube.launcher import _progress
from tfkube.launcher._progress import Heartbeat, latest_write, start_heartbeat
from tfkube.launcher._tee import start_tee

OLD = 1_000_000_000.0


def age_back(path: Path) -> None:
    os.utime(path, (OLD, OLD))


def fresh(path: Path) -> bool:
    return path.stat().st_mtime > OLD


@pytest.fixture(autouse=True)
def no_rate_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_progress, "MIN_TOUCH_INTERVAL", 0.0)


def test_latest_write_skips_tfkube_s_own_copy_of_the_output(tmp_path: Path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "model.ckpt-1.index").write_text("x")
    own = tmp_path / ".tfkube" / "logs" / "worker-0"
    own.mkdir(parents=True)
    for p in (tmp_path / "ckpt" / "model.ckpt-1.index", tmp_path / "ckpt", tmp_path):
        age_back(p)
    (own / "0.log").write_text("a line")
    assert latest_write(tmp_path) == OLD
    (tmp_path / "ckpt" / "model.ckpt-2.index").write_text("y")
    assert latest_write(tmp_path) > OLD


def test_no_heartbeat_unless_the_engine_asks():
    assert start_heartbeat(None, "/logs") is None


def test_the_heartbeat_beats_while_setting_up_then_only_on_progress(tmp_path: Path):
    logs, path = tmp_path / "logs", tmp_path / "run" / "heartbeat"
    logs.mkdir()
    beat = Heartbeat(str(path), str(logs), scan_every=3600)
    beat.beat(force=True)
    assert path.is_file()  # its folder made on the way
    age_back(path)
    beat.check()  # setting up (fetching, installing): not the program stalling
    assert fresh(path)
    (logs / "written-before-start").write_text("x")
    beat.program_started()
    age_back(path)
    beat.check()
    assert not fresh(path), "a write from before the program started is no progress"
    (logs / "summary").write_text("step 1")
    os.utime(logs / "summary", (time.time() + 5, time.time() + 5))  # newer, whatever the fs grain
    beat.check()
    assert fresh(path)
    age_back(path)
    beat.check()
    assert not fresh(path), "the same write counts once"


def test_without_a_log_folder_only_output_beats(tmp_path: Path):
    path = tmp_path / "heartbeat"
    beat = Heartbeat(str(path), "", scan_every=3600)
    beat.program_started()
    age_back(path)
    beat.check()
    assert not fresh(path)
    beat.beat()
    assert fresh(path)


def test_a_chatty_program_touches_at_most_once_a_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(_progress, "MIN_TOUCH_INTERVAL", 3600.0)
    path = tmp_path / "heartbeat"
    beat = Heartbeat(str(path), "", scan_every=3600)
    beat.beat()
    age_back(path)
    beat.beat()
    assert not fresh(path)
    beat.beat(force=True)
    assert fresh(path)


def test_the_tee_calls_its_hook_per_chunk_even_without_a_log_file():
    read, write = os.pipe()
    seen: list[int] = []
    out_read, out_write = os.pipe()
    with os.fdopen(read, "rb", buffering=0) as source:
        tee = start_tee(source, None, on_output=lambda: seen.append(1))
        tee.out_fd = out_write
        os.write(write, b"a line\n")
        os.close(write)
        tee.finish("done")
    os.close(out_write)
    assert seen
    assert os.read(out_read, 100) == b"a line\n"
    os.close(out_read)


def test_the_launcher_keeps_the_heartbeat_of_its_program(tmp_path: Path):
    """The real launcher process: the file exists once the program has printed."""
    heartbeat = tmp_path / "heartbeat"
    env = {
        "PATH": os.environ["PATH"],
        contract.JOB: "j",
        contract.ROLE: "worker",
        contract.INDEX: "0",
        contract.CLUSTER: json.dumps({"worker": ["127.0.0.1:1"]}),
        contract.NUM_PS: "0",
        contract.NUM_WORKERS: "1",
        contract.DATA_DIR: str(tmp_path),
        contract.LOG_DIR: str(tmp_path / "logs"),
        contract.WORK_DIR: str(tmp_path / "work"),
        contract.COMMAND: json.dumps(["sh", "-c", f"echo hi; test -f {heartbeat}"]),
        contract.HEARTBEAT_FILE: str(heartbeat),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "tfkube.launcher"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "hi" in proc.stdout
    assert heartbeat.is_file()
