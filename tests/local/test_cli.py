"""`tfkube` as a user runs it: separate processes for run, list, status, logs and delete;
Ctrl-C; bad input; code from an http URL (served on 127.0.0.1)."""

from __future__ import annotations

import hashlib
import http.server
import os
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

TFKUBE = [sys.executable, "-m", "tfkube"]


def tfkube(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TFKUBE, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )


def write_job(folder: Path, name: str, script: str, **spec: object) -> Path:
    code = folder / "code"
    code.mkdir(exist_ok=True)
    (code / "run.sh").write_text("#!/usr/bin/env bash\n" + script)
    raw = {
        "apiVersion": "tfkube.io/v1alpha1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {
            "replicas": {"ps": {"replicas": 1}, "worker": {"replicas": 2}},
            "code": {"source": "code"},
            **spec,
        },
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


SCRIPT = """
if [ "$TFKUBE_ROLE" = ps ]; then exec sleep 600; fi
echo "worker $TFKUBE_INDEX starts"
# worker 0 decides success (and then the rest is stopped): let it finish last
[ "$TFKUBE_INDEX" = 0 ] && sleep 1.5 || sleep 0.8
echo "worker $TFKUBE_INDEX done"
"""


def test_detached_job_is_seen_from_other_shells(tfkube_home: Path, tmp_path: Path) -> None:
    # AllWorkers: worker-1's "done" below is then a promise, whatever the load.
    job = write_job(tmp_path, "detached", SCRIPT, runPolicy={"successPolicy": "AllWorkers"})
    started = tfkube("run", str(job), "--detach")
    assert started.returncode == 0, started.stderr
    assert "job detached started (3 replicas)" in started.stdout

    listed = tfkube("list")
    assert "detached" in listed.stdout
    status = tfkube("status", "detached")
    assert "worker-1" in status.stdout
    assert "ps-0" in status.stdout

    followed = tfkube("logs", "detached", "--follow")
    assert followed.returncode == 0
    assert "[worker-1] worker 1 done" in followed.stdout
    one = tfkube("logs", "detached", "--replica", "worker-0")
    assert "worker 0 done" in one.stdout
    assert "worker 1" not in one.stdout

    status = tfkube("status", "detached")
    assert "Succeeded" in status.stdout
    deleted = tfkube("delete", "detached")
    assert deleted.returncode == 0
    assert "deleted" in deleted.stdout
    missing = tfkube("status", "detached")
    assert missing.returncode == 1
    assert "no job named 'detached'" in missing.stderr


def test_foreground_run_shows_replicas_and_returns_the_job_result(
    tfkube_home: Path, tmp_path: Path
) -> None:
    ok = tfkube("run", str(write_job(tmp_path, "fg-ok", SCRIPT)))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "Succeeded" in ok.stdout
    assert "worker-0 succeeded" in ok.stdout
    failed = tfkube(
        "run",
        str(write_job(tmp_path, "fg-fail", "exit 4\n", runPolicy={"restartPolicy": "Never"})),
    )
    assert failed.returncode == 1
    assert "ReplicaFailed" in failed.stdout


def test_quick_form_builds_the_job_from_four_parameters(tfkube_home: Path, tmp_path: Path) -> None:
    write_job(tmp_path, "unused", SCRIPT)
    result = subprocess.run(
        [*TFKUBE, "run", "--name", "quick", "--workers", "2", "--ps", "1", "--code", "code"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "quick: Succeeded" in result.stdout


def test_quick_form_takes_the_servers_options_and_training_arguments_after_dash(
    tfkube_home: Path, tmp_path: Path
) -> None:
    """`tfkube run --name ... -- ARGS`: the server's form, from the command line."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "run.sh").write_text(
        'echo "$TFKUBE_ROLE-$TFKUBE_INDEX got $* with A=$A"\n'
        # The chief's success ends the job: it waits until the worker has said its line.
        'if [ "$TFKUBE_ROLE" = worker ]; then touch "$TFKUBE_LOG_DIR/said"; fi\n'
        'if [ "$TFKUBE_ROLE" = chief ]; then\n'
        '  for _ in $(seq 1200); do [ -e "$TFKUBE_LOG_DIR/said" ] && break; sleep 0.1; done\n'
        "fi\n"
    )
    argv = ["run", "--name", "dash", "--workers", "1", "--code", "code", "--chief"]
    argv += ["--cpu", "500m", "--env", "A=b", "--restart-policy", "Never"]
    argv += ["--", "--train_steps=1000", "--flag"]
    result = subprocess.run(
        [*TFKUBE, *argv], capture_output=True, text=True, cwd=tmp_path, timeout=180, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    logs = tfkube("logs", "dash").stdout
    for key in ("chief-0", "worker-0"):
        assert f"{key} got " in logs
        assert "--train_steps=1000 --flag with A=b" in logs.split(f"{key} got ", 1)[1]
    spec = yaml.safe_load((tfkube_home / "jobs" / "dash" / "job.yaml").read_text())["spec"]
    assert spec["replicas"]["worker"]["resources"]["cpu"] == "500m"
    assert spec["runPolicy"]["restartPolicy"] == "Never"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        pytest.param(["--workers", "0", "--gpu", "17"], "--gpu: ", id="form-bounds"),
        pytest.param(["--workers", "0"], "--workers: a job needs at least one worker", id="w0"),
        pytest.param(["--workers", "1", "--env", "1X=y"], "--env: ", id="env-name"),
        pytest.param(["--workers", "1", "--env", "A"], "--env 'A': give NAME=VALUE", id="env"),
    ],
)
def test_quick_form_refusals_name_the_flag(
    tfkube_home: Path, tmp_path: Path, argv: list[str], said: str
) -> None:
    (tmp_path / "code").mkdir()
    result = subprocess.run(
        [*TFKUBE, "run", "--name", "bad", "--code", "code", *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=180,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert result.returncode == 2
    assert said in result.stderr
    assert not (tfkube_home / "jobs").exists() or not any((tfkube_home / "jobs").iterdir())


def test_a_job_file_and_the_quick_form_are_refused_together(
    tfkube_home: Path, tmp_path: Path
) -> None:
    path = write_job(tmp_path, "both", SCRIPT)
    result = tfkube("run", str(path), "--cpu", "1", "--", "--x")
    assert result.returncode == 2
    assert "not both (also gave -- ARGS, --cpu)" in result.stderr


@pytest.mark.parametrize(
    ("change", "field", "hint"),
    [
        pytest.param(
            {"spec": {"replicas": {"worker": {"replicas": 1, "gpus": 1}}}},
            "spec.replicas.worker.gpus",
            "unknown field",
            id="unknown-field",
        ),
        pytest.param(
            {"metadata": {"name": "My_Job"}}, "metadata.name", "lower-case", id="not-dns-1123"
        ),
        pytest.param(
            {"spec": {"replicas": {"worker": {"replicas": -1}}}},
            "spec.replicas.worker.replicas",
            "at least 0",
            id="negative-count",
        ),
        pytest.param(
            {"spec": {"replicas": {"chief": {"replicas": 2}}}},
            "spec.replicas.chief",
            "0 or 1",
            id="two-chiefs",
        ),
        pytest.param(
            {"spec": {"code": {"source": "code", "entrypoint": "train.sh"}}},
            "spec.code.entrypoint",
            "not found",
            id="missing-run-sh",
        ),
        pytest.param(
            {"spec": {"code": {"source": "http://127.0.0.1:9/code.tar.gz"}}},
            "spec.code.source",
            "reachable",
            id="unreachable-url",
        ),
    ],
)
def test_bad_input_names_the_field_and_starts_nothing(
    tfkube_home: Path, tmp_path: Path, change: dict[str, dict[str, object]], field: str, hint: str
) -> None:
    path = write_job(tmp_path, "bad", SCRIPT)
    raw = yaml.safe_load(path.read_text())
    for section, values in change.items():
        for key, value in values.items():
            if isinstance(value, dict) and isinstance(raw[section].get(key), dict):
                raw[section][key].update(value)
            else:
                raw[section][key] = value
    path.write_text(yaml.safe_dump(raw))
    result = tfkube("run", str(path))
    assert result.returncode == 2
    assert field in result.stderr
    assert hint in result.stderr
    jobs = tfkube_home / "jobs"
    assert not jobs.exists() or not any(jobs.iterdir()), "nothing half-created"


@pytest.fixture
def code_server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Serve a code .tar.gz over http on 127.0.0.1; yields (url, sha256)."""
    served = tmp_path / "served"
    (served / "src").mkdir(parents=True)
    (served / "src" / "run.sh").write_text("echo fetched over http; exit 0\n")
    archive = served / "code.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(served / "src" / "run.sh", arcname="run.sh")
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(served), **kwargs)  # type: ignore[arg-type]

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/code.tar.gz", sha
    server.shutdown()
    server.server_close()
    thread.join()


def test_code_from_a_url_is_fetched_and_verified(
    tfkube_home: Path, tmp_path: Path, code_server: tuple[str, str]
) -> None:
    url, sha = code_server
    job = write_job(tmp_path, "fromurl", "", code={"source": url, "sha256": sha})
    result = tfkube("run", str(job))
    assert result.returncode == 0, result.stdout + result.stderr
    log = tfkube("logs", "fromurl", "--replica", "worker-0").stdout
    assert "fetched over http" in log

    wrong = write_job(tmp_path, "wrongsha", "", code={"source": url, "sha256": "0" * 64})
    refused = tfkube("run", str(wrong))
    assert refused.returncode == 2
    assert "spec.code.sha256" in refused.stderr
