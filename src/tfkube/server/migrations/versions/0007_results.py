"""A job's result: the final metrics it reported (its result file,
`tfkube.contract.RESULT_FILE`), kept when it ends; each number also as a row of
job_metrics, which the jobs list sorts by.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("result", sa.JSON(), nullable=True))
    op.create_table(
        "job_metrics",
        sa.Column(
            "job_id",
            sa.String(32),
            sa.ForeignKey("jobs.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.Float(), nullable=False),
    )
    op.create_index("ix_job_metrics_name_value", "job_metrics", ["name", "value"])


def downgrade() -> None:
    op.drop_index("ix_job_metrics_name_value", "job_metrics")
    op.drop_table("job_metrics")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("result")
