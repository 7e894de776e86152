"""``GET /v1/conversations``: the caller's conversations, newest first, cursor-paginated.

Order: ``updatedAt`` descending, then ``conversationKey`` ascending (a total order, so a page
boundary is exact). The page cursor is the position of the last item of the page (opaque,
base64url JSON); the next page holds the items strictly after it. Only the page's snapshots
are read (for the last run's status and ``isRequesting``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from typing import Any, Literal

import orjson
from pydantic import BaseModel, Field

from app.api.errors import ApiError
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


def _order(item: tuple[str, ConversationMeta]) -> tuple[float, str]:
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


async def list_page(
    backend: Backend, principal: str, cursor: str | None, limit: int
) -> dict[str, Any]:
    """``{"conversations": [...], "nextCursor": str | None}``."""
    items = sorted(await backend.list_conversations(principal), key=_order)
    if cursor:
        updated_at, key = _decode(cursor)
        after = (-updated_at, key)
        items = [item for item in items if _order(item) > after]
    page, more = items[:limit], len(items) > limit
    listed = await asyncio.gather(
        *(conversation_item(backend, ConversationRef(principal, key), meta) for key, meta in page)
    )
    last = page[-1] if page else None
    return {
        "conversations": list(listed),
        "nextCursor": _encode(last[1].updated_at, last[0]) if more and last else None,
    }
