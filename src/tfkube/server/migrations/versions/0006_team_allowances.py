"""A team's allowances: what its members' jobs may use in its Kubernetes namespace beyond
their own (Secrets, ConfigMaps, claims, service accounts, TensorBoard images) and the Pod
Security level the namespace enforces (`tfkube.engines.Allowances`).

Revision ID: team_allowances
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "team_allowances"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("teams") as batch:
        batch.add_column(sa.Column("allowances", sa.JSON(), nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("teams") as batch:
        batch.drop_column("allowances")
