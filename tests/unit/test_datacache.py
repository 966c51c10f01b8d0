"""The node data cache's pure logic and its disk (tfkube.datacache._store); the program
against a real server: tests/cluster/test_datacache.py."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from tfkube.datacache import (
    DiskCache,
    Entry,
    Incomplete,
    KeyAnswer,
    parse_key_answer,
    parse_size,
    plan_eviction,
)

K1, K2, K3 = ("a" * 64, "b" * 64, "c" * 64)


def answer_for(data: bytes, key: str = K1) -> KeyAnswer:
    return KeyAnswer(key, len(data), hashlib.sha256(data).hexdigest())


@pytest.mark.parametrize(
    ("text", "size"),
    [("1048576", 1 << 20), ("500MiB", 500 << 20), ("50GiB", 50 << 30), ("2 kib", 2048)],
)
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "-1", "5GB", "1.5GiB", "lots"])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(ValueError, match="expected bytes"):
        parse_size(text)


def test_a_key_answer_is_checked() -> None:
    good = {"key": K1, "size": 10, "sha256": K2}
    assert parse_key_answer(good) == KeyAnswer(K1, 10, K2)
    for bad in (
        None,
        [],
        {**good, "key": "../../etc/passwd"},
        {**good, "key": K1.upper()},
        {**good, "key": K1 + "0"},
        {**good, "size": -1},
        {**good, "size": True},
        {**good, "size": "10"},
        {**good, "sha256": "x"},
        {"key": K1, "size": 10},
    ):
        assert parse_key_answer(bad) is None, bad


def test_eviction_takes_the_least_recently_used_first_and_never_kept_ones() -> None:
    entries = [Entry(K1, 40, 1.0), Entry(K2, 40, 2.0), Entry(K3, 40, 3.0)]
    assert plan_eviction(entries, 120) == []
    assert plan_eviction(entries, 100) == [K1]
    assert plan_eviction(entries, 50) == [K1, K2]
    assert plan_eviction(entries, 50, keep=[K1]) == [K2, K3]
    assert plan_eviction(entries, 0, keep=[K3]) == [K1, K2]


def test_a_complete_copy_is_kept_and_served(tmp_path: Path) -> None:
    disk = DiskCache(tmp_path, 1 << 20)
    data = b"tar bytes" * 100
    assert disk.open(K1) is None
    writer = disk.writer(answer_for(data))
    writer.write(data[:500])
    assert disk.open(K1) is None  # not until it is complete
    writer.write(data[500:])
    writer.commit()
    held = disk.open(K1)
    assert held is not None
    f, size = held
    with f:
        assert (f.read(), size) == (data, len(data))
    assert list((tmp_path / "incoming").iterdir()) == []


@pytest.mark.parametrize("how", ["short", "long", "other bytes"])
def test_a_copy_that_is_not_the_named_one_is_not_kept(tmp_path: Path, how: str) -> None:
    disk = DiskCache(tmp_path, 1 << 20)
    data = b"0123456789" * 10
    writer = disk.writer(answer_for(data))
    sent = {"short": data[:-1], "long": data + b"!", "other bytes": data[::-1]}[how]
    with pytest.raises(Incomplete):  # noqa: PT012 - by write or by commit
        writer.write(sent)
        writer.commit()
    writer.abort()
    assert disk.open(K1) is None
    assert list((tmp_path / "incoming").iterdir()) == []


def test_a_half_written_copy_left_by_a_stopped_cache_is_removed(tmp_path: Path) -> None:
    (tmp_path / "incoming").mkdir()
    (tmp_path / "incoming" / f"{K1}.7.0").write_bytes(b"ab")  # never committed nor aborted
    assert len(list((tmp_path / "incoming").iterdir())) == 1
    DiskCache(tmp_path, 100)
    assert list((tmp_path / "incoming").iterdir()) == []


def test_the_disk_stays_under_its_limit(tmp_path: Path) -> None:
    disk = DiskCache(tmp_path, 250)
    for n, key in enumerate((K1, K2, K3)):
        data = bytes([n]) * 100
        writer = disk.writer(answer_for(data, key))
        writer.write(data)
        writer.commit()
        if key == K1:
            os.utime(disk.object_path(K1), (1.0, 1.0))
        disk.evict(keep=(key,))
    assert disk.open(K1) is None  # the least recently used
    assert disk.object_path(K2).is_file()
    assert disk.object_path(K3).is_file()


def test_a_key_never_names_a_path(tmp_path: Path) -> None:
    disk = DiskCache(tmp_path, 100)
    with pytest.raises(ValueError, match="not a key"):
        disk.object_path("../x")


def test_keys_are_per_team() -> None:
    from tfkube.server.api.routes.data import cache_key

    assert cache_key(1, K1) == cache_key(1, K1)
    assert cache_key(1, K1) != cache_key(2, K1)
    assert cache_key(1, K1) != cache_key(1, K2)
    assert parse_key_answer({"key": cache_key(1, K1), "size": 0, "sha256": K1}) is not None


def test_a_served_tar_is_named_by_its_digest_once(tmp_path: Path) -> None:
    from tfkube.engines import served_digest, tar_stream

    served = tmp_path / "staged" / "job"
    (served / "worker-0").mkdir(parents=True)
    (served / "worker-0" / "a.bin").write_bytes(b"x" * 1000)
    tar = b"".join(tar_stream(served / "worker-0"))
    expected = (hashlib.sha256(tar).hexdigest(), len(tar))
    assert served_digest(served, "worker-0") == expected
    (served / "worker-0" / "a.bin").unlink()  # a ready view never changes: kept, not read
    assert served_digest(served, "worker-0") == expected
    whole = b"".join(tar_stream(served))
    assert served_digest(served, "") == (hashlib.sha256(whole).hexdigest(), len(whole))
