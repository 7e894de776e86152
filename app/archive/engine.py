"""The archive's async engine: aiosqlite (WAL, a busy timeout) or asyncpg (bounded waits); and
for SQLite a synchronous one (pysqlite, the same settings) the writer runs in a thread."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Engine
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from app.archive.url import is_sqlite

__all__ = ["STATEMENT_TIMEOUT_SECONDS", "create_engine", "create_sync_engine"]

#: The longest one statement may wait (a lock, a slow server) before it fails and is retried.
STATEMENT_TIMEOUT_SECONDS = 10.0


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute(f"PRAGMA busy_timeout={int(STATEMENT_TIMEOUT_SECONDS * 1000)}")
    cursor.close()


def create_engine(url: URL) -> AsyncEngine:
    if is_sqlite(url):
        engine = create_async_engine(url)
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        return engine
    return create_async_engine(
        url,
        pool_size=4,
        max_overflow=4,
        pool_pre_ping=True,
        pool_timeout=STATEMENT_TIMEOUT_SECONDS,
        connect_args={
            "timeout": STATEMENT_TIMEOUT_SECONDS,
            "command_timeout": STATEMENT_TIMEOUT_SECONDS,
        },
    )


def create_sync_engine(url: URL) -> Engine | None:
    """SQLite: the synchronous engine of the same file (None for PostgreSQL: asyncpg has no
    thread hand-offs to save)."""
    if not is_sqlite(url):
        return None
    engine = sa.create_engine(url.set(drivername="sqlite+pysqlite"))
    event.listen(engine, "connect", _sqlite_pragmas)
    return engine
