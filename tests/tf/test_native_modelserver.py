"""The native model server's own checks (native/modelserver, Go): gofmt, go vet and its
unit tests of the pure parts (the JSON reader and writer, the protobuf messages, the
version policy, batching), through tools/modelserver/build.sh --test. Its behaviour as a
server is tests/tf/test_model_server.py's, against both implementations."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.tf

ROOT = Path(__file__).resolve().parents[2]


def test_go_vet_and_unit_tests_pass() -> None:
    if shutil.which("go") is None and not Path("/usr/local/go/bin/go").exists():
        if os.environ.get("CI") == "true":
            pytest.fail("the Go toolchain is missing")
        pytest.skip("the Go toolchain is missing")
    env = {**os.environ, "VENV": str(Path(sys.executable).parent.parent)}
    done = subprocess.run(
        ["bash", str(ROOT / "tools" / "modelserver" / "build.sh"), "--test"],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "ok  \ttfkube.io/modelserver" in output, output[-4000:]
