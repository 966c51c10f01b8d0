"""A job's description (what the person who submitted it wants to remember about it) and
its data set (an uploaded data artifact, unpacked into the job's data folder).

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
        batch.add_column(
            sa.Column(
                "data_artifact_id",
                sa.Integer(),
                sa.ForeignKey("artifacts.id", name="fk_jobs_data_artifact", ondelete="SET NULL"),
                nullable=True,
            )
        )
        batch.add_column(sa.Column("data_sha256", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("data_sha256")
        batch.drop_column("data_artifact_id")
        batch.drop_column("description")
