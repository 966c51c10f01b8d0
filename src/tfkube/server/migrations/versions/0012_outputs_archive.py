"""Where a job's outputs and logs live (`--store s3://` archives, retention).

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(
            sa.Column("outputs_at", sa.String(16), nullable=False, server_default="local")
        )
        batch.add_column(sa.Column("archive_key", sa.Text(), nullable=True))
        batch.add_column(sa.Column("archived_at", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("archived_at")
        batch.drop_column("archive_key")
        batch.drop_column("outputs_at")
