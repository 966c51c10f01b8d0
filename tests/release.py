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
POD_RELEASE = "e1cabdacf1309e03189f246ef3e2dad610691234"
"""The version the in-cluster upgrade starts from (tests/cluster/test_real_node_upgrade.py):
main on 2026-12-02 at 13:22 UTC, schema revision 0012, the newest state before today's
schema (0013). `RELEASE` cannot run as pods of tfkube's image: its operator dies at start
(kopf asks the password database for uid 65532, which has no entry: KeyError; fixed after
it by 7ac930d) and its server answers every upload 500 on the image's Python 3.11.2
(`tarfile.data_filter` is 3.11.4's); it also had no `--node-selector`/`--toleration`."""
POD_RELEASE_HEAD = "0012"


def release_source(dest: Path, commit: str = RELEASE) -> Path:
    """The release's `src/` under `dest` (beside it its pyproject.toml and README.md, what
    its image is built from: tests/cluster/test_real_node_upgrade.py); checked to be what
    `import tfkube` finds there."""
    archive = dest / "src.tar"
    argv = ["git", "-C", str(REPO), "archive", "-o", str(archive), commit, "src/tfkube",
            "pyproject.toml", "README.md"]  # fmt: skip
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
            f"the release {commit[:7]} is not in this clone's history ({proc.stderr.strip()}):"
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
