"""The server's staging for replicas that fetch their data (a cluster's pods:
`tfkube.engines._served`), against a real S3 store (SeaweedFS on loopback,
tests/s3store.py): a source staged into a team's cache and shown per replica with a shard
rule, a second staging of the same data reading 0 bytes, refused credentials a failed
state with the reason (what the data door answers 410 with), the tar a replica gets.
The whole path with the server, the control plane and the launcher:
tests/cluster/test_k8s_data.py."""

from __future__ import annotations

import io
import ipaddress
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from s3store import S3Store
from tfkube.engines import (
    S3Credentials,
    Stager,
    StageRequest,
    StoreRef,
    _served,
    forget_served,
    read_state,
    tar_stream,
)
from tfkube.spec import parse_source

LOOPBACK = (ipaddress.ip_network("127.0.0.1/32"),)


def _request(
    tmp: Path, store: S3Store, bucket: str, job: str, credentials: S3Credentials
) -> StageRequest:
    return StageRequest(
        served=tmp / "staged" / job,
        cache=tmp / "data-cache",
        store=StoreRef(parse_source(f"s3://{bucket}/ds/"), store.endpoint),
        credentials=credentials,
        allowed=LOOPBACK,
        shard="byWorker",
        replicas=[("ps", 0), ("worker", 0), ("worker", 1)],
        workers=2,
        meta={"job": job},
    )


def _untar(chunks: Any) -> dict[str, bytes]:
    out = {}
    with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
        for member in tar.getmembers():
            found = tar.extractfile(member) if member.isfile() else None
            if found is not None:
                out[member.name] = found.read()
    return out


def _stage(stager: Stager, done: dict[str, dict[str, Any]], request: StageRequest) -> None:
    assert stager.start(request)
    assert not stager.start(request)  # one staging per job at a time
    event = done.setdefault("_events", {})
    waited = event.setdefault(request.meta["job"], threading.Event())
    assert waited.wait(60), f"{request.meta['job']} never ended"


def test_a_source_is_staged_once_per_content_and_served_by_shard(
    tmp_path: Path, s3_store: S3Store
) -> None:
    bucket = s3_store.bucket()
    objects = {f"part-{i}.bin": bytes([65 + i]) * (4096 + i) for i in range(4)}
    for name, body in objects.items():
        s3_store.put(bucket, f"ds/{name}", body)
    keys = S3Credentials(s3_store.access_key, s3_store.secret_key)
    done: dict[str, Any] = {}

    def on_done(request: StageRequest, state: dict[str, Any]) -> None:
        done[request.meta["job"]] = state
        done["_events"].setdefault(request.meta["job"], threading.Event()).set()

    stager = Stager(on_done)
    try:
        first = _request(tmp_path, s3_store, bucket, "j1", keys)
        _stage(stager, done, first)
        state = done["j1"]
        assert state == read_state(first.served)
        assert state["phase"] == "ready", state
        assert state["fetched_bytes"] == sum(len(b) for b in objects.values())
        assert "4 of 4 objects fetched" in state["text"], state["text"]
        names = sorted(objects)
        assert set(state["shares"]) == {"ps-0", "worker-0", "worker-1"}
        assert state["shares"]["ps-0"]["files"] == 0
        assert _untar(tar_stream(first.served / "worker-1")) == {n: objects[n] for n in names[1::2]}
        # Another job, the same data: nothing read from the store.
        second = _request(tmp_path, s3_store, bucket, "j2", keys)
        _stage(stager, done, second)
        assert done["j2"]["phase"] == "ready"
        assert done["j2"]["fetched_bytes"] == 0
        assert "0 of 4 objects fetched (0.0 MiB read from the store)" in done["j2"]["text"]
        # Refused credentials: a failed state naming the source, the key nowhere.
        bad = _request(tmp_path, s3_store, bucket, "j3", S3Credentials("nobody", "wrong-key"))
        _stage(stager, done, bad)
        failed = read_state(bad.served)
        assert failed is not None
        assert failed["phase"] == "failed", failed
        assert f"s3://{bucket}/ds/" in failed["text"], failed["text"]
        assert "refused the credentials" in failed["text"], failed["text"]
        assert "wrong-key" not in failed["text"]
        assert not stager.start(bad)  # failed stays failed: the door answers 410
    finally:
        stager.close()


def test_a_staging_cancelled_for_its_ended_job_writes_nothing_more(
    tmp_path: Path, s3_store: S3Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job is stopped or deleted while the server stages its source: the staging
    stops (its thread ends, no `on_done`, no state written after), what it fetched stays in
    the cache, and the job's folder can then be removed for good."""
    bucket = s3_store.bucket()
    for i in range(8):
        s3_store.put(bucket, f"ds/part-{i}.bin", bytes([97 + i]) * 8192)
    real_stage = _served.stage
    reached = threading.Event()

    def held_stage(*args: Any, **kwargs: Any) -> Any:
        """The real staging, held at its first progress report until it is cancelled:
        the cancel lands mid-staging however fast the store answers."""
        on_progress = kwargs["on_progress"]
        cancelled = kwargs["cancelled"]

        def progress(done: int, total: int, result: Any) -> None:
            on_progress(done, total, result)
            reached.set()
            deadline = time.monotonic() + 60
            while not cancelled() and time.monotonic() < deadline:
                time.sleep(0.01)

        kwargs["on_progress"] = progress
        return real_stage(*args, **kwargs)

    monkeypatch.setattr(_served, "stage", held_stage)
    ended: list[dict[str, Any]] = []
    stager = Stager(lambda _r, state: ended.append(state))
    keys = S3Credentials(s3_store.access_key, s3_store.secret_key)
    try:
        request = _request(tmp_path, s3_store, bucket, "gone", keys)
        assert stager.start(request)
        assert reached.wait(60), "the staging never reported progress"
        assert stager.running(request.served)
        assert stager.cancel(request.served)
        assert not stager.running(request.served)
        assert ended == []  # no outcome for a job that is gone
        state = read_state(request.served)
        assert state is not None
        assert state["phase"] == "staging", state
        kept = sum(1 for f in (tmp_path / "data-cache" / "objects").rglob("*") if f.is_file())
        forget_served(request.served)
        assert read_state(request.served) is None
        assert not request.served.exists()
        assert not stager.cancel(request.served)  # nothing runs any more
        # What it fetched is the team's: the same data staged again reads it from there.
        monkeypatch.setattr(_served, "stage", real_stage)
        again = _request(tmp_path, s3_store, bucket, "again", keys)
        done: dict[str, Any] = {}

        def on_done(request: StageRequest, state: dict[str, Any]) -> None:
            done[request.meta["job"]] = state
            done["_events"].setdefault(request.meta["job"], threading.Event()).set()

        stager.on_done = on_done
        _stage(stager, done, again)
        assert done["again"]["phase"] == "ready", done["again"]
        assert done["again"]["fetched_bytes"] == (8 - kept) * 8192, (kept, done["again"])
    finally:
        stager.close()
