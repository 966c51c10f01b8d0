"""`tfkube`'s command line as a user runs it, for the tests of what it refuses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def usage_error(argv: list[str], home: Path) -> str:
    """What `tfkube <argv>` says on stderr (on one line: rich wraps long lines), with
    TFKUBE_HOME `home`; it must exit 2, a usage error, before doing anything."""
    proc = subprocess.run(
        [sys.executable, "-m", "tfkube", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TFKUBE_HOME": str(home)},
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    return " ".join(proc.stderr.split())
