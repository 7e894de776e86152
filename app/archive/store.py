"""The archive's SQL: fenced, monotonic writes, deletes with tombstones, reads, listing and
retention.

A write is one UPSERT, guarded in its ``WHERE``: it lands over the archived row of the same
incarnation (``sessionId``) only when it is not older — more events reduced (``event_count``),
or as many and an ``updated_at`` not earlier — so a write delayed by an outage never replaces a
newer one from another instance. Over another incarnation it lands only when that one was
created earlier. A write of an incarnation with a tombstone (``DELETE``) is refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from app.archive.records import (
    ArchivedConversation,
    ArchivedSummary,
    ConversationDelete,
    ConversationWrite,
)
from app.archive.schema import conversations, tombstones
from app.backends import ConversationMeta, ConversationRef

__all__ = ["ArchiveStore"]

Operation = ConversationWrite | ConversationDelete
_c = conversations.c
_t = tombstones.c
_KEY = [_c.principal, _c.conversation_key]
_KEY_NAMES = ("principal", "conversation_key")


def _conv_where(ref: ConversationRef) -> sa.ColumnElement[bool]:
    return sa.and_(_c.principal == ref.principal, _c.conversation_key == ref.key)


def _values(write: ConversationWrite, now: float) -> dict[str, Any]:
    return {
        "principal": write.ref.principal,
        "conversation_key": write.ref.key,
        "session_id": write.session_id,
        "title": write.title,
        "created_at": write.created_at,
        "updated_at": write.updated_at,
        "last_run_id": write.last_run_id,
        "last_run_status": write.last_run_status,
        "meta": write.meta_json,
        "state": write.state_json,
        "extensions": write.extensions_json,
        "cursor": write.cursor,
        "event_count": write.event_count,
        "archived_at": now,
    }


def _upsert(dialect: Any) -> Any:
    """The guarded UPSERT, built once (executed with one parameter set per write). Its row is a
    ``SELECT`` of the parameters that yields nothing when the incarnation has a tombstone: one
    statement a write, no separate tombstone read (BENCHMARKS.md, "Costs behind the code's
    shortcuts")."""
    names = [column.name for column in conversations.columns]
    row = sa.select(
        *(sa.bindparam(name, type_=conversations.c[name].type) for name in names)
    ).where(
        ~sa.exists().where(
            _t.principal == sa.bindparam("principal"),
            _t.conversation_key == sa.bindparam("conversation_key"),
            _t.session_id == sa.bindparam("session_id"),
        )
    )
    insert = dialect.insert(conversations).from_select(names, row)
    new = insert.excluded
    not_older = sa.or_(
        _c.event_count < new.event_count,
        sa.and_(_c.event_count == new.event_count, _c.updated_at <= new.updated_at),
    )
    guard = sa.or_(
        sa.and_(_c.session_id == new.session_id, not_older),
        sa.and_(_c.session_id != new.session_id, _c.created_at <= new.created_at),
    )
    updated = {
        column.name: getattr(new, column.name)
        for column in conversations.columns
        if column.name not in _KEY_NAMES
    }
    return insert.on_conflict_do_update(index_elements=_KEY, set_=updated, where=guard)


def _apply(
    connection: Connection, upsert: Any, operations: Sequence[Operation], now: float
) -> None:
    """The writes and deletes, in order, on a synchronous connection (consecutive writes in
    one statement)."""
    writes: list[ConversationWrite] = []
    for operation in operations:
        if isinstance(operation, ConversationWrite):
            writes.append(operation)
            continue
        _write(connection, upsert, writes, now)
        writes = []
        _delete(connection, operation)
    _write(connection, upsert, writes, now)


def _tombstoned(connection: Connection, ref: ConversationRef, sid: str) -> bool:
    found = connection.scalar(
        sa.select(sa.literal(1)).where(
            _t.principal == ref.principal,
            _t.conversation_key == ref.key,
            _t.session_id == sid,
        )
    )
    return found is not None


def _write(
    connection: Connection, upsert: Any, writes: list[ConversationWrite], now: float
) -> None:
    if writes:
        connection.execute(upsert, [_values(w, now) for w in writes])


def _delete(connection: Connection, delete: ConversationDelete) -> None:
    ref = delete.ref
    sids = {delete.session_id} if delete.session_id else set()
    row = connection.execute(
        sa.select(_c.session_id, _c.created_at).where(_conv_where(ref))
    ).first()
    if row is not None and (row.session_id in sids or row.created_at <= delete.deleted_at):
        sids.add(row.session_id)
        connection.execute(sa.delete(conversations).where(_conv_where(ref)))
    for sid in sids:
        if not _tombstoned(connection, ref, sid):
            connection.execute(
                sa.insert(tombstones).values(
                    principal=ref.principal,
                    conversation_key=ref.key,
                    session_id=sid,
                    deleted_at=delete.deleted_at,
                )
            )


class ArchiveStore:
    def __init__(self, engine: AsyncEngine, sync_engine: Engine | None = None) -> None:
        """``sync_engine`` (SQLite): the writes run on it in a thread, each transaction one
        hand-off to that thread instead of one per statement, cursor and commit (aiosqlite)."""
        self.engine = engine
        self._sync_engine = sync_engine
        self._upsert = _upsert(postgresql if engine.dialect.name == "postgresql" else sqlite)

    # --- writes --------------------------------------------------------------------------
    async def apply(self, operations: Sequence[Operation], now: float) -> None:
        """Apply ``operations`` in order, in one transaction."""
        if self._sync_engine is not None:
            await asyncio.to_thread(self._apply_in_thread, self._sync_engine, operations, now)
            return
        async with self.engine.begin() as connection:
            await connection.run_sync(_apply, self._upsert, operations, now)

    def _apply_in_thread(self, engine: Engine, operations: Sequence[Operation], now: float) -> None:
        with engine.begin() as connection:
            _apply(connection, self._upsert, operations, now)

    # --- reads ---------------------------------------------------------------------------
    async def load(self, ref: ConversationRef) -> ArchivedConversation | None:
        async with self.engine.connect() as connection:
            row = (
                await connection.execute(
                    sa.select(_c.meta, _c.state, _c.extensions, _c.cursor).where(_conv_where(ref))
                )
            ).first()
        if row is None:
            return None
        return ArchivedConversation(
            ref=ref,
            meta=ConversationMeta.from_dict(orjson.loads(row.meta)),
            state=orjson.loads(row.state),
            extensions=orjson.loads(row.extensions),
            cursor=row.cursor,
        )

    async def keys(self, principal: str, limit: int) -> list[str]:
        """Up to ``limit`` of the principal's archived keys (an index-only read)."""
        query = sa.select(_c.conversation_key).where(_c.principal == principal).limit(limit)
        async with self.engine.connect() as connection:
            return list((await connection.execute(query)).scalars())

    async def list_page(
        self, principal: str, after: tuple[float, str] | None, limit: int
    ) -> list[ArchivedSummary]:
        """The principal's conversations, ``updated_at`` descending then key ascending, after
        the position ``after``."""
        query = sa.select(
            _c.conversation_key,
            _c.title,
            _c.created_at,
            _c.updated_at,
            _c.last_run_id,
            _c.last_run_status,
        ).where(_c.principal == principal)
        if after is not None:
            updated_at, key = after
            query = query.where(
                sa.or_(
                    _c.updated_at < updated_at,
                    sa.and_(_c.updated_at == updated_at, _c.conversation_key > key),
                )
            )
        query = query.order_by(_c.updated_at.desc(), _c.conversation_key.asc()).limit(limit)
        async with self.engine.connect() as connection:
            rows = await connection.execute(query)
            return [
                ArchivedSummary(
                    key=row.conversation_key,
                    title=row.title,
                    created_at=row.created_at,
                    updated_at=row.updated_at,
                    last_run_id=row.last_run_id,
                    last_run_status=row.last_run_status,
                )
                for row in rows
            ]

    # --- retention -----------------------------------------------------------------------
    async def drop_idle(self, updated_before: float) -> int:
        """Delete conversations last updated before ``updated_before``; how many were. One
        conditional statement: a conversation written meanwhile is no longer idle and stays."""
        async with self.engine.begin() as connection:
            result = await connection.execute(
                sa.delete(conversations).where(_c.updated_at < updated_before)
            )
            return int(result.rowcount or 0)

    async def drop_tombstones(self, deleted_before: float) -> None:
        async with self.engine.begin() as connection:
            await connection.execute(sa.delete(tombstones).where(_t.deleted_at < deleted_before))
