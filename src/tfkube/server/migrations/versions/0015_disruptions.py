"""How often each job restarted from its checkpoint because a PS was evicted (a node
drained; `jobs.disruptions`, the Kubernetes operator's `status.disruptions`), counted apart
from restarts and preemptions.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("disruptions", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("disruptions")
