"""A job's description: what the person who submitted it wants to remember about it.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("description", sa.Text(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("description")
