"""Alembic migrations, run at start and by ``agent-gateway migrate``; one instance at a time.

Several instances starting at once: each takes a database lock first (PostgreSQL: a
transaction-level advisory lock; SQLite: an exclusive ``flock`` on ``PATH.migrate.lock``), so one
migrates and the others then find the schema current.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import AsyncIterator
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from app.archive.url import is_sqlite

__all__ = ["HEAD", "MIGRATIONS_DIR", "current_revision", "migrate"]

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
HEAD = "head"
#: The advisory lock key of the archive's migrations (any constant shared by every instance).
_PG_LOCK_KEY = 0x41_52_43_48  # "ARCH"


def _config(connection: Connection) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["connection"] = connection
    return config


def _upgrade(connection: Connection, revision: str) -> None:
    command.upgrade(_config(connection), revision)


def _current(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


@contextlib.asynccontextmanager
async def _file_lock(engine: AsyncEngine) -> AsyncIterator[None]:
    database = engine.url.database
    if not database or database == ":memory:":
        yield
        return
    fd = os.open(f"{database}.migrate.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


async def migrate(engine: AsyncEngine, revision: str = HEAD) -> None:
    """Bring the schema to ``revision`` (default: the newest), under the migration lock."""
    if is_sqlite(engine.url):
        async with _file_lock(engine), engine.connect() as connection:
            await connection.run_sync(_upgrade, revision)
            await connection.commit()
        return
    async with engine.connect() as connection:
        await connection.execute(
            sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY}
        )
        await connection.run_sync(_upgrade, revision)
        await connection.commit()  # releases the advisory lock


async def current_revision(engine: AsyncEngine) -> str | None:
    async with engine.connect() as connection:
        return await connection.run_sync(_current)
