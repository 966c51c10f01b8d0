"""A model server's autoscaling (`tfkube.spec.Autoscale`; None: one replica).

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("model_servers") as batch:
        batch.add_column(sa.Column("autoscale", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("model_servers") as batch:
        batch.drop_column("autoscale")
