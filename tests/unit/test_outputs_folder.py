"""Scalars, progress, usage, the final checkpoint and the result read from a job's archive
(`server/outputs/archived.py` as a `folder.OutputsFolder`) give what they give from its
output folder: the folder holds real TensorBoard event files (TensorBoard's own writer),
a checkpoint index and files, usage samples as the supervisor writes them; the archive
is the real tar the archiver makes of it, read back through ranged reads of a bytes
object (the store itself: tests/server/test_s3_archive.py). Event files are read in
windows (`Windowed`), not record by record; TensorBoard and serving say why not."""

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
    first_format_key,
    needs_local_copy,
)
from tfkube.server.outputs.archived import ArchivedOutputs, index_of
from tfkube.server.outputs.checkpoints import INDEX, find_checkpoint
from tfkube.server.outputs.folder import LocalFolder, Windowed
from tfkube.server.outputs.results import read_result
from tfkube.server.outputs.scalars import ScalarReader, progress_hint
from tfkube.server.outputs.usage import latest_usage, read_usage


class Store:
    """The archive's bytes, read as the server reads the store: ranged reads, counted."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.reads: list[tuple[int, int]] = []

    def ranged(self, offset: int, length: int) -> Iterator[bytes]:
        self.reads.append((offset, length))
        data = self.body[offset : offset + length]
        for i in range(0, len(data), 65536):
            yield data[i : i + 65536]

    def opened(self) -> ArchivedOutputs:
        return ArchivedOutputs(index_of(io.BytesIO(self.body), len(self.body)), self.ranged, "k@1")


def write_events(folder: Path, steps: int, big: int = 0) -> None:
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(folder))
    if big:  # a large record the scalars skip (as a graph would be)
        writer.add_event(Event(wall_time=1.0, step=0, file_version="x" * big))
    for step in range(steps):
        values = [
            Summary.Value(tag="loss", simple_value=1.0 / (step + 1)),
            Summary.Value(tag="accuracy", simple_value=step / steps),
        ]
        writer.add_event(Event(wall_time=1000.0 + step, step=step, summary=Summary(value=values)))
    writer.close()


def outputs(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    write_events(out, 300, big=3 << 20)
    write_events(out / "eval", 20)
    (out / "progress.json").write_text('{"step": 299, "total": 400}')
    (out / "result.json").write_text('{"accuracy": 0.93}\n')
    for step in (100, 200):
        for suffix in (".index", ".data-00000-of-00001", ".meta"):
            (out / f"model.ckpt-{step}{suffix}").write_bytes(bytes([step % 256]) * 5000)
    (out / INDEX).write_text(
        'model_checkpoint_path: "/pods/w0/out/model.ckpt-200"\n'
        'all_model_checkpoint_paths: "/pods/w0/out/model.ckpt-100"\n'
    )
    usage = out / ".tfkube" / "usage"
    usage.mkdir(parents=True)
    for replica in ("worker-0", "ps-0"):
        lines = [f"[{1000 + 2 * i}.0,0.{i % 10}000,{1000 * i}]\n" for i in range(2000)]
        (usage / f"{replica}.jsonl").write_text("".join(lines))
    (usage / "notes.txt").write_text("not usage")
    (out / ".tfkube" / "logs" / "worker-0").mkdir(parents=True)
    (out / ".tfkube" / "logs" / "worker-0" / "0.log").write_text("hello\n")
    return out


def test_the_archive_answers_what_the_folder_answers(tmp_path: Path) -> None:
    out = outputs(tmp_path)
    store = Store(archive_reader(str(out)).read())
    archive = store.opened()

    local_series = ScalarReader().read(str(out))
    assert {(s.run, s.tag) for s in local_series} == {
        (".", "accuracy"),
        (".", "loss"),
        ("eval", "accuracy"),
        ("eval", "loss"),
    }
    assert ScalarReader().read(archive) == local_series
    assert ScalarReader().read(LocalFolder(str(out))) == local_series
    assert progress_hint(archive) == progress_hint(str(out)) == {"step": 299, "total": 400}
    assert read_usage(archive) == read_usage(str(out))
    assert [s.replica for s in read_usage(archive)] == ["ps-0", "worker-0"]
    assert (
        latest_usage(archive)
        == latest_usage(str(out))
        == {
            "ps-0": (4998.0, 0.9, 1999000),
            "worker-0": (4998.0, 0.9, 1999000),
        }
    )
    found = find_checkpoint(archive)
    assert found == find_checkpoint(str(out))
    assert found is not None
    assert found.prefix == "model.ckpt-200"
    assert read_result(archive) == read_result(str(out))
    assert read_result(archive).values == {"accuracy": 0.93}

    # The checkpoint packed from either holds the same bytes.
    files = [(p.split("/"), p) for p in found.files]
    extra = {INDEX: found.index_text().encode()}

    def members(body: bytes) -> dict[str, bytes]:
        with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
            return {m.name: tar.extractfile(m).read() for m in tar}  # type: ignore[union-attr]

    from_archive = members(b"".join(archive.tar_files(files, extra)))
    assert from_archive == members(b"".join(LocalFolder(str(out)).tar_files(files, extra)))
    assert from_archive["model.ckpt-200.index"] == bytes([200]) * 5000
    assert sorted(from_archive) == sorted([INDEX, *found.files])


def test_scalars_read_the_archive_in_windows_and_once(tmp_path: Path) -> None:
    out = outputs(tmp_path)
    store = Store(archive_reader(str(out)).read())
    archive = store.opened()
    reader = ScalarReader()
    reader.read(archive)
    # 320 events in two files and a 3 MiB record: a few windows, never the whole archive.
    assert len(store.reads) < 12, store.reads
    assert max(length for _, length in store.reads) < 4 << 20
    events = sum(f.stat().st_size for f in out.rglob("events.out.tfevents.*"))
    assert sum(length for _, length in store.reads) <= events  # each byte fetched once
    # An archive never changes: read again, nothing more is fetched.
    store.reads.clear()
    again = reader.read(archive)
    assert again == ScalarReader().read(str(out))
    assert store.reads == []


def test_a_missing_or_refused_archive_member_reads_as_missing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    archive = Store(archive_reader(str(out)).read()).opened()
    assert ScalarReader().read(archive) == []
    assert read_usage(archive) == []
    assert latest_usage(archive) == {}
    assert find_checkpoint(archive) is None
    assert read_result(archive).values is None
    assert progress_hint(archive) == {}
    with pytest.raises(FileNotFoundError):
        archive.read_bytes(("nothing",), 10)
    with pytest.raises(FileNotFoundError):
        list(archive.walk(("nothing",)))


def test_windowed_reads_ahead_and_holds_one_window() -> None:
    data = bytes(range(256)) * 40  # 10,240 bytes
    asked: list[tuple[int, int]] = []

    def pread(offset: int, length: int) -> bytes:
        asked.append((offset, length))
        return data[offset : offset + length]

    w = Windowed(pread, len(data), window=4096)
    assert w(0, 12) == data[:12]
    assert w(12, 100) == data[12:112]
    assert asked == [(0, 4096)]
    assert w(4000, 200) == data[4000:4200]  # past the window: only what is missing
    assert asked[-1] == (4096, 4096)
    assert w(9000, 5000) == data[9000:]  # elsewhere: read anew, cut at the file's end
    assert asked[-1] == (9000, 1240)
    assert w(10240, 12) == b""  # at the end: nothing asked
    assert w(20000, 12) == b""
    assert len(asked) == 3
    assert w(100, 8000) == data[100:8100]  # longer than a window: read whole
    assert asked[-1] == (100, 8000)
    assert w.reads == 4


@pytest.mark.parametrize(
    ("at", "status", "words"),
    [
        (ARCHIVE, 409, ["TensorBoard", "--keep-local", "archive", "download"]),
        (GONE, 410, ["TensorBoard", "retention", "--archive-retention"]),
    ],
)
def test_tensorboard_and_serving_say_why_without_the_local_copy(
    at: str, status: int, words: list[str]
) -> None:
    found = needs_local_copy(at, "TensorBoard")
    assert found is not None
    assert found[0] == status
    for word in words:
        assert word in found[1]
    assert needs_local_copy(LOCAL, "serving") is None
    assert needs_local_copy(BOTH, "serving") is None


def test_the_first_format_key_is_the_tar_gz_beside() -> None:
    assert first_format_key("site/outputs/a/j1.tar") == "site/outputs/a/j1.tar.gz"
    with pytest.raises(ValueError, match="not an outputs archive key"):
        first_format_key("site/outputs/a/j1.tar.gz")
