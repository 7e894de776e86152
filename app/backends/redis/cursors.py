"""Cursors of the Redis backend: ``"<incarnation>.<stream id>"``, opaque to clients.

The incarnation changes when a conversation is deleted and created again, so an old cursor
reads as unknown (answered with a snapshot), never as a position of the new log.
"""

from __future__ import annotations

from app.backends.base import EMPTY_CURSOR
from app.backends.redis.eventlog import ZERO_ID

__all__ = ["make_cursor", "parse_cursor"]


def make_cursor(inc: str, stream_id: str) -> str:
    return EMPTY_CURSOR if stream_id == ZERO_ID else f"{inc}.{stream_id}"


def parse_cursor(cursor: str) -> tuple[str | None, str] | None:
    """``(incarnation, stream id)``; ``(None, 0-0)`` for the empty cursor; None if malformed."""
    if cursor == EMPTY_CURSOR:
        return None, ZERO_ID
    inc, dot, sid = cursor.rpartition(".")
    ms, dash, seq = sid.partition("-")
    if not dot or not inc or not dash or not ms.isdigit() or not seq.isdigit():
        return None
    return inc, sid
