"""Code artifacts: checked and stored once at submit, fetched and verified by every replica.

A local folder is packed into a .tar.gz; a URL is downloaded once. Either archive then
goes through the very checks every replica's launcher runs before unpacking
(`tfkube.launcher.check_archive`: no member escaping the folder, no absolute path, no
link out, no device, bounded size and member count) and must hold the entrypoint. So a
bad archive, a missing `run.sh`, a wrong sha256 or an unreachable URL is an error on the
spec (naming `spec.code...`) before anything starts, never a crash-looping job.
"""

from __future__ import annotations

import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tfkube.contract import REQUIREMENTS_FILE
from tfkube.launcher import MAX_DOWNLOAD_BYTES, FetchError, check_archive, download, sha256_file
from tfkube.spec import FieldError, SpecError, TFJob

_SKIP = {"__pycache__", ".git", ".venv", ".mypy_cache", ".pytest_cache"}


@dataclass(frozen=True)
class Artifact:
    path: Path
    sha256: str
    requirements: bytes | None = None
    """The code's requirements.txt, when it has one."""
    names: frozenset[str] = frozenset()
    """The archive's member names (a role's command may name a file of the code)."""


def _spec_error(job: TFJob, field: str, message: str) -> SpecError:
    return SpecError([FieldError(field, message)], f"job {job.name!r}")


def _pack(folder: Path, dest: Path) -> None:
    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        parts = Path(info.name).parts
        return None if any(p in _SKIP for p in parts) else info

    with tarfile.open(dest, "w:gz") as tar:
        for child in sorted(folder.iterdir()):
            tar.add(child, arcname=child.name, filter=keep)


def _checked(job: TFJob, archive: Path, where: str) -> tuple[bytes | None, frozenset[str]]:
    """Run the launcher's archive checks; returns the code's requirements.txt, if any,
    and the archive's member names."""
    code = job.spec.code
    assert code is not None
    try:
        info = check_archive(archive)
    except FetchError as exc:
        raise _spec_error(
            job, "spec.code.source", f"{where} is refused: {exc}; fix the archive or folder"
        ) from None
    names = frozenset(n.removeprefix("./") for n in info.names)
    if job.spec.runs_entrypoint() and code.entrypoint not in names:
        raise _spec_error(
            job,
            "spec.code.entrypoint",
            f"{code.entrypoint!r} is not in the archive at {where}; add it or set "
            "spec.code.entrypoint to the script to run",
        )
    if REQUIREMENTS_FILE not in names:
        return None, names
    with tarfile.open(archive, "r:*") as tar:
        for name in (REQUIREMENTS_FILE, f"./{REQUIREMENTS_FILE}"):
            try:
                member = tar.extractfile(name)
            except KeyError:
                continue
            if member is not None:
                return member.read(), names
    return None, names


def prepare_artifact(job: TFJob, base_dir: Path, store: Path) -> Artifact:
    """Check the job's code and store it under `store`. Raises SpecError.
    The job must have code (`job.spec.code`)."""
    code = job.spec.code
    assert code is not None, "a job without code has no artifact"
    store.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=store, suffix=".tar.gz", delete=False) as tmp:
        staged = Path(tmp.name)
    try:
        if code.is_url:
            try:
                sha = download(code.source, staged)
            except FetchError as exc:
                raise _spec_error(
                    job, "spec.code.source", f"{exc}; check the URL and that it is reachable"
                ) from None
            if code.sha256 is not None and sha != code.sha256:
                raise _spec_error(
                    job,
                    "spec.code.sha256",
                    f"the file at {code.source} has SHA-256 {sha}; update sha256 or the file",
                )
            where = code.source
        else:
            folder = (base_dir / code.source).resolve()
            if not folder.is_dir():
                raise _spec_error(
                    job,
                    "spec.code.source",
                    f"{folder} is not a folder; give the folder holding "
                    f"{code.entrypoint} (relative to the job file) or an http(s) URL",
                )
            if job.spec.runs_entrypoint() and not (folder / code.entrypoint).is_file():
                raise _spec_error(
                    job,
                    "spec.code.entrypoint",
                    f"{code.entrypoint!r} not found in {folder}; add it or set "
                    "spec.code.entrypoint to the script to run",
                )
            _pack(folder, staged)
            if staged.stat().st_size > MAX_DOWNLOAD_BYTES:
                raise _spec_error(
                    job,
                    "spec.code.source",
                    f"{folder} packs to more than {MAX_DOWNLOAD_BYTES} bytes; keep data out "
                    "of the code folder (use spec.storage.data)",
                )
            sha = sha256_file(staged)
            where = str(folder)
        requirements, names = _checked(job, staged, where)
        final = store / f"code-{sha[:16]}.tar.gz"
        staged.replace(final)
        return Artifact(final, sha, requirements, names)
    finally:
        staged.unlink(missing_ok=True)
