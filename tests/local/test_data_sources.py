"""Data sources on the local engine against a real S3-compatible store (SeaweedFS, started
once per session by tests/s3store.py): the data is staged before any replica starts,
shown read-only at TFKUBE_DATA_DIR, cached by content so a second job reads 0 bytes from
the store; a bad source is refused before anything starts, naming it (exit 2 on the CLI);
the credentials appear in no log, event, status or stored spec; `tfkube status` shows the
staging progress."""

from __future__ import annotations

import hashlib
import os
import re
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from s3store import S3Store, Seaweed, start_seaweed
from tfkube.engines.local import LocalBackend
from tfkube.engines.local._procs import ref_of
from tfkube.engines.local._store import DataRecord, JobDir, JobRecord
from tfkube.engines.local._supervisor import spawn
from tfkube.planner import JobPhase
from tfkube.spec import SpecError, TFJob, parse_job

TFKUBE = [sys.executable, "-m", "tfkube"]

# Each worker lists the data folder and checksums what it reads there.
READER = """
set -eu
cd "$TFKUBE_DATA_DIR"
find . -type f | sort
sha256sum a.bin sub/b.txt
"""


def code_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "code"
    folder.mkdir(exist_ok=True)
    run = folder / "run.sh"
    run.write_text("#!/usr/bin/env bash\n" + READER)
    run.chmod(0o755)
    return folder


def raw_job(name: str, data: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "tfkube.io/v1alpha1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {
            "replicas": {"worker": {"replicas": 2}},
            "code": {"source": "code"},
            "storage": {"data": data},
            # Every worker reads and prints its data: the job ends when all have.
            "runPolicy": {
                "terminationGraceSeconds": 2,
                "backoffLimit": 0,
                "successPolicy": "AllWorkers",
            },
        },
    }


def data_job(name: str, store: S3Store, source: str) -> TFJob:
    return parse_job(raw_job(name, {"source": source, "endpoint": store.endpoint}))


@pytest.fixture
def dataset(s3_store: S3Store) -> tuple[str, dict[str, bytes]]:
    """A bucket with a few objects under `ds/` (and one beside it, never fetched)."""
    bucket = s3_store.bucket()
    objects = {
        "ds/a.bin": os.urandom(3 * 1024 * 1024 + 17),
        "ds/sub/b.txt": b"hello from the store\n",
    }
    for key, body in objects.items():
        s3_store.put(bucket, key, body)
    s3_store.put(bucket, "ds/empty-folder/", b"")  # a folder marker: no file
    s3_store.put(bucket, "elsewhere/c.bin", b"not under the prefix")
    return bucket, objects


def record(backend: LocalBackend, name: str) -> JobRecord:
    return JobDir(backend.home / "jobs" / name).read()


def everything_written(job_dir: Path) -> str:
    """The job's own files as text: spec, state, events, logs, the supervisor's log."""
    out = []
    for path in job_dir.rglob("*"):
        if path.is_file() and "data" not in path.relative_to(job_dir).parts:
            out.append(path.read_text(errors="replace"))
    return "\n".join(out)


def test_a_second_job_with_the_same_data_reads_nothing_from_the_store(
    s3_store: S3Store,
    dataset: tuple[str, dict[str, bytes]],
    tfkube_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bucket, objects = dataset
    for key, value in s3_store.env.items():
        monkeypatch.setenv(key, value)
    code_folder(tmp_path)
    backend = LocalBackend(tfkube_home, cache=tmp_path / "cache")
    total = sum(len(b) for b in objects.values())
    sums = {k.removeprefix("ds/"): hashlib.sha256(b).hexdigest() for k, b in objects.items()}

    reads = []
    for name in ("first", "second"):
        backend.submit(data_job(name, s3_store, f"s3://{bucket}/ds"), tmp_path)
        view = backend.wait(name, timeout=180)
        assert view.phase is JobPhase.SUCCEEDED, view.message
        data = record(backend, name).data
        assert data is not None
        assert (data.objects, data.total_bytes, data.done_bytes) == (2, total, total)
        reads.append(data.fetched_bytes)
        # Every worker read the very bytes of the store, at TFKUBE_DATA_DIR.
        for worker in ("worker-0", "worker-1"):
            log = "\n".join(backend.logs(name, worker))
            assert "./a.bin" in log
            assert "./sub/b.txt" in log
            assert "empty-folder" not in log
            assert "c.bin" not in log
            for rel, digest in sums.items():
                assert f"{digest}  {rel}" in log
        # Read-only: files 0444, folders 0555 (no file added, removed or renamed).
        folder = Path(view.data_dir or "")
        assert stat.S_IMODE((folder / "a.bin").stat().st_mode) == 0o444
        assert stat.S_IMODE((folder / "sub").stat().st_mode) == 0o555
        assert stat.S_IMODE(folder.stat().st_mode) == 0o555
    assert reads == [total, 0], "the second job read from the store"
    events = [e.message for e in backend.events("second")]
    assert any("0 of 2 objects fetched (0.0 MiB read from the store)" in m for m in events)
    # Both jobs show the one cached copy (hard links, no second copy on disk).
    first = Path(backend.get("first").data_dir or "", "a.bin").stat()
    second = Path(backend.get("second").data_dir or "", "a.bin").stat()
    assert (first.st_ino, first.st_dev) == (second.st_ino, second.st_dev)
    assert str(tmp_path / "cache" / "data" / "local") in everything_written(
        tfkube_home / "jobs" / "first"
    )
    # The secret is nowhere the job wrote: spec, state, events, logs.
    for name in ("first", "second"):
        written = everything_written(tfkube_home / "jobs" / name)
        assert s3_store.secret_key not in written
        assert not (tfkube_home / "jobs" / name / "data-credentials").exists()
    # A deleted job's read-only data folder goes with it; the cache stays.
    backend.delete("first")
    assert not (tfkube_home / "jobs" / "first").exists()
    cached = Path(backend.get("second").data_dir or "", "a.bin")
    assert cached.exists()
    # A cached copy written to since (root ignores the read-only bits) is fetched again.
    with cached.open("r+b") as f:
        f.write(b"X")
    backend.submit(data_job("third", s3_store, f"s3://{bucket}/ds"), tmp_path)
    view = backend.wait("third", timeout=180)
    assert view.phase is JobPhase.SUCCEEDED, view.message
    third = record(backend, "third").data
    assert third is not None
    assert (third.fetched_objects, third.fetched_bytes) == (1, len(objects["ds/a.bin"]))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_bad_source_is_refused_before_anything_starts(
    s3_store: S3Store,
    dataset: tuple[str, dict[str, bytes]],
    tfkube_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bucket, _objects = dataset
    code_folder(tmp_path)
    backend = LocalBackend(tfkube_home, cache=tmp_path / "cache")
    for key, value in s3_store.env.items():
        monkeypatch.setenv(key, value)
    nowhere = f"http://127.0.0.1:{free_port()}"
    cases = [
        (f"s3://no-such-bucket-{bucket}/ds", s3_store.endpoint, "does not exist"),
        (f"s3://{bucket}/missing", s3_store.endpoint, "nothing there"),
        (f"s3://{bucket}/ds", nowhere, "cannot be reached"),
    ]
    for i, (source, endpoint, says) in enumerate(cases):
        job = parse_job(raw_job(f"bad-{i}", {"source": source, "endpoint": endpoint}))
        started = time.monotonic()
        with pytest.raises(SpecError) as caught:
            backend.submit(job, tmp_path)
        assert time.monotonic() - started < 30
        assert [e.field for e in caught.value.errors] == ["spec.storage.data.source"]
        assert source.split("/")[2] in str(caught.value)
        assert says in str(caught.value)
        assert backend.list() == []  # nothing made, nothing started
    # Wrong credentials: refused, and the secret not quoted.
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-" + s3_store.secret_key)
    job = data_job("bad-creds", s3_store, f"s3://{bucket}/ds")
    with pytest.raises(SpecError, match="refused the credentials") as caught:
        backend.submit(job, tmp_path)
    assert s3_store.secret_key not in str(caught.value)
    assert backend.list() == []


def tfkube(
    *args: str, env: dict[str, str], timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TFKUBE, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**env, "COLUMNS": "200"},
        check=False,
    )


def test_the_cli_takes_the_source_and_a_credentials_file(
    s3_store: S3Store,
    dataset: tuple[str, dict[str, bytes]],
    tfkube_home: Path,
    tmp_path: Path,
) -> None:
    bucket, _objects = dataset
    code_folder(tmp_path)
    job_file = tmp_path / "job.yaml"
    raw = raw_job("cli-data", {})
    del raw["spec"]["storage"]
    job_file.write_text(yaml.safe_dump(raw))
    creds = tmp_path / "store-credentials"
    creds.write_text(
        f"[default]\naws_access_key_id = {s3_store.access_key}\n"
        f"aws_secret_access_key = {s3_store.secret_key}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | {
        "TFKUBE_CACHE": str(tmp_path / "cache")
    }
    # Not there: exit 2 before anything starts, naming the source.
    bad = tfkube(
        "run", str(job_file), "--data", f"s3://{bucket}/nope", "--data-endpoint",
        s3_store.endpoint, "--data-credentials", str(creds), env=env,
    )  # fmt: skip
    assert bad.returncode == 2, bad.stderr
    assert f"s3://{bucket}/nope" in bad.stderr
    assert "spec.storage.data.source" in bad.stderr
    # A bad flag names the flag.
    flag = tfkube("run", str(job_file), "--data", "hdfs://nn/x", env=env)
    assert flag.returncode == 2
    assert "--data: " in flag.stderr
    assert "hdfs://namenode:port/path" in flag.stderr
    # Good: the job runs on the staged data; the credentials file was the only source.
    good = tfkube(
        "run", str(job_file), "--data", f"s3://{bucket}/ds", "--data-endpoint",
        s3_store.endpoint, "--data-credentials", str(creds), env=env,
    )  # fmt: skip
    assert good.returncode == 0, good.stdout + good.stderr
    status = tfkube("status", "cli-data", env=env)
    assert status.returncode == 0
    stored = (tfkube_home / "jobs" / "cli-data" / "job.yaml").read_text()
    for text in (good.stdout, good.stderr, status.stdout, stored):
        assert s3_store.secret_key not in text
    assert f"source: s3://{bucket}/ds\n" in stored
    assert tfkube("delete", "cli-data", env=env).returncode == 0


def test_status_shows_the_staging_progress(tfkube_home: Path, tmp_path: Path) -> None:
    """The progress line as `tfkube status` prints it, from a job's state mid-staging
    (written as its supervisor writes it: a live supervisor, its data half fetched)."""
    folder = JobDir(tfkube_home / "jobs" / "staging")
    folder.root.mkdir(parents=True)
    job = parse_job(raw_job("staging", {"source": "s3://bkt/ds"}))
    folder.spec.write_text(yaml.safe_dump(job.model_dump(mode="json", by_alias=True)))
    now = time.time()
    folder.write(
        JobRecord(
            name="staging",
            uid="u",
            created_at=now - 4,
            data_dir=str(folder.root / "data"),
            log_dir=str(folder.root / "output"),
            artifact="",
            artifact_sha256="",
            supervisor=ref_of(os.getpid()),
            data=DataRecord(
                source="s3://bkt/ds/",
                objects=3,
                total_bytes=8 * 2**20,
                done_bytes=3 * 2**20,
                fetched_bytes=3 * 2**20,
                started_at=now - 2,
            ),
        )
    )
    shown = tfkube("status", "staging", env=dict(os.environ))
    assert shown.returncode == 0, shown.stderr
    assert re.search(
        r"StagingData: staging data: 3\.0 of 8\.0 MiB, [0-9.]+ MiB/s, \d+ s left", shown.stdout
    ), shown.stdout
    assert "(s3://bkt/ds/)" in shown.stdout


def test_a_store_gone_before_staging_ends_the_job_with_the_reason(
    s3_store: S3Store, tfkube_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listed at submit, gone when the supervisor fetches (a store of this test's own,
    stopped between the two): the job ends Failed (DataStagingFailed) naming the source,
    no replica started, never retried."""
    own = S3Store(start_seaweed())
    try:
        bucket = own.bucket()
        own.put(bucket, "ds/a.bin", os.urandom(1024))
        for key, value in own.env.items():
            monkeypatch.setenv(key, value)
        code_folder(tmp_path)

        def stop_store_then_spawn(job_dir: JobDir, fork: bool) -> None:
            own.server.stop()
            spawn(job_dir, fork)

        backend = LocalBackend(tfkube_home, cache=tmp_path / "cache", spawner=stop_store_then_spawn)
        backend.submit(data_job("gone", own, f"s3://{bucket}/ds"), tmp_path)
        view = backend.wait("gone", timeout=120)
    finally:
        own.server.stop()
    assert view.phase is JobPhase.FAILED
    assert view.reason == "DataStagingFailed"
    assert f"s3://{bucket}/ds" in (view.message or "")
    assert "cannot be reached" in (view.message or "")
    assert all(r.restarts == 0 and r.exit_code is None for r in view.replicas)
    assert not any(e.message.startswith("started ") for e in backend.events("gone"))


def test_with_the_shard_rule_each_worker_gets_only_its_objects(
    s3_store: S3Store,
    dataset: tuple[str, dict[str, bytes]],
    tfkube_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`shard: byWorker`: worker i of n sees `sorted(objects)[i::n]` at its own
    TFKUBE_DATA_DIR (tests/local/test_hdfs_data.py does the same for HDFS, with a PS)."""
    bucket, objects = dataset
    for key, value in s3_store.env.items():
        monkeypatch.setenv(key, value)
    raw = raw_job("shards", {"source": f"s3://{bucket}/ds", "endpoint": s3_store.endpoint})
    raw["spec"]["storage"]["data"]["shard"] = "byWorker"
    del raw["spec"]["code"]
    lister = 'cd "$TFKUBE_DATA_DIR" && pwd && find . -type f | sort'
    raw["spec"]["replicas"]["worker"]["command"] = ["sh", "-c", lister]
    backend = LocalBackend(tfkube_home, cache=tmp_path / "cache")
    backend.submit(parse_job(raw), tmp_path)
    view = backend.wait("shards", timeout=120)
    assert view.phase is JobPhase.SUCCEEDED, view.message
    data = record(backend, "shards").data
    assert data is not None
    for i, key in enumerate(["ds/a.bin", "ds/sub/b.txt"]):
        log = list(backend.logs("shards", f"worker-{i}"))
        assert any(line.endswith(f"/data/worker-{i}") for line in log), log
        assert [line for line in log if line.startswith("./")] == ["./" + key.removeprefix("ds/")]
        share = data.shares[f"worker-{i}"]
        size = len(objects[key])
        assert (share.files, share.bytes, share.fetched_bytes) == (1, size, size)


def test_the_store_starts_again_on_other_ports_when_one_was_taken(
    s3_store: S3Store, tmp_path: Path
) -> None:
    """A port chosen while free and taken before weed binds it (a CI run's failure:
    `bind: address already in use`): weed is started again on new ports."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = int(taken.getsockname()[1])
    server = Seaweed(binary=s3_store.server.binary, workdir=tmp_path / "weed", s3_port=port)
    server.workdir.mkdir()
    try:
        server.start()
        assert server.s3_port != port
        S3Store(server).bucket()
    finally:
        server.stop()
        taken.close()
