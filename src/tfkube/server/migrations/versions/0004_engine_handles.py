"""Model servers and notebooks keep what their engine needs to find them again as one
opaque `handle` (JSON), instead of a process's pid, start time and port: the server no
longer knows how an engine runs them. A model server also keeps its runtime.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

TABLES = ("model_servers", "notebooks")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("handle", sa.JSON(), nullable=True))
        rows = sa.table(
            table,
            sa.column("id", sa.String),
            sa.column("pid", sa.Integer),
            sa.column("pid_started", sa.Float),
            sa.column("port", sa.Integer),
            sa.column("handle", sa.JSON),
        )
        bind = op.get_bind()
        for row_id, pid, started, port in bind.execute(
            sa.select(rows.c.id, rows.c.pid, rows.c.pid_started, rows.c.port)
        ).all():
            handle = {"pid": pid, "started": started, "port": port} if pid else {}
            bind.execute(rows.update().where(rows.c.id == row_id).values(handle=handle))
        with op.batch_alter_table(table) as batch:
            batch.drop_column("pid")
            batch.drop_column("pid_started")
            batch.drop_column("port")
    with op.batch_alter_table("model_servers") as batch:
        batch.add_column(sa.Column("runtime", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("model_servers") as batch:
        batch.drop_column("runtime")
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("pid", sa.Integer(), nullable=True))
            batch.add_column(sa.Column("pid_started", sa.Float(), nullable=True))
            batch.add_column(sa.Column("port", sa.Integer(), nullable=True))
            batch.drop_column("handle")
