"""Queued runs of a dead instance: a live instance adopts their tickets and starts them in turn.

A ticket stores its run's request (:func:`encode_request`). When its owner stops renewing it
(killed, or shutting down: it disowns its tickets), the ticket lapses and the first live
instance to notice takes it in one script (``queue.ADOPT``: exactly one wins, the score is
kept, so the order is) and hands the runs to its RunManager (``on_adopted_runs``), which starts
them like its own queued runs. Who notices: the periodic sweep of the ``P:queues`` index (every
lease TTL/2) and any claim of the conversation's slot that sees a lapsed ticket.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

import orjson

from app.backends.redis.keys import ConversationKeys
from app.backends.redis.queue import RunQueue
from app.backends.redis.tickets import TicketKeeper
from app.backends.types import ConversationRef, QueuedRun, RunAdopter
from core.runs import QUEUED_CANCEL_REASONS, QueuedCancelReason

__all__ = ["Adoption", "decode_request", "encode_request"]

log = logging.getLogger("app.backends.redis")


def encode_request(ref: ConversationRef, run: QueuedRun) -> bytes:
    """The request stored with a ticket: everything another instance needs to start the run."""
    request: dict[str, Any] = {
        "principal": ref.principal,
        "key": ref.key,
        "runId": run.run_id,
        "input": run.input,
        "provider": run.provider,
        "emitUserMessage": run.emit_user_message,
    }
    if run.trace is not None:  # the adopting instance continues the accepting request's trace
        request["traceparent"] = run.trace
    return orjson.dumps(request)


def decode_request(raw: bytes, cancelled: str = "") -> tuple[ConversationRef, QueuedRun]:
    data: dict[str, Any] = orjson.loads(raw)
    reason: QueuedCancelReason | None = None
    if cancelled in QUEUED_CANCEL_REASONS:
        reason = cast(QueuedCancelReason, cancelled)
    trace = data.get("traceparent")
    run = QueuedRun(
        data["runId"],
        data["input"],
        data["provider"],
        bool(data["emitUserMessage"]),
        reason,
        trace if isinstance(trace, str) else None,
    )
    return ConversationRef(data["principal"], data["key"]), run


class Adoption:
    """Adopts lapsed tickets for this instance and hands their runs to the adopter."""

    def __init__(
        self,
        queue: RunQueue,
        tickets: TicketKeeper,
        prefix: str,
        wake: Callable[[ConversationKeys], Awaitable[None]],
    ) -> None:
        self.queue = queue
        self.tickets = tickets
        self.prefix = prefix
        self._wake = wake
        #: Starts adopted runs (the RunManager); None: nothing is adopted.
        self.adopter: RunAdopter | None = None

    async def adopt(self, keys: ConversationKeys) -> int:
        """Adopt the conversation's lapsed tickets; how many tickets still wait."""
        if self.adopter is None:
            return 0
        taken = await self.queue.adopt(keys)
        # Our own lapsed tickets (Redis was unreachable) were just re-asserted: nothing to hand.
        fresh = [item for item in taken.runs if not self.tickets.has(keys, item[0])]
        if not fresh:
            return len(taken.order)
        decoded = []
        for run_id, raw, cancelled in fresh:
            try:
                decoded.append(decode_request(raw, cancelled))
            except (ValueError, KeyError, TypeError):
                log.error("queued run %s has no readable request; dropped", run_id)
                await self.queue.drop(keys, run_id)
        if not decoded:
            return len(taken.order)
        ref = decoded[0][0]
        runs = [run for _, run in decoded]
        if not self.adopter(ref, runs, taken.order):  # shutting down: another instance will
            await self.queue.disown(keys, [run.run_id for run in runs])
            return len(taken.order)
        for run in runs:
            self.tickets.add(keys, run.run_id)
        log.warning(
            "adopted %d queued run(s) of a lost instance: %s",
            len(runs),
            ", ".join(run.run_id for run in runs),
        )
        await self.queue.mark(keys)
        await self._wake(keys)
        return len(taken.order)

    async def sweep(self) -> None:
        """Visit every conversation whose tickets' recorded deadline passed."""
        if self.adopter is None:
            return
        now, tags = await self.queue.lapsed()
        for tag in tags:
            keys = ConversationKeys(self.prefix, tag)
            if await self.adopt(keys):
                await self.queue.mark(keys)  # look again once the tickets left could lapse
            else:
                await self.queue.unindex(keys, now)
