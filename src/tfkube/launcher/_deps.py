"""Per-job Python dependencies: a code folder's requirements.txt, installed once into a
virtual environment that every replica (and the next job with the same requirements)
shares.

    cache/<key>/          the environment; <key> hashes the requirements, the Python and
                          the packages it already sees (so a new TensorFlow means a new one)
    cache/<key>/.ready    written last, by an atomic rename: only then is it used
    cache/<key>.lock      held (flock) by whoever builds it

Environments are built at their final path, not renamed into place, because a virtual
environment is not relocatable (installed scripts carry its absolute path). Concurrent
builders serialize on the lock; the second finds `.ready` and reuses the first one's
work; a build that died half-way (no `.ready`) is removed and redone by the next.

The environment sees the packages of the Python that builds it (a `.pth` file names that
Python's site-packages, after the environment's own), so TensorFlow is not installed
again. Standard library only: the launcher runs this inside stock TensorFlow images.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

READY = ".ready"
INSTALL_TIMEOUT = 1800.0
_PTH = "_tfkube_parent.pth"


class DepsError(Exception):
    """requirements.txt could not be installed: a set-up failure, never retried."""


def _parent_site_dirs() -> list[str]:
    """This Python's own package folders (a virtual environment's, if it runs in one)."""
    found = []
    for key in ("purelib", "platlib"):
        path = sysconfig.get_paths()[key]
        if path not in found and Path(path).is_dir():
            found.append(path)
    return found


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _named(requirements: str) -> set[str]:
    """The project names requirements.txt asks for by name (options and URLs skipped)."""
    names = set()
    for line in requirements.splitlines():
        line = line.split(" #", 1)[0].strip()
        if m := re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line):
            names.add(_normal(m.group(0)))
    return names


def _parent_dists() -> dict[str, str]:
    """Normalized name -> version of every distribution this Python sees."""
    return {
        _normal(d.metadata["Name"]): d.version
        for d in importlib.metadata.distributions()
        if d.metadata["Name"]
    }


def requirements_key(requirements: bytes) -> str:
    """The cache key: the requirements' bytes, this Python (version, platform, prefix)
    and every distribution it already sees (name and version)."""
    digest = hashlib.sha256()
    digest.update(requirements)
    identity = [
        sys.implementation.name,
        platform.python_version(),
        platform.machine(),
        sys.platform,
        sys.prefix,
        *_parent_site_dirs(),
    ]
    digest.update("\0".join(identity).encode())
    dists = sorted(f"{name}=={version}" for name, version in _parent_dists().items())
    digest.update("\n".join(dists).encode())
    return digest.hexdigest()[:32]


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on `path` (created if need be): between processes of one
    machine, or pods of one node sharing a hostPath."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(argv: list[str], what: str, env: dict[str, str]) -> None:
    try:
        result = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT,
            check=False,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DepsError(f"{what}: {exc}") from None
    if result.returncode != 0:
        tail = (result.stderr.strip() or result.stdout.strip())[-1500:]
        raise DepsError(f"{what} failed (exit {result.returncode}): {tail}")


def _build(target: Path, requirements: Path, uv: str | None, index_url: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    python = str(target / "bin" / "python")
    if uv:
        _run(
            [
                uv,
                "venv",
                "--quiet",
                "--system-site-packages",
                "--python",
                sys.executable,
                str(target),
            ],
            "creating the virtual environment",
            env,
        )
    else:
        _run(
            [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(target)],
            "creating the virtual environment",
            env,
        )
    # Our own packages (TensorFlow...) after the environment's: see them, do not reinstall.
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout.strip()
    Path(site, _PTH).write_text("".join(f"{d}\n" for d in _parent_site_dirs()))
    if uv:
        # uv does not count packages outside the environment as installed (pip does):
        # exclude what this Python has, unless requirements.txt names it itself.
        keep = _named(requirements.read_text(errors="replace"))
        excludes = target / "tfkube-excludes.txt"
        excludes.write_text("".join(f"{n}\n" for n in sorted(_parent_dists()) if n not in keep))
        argv = [
            uv,
            "pip",
            "install",
            "--quiet",
            "--python",
            python,
            "-r",
            str(requirements),
            "--excludes",
            str(excludes),
        ]
        if index_url:
            argv += ["--default-index", index_url]
    else:
        argv = [
            sys.executable,
            "-m",
            "pip",
            "--python",
            python,
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-r",
            str(requirements),
        ]
        if index_url:
            argv += ["--index-url", index_url]
    _run(argv, f"installing {requirements.name}", env)


def ensure_venv(
    requirements: Path, cache: Path, uv: str | None = None, index_url: str | None = None
) -> Path:
    """The environment for `requirements` under `cache`, built if need be.

    `uv`: the uv binary to install with; None falls back to `python -m venv` and pip
    (stock TensorFlow images have pip, not uv). `index_url`: the package index to
    install from (`--package-index`; default: the installer's, PyPI, or its
    environment's UV_DEFAULT_INDEX / PIP_INDEX_URL). Raises DepsError."""
    key = requirements_key(requirements.read_bytes())
    final = cache / key
    if (final / READY).is_file():
        return final
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DepsError(f"cannot create the environment cache {cache}: {exc}") from None
    with file_lock(cache / f"{key}.lock"):
        if (final / READY).is_file():
            return final  # another job built it while we waited
        shutil.rmtree(final, ignore_errors=True)  # debris of a build that died
        try:
            _build(final, requirements, uv, index_url)
            marker = final / f"{READY}.{os.getpid()}"
            marker.write_text(requirements.read_text(errors="replace"))
            marker.replace(final / READY)
        except BaseException:
            shutil.rmtree(final, ignore_errors=True)
            raise
    return final


def activate(env: dict[str, str], venv: str) -> dict[str, str]:
    """`env` with the environment first on PATH (so `python3` in run.sh is its Python)."""
    out = dict(env)
    out["VIRTUAL_ENV"] = venv
    out["PATH"] = os.pathsep.join([str(Path(venv, "bin")), env.get("PATH", "")])
    return out
