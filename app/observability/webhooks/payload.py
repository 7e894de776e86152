"""The webhook of one run end: its delivery id, event type and body, computed once.

The delivery id is derived from the conversation and the run, so whoever enqueues a run's end
(its owner, or the instance that reaped it) names it alike and a receiver de-duplicates by it.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Collection
from typing import Any

import orjson

from app.backends import ConversationRef
from app.backends.webhook_outbox import OutboxEntry
from core.runs import RUN_TERMINAL_TYPE_LIST

__all__ = ["WEBHOOK_EVENTS", "delivery_id", "webhook_entry"]

#: Run status -> webhook event type.
WEBHOOK_EVENTS = {event.removeprefix("run."): event for event in RUN_TERMINAL_TYPE_LIST}
_RECORD_FIELDS = ("sessionId", "status", "usage", "error", "reason", "createdAt", "updatedAt")


def delivery_id(ref: ConversationRef, run_id: str) -> str:
    """``whd_`` + 128 bits of SHA-256 over (conversation, run): the same on every instance."""
    return "whd_" + hashlib.sha256(f"{ref.digest}|{run_id}".encode()).hexdigest()[:32]


def webhook_entry(
    ref: ConversationRef,
    run_id: str,
    run: dict[str, Any] | None,
    events: Collection[str],
    now: float | None = None,
) -> OutboxEntry | None:
    """The delivery of ``run``'s end; None when it has not ended or its event is not wanted."""
    event = WEBHOOK_EVENTS.get(run.get("status", "")) if run else None
    if run is None or event is None or event not in events:
        return None
    created = time.time() if now is None else now
    ident = delivery_id(ref, run_id)
    body = {
        "id": ident,
        "type": event,
        "timestamp": created * 1000,
        "principal": ref.principal,
        "conversationKey": ref.key,
        "run": {"runId": run_id} | {k: run[k] for k in _RECORD_FIELDS if k in run},
    }
    return OutboxEntry(ident, event, run_id, orjson.dumps(body), created)
