"""Backends: where conversations live. ``create_backend(settings)`` picks one by config."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from app.backends.base import (
    EMPTY_CURSOR,
    AppendDone,
    Backend,
    ConversationMeta,
    ConversationRef,
    IdempotencyRecord,
    LogEntry,
    LogItem,
    ReadResult,
    ReadSink,
    RunControl,
    Snapshot,
)
from app.backends.memory import MemoryBackend
from app.backends.roles import (
    ConversationStore,
    EventAppender,
    EventReader,
    IdempotencyStore,
    Lifecycle,
    QueuedRuns,
    RunSignals,
    RunSlots,
    Snapshots,
    WebhookSupport,
)

if TYPE_CHECKING:
    from app.config import Settings

__all__ = [
    "EMPTY_CURSOR",
    "AppendDone",
    "Backend",
    "ConversationMeta",
    "ConversationRef",
    "ConversationStore",
    "EventAppender",
    "EventReader",
    "IdempotencyRecord",
    "IdempotencyStore",
    "Lifecycle",
    "LogEntry",
    "LogItem",
    "MemoryBackend",
    "QueuedRuns",
    "ReadResult",
    "ReadSink",
    "RunControl",
    "RunSignals",
    "RunSlots",
    "Snapshot",
    "Snapshots",
    "WebhookSupport",
    "create_backend",
]


def create_backend(settings: Settings) -> Backend:
    gateway = settings.gateway
    if gateway.backend == "memory":
        return MemoryBackend(
            event_log_max_len=gateway.event_log_max_len,
            max_conversations=gateway.max_conversations,
            conversation_ttl_seconds=gateway.conversation_ttl_seconds,
        )
    # Imported only when chosen: the memory backend needs no Redis client installed or loaded.
    module = importlib.import_module("app.backends.redis")
    backend: Backend = module.create_redis_backend(settings)
    return backend
