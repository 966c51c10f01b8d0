"""Import one of tools/'s standard-library scripts by path (tools/ is not a package): the
throwaway PostgreSQL (tests/server/_postgres.py) and S3 store (tests/s3store.py) that the
tests share with the benchmarks; and the wait for a store that `make test` builds beside the
tests (`waiting_for_build`)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pytest

TOOLS = Path(__file__).resolve().parents[1] / "tools"
BUILDS_BESIDE = os.environ.get("TFKUBE_BUILDS_BESIDE") == "1"
"""Set by make test (tools/test/suite.sh), which builds the S3 store and HDFS in the
background beside the sessions: a test that needs one builds it (a no-op once built), which
waits for the background build's lock, rather than skip it."""


def load_tool(name: str, *path: str) -> ModuleType:
    """tools/<path> as module `name` (loaded once per process)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, TOOLS.joinpath(*path))
        assert spec is not None
        assert spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


@contextmanager
def waiting_for_build(config: pytest.Config, what: str, script: Path) -> Iterator[None]:
    """Around a fixture's call of `script` (which builds when needed): when make test's
    background build of `what` is still under way, say on the terminal, past pytest's
    capture, that the test waits for it, and how long it waited."""
    check = ["bash", str(script), "--check"]
    if not BUILDS_BESIDE or subprocess.run(check, capture_output=True).returncode == 0:
        yield
        return
    capture = config.pluginmanager.getplugin("capturemanager")

    def say(line: str) -> None:
        with capture.global_and_fixture_disabled():
            print(f"\n{line}", file=sys.stderr, flush=True)

    rel = script.relative_to(TOOLS.parent)
    say(f"waiting for the {what} build ({rel}: make test builds it beside the tests) ...")
    start = time.monotonic()
    yield
    say(f"the {what} build was there after {time.monotonic() - start:.0f} s of waiting")
