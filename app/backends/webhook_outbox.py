"""Where completion webhooks wait to be delivered (``Backend.webhook_outbox``), like a transport.

The dispatcher (``app.observability.webhooks``) puts one self-contained :class:`OutboxEntry` per
run end (the body is computed once, so every attempt from any instance sends the same bytes
under the same delivery id) and its workers ``take`` entries that are due, ``done`` them when
delivered or given up, or put them back ``later``. Without a backend outbox (memory backend, one
instance) the dispatcher keeps an in-process queue; the Redis outbox is durable: what one
instance accepted is delivered by another when it dies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from app.backends.types import ConversationRef

__all__ = ["LostRunListener", "OutboxEntry", "OutboxFull", "WebhookOutbox"]


class LostRunListener(Protocol):
    """Told of each run the backend ends itself (its owner was lost): the run-end hooks
    (``app.runs.ending.RunEndHooks``)."""

    async def run_lost(self, ref: ConversationRef, run_id: str, run: dict[str, Any]) -> None:
        """Before the end is written (with the run's record as ended): what must be handed
        over in case this instance dies next."""
        ...

    async def lost_run_ended(self, ref: ConversationRef, run_id: str) -> None:
        """After this instance wrote the end."""
        ...


class OutboxFull(Exception):
    """The outbox holds as many entries as it may: this one is not accepted."""


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """One webhook delivery: everything needed to (re)send it from any instance."""

    delivery_id: str
    event: str
    run_id: str
    body: bytes
    #: Unix seconds when the run's end was accepted: retries stop a bounded time after it.
    created: float
    #: The outbox's own reference to the entry (a Redis stream id); empty until stored.
    handle: str = ""


class WebhookOutbox(Protocol):
    async def start(self) -> None: ...

    async def put(self, entry: OutboxEntry) -> None:
        """Store ``entry`` (durably when the outbox is); raises when it could not
        (:class:`OutboxFull`, or a backend error: the caller retries)."""
        ...

    async def take(self) -> OutboxEntry:
        """The next entry due for an attempt on this instance (waits for one)."""
        ...

    async def later(self, entry: OutboxEntry, delay: float) -> None:
        """An attempt failed: ``entry`` is due again in ``delay`` seconds."""
        ...

    async def done(self, entry: OutboxEntry) -> None:
        """Delivered or given up: forget ``entry``."""
        ...

    async def pending(self) -> int:
        """Entries not yet done (on every instance, for a shared outbox)."""
        ...

    async def drain(self, grace: float) -> None:
        """At shutdown, before ``close``: wait (up to ``grace`` s) for what only this
        instance can deliver (in process: everything; durable: nothing)."""
        ...

    async def close(self) -> None:
        """Stop; a durable outbox hands what this instance held to the other instances."""
        ...
