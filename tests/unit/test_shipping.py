"""Shipping's rules and the server's store, on real files: which paths are shipped
(`contract.shipped_file`), what the launcher finds to send (`scan_shipped`), and how the
server writes what arrives (`ShippedStore`: starts numbered, appends at the end only,
repeats taken once, bounds, no link followed). The protocol end to end, with a real
server, operator and launcher: tests/cluster/test_shipping.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tfkube import contract
from tfkube.launcher._ship import scan_shipped
from tfkube.server.outputs import shipped
from tfkube.server.outputs.shipped import Behind, ShippedStore, ShipRefused

START_A = "a" * 32
START_B = "b" * 32


@pytest.mark.parametrize(
    ("path", "taken"),
    [
        ("result.json", True),
        ("events.out.tfevents.1700000000.host.12.0.v2", True),
        ("train/events.out.tfevents.1700000000.host.12.0.v2", True),
        ("a/b/c/d/e/events.out.tfevents.1.h", True),  # 6 deep
        ("a/b/c/d/e/f/events.out.tfevents.1.h", False),  # 7 deep
        ("sub/result.json", False),  # the result is the top's only
        ("../events.out.tfevents.1.h", False),
        ("./events.out.tfevents.1.h", False),
        (".tfkube/logs/worker-0/0.log", False),
        (".hidden/events.out.tfevents.1.h", False),
        ("train//events.out.tfevents.1.h", False),
        ("/events.out.tfevents.1.h", False),
        ("model.ckpt-100.index", False),
        ("events.out.tfevents.", False),
        ("events.out.tfevents.1/2", False),
        ("train/events.out.tfevents.1\x00", False),
        ("saved_model.pb", False),
    ],
)
def test_what_is_shipped(path: str, taken: bool) -> None:
    assert (contract.shipped_file(path) is not None) is taken


def test_the_launcher_finds_event_files_and_the_result_but_nothing_of_tfkubes(
    tmp_path: Path,
) -> None:
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "events.out.tfevents.1.h").write_bytes(b"x")
    (tmp_path / "events.out.tfevents.2.h").write_bytes(b"x")
    (tmp_path / "result.json").write_text("{}")
    (tmp_path / "model.ckpt-1.index").write_bytes(b"x")
    (tmp_path / ".tfkube" / "logs" / "worker-0").mkdir(parents=True)
    (tmp_path / ".tfkube" / "events.out.tfevents.3.h").write_bytes(b"x")
    (tmp_path / "linked").symlink_to(tmp_path / "train")  # not followed
    deep = tmp_path / "a" / "b" / "c" / "d" / "e" / "f"
    deep.mkdir(parents=True)
    (deep / "events.out.tfevents.4.h").write_bytes(b"x")
    found = sorted(rel for rel, _ in scan_shipped(tmp_path))
    assert found == ["events.out.tfevents.2.h", "result.json", "train/events.out.tfevents.1.h"]


def _log(out: Path, replica: str, attempt: int) -> bytes:
    return (out / ".tfkube" / "logs" / replica / f"{attempt}.log").read_bytes()


def test_starts_are_numbered_and_appended_once(tmp_path: Path) -> None:
    store, out = ShippedStore(), str(tmp_path / "job")
    assert store.log("j", out, "worker-0", START_A, 0, b"hello\n") == 6
    assert store.log("j", out, "worker-0", START_A, 6, b"world\n") == 12
    # A retried chunk (the answer was lost) is taken once; one overlapping the end adds
    # only what is new.
    assert store.log("j", out, "worker-0", START_A, 6, b"world\n") == 12
    assert store.log("j", out, "worker-0", START_A, 9, b"ld\nagain\n") == 18
    # A chunk past the end is not written: the answer says where to send from.
    assert store.log("j", out, "worker-0", START_A, 30, b"lost?") == Behind(18)
    assert _log(tmp_path / "job", "worker-0", 0) == b"hello\nworld\nagain\n"
    # A second start (a new pod, maybe on another node) is the replica's next attempt.
    assert store.log("j", out, "worker-0", START_B, 0, b"second\n") == 7
    assert _log(tmp_path / "job", "worker-0", 1) == b"second\n"
    # A start the server never saw cannot begin in the middle.
    assert store.log("j", out, "worker-1", START_A, 5, b"x") == Behind(0)
    assert not (tmp_path / "job" / ".tfkube" / "logs" / "worker-1" / "0.log").exists()


@pytest.mark.parametrize(
    ("replica", "start"),
    [("worker-0/..", START_A), ("boss-0", START_A), ("worker-0", "../x"), ("worker-0", "AB" * 8)],
)
def test_bad_replica_or_start_names_are_refused(tmp_path: Path, replica: str, start: str) -> None:
    with pytest.raises(ShipRefused):
        ShippedStore().log("j", str(tmp_path), replica, start, 0, b"x")
    assert list(tmp_path.iterdir()) == []


def test_files_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, out = ShippedStore(), str(tmp_path)
    monkeypatch.setattr(shipped, "LOG_MAX_BYTES", 10)
    assert store.log("j", out, "ps-0", START_A, 0, b"0123456789") == 10
    with pytest.raises(ShipRefused) as refused:
        store.log("j", out, "ps-0", START_A, 10, b"x")
    assert refused.value.status == 413
    big = b"{" + b" " * contract.RESULT_MAX_BYTES + b"}"
    with pytest.raises(ShipRefused):
        store.file("j", out, "result.json", 0, big, whole=True)
    monkeypatch.setattr(shipped, "MAX_EVENT_FILES", 2)
    for n in range(2):
        store.file("j", out, f"events.out.tfevents.{n}.h", 0, b"e", whole=False)
    with pytest.raises(ShipRefused):
        store.file("j", out, "events.out.tfevents.9.h", 0, b"e", whole=False)
    # The ones it has still grow.
    assert store.file("j", out, "events.out.tfevents.1.h", 1, b"f", whole=False) == 2


def test_event_files_and_the_result(tmp_path: Path) -> None:
    store, out = ShippedStore(), str(tmp_path)
    path = "train/events.out.tfevents.1.h"
    assert store.file("j", out, path, 0, b"abc", whole=False) == 3
    assert store.file("j", out, path, 3, b"def", whole=False) == 6
    assert store.file("j", out, path, 9, b"x", whole=False) == Behind(6)
    assert (tmp_path / "train" / "events.out.tfevents.1.h").read_bytes() == b"abcdef"
    assert store.file("j", out, "result.json", 0, b'{"a": 1}', whole=True) == 8
    assert store.file("j", out, "result.json", 0, b'{"a": 2}', whole=True) == 8
    assert (tmp_path / "result.json").read_bytes() == b'{"a": 2}'
    with pytest.raises(ShipRefused):  # the result is whole, event files by offset
        store.file("j", out, "result.json", 0, b"{}", whole=False)
    with pytest.raises(ShipRefused):
        store.file("j", out, path, 0, b"{}", whole=True)
    with pytest.raises(ShipRefused):
        store.file("j", out, "model.ckpt-1.index", 0, b"x", whole=False)


def test_a_link_in_the_folder_is_never_followed(tmp_path: Path) -> None:
    """Only the server writes this folder; still, a link found in it leads nowhere."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "job"
    (out / ".tfkube" / "logs").mkdir(parents=True)
    (out / ".tfkube" / "logs" / "worker-0").symlink_to(elsewhere)
    os.symlink(elsewhere / "result.json", out / "train")
    store = ShippedStore()
    with pytest.raises(OSError, match=r"symbolic links|Not a directory"):
        store.log("j", str(out), "worker-0", START_A, 0, b"x")
    with pytest.raises(OSError, match=r"symbolic links|Not a directory"):
        store.file("j", str(out), "train/events.out.tfevents.1.h", 0, b"x", whole=False)
    assert list(elsewhere.iterdir()) == []
