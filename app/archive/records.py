"""The values the archive writes and reads back (plain data, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from app.backends import ConversationMeta, ConversationRef

__all__ = ["ArchivedConversation", "ArchivedSummary", "ConversationDelete", "ConversationWrite"]

EntryKind = Literal["event", "extension"]


@dataclass(slots=True)
class ConversationWrite:
    """A conversation as the live backend held it when gathered (serialized then, so later
    changes of the live objects cannot leak in), and its log entries not yet archived."""

    ref: ConversationRef
    session_id: str
    title: str | None
    created_at: float
    updated_at: float
    last_run_id: str | None
    last_run_status: str | None
    meta_json: str
    state_json: str
    extensions_json: str
    cursor: str
    #: ``(kind, JSON)`` of each new log entry, in log order.
    entries: list[tuple[EntryKind, str]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ConversationDelete:
    """``DELETE``: the incarnation ``session_id`` (when it was live) is gone, and any archived
    one created before ``deleted_at``."""

    ref: ConversationRef
    session_id: str | None
    deleted_at: float


@dataclass(frozen=True, slots=True)
class ArchivedConversation:
    ref: ConversationRef
    meta: ConversationMeta
    state: dict[str, Any]
    extensions: dict[str, Any]
    cursor: str


@dataclass(frozen=True, slots=True)
class ArchivedSummary:
    """One row of the listing."""

    key: str
    title: str | None
    created_at: float
    updated_at: float
    last_run_id: str | None
    last_run_status: str | None
