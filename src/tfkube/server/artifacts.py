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
import zipfile
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tfkube.launcher import MAX_DOWNLOAD_BYTES, MAX_MEMBERS, MAX_UNPACKED_BYTES

CHUNK = 1 << 20
MAX_UPLOAD_BYTES = MAX_DOWNLOAD_BYTES
"""An upload larger than this is refused while it streams (the launcher's download limit:
a bigger code archive could not be fetched by replicas anyway)."""
MAX_DATA_UPLOAD_BYTES = 16 * 2**30
"""Data sets may be larger than code."""


class BadArchive(ValueError):
    """An upload refused; the message says why and what to do."""


@dataclass(frozen=True)
class Stored:
    sha256: str
    size: int
    files: int
    path: Path


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
                raise BadArchive(f"the upload is larger than the {limit} byte limit")
            digest.update(chunk)
            out.write(chunk)
    return size, digest.hexdigest()


def _check_name(name: str) -> str:
    """A member name as a safe relative path, or BadArchive."""
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


def check_tar(archive: Path, entrypoint: str | None) -> int:
    """Check every member of a tar archive as the launcher will unpack it; -> file count."""
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
                    tarfile.data_filter(member, "/nonexistent/dest")
                except tarfile.FilterError as exc:
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
    return sum(1 for _ in names)


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


def zip_to_targz(archive: Path, dest: Path, entrypoint: str | None) -> int:
    """Check a .zip and re-pack it as a deterministic .tar.gz; -> file count."""
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
            return len(files)
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise BadArchive(f"not a readable .zip archive: {exc}") from None


def files_to_targz(files: Iterable[tuple[str, Path]], dest: Path, entrypoint: str | None) -> int:
    """Pack uploaded loose files (relative name, temp file) as a deterministic .tar.gz."""
    items = sorted((_check_name(name), path) for name, path in files)
    if not items:
        raise BadArchive("no files were uploaded")
    if len(items) > MAX_MEMBERS:
        raise BadArchive(f"more than {MAX_MEMBERS} files")
    _check_entrypoint({n for n, _ in items}, entrypoint)
    tar, gz, raw = _deterministic_targz(dest)
    with raw, gz, tar:
        for name, path in items:
            size = path.stat().st_size
            perm = 0o755 if name == entrypoint or name.endswith(".sh") else 0o644
            with path.open("rb") as src:
                tar.addfile(_tarinfo(name, size, perm), src)
    return len(items)


def archive_kind(filename: str) -> str:
    lower = filename.lower()
    if lower.endswith((".tar.gz", ".tgz", ".tar")):
        return "tar"
    if lower.endswith(".zip"):
        return "zip"
    return "file"


class BlobStore:
    """Content-addressed files under `root`."""

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
        digest = hashlib.sha256()
        with staged.open("rb") as f:
            for chunk in iter(lambda: f.read(CHUNK), b""):
                digest.update(chunk)
        sha = digest.hexdigest()
        size = staged.stat().st_size
        final = blob_path(self.root, sha)
        if final.exists():
            staged.unlink()
        else:
            final.parent.mkdir(parents=True, exist_ok=True)
            os.chmod(staged, 0o444)
            staged.replace(final)
        return sha, size

    def path(self, sha256: str) -> Path:
        return blob_path(self.root, sha256)

    def remove(self, sha256: str) -> None:
        self.path(sha256).unlink(missing_ok=True)

    def clear_incoming(self) -> None:
        """Debris of uploads cut off by a crash."""
        shutil.rmtree(self.incoming, ignore_errors=True)
        self.incoming.mkdir(parents=True, exist_ok=True)
