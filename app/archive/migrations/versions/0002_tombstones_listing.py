"""Tombstones of deleted incarnations, and the listing index (principal, updated_at, key).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision: str | None = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "archive_tombstones",
        sa.Column("principal", sa.String(512), primary_key=True),
        sa.Column("conversation_key", sa.String(512), primary_key=True),
        sa.Column("session_id", sa.String(128), primary_key=True),
        sa.Column("deleted_at", sa.Float, nullable=False),
    )
    op.create_index("ix_archive_tombstones_deleted", "archive_tombstones", ["deleted_at"])
    op.create_index(
        "ix_archived_conversations_listing",
        "archived_conversations",
        ["principal", "updated_at", "conversation_key"],
    )


def downgrade() -> None:
    op.drop_index("ix_archived_conversations_listing", "archived_conversations")
    op.drop_index("ix_archive_tombstones_deleted", "archive_tombstones")
    op.drop_table("archive_tombstones")
