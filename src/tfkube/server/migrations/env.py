"""Alembic's environment: runs the migrations on the connection the server hands over
(`config.attributes["connection"]`); there is no alembic.ini."""

from __future__ import annotations

from alembic import context

from tfkube.server.core.tables import Base

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
