"""A job's outputs as the server hands them out: a folder listed, one file streamed, a
folder or a checkpoint packed as .tar.gz (streamed), the exported model versions listed.

The job wrote every byte and every name here, so everything goes through
`tfkube.safefs`: found from the output folder's descriptor down, no link followed on the
way or at the end, links and special files neither listed nor packed nor opened (their
targets are never looked at), hard-linked files refused.
"""

from __future__ import annotations

import io
import os
import tarfile
import time
from collections.abc import Iterator, Sequence

from tfkube import contract
from tfkube.safefs import (
    Entry,
    closing,
    entries,
    open_dir,
    open_file,
    open_root,
    pread_all,
    walk,
)
from tfkube.serving import SAVED_MODEL_FILES, version_of
from tfkube.wire import OutputFile

CHUNK = 1 << 20


class NotInOutputs(LookupError):
    """No such file or folder in the outputs (or something there that is not served:
    a link, a special file)."""


def kind_of(output_dir: str, parts: Sequence[str]) -> str:
    """`dir`, `file`, or NotInOutputs for what `parts` names in the outputs."""
    try:
        with closing(open_root(output_dir)) as root:
            if not parts:
                return "dir"
            with closing(open_dir(root, parts[:-1])) as folder:
                found = {e.name: e for e in entries(folder)}.get(parts[-1])
    except OSError:
        raise NotInOutputs("/".join(parts)) from None
    if found is None or found.kind not in {"dir", "file"}:
        raise NotInOutputs("/".join(parts))
    return found.kind


def list_folder(output_dir: str, parts: Sequence[str]) -> list[OutputFile]:
    """The plain files and folders in one folder of the outputs (links left out). The top
    of outputs nothing has written to yet (a job still starting) is an empty folder, not a
    missing one."""
    try:
        root = open_root(output_dir)
    except FileNotFoundError:
        if parts:
            raise NotInOutputs("/".join(parts)) from None
        return []
    except OSError:
        raise NotInOutputs("/".join(parts)) from None
    try:
        with closing(root), closing(open_dir(root, parts)) as folder:
            found = entries(folder)
    except OSError:
        raise NotInOutputs("/".join(parts)) from None
    return [
        OutputFile(
            path="/".join((*parts, e.name)),
            size=e.size if e.kind == "file" else 0,
            modified=e.mtime,
            is_dir=e.kind == "dir",
        )
        for e in found
        if e.kind in {"dir", "file"}
    ]


MAX_LISTED = 5000
"""The most entries `every_file` looks at (a job that wrote a million files gets a partial
overview, not a slow page)."""


def every_file(output_dir: str | None, limit: int = MAX_LISTED) -> tuple[list[OutputFile], bool]:
    """Every plain file of the outputs (tfkube's own folder left out), depth first in name
    order; -> (files, whether the listing stopped at `limit` entries)."""
    if not output_dir:
        return [], False
    out: list[OutputFile] = []
    try:
        with closing(open_root(output_dir)) as root:
            for seen, (rel, e) in enumerate(
                walk(root, skip=lambda rel: rel == (contract.OWN_SUBDIR,))
            ):
                if seen >= limit:
                    return out, True
                if e.kind == "file":
                    out.append(OutputFile(path="/".join(rel), size=e.size, modified=e.mtime))
    except OSError:
        return out, False
    return out, False


def open_output(output_dir: str, parts: Sequence[str]) -> tuple[int, int]:
    """(descriptor, size) of one plain file of the outputs; NotInOutputs otherwise."""
    try:
        with closing(open_root(output_dir)) as root:
            fd = open_file(root, parts)
    except OSError:
        raise NotInOutputs("/".join(parts)) from None
    return fd, os.fstat(fd).st_size


def file_chunks(fd: int, size: int) -> Iterator[bytes]:
    """The first `size` bytes of an open file (what its Content-Length promised), then
    closes it."""
    try:
        offset = 0
        while offset < size:
            chunk = os.pread(fd, min(CHUNK, size - offset), offset)
            if not chunk:
                break
            offset += len(chunk)
            yield chunk
    finally:
        os.close(fd)


class _Pipe(io.RawIOBase):
    """A write-only sink whose contents are taken out in pieces."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.buffer += data
        return len(data)

    def take(self) -> bytes:
        data = bytes(self.buffer)
        self.buffer.clear()
        return data


class _Exactly(io.RawIOBase):
    """`size` bytes of an open file, read with pread: a file that shrank while it was
    packed is padded with NULs, one that grew is cut, so the tar header stays true."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd, self.size, self.at = fd, size, 0

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        want = self.size - self.at if n < 0 else min(n, self.size - self.at)
        data = pread_all(self.fd, self.at, want) if want > 0 else b""
        data += b"\0" * (want - len(data))
        self.at += len(data)
        return data


def _add_file(
    tar: tarfile.TarFile, root: int, parts: Sequence[str], arcname: str, exact: bool = False
) -> None:
    try:
        fd = open_file(root, parts)
    except OSError:
        return  # replaced by a link or removed since it was listed: left out
    with closing(fd):
        st = os.fstat(fd)
        info = tarfile.TarInfo(arcname)
        info.size, info.mode = st.st_size, 0o644
        info.mtime = st.st_mtime if exact else int(st.st_mtime)
        tar.addfile(info, _Exactly(fd, st.st_size))


def _add_dir(tar: tarfile.TarFile, arcname: str, entry: Entry, exact: bool = False) -> None:
    info = tarfile.TarInfo(arcname)
    info.type, info.mode = tarfile.DIRTYPE, 0o755
    info.mtime = entry.mtime if exact else int(entry.mtime)
    tar.addfile(info)


def tar_folder(output_dir: str, parts: Sequence[str], *, gzip: bool = True) -> Iterator[bytes]:
    """A folder of the outputs as .tar.gz (or a plain tar: the archive in the store, whose
    members are read back by ranged reads, with exact modification times in PAX headers),
    produced piece by piece (memory stays bounded): plain files and folders only, each
    file read through its own descriptor."""
    pipe = _Pipe()
    with (
        closing(open_root(output_dir)) as root,
        closing(open_dir(root, parts)) as folder,
        tarfile.open(fileobj=pipe, mode="w|gz" if gzip else "w|", format=tarfile.PAX_FORMAT) as tar,
    ):
        for rel, entry in walk(folder):
            arcname = "/".join(rel)
            if entry.kind == "dir":
                _add_dir(tar, arcname, entry, exact=not gzip)
            elif entry.kind == "file":
                _add_file(tar, folder, rel, arcname, exact=not gzip)
            if len(pipe.buffer) > CHUNK:
                yield pipe.take()
    yield pipe.take()


def tar_files(
    output_dir: str, files: Sequence[tuple[Sequence[str], str]], extra: dict[str, bytes]
) -> Iterator[bytes]:
    """Chosen files of the outputs (parts, name in the archive) plus `extra` small files
    made here, as .tar.gz, streamed."""
    pipe = _Pipe()
    with closing(open_root(output_dir)) as root, tarfile.open(fileobj=pipe, mode="w|gz") as tar:
        for name, data in extra.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
            tar.addfile(info, io.BytesIO(data))
        for parts, arcname in files:
            _add_file(tar, root, parts, arcname)
            if len(pipe.buffer) > CHUNK:
                yield pipe.take()
    yield pipe.take()


def exported_versions(output_dir: str | None, subdir: str = "export") -> list[int]:
    """The complete SavedModel versions a job exported (`<outputs>/export/<version>` with
    a saved_model.pb(txt)), oldest first: `tfkube.serving.exported_versions` without
    following anything the job linked."""
    if not output_dir:
        return []
    found = []
    try:
        with closing(open_root(output_dir)) as root, closing(open_dir(root, [subdir])) as base:
            for entry in entries(base):
                version = version_of(entry.name)
                if version is None or entry.kind != "dir":
                    continue
                try:
                    with closing(open_dir(base, [entry.name])) as folder:
                        names = {e.name for e in entries(folder) if e.kind == "file"}
                except OSError:
                    continue
                if names & set(SAVED_MODEL_FILES):
                    found.append(version)
    except OSError:
        return []
    return sorted(found)
