"""The data cache against real stores (SeaweedFS, tests/s3store.py; MiniDFSCluster,
tests/hdfsstore.py): a staging cut short leaves its object's first bytes, and the next
staging fetches only the rest (an S3 ranged GET, a WebHDFS OPEN at an offset), counted in
the bytes read from the store; past its bound the
least recently used objects that no job's data folder shows are evicted."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from local.test_data_sources import code_folder, data_job
from s3store import S3Store
from tfkube.engines._data import (
    Cancelled,
    HdfsCredentials,
    MiB,
    S3Credentials,
    StoreRef,
    list_objects,
    open_store,
    stage,
    writable_tree,
)
from tfkube.engines.local import LocalBackend
from tfkube.spec import S3Source, SpecError, parse_source


def test_a_staging_cut_short_is_resumed_not_fetched_again_from_byte_0(
    s3_store: S3Store, tmp_path: Path
) -> None:
    bucket = s3_store.bucket()
    body = os.urandom(8 * MiB + 123)
    s3_store.put(bucket, "ds/big.bin", body)
    store = StoreRef(S3Source(bucket, "ds/"), s3_store.endpoint)
    client = open_store(store, S3Credentials(s3_store.access_key, s3_store.secret_key))
    cut_short_then_completed(client, store, body, tmp_path)


def test_an_hdfs_staging_cut_short_is_resumed_at_its_offset(
    hdfs_store: Any, tmp_path: Path
) -> None:
    body = os.urandom(8 * MiB + 123)
    root = f"/tests/{uuid.uuid4().hex[:10]}"
    hdfs_store.put(f"{root}/big.bin", body)
    source = parse_source(f"{hdfs_store.uri}{root}")
    store = StoreRef(source, hdfs_store.webhdfs.removesuffix("/webhdfs/v1"))
    client = open_store(store, HdfsCredentials("tfkube-test"))
    cut_short_then_completed(client, store, body, tmp_path)


def cut_short_then_completed(client: Any, store: StoreRef, body: bytes, tmp_path: Path) -> None:
    """Staging stopped once 3 MiB of the one object landed, then run again: the second
    reads only the rest from the store, and the copy is whole."""
    objects = list_objects(client, store)
    cache = tmp_path / "cache"

    def parts() -> list[Path]:
        return list((cache / "objects").rglob("*.part"))

    def cut_short() -> bool:  # the supervisor stopped once 3 MiB had landed
        return any(p.stat().st_size >= 3 * MiB for p in parts())

    try:
        stage(client, store, objects, cache, tmp_path / "first", workers=1, cancelled=cut_short)
        raise AssertionError("staging was not cut short")
    except Cancelled:
        pass
    (part,) = parts()
    kept = part.stat().st_size
    assert 3 * MiB <= kept < len(body)

    result = stage(client, store, objects, cache, tmp_path / "second", workers=1)
    assert result.fetched_bytes == len(body) - kept  # the rest only, not from byte 0
    assert result.fetched_objects == 1
    assert (tmp_path / "second" / "big.bin").read_bytes() == body
    assert parts() == []
    writable_tree(tmp_path / "second")


def test_the_least_recently_used_data_no_job_shows_is_evicted_past_the_bound(
    s3_store: S3Store, tmp_path: Path
) -> None:
    bucket = s3_store.bucket()
    for key in ("a/1.bin", "a/2.bin", "b/1.bin"):
        s3_store.put(bucket, key, os.urandom(MiB))
    creds = S3Credentials(s3_store.access_key, s3_store.secret_key)
    cache = tmp_path / "cache"

    def staged(prefix: str, dest: str, limit: int | None = None) -> int:
        store = StoreRef(S3Source(bucket, prefix), s3_store.endpoint)
        client = open_store(store, creds)
        objects = list_objects(client, store)
        return stage(client, store, objects, cache, tmp_path / dest, limit=limit).fetched_bytes

    def cached() -> int:
        return sum(p.stat().st_size for p in (cache / "objects").glob("*/*"))

    assert staged("a/", "job-a") == 2 * MiB
    hour_ago = time.time() - 3600
    for path in (cache / "objects").glob("*/*"):  # job a's data was last used an hour ago
        os.utime(path, (hour_ago, path.stat().st_mtime))
    assert staged("b/", "job-b", limit=MiB) == MiB
    assert cached() == 3 * MiB  # over the bound, but job a still shows its data

    stale = next((cache / "objects").glob("*/*")).with_name("0" * 64 + ".part")
    stale.write_bytes(b"cut short a day ago")  # what a staging killed long ago left
    os.utime(stale, (time.time() - 86400, time.time() - 86400))
    writable_tree(tmp_path / "job-a")
    shutil.rmtree(tmp_path / "job-a")  # job a deleted
    assert staged("b/", "job-b2", limit=MiB) == 0  # b from the cache; a evicted
    assert cached() == MiB
    assert not stale.exists()
    assert staged("a/", "job-a2") == 2 * MiB  # fetched again
    for dest in ("job-b", "job-b2", "job-a2"):
        writable_tree(tmp_path / dest)


def test_a_bad_cache_bound_is_refused_at_submit_naming_the_setting(
    s3_store: S3Store, tfkube_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = s3_store.bucket()
    s3_store.put(bucket, "ds/a.bin", b"x")
    code_folder(tmp_path)
    for key, value in s3_store.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("TFKUBE_DATA_CACHE_LIMIT", "lots")
    backend = LocalBackend(tfkube_home, cache=tmp_path / "cache")
    job = data_job("bounded", s3_store, f"s3://{bucket}/ds")
    with pytest.raises(SpecError, match=r"TFKUBE_DATA_CACHE_LIMIT='lots'.*\"20%\"") as caught:
        backend.submit(job, tmp_path)
    assert [e.field for e in caught.value.errors] == ["TFKUBE_DATA_CACHE_LIMIT"]
    assert backend.list() == []
