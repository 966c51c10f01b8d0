"""A job's outputs read back from its archive (`server/outputs/archived.py`): the index
built from a real tar made by the archiver from a real folder, every answer the same as
from the folder, and archives breaking a rule refused whole. The store is a bytes object
here (pure logic); tests/server/test_s3_store.py reads through the real S3 server."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tfkube.server.outputs.archive import (
    ARCHIVE,
    BOTH,
    GONE,
    LOCAL,
    archive_reader,
    parse_days,
    retention_step,
)
from tfkube.server.outputs.archived import ArchivedOutputs, ArchiveRefused, build_index, index_of
from tfkube.server.outputs.files import NotInOutputs, every_file, list_folder
from tfkube.server.outputs.logs import SearchCursor, log_files, read_all, search_logs

DAY = 86400.0


def opened(body: bytes) -> ArchivedOutputs:
    """The archive in `body`, read as the server reads the store: headers by seeking, each
    member's data by a ranged read (here: a slice, in chunks of 7 bytes)."""

    def ranged(offset: int, length: int) -> Iterator[bytes]:
        data = body[offset : offset + length]
        for i in range(0, len(data), 7):
            yield data[i : i + 7]

    return ArchivedOutputs(index_of(io.BytesIO(body), len(body)), ranged)


def outputs(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    for replica, attempts in {"worker-0": 2, "worker-1": 1, "ps-0": 1, "chief-0": 1}.items():
        folder = out / ".tfkube" / "logs" / replica
        folder.mkdir(parents=True)
        for attempt in range(attempts):
            lines = [f"{replica} start {attempt} line {n}: loss 0.{n}" for n in range(300)]
            (folder / f"{attempt}.log").write_text("\n".join(lines) + "\nLoss done\n")
    (out / "export" / "1").mkdir(parents=True)
    (out / "export" / "1" / "saved_model.pb").write_bytes(bytes(range(256)) * 100)
    (out / "result.json").write_text('{"accuracy": 0.9}\n')
    (out / "empty.txt").write_text("")
    (out / "link.txt").symlink_to("/etc/passwd")
    return out


def test_the_archive_answers_what_the_folder_answers(tmp_path: Path) -> None:
    out = outputs(tmp_path)
    archive = opened(archive_reader(str(out)).read())
    assert archive.log_files() == log_files(str(out))
    assert [f.replica for f in archive.log_files()][:2] == ["chief-0", "ps-0"]
    for parts in [(), ("export",), ("export", "1"), (".tfkube", "logs")]:
        assert archive.list_folder(parts) == sorted(
            list_folder(str(out), parts), key=lambda f: f.path
        )
    assert archive.every_file() == every_file(str(out))
    assert "link.txt" not in {f.path for f in archive.list_folder(())}
    for replica, attempt in [("worker-0", 0), ("worker-0", None), ("chief-0", None)]:
        parts = archive.log_parts(replica, attempt)
        ref = (str(out), parts)
        for offset, limit in [(0, None), (5, 100), (1000, None), (10**9, None)]:
            assert archive.read(parts, offset, limit) == read_all(ref, offset, limit)
    assert archive.log_parts("worker-0", None)[-1] == "1.log"
    size, chunks = archive.file_chunks(("export", "1", "saved_model.pb"))
    assert size == 25600
    assert b"".join(chunks) == bytes(range(256)) * 100
    assert archive.read(("empty.txt",), 0) == b""
    with pytest.raises(NotInOutputs):
        archive.list_folder(("result.json",))
    with pytest.raises(NotInOutputs):
        archive.file_chunks(("export",))
    # A folder packed anew holds the same files.
    packed = b"".join(archive.tar_folder(("export",)))
    with tarfile.open(fileobj=io.BytesIO(packed), mode="r:gz") as tar:
        member = tar.extractfile("1/saved_model.pb")
        assert member is not None
        assert member.read() == bytes(range(256)) * 100


@pytest.mark.parametrize(("limit", "read"), [(7, 1 << 20), (1000, 4096), (3, 333)])
def test_search_pages_through_the_archive_as_through_the_folder(
    tmp_path: Path, limit: int, read: int
) -> None:
    out = outputs(tmp_path)
    archive = opened(archive_reader(str(out)).read())

    def pages(search: object) -> list[object]:
        got, cursor = [], None
        while True:
            page = search(cursor)  # type: ignore[operator]
            got.append(page)
            if page.next is None:
                return got
            cursor = SearchCursor.parse(page.next)

    from tfkube.server.outputs.logs import search_in

    local = pages(lambda c: search_logs(str(out), "loss", c, max_hits=limit, read=read))
    remote = pages(
        lambda c: search_in(
            archive.log_files(), archive._opener(), "loss", c, max_hits=limit, read=read
        )
    )
    assert remote == local
    assert sum(len(p.hits) for p in local) == 5 * 301  # type: ignore[attr-defined]
    assert archive.search("LOSS DONE", None, 100).hits == search_logs(str(out), "LOSS DONE").hits


def tar_of(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    body = io.BytesIO()
    with tarfile.open(fileobj=body, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return body.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


@pytest.mark.parametrize(
    ("members", "why"),
    [
        ([member("../escape.txt")], "'..'"),
        ([member("logs/../../x")], "'..'"),
        ([member("/etc/cron.d/x")], "not an absolute one"),
        ([member("a/./b")], "'.'"),
        ([member("link", tarfile.SYMTYPE, "/etc/passwd")], "is a link"),
        ([member(".tfkube/logs/worker-0/0.log", tarfile.SYMTYPE, "/etc/passwd")], "is a link"),
        ([member("a"), member("hard", tarfile.LNKTYPE, "a")], "is a link"),
        ([member("dev", tarfile.CHRTYPE)], "not a plain file"),
        ([member("fifo", tarfile.FIFOTYPE)], "not a plain file"),
        ([member("a"), member("a")], "appears twice"),
        ([member("a"), member("a/b")], "below a file"),
        ([member("bad\x1bname")], "control characters"),
    ],
)
def test_an_archive_breaking_a_rule_is_refused_whole(
    members: list[tarfile.TarInfo], why: str
) -> None:
    body = tar_of(*((m, b"data\n") for m in members))
    with pytest.raises(ArchiveRefused, match=why.replace(".", r"\.").replace("'", "'")):
        opened(body)


def test_sizes_past_the_archive_are_refused() -> None:
    body = tar_of((member("big.bin"), b"x" * 4096))
    with (
        tarfile.open(fileobj=io.BytesIO(body), mode="r:") as tar,
        pytest.raises(ArchiveRefused, match="past the archive's end"),
    ):
        build_index(tar, 1024)  # the object in the store is shorter than its headers say
    with pytest.raises(ArchiveRefused, match="not a readable tar"):
        opened(b"\x1f\x8b" + b"\0" * 2000)
    # A PAX record claiming megabytes is refused before it is read (memory stays bounded).
    big = member("a.txt")
    big.pax_headers = {"comment": "x" * (2 << 20)}
    with pytest.raises(ArchiveRefused, match="header record of more than"):
        opened(tar_of((big, b"data\n")))


@pytest.mark.parametrize(
    ("at", "age", "keep", "days", "want"),
    [
        (LOCAL, 100, 0, 0, (False, False, LOCAL)),  # never archived: the only copy stays
        (BOTH, 0.5, 1, None, (False, False, BOTH)),
        (BOTH, 1.0, 1, None, (True, False, ARCHIVE)),
        (BOTH, 5, None, None, (False, False, BOTH)),  # default: kept forever
        (BOTH, 0, 0, None, (True, False, ARCHIVE)),  # 0: right after archiving
        (BOTH, 40, None, 30, (False, True, LOCAL)),  # the archive goes, the local copy stays
        (BOTH, 40, 1, 30, (True, True, GONE)),
        (ARCHIVE, 29, 1, 30, (False, False, ARCHIVE)),
        (ARCHIVE, 30, 1, 30, (False, True, GONE)),
        (GONE, 99, 1, 30, (False, False, GONE)),
    ],
)
def test_retention_steps(
    at: str, age: float, keep: float | None, days: float | None, want: tuple[bool, bool, str]
) -> None:
    archived_at = None if at == LOCAL else 1000.0
    now = 1000.0 + age * DAY
    assert retention_step(at, archived_at, now, keep, days) == want


def test_a_served_job_keeps_its_local_copy() -> None:
    now = 1000.0 + 40 * DAY
    assert retention_step(BOTH, 1000.0, now, 1, None, served=True) == (False, False, BOTH)
    assert retention_step(BOTH, 1000.0, now, 1, 30, served=True) == (False, True, LOCAL)


def test_retention_days_are_checked_naming_the_flag() -> None:
    assert parse_days("--keep-local", None) is None
    assert parse_days("--keep-local", "forever") is None
    assert parse_days("--keep-local", "0.5") == 0.5
    with pytest.raises(ValueError, match="--keep-local: 'soon' is not a number of days"):
        parse_days("--keep-local", "soon")
    with pytest.raises(ValueError, match="--archive-retention: give 0 to 36500 days"):
        parse_days("--archive-retention", "-1")
    with pytest.raises(ValueError, match="--archive-retention: give 0 to 36500 days"):
        parse_days("--archive-retention", "nan")
