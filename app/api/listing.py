"""``GET /v1/conversations``: the caller's conversations, newest first, cursor-paginated.

Order: ``updatedAt`` descending, then ``conversationKey`` ascending (a total order, so a page
boundary is exact). The page cursor is the position of the last item of the page (opaque,
base64url JSON); the next page holds the items strictly after it. Only the page's snapshots
are read (for the last run's status and ``isRequesting``).

With ``[archive]`` on, the page merges the live conversations with the archived ones (the
archive's row of a conversation the live backend holds is left out: the live one is newer).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from typing import Any, Literal

import orjson
from pydantic import BaseModel, Field

from app.api.errors import ApiError
from app.archive import Archive
from app.archive.records import ArchivedSummary
from app.backends import Backend, ConversationMeta, ConversationRef
from core import is_requesting

__all__ = [
    "DEFAULT_PAGE",
    "MAX_PAGE",
    "ConversationList",
    "ConversationSummary",
    "conversation_item",
    "list_page",
]

DEFAULT_PAGE = 50
MAX_PAGE = 200


class ConversationSummary(BaseModel):
    """One listed conversation (also the answer of ``PATCH /v1/conversations/{key}``)."""

    conversationKey: str
    title: str | None
    createdAt: float
    updatedAt: float
    lastRunId: str | None
    lastRunStatus: Literal["running", "completed", "failed", "cancelled"] | None
    isRequesting: bool


class ConversationList(BaseModel):
    conversations: list[ConversationSummary]
    nextCursor: str | None = Field(description="Pass as ?cursor= for the next page; null: last")


def _encode(updated_at: float, key: str) -> str:
    return base64.urlsafe_b64encode(orjson.dumps([updated_at, key])).decode().rstrip("=")


def _decode(cursor: str) -> tuple[float, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        updated_at, key = orjson.loads(raw)
        if isinstance(updated_at, int | float) and isinstance(key, str):
            return float(updated_at), key
    except (binascii.Error, ValueError, TypeError):
        pass
    raise ApiError(422, "invalid_request", "Invalid conversation list cursor.")


def _order(item: tuple[str, ConversationMeta | ArchivedSummary]) -> tuple[float, str]:
    return (-item[1].updated_at, item[0])


async def conversation_item(
    backend: Backend, ref: ConversationRef, meta: ConversationMeta
) -> dict[str, Any]:
    """One conversation as listed: key, title, timestamps, last run and whether it is busy."""
    snapshot = await backend.snapshot(ref)
    runs: dict[str, Any] = snapshot.state.get("runs", {}) if snapshot is not None else {}
    last_id = meta.last_run_id if meta.last_run_id in runs else next(reversed(runs), None)
    last = runs.get(last_id) if last_id is not None else None
    return {
        "conversationKey": ref.key,
        "title": meta.title,
        "createdAt": meta.created_at,
        "updatedAt": meta.updated_at,
        "lastRunId": last_id,
        "lastRunStatus": last.get("status") if last else None,
        "isRequesting": bool(snapshot is not None and is_requesting(snapshot.state)),
    }


def archived_item(row: ArchivedSummary) -> dict[str, Any]:
    """An archived conversation as listed (none of its runs is running: they ended or were
    lost with their instance)."""
    status = row.last_run_status
    return {
        "conversationKey": row.key,
        "title": row.title,
        "createdAt": row.created_at,
        "updatedAt": row.updated_at,
        "lastRunId": row.last_run_id,
        "lastRunStatus": "failed" if status == "running" else status,
        "isRequesting": False,
    }


async def _archived_after(
    archive: Archive,
    principal: str,
    after: tuple[float, str] | None,
    limit: int,
    live: set[str],
) -> list[ArchivedSummary]:
    """Up to ``limit`` archived rows after ``after`` whose conversation is not live."""
    out: list[ArchivedSummary] = []
    position = after
    while len(out) < limit:
        rows = await archive.list_page(principal, position, limit + len(live))
        out.extend(row for row in rows if row.key not in live)
        if len(rows) < limit + len(live):
            break
        position = (rows[-1].updated_at, rows[-1].key)
    return out[:limit]


async def list_page(
    backend: Backend,
    principal: str,
    cursor: str | None,
    limit: int,
    archive: Archive | None = None,
) -> dict[str, Any]:
    """``{"conversations": [...], "nextCursor": str | None}``."""
    live_items = await backend.list_conversations(principal)
    items: list[tuple[str, ConversationMeta | ArchivedSummary]] = list(live_items)
    after = _decode(cursor) if cursor else None
    if archive is not None:
        live_keys = {key for key, _ in live_items}
        rows = await _archived_after(archive, principal, after, limit + 1, live_keys)
        items.extend((row.key, row) for row in rows)
    items.sort(key=_order)
    if after is not None:
        position = (-after[0], after[1])
        items = [item for item in items if _order(item) > position]
    page, more = items[:limit], len(items) > limit

    async def item(key: str, value: ConversationMeta | ArchivedSummary) -> dict[str, Any]:
        if isinstance(value, ArchivedSummary):
            return archived_item(value)
        return await conversation_item(backend, ConversationRef(principal, key), value)

    listed = await asyncio.gather(*(item(key, value) for key, value in page))
    last = page[-1] if page else None
    return {
        "conversations": list(listed),
        "nextCursor": _encode(last[1].updated_at, last[0]) if more and last else None,
    }
