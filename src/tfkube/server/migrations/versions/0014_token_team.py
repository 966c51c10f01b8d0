"""An API token limited to one team (`api_tokens.team_id`; None: the user's every team):
what a notebook's `tfkube.Client()` signs in with.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(
            sa.Column(
                "team_id",
                sa.Integer(),
                sa.ForeignKey("teams.id", name="fk_api_tokens_team", ondelete="CASCADE"),
                nullable=True,
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("team_id")
