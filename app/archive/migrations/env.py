"""Alembic environment: runs on the connection handed in by :mod:`app.archive.migrate`."""

from __future__ import annotations

from alembic import context

from app.archive.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata)
with context.begin_transaction():
    context.run_migrations()
