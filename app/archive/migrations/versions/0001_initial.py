"""Conversations and their events.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision: str | None = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "archived_conversations",
        sa.Column("principal", sa.String(512), primary_key=True),
        sa.Column("conversation_key", sa.String(512), primary_key=True),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("title", sa.Text, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("last_run_id", sa.String(128), nullable=True),
        sa.Column("last_run_status", sa.String(32), nullable=True),
        sa.Column("meta", sa.Text, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("extensions", sa.Text, nullable=False),
        sa.Column("cursor", sa.String(128), nullable=False),
        sa.Column("event_count", sa.Integer, nullable=False),
        sa.Column("archived_at", sa.Float, nullable=False),
    )
    op.create_index("ix_archived_conversations_updated", "archived_conversations", ["updated_at"])
    op.create_table(
        "archived_events",
        sa.Column("principal", sa.String(512), primary_key=True),
        sa.Column("conversation_key", sa.String(512), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("data", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("archived_events")
    op.drop_index("ix_archived_conversations_updated", "archived_conversations")
    op.drop_table("archived_conversations")
