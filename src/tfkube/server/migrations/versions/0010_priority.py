"""Priorities: a team's (`teams.priority`, set by a site admin; the local queue offers a
higher priority's jobs first and stops lower ones to make room) and how often each job
was preempted (`jobs.preemptions`, counted apart from restarts).

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("teams") as batch:
        batch.add_column(sa.Column("priority", sa.Integer(), nullable=False, server_default="0"))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("preemptions", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("preemptions")
    with op.batch_alter_table("teams") as batch:
        batch.drop_column("priority")
