"""Import one of tools/'s standard-library scripts by path (tools/ is not a package): the
throwaway PostgreSQL (tests/server/_postgres.py) and S3 store (tests/s3store.py) that the
tests share with the benchmarks."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def load_tool(name: str, *path: str) -> ModuleType:
    """tools/<path> as module `name` (loaded once per process)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, TOOLS.joinpath(*path))
        assert spec is not None
        assert spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]
