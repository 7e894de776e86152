"""The archive's SQL: fenced writes, deletes with tombstones, reads, listing and retention.

A write is fenced by the conversation's incarnation (its ``sessionId``): refused when that
incarnation has a tombstone (``DELETE``), or when the archive holds a newer incarnation of the
same key. Entries are appended after those already archived (``event_count``); an entry written
twice (a commit whose answer was lost, then retried) is harmless, the reducer ignores a repeated
``eventId``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.archive.records import (
    ArchivedConversation,
    ArchivedSummary,
    ConversationDelete,
    ConversationWrite,
    EntryKind,
)
from app.archive.schema import conversations, events, tombstones
from app.backends import ConversationMeta, ConversationRef

__all__ = ["ArchiveStore"]

Operation = ConversationWrite | ConversationDelete
_c = conversations.c
_e = events.c
_t = tombstones.c


def _conv_where(ref: ConversationRef) -> sa.ColumnElement[bool]:
    return sa.and_(_c.principal == ref.principal, _c.conversation_key == ref.key)


def _events_where(ref: ConversationRef) -> sa.ColumnElement[bool]:
    return sa.and_(_e.principal == ref.principal, _e.conversation_key == ref.key)


class ArchiveStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._lock_rows = engine.dialect.name == "postgresql"

    # --- writes --------------------------------------------------------------------------
    async def apply(self, operations: Sequence[Operation], now: float) -> None:
        """Apply ``operations`` in order, in one transaction."""
        async with self.engine.begin() as connection:
            for operation in operations:
                if isinstance(operation, ConversationWrite):
                    await self._write(connection, operation, now)
                else:
                    await self._delete(connection, operation)

    async def _tombstoned(
        self, connection: AsyncConnection, ref: ConversationRef, sid: str
    ) -> bool:
        found = await connection.scalar(
            sa.select(sa.literal(1)).where(
                _t.principal == ref.principal,
                _t.conversation_key == ref.key,
                _t.session_id == sid,
            )
        )
        return found is not None

    async def _write(
        self, connection: AsyncConnection, write: ConversationWrite, now: float
    ) -> None:
        ref = write.ref
        if await self._tombstoned(connection, ref, write.session_id):
            return
        query = sa.select(_c.session_id, _c.created_at, _c.event_count).where(_conv_where(ref))
        if self._lock_rows:
            query = query.with_for_update()
        existing = (await connection.execute(query)).first()
        start = 0
        if existing is not None and existing.session_id != write.session_id:
            if existing.created_at > write.created_at:
                return  # a newer incarnation is archived: this write is stale
            await connection.execute(sa.delete(events).where(_events_where(ref)))
            await connection.execute(sa.delete(conversations).where(_conv_where(ref)))
            existing = None
        elif existing is not None:
            start = int(existing.event_count)
        if write.entries:
            await connection.execute(
                sa.insert(events),
                [
                    {
                        "principal": ref.principal,
                        "conversation_key": ref.key,
                        "seq": start + index,
                        "kind": kind,
                        "data": data,
                    }
                    for index, (kind, data) in enumerate(write.entries)
                ],
            )
        values = {
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
            "event_count": start + len(write.entries),
            "archived_at": now,
        }
        if existing is None:
            await connection.execute(
                sa.insert(conversations).values(
                    principal=ref.principal, conversation_key=ref.key, **values
                )
            )
        else:
            await connection.execute(
                sa.update(conversations).where(_conv_where(ref)).values(**values)
            )

    async def _delete(self, connection: AsyncConnection, delete: ConversationDelete) -> None:
        ref = delete.ref
        sids = {delete.session_id} if delete.session_id else set()
        row = (
            await connection.execute(
                sa.select(_c.session_id, _c.created_at).where(_conv_where(ref))
            )
        ).first()
        if row is not None and (row.session_id in sids or row.created_at <= delete.deleted_at):
            sids.add(row.session_id)
            await connection.execute(sa.delete(events).where(_events_where(ref)))
            await connection.execute(sa.delete(conversations).where(_conv_where(ref)))
        for sid in sids:
            if not await self._tombstoned(connection, ref, sid):
                await connection.execute(
                    sa.insert(tombstones).values(
                        principal=ref.principal,
                        conversation_key=ref.key,
                        session_id=sid,
                        deleted_at=delete.deleted_at,
                    )
                )

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

    async def load_entries(self, ref: ConversationRef) -> list[tuple[EntryKind, Any]]:
        """The archived log entries, in order, decoded."""
        async with self.engine.connect() as connection:
            rows = await connection.execute(
                sa.select(_e.kind, _e.data).where(_events_where(ref)).order_by(_e.seq)
            )
            return [(row.kind, orjson.loads(row.data)) for row in rows]

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
    async def drop_idle(self, updated_before: float, batch: int = 500) -> int:
        """Delete conversations last updated before ``updated_before``; how many were."""
        async with self.engine.connect() as connection:
            rows = await connection.execute(
                sa.select(_c.principal, _c.conversation_key)
                .where(_c.updated_at < updated_before)
                .limit(batch)
            )
            refs = [ConversationRef(row.principal, row.conversation_key) for row in rows]
        dropped = 0
        for ref in refs:  # one transaction each: a conversation written meanwhile stays
            async with self.engine.begin() as connection:
                result = await connection.execute(
                    sa.delete(conversations).where(_conv_where(ref), _c.updated_at < updated_before)
                )
                if result.rowcount:
                    await connection.execute(sa.delete(events).where(_events_where(ref)))
                    dropped += 1
        return dropped

    async def drop_tombstones(self, deleted_before: float) -> None:
        async with self.engine.begin() as connection:
            await connection.execute(sa.delete(tombstones).where(_t.deleted_at < deleted_before))
