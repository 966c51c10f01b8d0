"""HDFS data sources on the local engine against a real HDFS (Apache Hadoop's
MiniDFSCluster, started once per session by tests/hdfsstore.py), read over WebHDFS: a
source is staged before any replica starts and read by the replicas; a second job with
the same data reads 0 bytes from the store; with `shard: byWorker` each worker gets only
its shard (PS none); a missing path or an unreachable NameNode is refused before
anything starts (exit 2 on the CLI); a file gone mid-staging ends the job with
DataStagingFailed; the HDFS user appears in nothing the job wrote. Replicas run a tiny
shell command, no TensorFlow (tests/tf/test_data_sources.py trains from a store)."""

from __future__ import annotations

import hashlib
import http.server
import ipaddress
import os
import socket
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from local.test_data_sources import everything_written
from tfkube.engines._webhdfs import HdfsError, WebHdfs
from tfkube.engines.local import LocalBackend
from tfkube.engines.local._store import JobDir, JobRecord
from tfkube.engines.local._supervisor import spawn
from tfkube.planner import JobPhase
from tfkube.spec import SpecError, TFJob, parse_job

USER = "reader-5e1f0c"
"""Who the jobs read as (HADOOP_USER_NAME): must appear nowhere the jobs write."""

READER = (
    'cd "$TFKUBE_DATA_DIR" && find . -type f | sort && find . -type f | sort | xargs -r sha256sum'
)


def raw_job(name: str, data: dict[str, Any], workers: int = 2, ps: int = 0) -> dict[str, Any]:
    replicas: dict[str, Any] = {"worker": {"replicas": workers, "command": ["sh", "-c", READER]}}
    if ps:
        replicas["ps"] = {"replicas": ps, "command": ["sh", "-c", READER + " && sleep 60"]}
    return {
        "apiVersion": "tfkube.io/v1alpha1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "storage": {"data": data},
            # Every worker reads and prints its data: the job ends when all have.
            "runPolicy": {
                "terminationGraceSeconds": 2,
                "backoffLimit": 0,
                "successPolicy": "AllWorkers",
            },
        },
    }


def hdfs_job(name: str, hdfs: Any, path: str, **kw: Any) -> TFJob:
    data = {"source": f"{hdfs.uri}{path}", "endpoint": hdfs.webhdfs.removesuffix("/webhdfs/v1")}
    data.update(kw.pop("data", {}))
    return parse_job(raw_job(name, data, **kw))


def put_tree(hdfs: Any, files: dict[str, bytes]) -> str:
    """The files under a folder of this test's own; its path."""
    root = f"/tests/{uuid.uuid4().hex[:10]}"
    for rel, body in files.items():
        hdfs.put(f"{root}/{rel}", body)
    return root


def record(backend: LocalBackend, name: str) -> JobRecord:
    return JobDir(backend.home / "jobs" / name).read()


@pytest.fixture
def reader(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HADOOP_USER_NAME", USER)


def test_an_hdfs_source_is_staged_read_and_a_second_job_reads_nothing(
    hdfs_store: Any, reader: None, tfkube_home: Path, tmp_path: Path
) -> None:
    files = {
        "a.bin": os.urandom(2 * 1024 * 1024 + 3),
        "sub/b.txt": b"hello from hdfs\n",
        "sub/empty": b"",
    }
    root = put_tree(hdfs_store, files)
    backend = LocalBackend(tfkube_home, cache=tmp_path / "cache")
    total = sum(len(b) for b in files.values())
    reads = []
    for name in ("first", "second"):
        backend.submit(hdfs_job(name, hdfs_store, root), tmp_path)
        view = backend.wait(name, timeout=120)
        assert view.phase is JobPhase.SUCCEEDED, view.message
        data = record(backend, name).data
        assert data is not None
        assert data.source == f"{hdfs_store.uri}{root}"
        assert (data.objects, data.total_bytes, data.done_bytes) == (3, total, total)
        assert data.shares[""].bytes == total
        reads.append(data.fetched_bytes)
        for worker in ("worker-0", "worker-1"):
            log = "\n".join(backend.logs(name, worker))
            for rel, body in files.items():
                assert f"{hashlib.sha256(body).hexdigest()}  ./{rel}" in log
    assert reads == [total, 0], "the second job read from the store"
    events = [e.message for e in backend.events("second")]
    assert any("0 of 3 objects fetched (0.0 MiB read from the store)" in m for m in events)
    for name in ("first", "second"):
        assert USER not in everything_written(tfkube_home / "jobs" / name)
        assert not (tfkube_home / "jobs" / name / "data-credentials").exists()
    # A single file as the source: shown by its name.
    backend.submit(hdfs_job("one", hdfs_store, f"{root}/sub/b.txt"), tmp_path)
    view = backend.wait("one", timeout=120)
    assert view.phase is JobPhase.SUCCEEDED, view.message
    assert "./b.txt" in "\n".join(backend.logs("one", "worker-0"))


def test_with_the_shard_rule_each_worker_gets_only_its_shard(
    hdfs_store: Any, reader: None, tfkube_home: Path, tmp_path: Path
) -> None:
    files = {f"part-{i}.bin": os.urandom(1000 * (i + 1)) for i in range(5)}
    root = put_tree(hdfs_store, files)
    backend = LocalBackend(tfkube_home, cache=tmp_path / "cache")
    job = hdfs_job("sharded", hdfs_store, root, workers=3, ps=1, data={"shard": "byWorker"})
    backend.submit(job, tmp_path)
    view = backend.wait("sharded", timeout=120)
    assert view.phase is JobPhase.SUCCEEDED, view.message
    data = record(backend, "sharded").data
    assert data is not None
    names = sorted(files)
    for i in range(3):
        mine = names[i::3]
        share = data.shares[f"worker-{i}"]
        size = sum(len(files[n]) for n in mine)
        assert (share.files, share.bytes, share.fetched_bytes) == (len(mine), size, size)
        listed = [
            line.removeprefix("./")
            for line in backend.logs("sharded", f"worker-{i}")
            if line.startswith("./")
        ]
        assert listed == mine
    assert (data.shares["ps-0"].files, data.shares["ps-0"].bytes) == (0, 0)
    events = {e.replica: e.message for e in backend.events("sharded") if "shard (" in e.message}
    assert (
        events["ps-0"] == "ps-0's shard (byWorker): 0 files, 0.0 MiB (0.0 MiB read from the store)"
    )
    assert data.fetched_bytes == sum(len(b) for b in files.values())  # each file once


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_missing_path_or_an_unreachable_namenode_is_refused_before_anything_starts(
    hdfs_store: Any, reader: None, tfkube_home: Path, tmp_path: Path
) -> None:
    root = put_tree(hdfs_store, {"x.bin": b"x"})
    backend = LocalBackend(tfkube_home, cache=tmp_path / "cache")
    endpoint = hdfs_store.webhdfs.removesuffix("/webhdfs/v1")
    cases = [
        (f"{hdfs_store.uri}{root}/missing", endpoint, "does not exist"),
        (f"{hdfs_store.uri}{root}", f"http://127.0.0.1:{free_port()}", "cannot be reached"),
    ]
    for i, (source, where, says) in enumerate(cases):
        job = parse_job(raw_job(f"bad-{i}", {"source": source, "endpoint": where}))
        with pytest.raises(SpecError) as caught:
            backend.submit(job, tmp_path)
        assert [e.field for e in caught.value.errors] == ["spec.storage.data.source"]
        assert source in str(caught.value)
        assert says in str(caught.value)
        assert USER not in str(caught.value)
        assert backend.list() == []
    # The CLI: exit 2, naming the source.
    job_file = tmp_path / "job.yaml"
    job_file.write_text(
        "metadata: {name: cli}\nspec:\n  replicas: {worker: {replicas: 1, command: ['true']}}\n"
    )
    source = f"{hdfs_store.uri}{root}/nope"
    done = subprocess.run(
        [sys.executable, "-m", "tfkube", "run", str(job_file), "--data", source,
         "--data-endpoint", endpoint],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert source in done.stderr
    assert "spec.storage.data.source" in done.stderr
    # There: it runs on its shard (--data-shard), the user taken from HADOOP_USER_NAME.
    done = subprocess.run(
        [sys.executable, "-m", "tfkube", "run", str(job_file), "--data",
         f"{hdfs_store.uri}{root}", "--data-endpoint", endpoint, "--data-shard", "byWorker"],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "COLUMNS": "200", "TFKUBE_CACHE": str(tmp_path / "cache")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = record(backend, "cli").data
    assert data is not None
    assert (data.shard, data.shares["worker-0"].files) == ("byWorker", 1)
    assert USER not in done.stdout + done.stderr


def test_a_file_gone_mid_staging_ends_the_job_with_the_reason(
    hdfs_store: Any, reader: None, tfkube_home: Path, tmp_path: Path
) -> None:
    root = put_tree(hdfs_store, {"gone.bin": os.urandom(4096)})

    def delete_then_spawn(job_dir: JobDir, fork: bool) -> None:
        query = urllib.parse.urlencode({"op": "DELETE", "user.name": "tfkube"})
        url = f"{hdfs_store.webhdfs}{root}/gone.bin?{query}"
        urllib.request.urlopen(urllib.request.Request(url, method="DELETE"), timeout=10).close()
        spawn(job_dir, fork)

    backend = LocalBackend(tfkube_home, cache=tmp_path / "cache", spawner=delete_then_spawn)
    backend.submit(hdfs_job("gone", hdfs_store, root), tmp_path)
    view = backend.wait("gone", timeout=60)
    assert view.phase is JobPhase.FAILED
    assert view.reason == "DataStagingFailed"
    assert f"{hdfs_store.uri}{root}" in (view.message or "")
    assert "does not exist" in (view.message or "")
    assert all(r.started_at is None for r in record(backend, "gone").replicas)


def test_a_servers_job_reads_only_from_hosts_its_fetch_policy_allows(
    hdfs_store: Any, reader: None, tfkube_home: Path, tmp_path: Path
) -> None:
    """A server's team backend (`fetch_allowed`, its --allow-fetch-from) judges the
    NameNode and every DataNode it redirects to: loopback refused unless allowed."""
    root = put_tree(hdfs_store, {"x.bin": b"x" * 100})
    strict = LocalBackend(tfkube_home / "strict", cache=tmp_path / "cache", fetch_allowed=())
    with pytest.raises(SpecError, match="does not fetch from") as caught:
        strict.submit(hdfs_job("strict", hdfs_store, root), tmp_path)
    assert [e.field for e in caught.value.errors] == ["spec.storage.data.source"]
    assert strict.list() == []
    allowed = LocalBackend(
        tfkube_home / "allowed", cache=tmp_path / "cache", fetch_allowed=("127.0.0.1/32",)
    )
    allowed.submit(hdfs_job("allowed", hdfs_store, root), tmp_path)
    view = allowed.wait("allowed", timeout=60)
    assert view.phase is JobPhase.SUCCEEDED, view.message
    # A NameNode that redirects a read to an address not allowed: refused before any
    # connection to it (127.0.0.2 is loopback, outside 127.0.0.1/32).
    redirected: list[str] = []

    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            redirected.append(self.path)
            self.send_response(307)
            self.send_header("Location", "http://127.0.0.2:9/webhdfs/v1/x?op=OPEN")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/webhdfs/v1"
        client = WebHdfs(base, USER, (ipaddress.ip_network("127.0.0.1/32"),))
        with pytest.raises(HdfsError, match=r"127\.0\.0\.2 is an address") as refusal:
            client.open("/x")
        assert refusal.value.kind == "refused"
        assert redirected
        assert USER not in str(refusal.value)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
