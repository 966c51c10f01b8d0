"""Fetch a code artifact (.tar.gz by file:// or http(s)://), verify it, unpack it safely.

Safety rules (`check_archive`, which the engines also run at submit, so a bad archive is
refused before anything starts): the download, the member count and the unpacked size
are bounded; members with absolute paths, members that would land outside the
destination (`..`, links pointing out), devices and other special files are refused
(tarfile's `data` filter); a checksum mismatch is fatal. Pythons older than the `data`
filter (3.11.0-3.11.3, e.g. Debian 12's python3 in a TensorFlow image) get the same rules
from `_data_member`.
"""

from __future__ import annotations

import copy
import hashlib
import os
import shutil
import tarfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

MAX_DOWNLOAD_BYTES = 512 * 1024 * 1024
MAX_UNPACKED_BYTES = 2 * 1024 * 1024 * 1024
MAX_MEMBERS = 100_000
_CHUNK = 1 << 20


class FetchError(Exception):
    """The code could not be fetched or unpacked. `permanent` errors are never retried."""

    def __init__(self, message: str, *, permanent: bool) -> None:
        super().__init__(message)
        self.permanent = permanent


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def download(
    url: str,
    dest: Path,
    max_bytes: int = MAX_DOWNLOAD_BYTES,
    timeout: float = 30,
    token: str | None = None,
) -> str:
    """Copy `url` to `dest`; returns the SHA-256 of what was written. `token` goes in an
    `Authorization: Bearer` header (http(s) only), never into the URL or a message."""
    scheme = urllib.parse.urlparse(url).scheme
    if scheme not in {"file", "http", "https"}:
        raise FetchError(f"unsupported code URL scheme {scheme!r} in {url}", permanent=True)
    digest = hashlib.sha256()
    written = 0
    tmp = dest.with_name(dest.name + ".part")
    try:
        request = urllib.request.Request(url)
        if token and scheme in {"http", "https"}:
            request.add_header("Authorization", f"Bearer {token}")
        with urllib.request.urlopen(request, timeout=timeout) as response, tmp.open("wb") as out:
            for chunk in iter(lambda: response.read(_CHUNK), b""):
                written += len(chunk)
                if written > max_bytes:
                    raise FetchError(
                        f"{url} is larger than the {max_bytes} byte limit", permanent=True
                    )
                digest.update(chunk)
                out.write(chunk)
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        tmp.unlink(missing_ok=True)
        if scheme == "file":
            raise FetchError(f"cannot read {url}: {exc}", permanent=True) from None
        raise FetchError(f"cannot download {url}: {exc}", permanent=False) from None
    except FetchError:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(dest)
    return digest.hexdigest()


def _data_member(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
    """What tarfile's `data` filter does, for Pythons without it: the member to extract
    (leading '/' stripped, no setuid/setgid/sticky or group/other write bits, owned by the
    unpacking user), or a FetchError when it would land or point outside `dest`."""
    name = member.name.lstrip("/")
    target = os.path.realpath(os.path.join(dest, name))
    if os.path.commonpath([target, dest]) != dest:
        raise FetchError(f"cannot unpack the code: {member.name!r} is outside it", permanent=True)
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        raise FetchError(
            f"cannot unpack the code: {member.name!r} is a special file", permanent=True
        )
    if member.issym() or member.islnk():
        base = os.path.dirname(target) if member.issym() else dest
        link = os.path.realpath(os.path.join(base, member.linkname))
        if os.path.isabs(member.linkname) or os.path.commonpath([link, dest]) != dest:
            raise FetchError(
                f"cannot unpack the code: {member.name!r} links outside it", permanent=True
            )
    safe = copy.copy(member)
    safe.name = name
    if member.isfile():
        safe.mode = (member.mode & 0o755) | 0o600
    elif member.isdir():
        safe.mode = member.mode & 0o755
    safe.uid, safe.gid, safe.uname, safe.gname = os.geteuid(), os.getegid(), "", ""
    return safe


@dataclass(frozen=True)
class ArchiveInfo:
    """What `check_archive` found in a code archive that passed every check."""

    members: int
    unpacked_bytes: int
    names: frozenset[str]
    """Regular files and symlinks, as relative paths without a leading './'."""


_CHECK_ROOT = "/tfkube-archive-check"
"""A stand-in destination for the data filter: it judges paths, it touches nothing."""


def check_member(
    member: tarfile.TarInfo, builtin_filter: bool = hasattr(tarfile, "data_filter")
) -> None:
    """Refuse one archive member as tarfile's `data` filter would (FetchError, permanent),
    judged against a stand-in folder; on a Python without that filter (before 3.11.4, e.g.
    Debian 12's 3.11.2) with `_data_member`, the same rule."""
    if builtin_filter:
        try:
            tarfile.data_filter(member, _CHECK_ROOT)
        except tarfile.FilterError as exc:
            raise FetchError(f"cannot unpack the code: {exc}", permanent=True) from None
    else:
        _data_member(member, _CHECK_ROOT)


def check_archive(
    archive: Path,
    max_bytes: int = MAX_UNPACKED_BYTES,
    max_members: int = MAX_MEMBERS,
    builtin_filter: bool = hasattr(tarfile, "data_filter"),
) -> ArchiveInfo:
    """Read a code archive's headers and refuse anything unsafe, without unpacking it.

    Members are read one at a time, so a bomb (too many members, or too many bytes) is
    refused as soon as it crosses a limit. Raises FetchError (permanent) naming the
    member at fault."""
    count = 0
    total = 0
    names: set[str] = set()
    try:
        with tarfile.open(archive, "r:*") as tar:
            while (member := tar.next()) is not None:
                count += 1
                if count > max_members:
                    raise FetchError(
                        f"the code has more than {max_members} files; at most {max_members} "
                        "are allowed",
                        permanent=True,
                    )
                if member.name.startswith("/"):
                    raise FetchError(
                        f"cannot unpack the code: member {member.name!r} has an absolute "
                        "path; an archive must hold relative paths only",
                        permanent=True,
                    )
                check_member(member, builtin_filter)
                if member.isfile():
                    total += member.size
                    if total > max_bytes:
                        raise FetchError(
                            f"the code unpacks to more than {max_bytes} bytes (at "
                            f"{member.name!r}); the limit is {max_bytes}",
                            permanent=True,
                        )
                if member.isfile() or member.issym():
                    names.add(member.name.removeprefix("./"))
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise FetchError(f"cannot unpack the code: {exc}", permanent=True) from None
    return ArchiveInfo(members=count, unpacked_bytes=total, names=frozenset(names))


def unpack(
    archive: Path,
    dest: Path,
    max_bytes: int = MAX_UNPACKED_BYTES,
    builtin_filter: bool = hasattr(tarfile, "data_filter"),
) -> ArchiveInfo:
    """Unpack a .tar.gz into `dest` (which must not exist), refusing anything unsafe.
    `builtin_filter` False checks members with `_data_member` instead of tarfile's filter."""
    info = check_archive(archive, max_bytes, builtin_filter=builtin_filter)
    try:
        with tarfile.open(archive, "r:*") as tar:
            if builtin_filter:
                dest.mkdir(parents=True)
                tar.extractall(dest, filter="data")
            else:
                root = os.path.realpath(dest)
                safe = [_data_member(m, root) for m in tar.getmembers()]
                dest.mkdir(parents=True)
                tar.extractall(dest, members=safe)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise FetchError(f"cannot unpack the code: {exc}", permanent=True) from None
    return info


def fetch_code(
    url: str, expected_sha256: str | None, work_dir: Path, token: str | None = None
) -> Path:
    """Fetch, verify and unpack the code into `work_dir/code` (replaced if present).

    Returns the code folder. Raises FetchError.
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    archive = work_dir / "code.tar.gz"
    actual = download(url, archive, token=token)
    if expected_sha256 is not None and actual != expected_sha256:
        archive.unlink(missing_ok=True)
        raise FetchError(
            f"the code at {url} has SHA-256 {actual}, expected {expected_sha256}",
            permanent=True,
        )
    code = work_dir / "code"
    if code.exists():
        shutil.rmtree(code)
    unpack(archive, code)
    os.unlink(archive)
    return code
