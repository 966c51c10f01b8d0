"""`tfkube server --store s3://bucket/prefix` against a real SeaweedFS (tests/s3store.py):
artifacts kept in the bucket (not under --data-dir), downloaded and fetched by replicas
from it, deleted from it; a missing bucket or refused credentials stop the server at start
with the flag named, and the secret key is never printed."""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from s3store import S3Store
from server._server import Api, ServerProc

from .conftest import TeamCtx, start_server, stop_server, targz, upload, wait_job

RUN = """#!/bin/sh
echo "code from the store"
read -r line < "$TFKUBE_DATA_DIR/hello.txt"
echo "data: $line"
echo "kept" > "$TFKUBE_LOG_DIR/result.txt"
ln -s /etc/passwd "$TFKUBE_LOG_DIR/planted.txt"
ln -s /etc "$TFKUBE_LOG_DIR/planted-dir"
"""


def archived(store: S3Store, bucket: str, key: str, timeout: float = 60) -> dict[str, bytes]:
    """The members of a job's outputs archive once it is in the bucket: name -> bytes
    (b"" for a folder); every member a plain file or folder."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            body = store.client.get_object(Bucket=bucket, Key=key)["Body"].read()
            break
        except store.client.exceptions.NoSuchKey:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    members: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:") as tar:
        for member in tar:
            assert member.isfile() or member.isdir(), member.name  # no link, no device
            extracted = tar.extractfile(member) if member.isfile() else None
            members[member.name] = extracted.read() if extracted else b""
    return members


def credentials_file(path: Path, access: str, secret: str) -> Path:
    path.write_text(f"# the store's keys\naccess_key_id = {access}\nsecret_access_key = {secret}\n")
    path.chmod(0o600)
    return path


def store_args(store: S3Store, bucket: str, credentials: Path) -> list[str]:
    return [
        "--cpus",
        "2",
        "--store",
        f"s3://{bucket}/tfk/site",
        "--store-endpoint",
        store.endpoint,
        "--store-credentials",
        str(credentials),
    ]


@pytest.fixture(scope="module")
def bucket(s3_store: S3Store) -> str:
    return s3_store.bucket()


@pytest.fixture(scope="module")
def platform(
    tmp_path_factory: pytest.TempPathFactory, s3_store: S3Store, bucket: str
) -> Iterator[tuple[ServerProc, Api]]:
    tmp = tmp_path_factory.mktemp("server-s3")
    keys = credentials_file(tmp / "store-keys", s3_store.access_key, s3_store.secret_key)
    server, admin, tag = start_server(tmp, "sqlite", None, store_args(s3_store, bucket, keys))
    try:
        yield server, admin
    finally:
        stop_server(server, admin, tag)


def keys_in(store: S3Store, bucket: str) -> list[str]:
    listed = store.client.list_objects_v2(Bucket=bucket, Prefix="tfk/site/")
    return sorted(o["Key"] for o in listed.get("Contents", []))


def test_artifacts_live_in_the_bucket_and_replicas_fetch_them(
    server: ServerProc, team: TeamCtx, s3_store: S3Store, bucket: str
) -> None:
    api = team.member
    code = targz({"run.sh": RUN})
    sha = hashlib.sha256(code).hexdigest()
    artifact = api.ok(upload(api, team.name, "reader", code), 201)
    assert artifact["sha256"] == sha
    key = f"tfk/site/blobs/{sha[:2]}/{sha}"
    assert key in keys_in(s3_store, bucket)
    stored = s3_store.client.get_object(Bucket=bucket, Key=key)["Body"].read()
    assert stored == code
    # Nothing of it stays under --data-dir: no blobs folder, the upload's staging gone.
    assert not (server.data_dir / "blobs").exists()
    assert not any((server.data_dir / "s3-cache" / "blobs" / ".incoming").iterdir())

    download = api.get(f"/api/v1/artifacts/{artifact['id']}/download")
    assert download.status_code == 200
    assert download.content == code
    assert download.headers["content-length"] == str(len(code))
    assert "reader-1.tar.gz" in download.headers["content-disposition"]

    # A job's replica fetches the code through the server's code URL, as always; its data
    # set comes from the bucket into the job's data folder (after a restart, which empties
    # the local cache: the bucket is the truth).
    data = api.ok(
        upload(api, team.name, "greeting", targz({"hello.txt": "hi\n"}), kind="data"), 201
    )
    server.stop()
    server.start()
    assert not list((server.data_dir / "s3-cache" / "blobs").glob("??/*"))
    job = api.ok(
        api.post(
            f"/api/v1/teams/{team.name}/jobs",
            json={"name": "from-store", "workers": 1, "code": "reader", "data": "greeting"},
        ),
        201,
    )
    done = wait_job(api, job["id"], {"Succeeded", "Failed"}, timeout=180)
    assert done["phase"] == "Succeeded", done
    log = api.get(f"/api/v1/jobs/{job['id']}/logs/worker-0").text
    assert "code from the store" in log, log
    assert "data: hi" in log, log

    # Once it ended, its outputs and logs are archived to the bucket: plain files only,
    # the planted links left out (the same no-follow reads as every read of outputs).
    members = archived(s3_store, bucket, f"tfk/site/outputs/{team.name}/{job['id']}.tar")
    assert members["result.txt"] == b"kept\n"
    logs = [n for n in members if n.startswith(".tfkube/logs/worker-0/")]
    assert logs, sorted(members)
    assert any(b"code from the store" in members[n] for n in logs)
    assert not any(n.startswith("planted") for n in members), sorted(members)
    assert not any(b"root:" in data for data in members.values())

    # Deleting the job (its archive) and then the artifacts removes every object.
    assert api.delete(f"/api/v1/jobs/{job['id']}").status_code in {200, 204}
    assert api.delete(f"/api/v1/artifacts/{artifact['id']}").status_code == 204
    assert api.delete(f"/api/v1/artifacts/{data['id']}").status_code == 204
    assert keys_in(s3_store, bucket) == []
    assert key not in keys_in(s3_store, bucket)
    assert not (server.data_dir / "s3-cache" / "blobs" / sha[:2] / sha).exists()
    assert s3_store.secret_key not in server.log.read_text()


SLEEPER = """#!/bin/sh
echo "before the stop" > "$TFKUBE_LOG_DIR/result.txt"
echo "waiting to be stopped"
exec sleep 600
"""


def test_a_stopped_job_is_archived_too(team: TeamCtx, s3_store: S3Store, bucket: str) -> None:
    """A job stopped through the server ends in the request, not in the sync loop, which
    was the only place that handed an ended job to the archiver: its outputs stayed on
    this machine only (`JobService._news` now tells the archiver wherever a job ends)."""
    api = team.member
    api.ok(upload(api, team.name, "sleeper", targz({"run.sh": SLEEPER})), 201)
    body = {"name": "stopped", "workers": 1, "code": "sleeper"}
    job = api.ok(api.post(f"/api/v1/teams/{team.name}/jobs", json=body), 201)
    deadline = time.monotonic() + 120
    while "waiting to be stopped" not in api.get(f"/api/v1/jobs/{job['id']}/logs/worker-0").text:
        assert time.monotonic() < deadline, api.ok(api.get(f"/api/v1/jobs/{job['id']}"))
        time.sleep(0.5)
    api.ok(api.post(f"/api/v1/jobs/{job['id']}/stop"))
    members = archived(s3_store, bucket, f"tfk/site/outputs/{team.name}/{job['id']}.tar")
    assert members["result.txt"] == b"before the stop\n"
    assert api.delete(f"/api/v1/jobs/{job['id']}").status_code in {200, 204}


def refused(tmp: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    """The server's refusal, its lines joined (the console wraps long messages)."""
    argv = [sys.executable, "-m", "tfkube", "server", "--data-dir", str(tmp / "data"), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    done.stderr = " ".join(done.stderr.split())
    return done


def test_refused_credentials_stop_the_server_naming_the_flag(
    tmp_path: Path, s3_store: S3Store, bucket: str
) -> None:
    wrong = "not-the-secret-" + "x" * 20
    keys = credentials_file(tmp_path / "keys", s3_store.access_key, wrong)
    done = refused(tmp_path, [*store_args(s3_store, bucket, keys), "--port", "1"])
    assert done.returncode == 2, done
    assert "--store" in done.stderr
    assert "refused the credentials" in done.stderr
    assert "--store-credentials" in done.stderr  # where to fix them
    assert wrong not in done.stdout + done.stderr


def test_a_missing_bucket_stops_the_server_naming_it(tmp_path: Path, s3_store: S3Store) -> None:
    keys = credentials_file(tmp_path / "keys", s3_store.access_key, s3_store.secret_key)
    done = refused(tmp_path, [*store_args(s3_store, "no-such-bucket-here", keys), "--port", "1"])
    assert done.returncode == 2, done
    assert "no-such-bucket-here" in done.stderr
    assert "does not exist" in done.stderr
    assert s3_store.secret_key not in done.stdout + done.stderr


def test_a_store_url_that_is_not_s3_is_refused(tmp_path: Path) -> None:
    done = refused(tmp_path, ["--store", "/var/store", "--port", "1"])
    assert done.returncode == 2, done
    assert "--store" in done.stderr
    assert "s3://bucket/prefix" in done.stderr


def test_workloads_are_never_given_the_store_keys(tmp_path: Path) -> None:
    done = refused(
        tmp_path,
        ["--store", "s3://a-bucket/p", "--workload-env", "TFKUBE_STORE_SECRET_ACCESS_KEY"],
    )
    assert done.returncode == 2, done
    assert "--workload-env: TFKUBE_STORE_SECRET_ACCESS_KEY" in done.stderr


def test_retention_flags_are_checked_naming_the_flag(tmp_path: Path) -> None:
    done = refused(tmp_path, ["--store", "s3://a-bucket/p", "--keep-local", "soon"])
    assert done.returncode == 2, done
    assert "--keep-local: 'soon' is not a number of days" in done.stderr
    done = refused(tmp_path, ["--archive-retention", "30", "--port", "1"])
    assert done.returncode == 2, done
    assert "--archive-retention apply to archives in --store s3://" in done.stderr
