"""The throwaway PostgreSQL of tools/postgres/throwaway.py (shared with the benchmarks),
imported by path: tools/ is not a package."""

from __future__ import annotations

from tooling import load_tool

_module = load_tool("tfkube_tools_postgres", "postgres", "throwaway.py")

Postgres = _module.Postgres
PostgresUnavailable = _module.PostgresUnavailable
start_postgres = _module.start_postgres

__all__ = ["Postgres", "PostgresUnavailable", "start_postgres"]
