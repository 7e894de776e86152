"""The archive's tables (SQLAlchemy Core). Migrations in ``migrations/versions`` create them.

- ``archived_conversations``: one row per conversation (principal, key): the meta, the reduced
  state after the last write, and ``session_id``, the conversation's incarnation.
- ``archived_events``: the conversation's log entries in order (``seq``), replayed into the
  live backend when a new run continues an archived conversation.
- ``archive_tombstones``: incarnations deleted by ``DELETE``; a write of one is refused.
JSON values are stored as text (orjson both ways), the same on SQLite and PostgreSQL.
"""

from __future__ import annotations

import sqlalchemy as sa

__all__ = ["conversations", "events", "metadata", "tombstones"]

metadata = sa.MetaData()

conversations = sa.Table(
    "archived_conversations",
    metadata,
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
sa.Index(
    "ix_archived_conversations_listing",
    conversations.c.principal,
    conversations.c.updated_at,
    conversations.c.conversation_key,
)
sa.Index("ix_archived_conversations_updated", conversations.c.updated_at)

events = sa.Table(
    "archived_events",
    metadata,
    sa.Column("principal", sa.String(512), primary_key=True),
    sa.Column("conversation_key", sa.String(512), primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("data", sa.Text, nullable=False),
)

tombstones = sa.Table(
    "archive_tombstones",
    metadata,
    sa.Column("principal", sa.String(512), primary_key=True),
    sa.Column("conversation_key", sa.String(512), primary_key=True),
    sa.Column("session_id", sa.String(128), primary_key=True),
    sa.Column("deleted_at", sa.Float, nullable=False),
)
sa.Index("ix_archive_tombstones_deleted", tombstones.c.deleted_at)
