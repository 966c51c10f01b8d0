"""The database connection: SQLite (WAL) in the data directory by default, PostgreSQL
with `--database-url postgresql://...`. Migrations run at start-up (Alembic, shipped in
the package), so an upgraded server upgrades its schema before it answers anything."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
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


class SchemaTooNew(RuntimeError):
    """The database was brought to a schema this tfkube does not know: a newer tfkube
    upgraded it. Nothing was changed; the server does not start."""


def schema_refusal(found: list[str], known: set[str], head: str, version: str) -> str | None:
    """Why this tfkube must not open a database whose schema revisions are `found`
    (`known`: every revision this tfkube ships, `head` its newest), or None when it may
    (an empty database, an older schema it will upgrade, or its own)."""
    unknown = sorted(rev for rev in found if rev not in known)
    if not unknown:
        return None
    return (
        f"the database's schema is at revision {', '.join(unknown)}, newer than this tfkube "
        f"{version} knows (its newest is {head}): a newer tfkube upgraded it, and a "
        "downgrade is not supported. Run that version (or a newer one) again, or restore "
        "the database backup taken before the upgrade (docs/kubernetes.md, 'Upgrading')"
    )


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest revision; refuse (SchemaTooNew, before anything is
    changed) a database a newer tfkube has upgraded."""
    from tfkube import __version__

    config = Config()
    config.set_main_option(
        "script_location", str(resources.files("tfkube.server").joinpath("migrations"))
    )
    script = ScriptDirectory.from_config(config)
    known = {rev.revision for rev in script.walk_revisions()}
    with engine.begin() as connection:
        found = list(MigrationContext.configure(connection).get_current_heads())
        why = schema_refusal(found, known, str(script.get_current_head()), __version__)
        if why is not None:
            raise SchemaTooNew(why)
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)
