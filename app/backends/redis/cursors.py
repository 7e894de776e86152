"""Cursors of the Redis backend: ``"<incarnation>.<stream id>"``, opaque to clients.

The incarnation changes when a conversation is deleted and created again, so an old cursor
reads as unknown (answered with a snapshot), never as a position of the new log. It also takes
a new epoch, ``"<incarnation>~<epoch>"``, when the log lost entries its run's owner had logged
and the owner's next ids do not follow them (a failover's promoted replica lacked them, and
stream ids may repeat theirs: ``scripts.APPEND``): a cursor of the lost entries then reads as
unknown too, never as a position of the entries that took their ids.
"""

from __future__ import annotations

from app.backends.base import EMPTY_CURSOR
from app.backends.redis.eventlog import ZERO_ID

__all__ = ["make_cursor", "parse_cursor", "same_incarnation"]


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


def same_incarnation(inc: str, other: str) -> bool:
    """``inc`` and ``other`` are epochs of one incarnation (equal or not)."""
    return inc.partition("~")[0] == other.partition("~")[0]
