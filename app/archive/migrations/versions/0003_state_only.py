"""The archive keeps each conversation's reduced state, not its event log: a restore seeds the
live backend with that state in one step, so ``archived_events`` goes. ``event_count`` now
counts the events reduced into the archived state (the conversation's version).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision: str | None = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_table("archived_events")


def downgrade() -> None:
    op.create_table(
        "archived_events",
        sa.Column("principal", sa.String(512), primary_key=True),
        sa.Column("conversation_key", sa.String(512), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("data", sa.Text, nullable=False),
    )
