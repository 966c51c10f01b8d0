"""The artifact store: uploads streamed to disk, checked, stored once per sha256.

    upload (a .tar.gz/.tgz/.tar, a .zip, or several files with relative names)
      -> streamed in 1 MiB chunks into <data-dir>/blobs/.incoming/<random> (bounded memory)
      -> checked member by member: the launcher's rules (tarfile's `data` filter: no
         absolute paths, no `..`, no links out of the folder, no devices; the launcher's
         size and member-count limits) plus the code's entrypoint when it is code
      -> a .zip or loose files are re-packed as a deterministic .tar.gz (what replicas
         fetch; the same files give the same bytes)
      -> renamed to <data-dir>/blobs/<sha256[:2]>/<sha256> (already there: the same bytes
         are kept once)
A refused upload leaves nothing behind. Uploaded bytes are only ever read as archives:
never imported, unpickled or executed by the server.

A multipart upload (the dashboard's) is parsed as it streams (`receive_form`): each file
goes straight to its own staged file, and the bytes are counted against the limit of the
artifact's kind as they arrive, so a body over the limit is cut off there, never read
whole first. The kind is the one in force when the first file begins (the query's, or a
`kind` field sent before the files, as the dashboard does).

The records: `record_artifact` makes a kept blob the team's next version of a name (or
finds the latest version already holding those bytes); `remove_artifact` deletes one and
its blob once nothing refers to those bytes any more.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import stat
import tarfile
import tempfile
import time
import zipfile
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from tfkube.launcher import (
    MAX_DOWNLOAD_BYTES,
    MAX_MEMBERS,
    MAX_UNPACKED_BYTES,
    FetchError,
    check_member,
)
from tfkube.server.core.tables import Artifact, Blob, Job, Team, User

CHUNK = 1 << 20
MAX_UPLOAD_BYTES = MAX_DOWNLOAD_BYTES
"""An upload larger than this is refused while it streams (the launcher's download limit:
a bigger code archive could not be fetched by replicas anyway)."""
MAX_DATA_UPLOAD_BYTES = 16 * 2**30
"""Data sets may be larger than code."""


MAX_FORM_FIELDS = 100
MAX_FORM_FILES = 10_000
MAX_FIELD_BYTES = 4096
"""A form field's value (name, kind, entrypoint: short words)."""
MAX_FORM_OVERHEAD = 4 * 2**20
"""Bytes of a multipart body besides its files' contents: part headers, fields."""
_CONTROL = frozenset(chr(c) for c in [*range(0x20), 0x7F])


class BadArchive(ValueError):
    """An upload refused; the message says why and what to do."""


class TooLarge(BadArchive):
    """An upload over its limit, refused while it streams (413)."""


class BadForm(BadArchive):
    """A multipart form refused; `field` names the form field at fault (422)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class BlobStoreError(RuntimeError):
    """The blob store cannot be used now (`--store s3://` unreachable, say): 503, the
    message for members (the details go to the server's log)."""


@dataclass(frozen=True)
class Contents:
    """What an upload holds once checked: its files and their bytes unpacked."""

    files: int
    unpacked: int


@dataclass(frozen=True)
class Stored:
    sha256: str
    size: int
    files: int
    path: Path


def sha256_of(path: Path) -> tuple[str, int]:
    """A file's sha256 (read in CHUNK pieces) and size."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest(), path.stat().st_size


def blob_path(root: Path, sha256: str) -> Path:
    return root / sha256[:2] / sha256


async def receive(chunks: AsyncIterator[bytes], dest: Path, limit: int) -> tuple[int, str]:
    """Write a stream to `dest`, refusing more than `limit` bytes. -> (size, sha256)."""
    digest = hashlib.sha256()
    size = 0
    with dest.open("wb") as out:
        async for chunk in chunks:
            size += len(chunk)
            if size > limit:
                raise TooLarge(f"the upload is larger than the {limit:,} byte limit")
            digest.update(chunk)
            out.write(chunk)
    return size, digest.hexdigest()


def _check_name(name: str) -> str:
    """A member name as a safe relative path, or BadArchive."""
    if any(c in _CONTROL for c in name):
        raise BadArchive(f"{name!r} holds a control character (NUL, newline, ...); rename it")
    clean = name.removeprefix("./")
    path = PurePosixPath(clean)
    if (
        name.startswith("/")
        or path.is_absolute()
        or "\\" in name
        or (len(clean) > 1 and clean[1] == ":")
    ):
        raise BadArchive(f"{name!r} is an absolute path; archives must hold relative paths")
    if ".." in path.parts:
        raise BadArchive(f"{name!r} leads out of the folder ('..')")
    return clean


def check_tar(archive: Path, entrypoint: str | None) -> Contents:
    """Check every member of a tar archive as the launcher will unpack it."""
    try:
        with tarfile.open(archive, "r:*") as tar:
            total = 0
            names = set()
            for count, member in enumerate(tar, start=1):
                if count > MAX_MEMBERS:
                    raise BadArchive(f"the archive holds more than {MAX_MEMBERS} entries")
                name = _check_name(member.name)
                try:
                    # The very rule the launcher's `extractall(filter="data")` applies.
                    if hasattr(tarfile, "data_filter"):
                        tarfile.data_filter(member, "/nonexistent/dest")
                    else:  # Python < 3.11.4 (Debian 12's, tfkube's image built here)
                        check_member(member, builtin_filter=False)
                except tarfile.FilterError as exc:
                    raise BadArchive(f"{member.name!r}: {exc}") from None
                except FetchError as exc:
                    raise BadArchive(f"{member.name!r}: {exc}") from None
                if member.isfile():
                    total += member.size
                    if total > MAX_UNPACKED_BYTES:
                        raise BadArchive(
                            f"the archive unpacks to more than {MAX_UNPACKED_BYTES} bytes"
                        )
                names.add(name.rstrip("/"))
    except (tarfile.TarError, EOFError, OSError, gzip.BadGzipFile) as exc:
        raise BadArchive(f"not a readable .tar.gz archive: {exc}") from None
    _check_entrypoint(names, entrypoint)
    return Contents(sum(1 for _ in names), total)


@dataclass
class ReceivedForm:
    """A multipart upload as it was received: its fields, and its files staged on disk."""

    fields: dict[str, str] = field(default_factory=dict)
    files: list[tuple[str, str, Path]] = field(default_factory=list)
    """(form field, file name as sent, staged file)."""
    limit: int | None = None
    """The limit the files were held to (decided when the first file began)."""


class _FormReader:
    """python-multipart's callbacks: fields kept (bounded), files written as they come."""

    def __init__(
        self,
        temp: Callable[[], Path],
        staged: list[Path],
        file_limit: Callable[[dict[str, str]], int],
    ) -> None:
        self.temp = temp
        self.staged = staged
        self.file_limit = file_limit
        self.form = ReceivedForm()
        self.file_bytes = 0
        self._header_name = bytearray()
        self._header_value = bytearray()
        self._disposition = b""
        self._field: str | None = None
        self._value = bytearray()
        self._out: IO[bytes] | None = None

    def on_part_begin(self) -> None:
        self._disposition = b""
        self._field = None
        self._value.clear()
        self._out = None

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_name += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def on_header_end(self) -> None:
        if bytes(self._header_name).lower() == b"content-disposition":
            self._disposition = bytes(self._header_value)
        self._header_name.clear()
        self._header_value.clear()

    def on_headers_finished(self) -> None:
        _, options = parse_options_header(self._disposition)
        name = _decode(options.get(b"name"), "(part)", "the part has no name")
        if b"filename" not in options:
            if len(self.form.fields) >= MAX_FORM_FIELDS:
                raise BadForm(name, f"more than {MAX_FORM_FIELDS} form fields")
            if name == "kind" and self.form.files:
                raise BadForm(
                    "kind", "send the kind before the files (or as ?kind=), as it sets the limit"
                )
            self._field = name
            return
        filename = _decode(options[b"filename"], name, "the file has no name")
        if any(c in _CONTROL for c in filename):
            raise BadForm(name, f"the file name {filename!r} holds a control character")
        if len(self.form.files) >= MAX_FORM_FILES:
            raise BadForm(name, f"more than {MAX_FORM_FILES} files")
        if self.form.limit is None:
            self.form.limit = self.file_limit(self.form.fields)
        path = self.temp()
        self.staged.append(path)
        self.form.files.append((name, filename, path))
        self._out = path.open("wb")

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        piece = data[start:end]
        if self._out is not None:
            self.file_bytes += len(piece)
            if self.form.limit is not None and self.file_bytes > self.form.limit:
                raise TooLarge(f"the upload is larger than the {self.form.limit:,} byte limit")
            self._out.write(piece)
        else:
            self._value += piece
            if len(self._value) > MAX_FIELD_BYTES:
                raise BadForm(self._field or "(part)", f"longer than {MAX_FIELD_BYTES} bytes")

    def on_part_end(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None
        elif self._field is not None:
            value = _decode(bytes(self._value), self._field, "not UTF-8 text")
            if any(c in _CONTROL for c in value):
                raise BadForm(self._field, "holds a control character (NUL, newline, ...)")
            self.form.fields[self._field] = value

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None


def _decode(raw: bytes | None, field: str, missing: str) -> str:
    if raw is None:
        raise BadForm(field, missing)
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise BadForm(field, "not UTF-8 text") from None


async def receive_form(
    content_type: str,
    chunks: AsyncIterator[bytes],
    temp: Callable[[], Path],
    staged: list[Path],
    file_limit: Callable[[dict[str, str]], int],
) -> ReceivedForm:
    """Parse a multipart/form-data body as it streams: fields into memory (bounded),
    each file into a fresh `temp()` file (added to `staged`, for the caller to remove).
    The files together may hold `file_limit(fields so far)` bytes, the rest of the body
    `MAX_FORM_OVERHEAD`; past either, TooLarge at once (the rest is never read)."""
    _, params = parse_options_header(content_type)
    boundary = params.get(b"boundary")
    if not boundary:
        raise BadForm("(request)", "a multipart body needs a boundary")
    reader = _FormReader(temp, staged, file_limit)
    parser = MultipartParser(
        boundary,
        {
            "on_part_begin": reader.on_part_begin,
            "on_part_data": reader.on_part_data,
            "on_part_end": reader.on_part_end,
            "on_header_field": reader.on_header_field,
            "on_header_value": reader.on_header_value,
            "on_header_end": reader.on_header_end,
            "on_headers_finished": reader.on_headers_finished,
        },
    )
    total = 0
    try:
        async for chunk in chunks:
            total += len(chunk)
            parser.write(chunk)
            if total - reader.file_bytes > MAX_FORM_OVERHEAD:
                raise TooLarge(
                    f"the form besides its files is larger than {MAX_FORM_OVERHEAD:,} bytes"
                )
        parser.finalize()
    except MultipartParseError as exc:
        raise BadForm("(request)", f"not a readable multipart body: {exc}") from None
    finally:
        reader.close()
    return reader.form


def _check_entrypoint(names: set[str], entrypoint: str | None) -> None:
    if entrypoint is not None and entrypoint not in names:
        raise BadArchive(
            f"the code has no {entrypoint!r} at its top level; add it (the script every "
            "replica runs) or name another entrypoint"
        )


def _tarinfo(name: str, size: int, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = mode
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _deterministic_targz(dest: Path) -> tuple[tarfile.TarFile, gzip.GzipFile, io.BufferedWriter]:
    raw = dest.open("wb")
    # No file name and no time in the gzip header: the same files give the same bytes.
    gz = gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0)
    return tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT), gz, raw


def zip_to_targz(archive: Path, dest: Path, entrypoint: str | None) -> Contents:
    """Check a .zip and re-pack it as a deterministic .tar.gz."""
    try:
        with zipfile.ZipFile(archive) as zf:
            infos = zf.infolist()
            if len(infos) > MAX_MEMBERS:
                raise BadArchive(f"the archive holds more than {MAX_MEMBERS} entries")
            total = 0
            files = []
            for info in infos:
                name = _check_name(info.filename)
                mode = (info.external_attr >> 16) & 0xFFFF
                if stat.S_ISLNK(mode):
                    raise BadArchive(f"{info.filename!r} is a link; archives may hold files only")
                if mode and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                    raise BadArchive(f"{info.filename!r} is a special file")
                if info.is_dir():
                    continue
                total += info.file_size
                if total > MAX_UNPACKED_BYTES:
                    raise BadArchive(f"the archive unpacks to more than {MAX_UNPACKED_BYTES} bytes")
                files.append((name, info, 0o755 if mode & 0o111 else 0o644))
            _check_entrypoint({n for n, _, _ in files}, entrypoint)
            tar, gz, raw = _deterministic_targz(dest)
            with raw, gz, tar:
                for name, info, perm in sorted(files, key=lambda f: f[0]):
                    with zf.open(info) as src:
                        tar.addfile(_tarinfo(name, info.file_size, perm), src)
            return Contents(len(files), total)
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise BadArchive(f"not a readable .zip archive: {exc}") from None


def files_to_targz(
    files: Iterable[tuple[str, Path]], dest: Path, entrypoint: str | None
) -> Contents:
    """Pack uploaded loose files (relative name, temp file) as a deterministic .tar.gz."""
    items = sorted((_check_name(name), path) for name, path in files)
    if not items:
        raise BadArchive("no files were uploaded")
    if len(items) > MAX_MEMBERS:
        raise BadArchive(f"more than {MAX_MEMBERS} files")
    _check_entrypoint({n for n, _ in items}, entrypoint)
    tar, gz, raw = _deterministic_targz(dest)
    total = 0
    with raw, gz, tar:
        for name, path in items:
            size = path.stat().st_size
            total += size
            perm = 0o755 if name == entrypoint or name.endswith(".sh") else 0o644
            with path.open("rb") as src:
                tar.addfile(_tarinfo(name, size, perm), src)
    return Contents(len(items), total)


def archive_kind(filename: str) -> str:
    lower = filename.lower()
    if lower.endswith((".tar.gz", ".tgz", ".tar")):
        return "tar"
    if lower.endswith(".zip"):
        return "zip"
    return "file"


class BlobStore:
    """Content-addressed files under `root` (the default; `s3blobs.S3BlobStore` keeps
    them in an S3-compatible store behind the same methods)."""

    is_local = True
    """Whether `path` is where the blob lives (so a response may serve the file)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.incoming = root / ".incoming"
        self.incoming.mkdir(parents=True, exist_ok=True)

    def temp(self) -> Path:
        fd, name = tempfile.mkstemp(dir=self.incoming)
        os.close(fd)
        return Path(name)

    def keep(self, staged: Path) -> tuple[str, int]:
        """Move a checked file into place under its sha256 (once); -> (sha256, size)."""
        sha, size = sha256_of(staged)
        final = blob_path(self.root, sha)
        if final.exists():
            staged.unlink()
        else:
            final.parent.mkdir(parents=True, exist_ok=True)
            os.chmod(staged, 0o444)
            staged.replace(final)
        return sha, size

    def path(self, sha256: str) -> Path:
        """The blob as a file here (a path that is not a file when there is none)."""
        return blob_path(self.root, sha256)

    def stream(self, sha256: str) -> tuple[int, Iterator[bytes]] | None:
        """(size, its bytes in CHUNK pieces), or None when there is no such blob."""
        path = self.path(sha256)
        if not path.is_file():
            return None

        def chunks() -> Iterator[bytes]:
            with path.open("rb") as f:
                yield from iter(lambda: f.read(CHUNK), b"")

        return path.stat().st_size, chunks()

    def remove(self, sha256: str) -> None:
        self.path(sha256).unlink(missing_ok=True)

    def clear_incoming(self) -> None:
        """Debris of uploads cut off by a crash."""
        shutil.rmtree(self.incoming, ignore_errors=True)
        self.incoming.mkdir(parents=True, exist_ok=True)


def record_artifact(
    db: Session,
    team: Team,
    user: User,
    name: str,
    kind: str,
    sha: str,
    size: int,
    contents: Contents,
) -> tuple[Artifact, bool]:
    """The team's artifact for a kept blob: its latest version of `name` when that holds
    the same bytes and kind, else a new version. Commits. -> (artifact, whether new)."""
    latest = db.scalars(
        select(Artifact)
        .where(Artifact.team_id == team.id, Artifact.name == name)
        .order_by(Artifact.version.desc())
        .limit(1)
    ).first()
    if latest is not None and latest.sha256 == sha and latest.kind == kind:
        return latest, False
    if db.get(Blob, sha) is None:
        db.add(Blob(sha256=sha, size=size, created_at=time.time()))
    version = (
        db.scalar(
            select(func.max(Artifact.version)).where(
                Artifact.team_id == team.id, Artifact.name == name
            )
        )
        or 0
    ) + 1
    artifact = Artifact(
        team_id=team.id,
        name=name,
        version=version,
        kind=kind,
        sha256=sha,
        size=size,
        files=contents.files,
        unpacked_size=contents.unpacked,
        created_by=user.id,
        created_at=time.time(),
    )
    db.add(artifact)
    db.commit()
    return artifact, True


def remove_artifact(db: Session, blobs: BlobStore, artifact: Artifact) -> None:
    """Delete an artifact (the caller checked no unfinished job uses it), and its blob
    when no other artifact and no job's record names those bytes. Commits."""
    sha = artifact.sha256
    db.delete(artifact)
    db.flush()
    if db.scalars(select(Artifact.id).where(Artifact.sha256 == sha).limit(1)).first() is None:
        used_by_jobs = db.scalars(
            select(Job.id).where(or_(Job.code_sha256 == sha, Job.data_sha256 == sha)).limit(1)
        ).first()
        if used_by_jobs is None:
            blob = db.get(Blob, sha)
            if blob is not None:
                db.delete(blob)
            blobs.remove(sha)
    db.commit()
