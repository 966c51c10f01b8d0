"""The database connection: SQLite (WAL) in the data directory by default, PostgreSQL
with `--database-url postgresql://...`. Migrations run at start-up (Alembic, shipped in
the package), so an upgraded server upgrades its schema before it answers anything."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker


def database_url(value: str | None, data_dir: Path) -> str:
    """The SQLAlchemy URL: `value` (postgresql:// uses psycopg 3), else the SQLite file."""
    if not value:
        return f"sqlite:///{data_dir / 'tfkube.db'}"
    if value.startswith("postgresql://") or value.startswith("postgres://"):
        return "postgresql+psycopg://" + value.split("://", 1)[1]
    return value


POOL: dict[str, Any] = {"pool_size": 10, "max_overflow": 40, "pool_timeout": 60}
"""Room for every request thread at once (anyio runs sync handlers on 40 threads) plus the
job sync loop: a smaller pool made requests wait for a connection and fail under a burst
(benchmarks/server_load found it on PostgreSQL)."""


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(
            url, connect_args={"check_same_thread": False, "timeout": 30}, **POOL
        )

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            # WAL: readers never wait for the writer; NORMAL sync is safe with WAL.
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

        return engine
    return create_engine(url, pool_pre_ping=True, **POOL)


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest revision."""
    config = Config()
    config.set_main_option(
        "script_location", str(resources.files("tfkube.server").joinpath("migrations"))
    )
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)
