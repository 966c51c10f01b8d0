"""The launcher as one file a stock TensorFlow image can run: a zipapp.

Every replica runs the same launcher as on the local engine, but a cluster pod has no
tfkube installed. The launcher and the cluster math are standard-library only (an
import-linter contract keeps them so), so their sources zipped together with a
`__main__.py` run on any Python 3.11+: `python3 /opt/tfkube/launcher.pyz`. The zip reaches
the pod as a ConfigMap (binaryData) mounted read-only, so no init container, custom image or
registry is needed.

This is the one place `tfkube.render` reads files: its own package's sources. The result
is cached and byte-for-byte deterministic (sorted names, fixed timestamps and modes), so
rendering twice gives identical ConfigMaps and `kubectl apply` sees no change.
"""

from __future__ import annotations

import functools
import io
import zipfile
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
"""The installed `tfkube` package folder."""

LAUNCHER_PARTS: tuple[str, ...] = ("__init__.py", "contract.py", "launcher", "tfcluster")
"""What the zipapp holds, relative to the package: exactly the stdlib-only code the
launcher needs (`tfkube/__init__.py` has no imports)."""

MAIN = b"from tfkube.launcher._run import main\n\nraise SystemExit(main())\n"
_EPOCH = (1980, 1, 1, 0, 0, 0)


def _sources(root: Path) -> list[tuple[str, bytes]]:
    files: list[tuple[str, bytes]] = []
    for part in LAUNCHER_PARTS:
        path = root / part
        found = [path] if path.is_file() else sorted(path.rglob("*.py"))
        for file in found:
            if "__pycache__" in file.parts:
                continue
            name = "tfkube/" + file.relative_to(root).as_posix()
            files.append((name, file.read_bytes()))
    return sorted(files)


def build_launcher_zipapp(root: Path = PACKAGE_ROOT) -> bytes:
    """Zip the launcher's sources under `root` (a `tfkube` package folder)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in [("__main__.py", MAIN), *_sources(root)]:
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data, compresslevel=9)
    return buffer.getvalue()


@functools.cache
def launcher_zipapp() -> bytes:
    """The zipapp of the installed package, built once per process."""
    return build_launcher_zipapp()
