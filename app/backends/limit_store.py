"""Where the ``[limits]`` counters live when several instances share them (``Backend.limit_store``).

Each operation checks and records in one atomic step, so concurrent requests on any instance are
admitted exactly as one instance admits them one at a time. Without a store (memory backend,
one instance) the gateway keeps in-process counters (``app.runs.limits``), which are atomic
because nothing awaits between their check and their record.
"""

from __future__ import annotations

from typing import Literal, Protocol

from app.backends.types import ConversationRef

__all__ = ["LimitStore", "SubscriberRefusal"]

#: Which subscriber limit refused a stream.
SubscriberRefusal = Literal["conversation", "principal"]


class LimitStore(Protocol):
    async def take_run(self, principal: str, per_minute: int) -> tuple[str | None, float]:
        """Record one accepted run in the principal's 60 s window: ``(token, 0)``; when the
        window is full nothing is recorded: ``(None, seconds until a run leaves it)``."""
        ...

    async def refund_run(self, principal: str, token: str) -> None:
        """Forget a run recorded by ``take_run`` that was refused after all."""
        ...

    async def take_subscriber(
        self, ref: ConversationRef, per_conversation: int, per_principal: int
    ) -> tuple[str | None, SubscriberRefusal | None]:
        """Take a stream slot of ``ref``: ``(token, None)``,
        else ``(None, the limit that refused)``. A slot expires unless renewed by its
        instance (so the slots of a dead instance free themselves)."""
        ...

    async def free_subscriber(self, token: str) -> None: ...

    async def subscribers_full(
        self, ref: ConversationRef, per_conversation: int, per_principal: int
    ) -> SubscriberRefusal | None:
        """The limit a new stream would hit now (takes nothing)."""
        ...
