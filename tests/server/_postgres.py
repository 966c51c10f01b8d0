"""The throwaway PostgreSQL of tools/postgres/throwaway.py (shared with the benchmarks),
imported by path: tools/ is not a package."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_NAME = "tfkube_tools_postgres"
if _NAME not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        _NAME, Path(__file__).resolve().parents[2] / "tools" / "postgres" / "throwaway.py"
    )
    assert _spec is not None
    assert _spec.loader is not None
    sys.modules[_NAME] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules[_NAME])
_module = sys.modules[_NAME]

Postgres = _module.Postgres
PostgresUnavailable = _module.PostgresUnavailable
start_postgres = _module.start_postgres

__all__ = ["Postgres", "PostgresUnavailable", "start_postgres"]
