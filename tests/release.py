"""The released tfkube an upgrade starts from: its package's source from this repository's
history (`git archive`), run with this virtualenv's libraries (PYTHONPATH first), as a
platform team runs the previous image. Used by tests/server/test_upgrade.py (the server on
the local engine) and tests/cluster/test_operator_upgrade.py (the operator)."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RELEASE = "3b451d041f366156913e020dcbf6fa6444cf47fd"
"""The submission that landed on 2026-12-02 03:42 UTC (session 8): schema revision 0011."""
RELEASE_HEAD = "0011"


def release_source(dest: Path) -> Path:
    """The release's `src/` under `dest`; checked to be what `import tfkube` finds there."""
    archive = dest / "src.tar"
    argv = ["git", "-C", str(REPO), "archive", "-o", str(archive), RELEASE, "src/tfkube"]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:  # a shallow clone: its history from where it was cloned
        subprocess.run(
            ["git", "-C", str(REPO), "fetch", "--quiet", "--unshallow"],
            capture_output=True,
            check=False,
            timeout=300,
        )
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        pytest.fail(
            f"the release {RELEASE[:7]} is not in this clone's history ({proc.stderr.strip()}):"
            " test from a full clone (git clone, not --depth)",
            pytrace=False,
        )
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    src = dest / "src"
    where = subprocess.run(
        [sys.executable, "-c", "import tfkube; print(tfkube.__file__)"],
        env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert where.startswith(str(src)), where  # the old package, not this checkout's
    return src
