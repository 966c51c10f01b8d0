"""Public ids that cannot be enumerated for artifacts and API tokens: URLs and answers
name them by a random `public_id` (16 hex digits); the integer keys stay internal.
Existing rows get a random one each.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import secrets

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

TABLES = ("artifacts", "api_tokens")


def upgrade() -> None:
    connection = op.get_bind()
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("public_id", sa.String(32), nullable=True))
        rows = sa.table(table, sa.column("id", sa.Integer), sa.column("public_id", sa.String))
        for (key,) in connection.execute(sa.select(rows.c.id)).all():
            connection.execute(
                rows.update().where(rows.c.id == key).values(public_id=secrets.token_hex(8))
            )
        with op.batch_alter_table(table) as batch:
            batch.alter_column("public_id", existing_type=sa.String(32), nullable=False)
            batch.create_index(f"ix_{table}_public_id", ["public_id"], unique=True)


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_index(f"ix_{table}_public_id")
            batch.drop_column("public_id")
