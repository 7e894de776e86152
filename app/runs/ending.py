"""A run's end, in one place: how it ends (the decision) and what follows (the run-end hooks).

How a run ends: exactly one terminal event (protocol.md §6), decided by this table.

======================================  ==============  =========================================
the run's own end                       abort accepted  the terminal logged
======================================  ==============  =========================================
``run.completed`` or ``run.failed``     no              as it is (completion, failure)
``run.completed`` or ``run.failed``     yes (reason)    ``run.cancelled`` {reason}
``run.cancelled`` (the provider's)      either          as it is
none (the provider returned, raised)    no              ``run.failed`` ``provider_error``
none                                    yes (reason)    ``run.cancelled`` {reason}
its provider is not configured here     no              ``run.failed`` (that error)
its owner was lost (lease lapsed)       —               ``run.failed`` ``gateway_instance_lost``
======================================  ==============  =========================================

An abort is accepted when it was answered ``aborted: true`` before the end was decided, on this
instance (the run's signal) or on another (``Backend.end_run`` answers its reason): an accepted
abort always wins. Once the end is decided (``ActiveRun.ending``) aborts answer ``false``.

The owner decides: :func:`decide_end` for the terminal its provider emitted, and
:func:`close_unterminated` for the one it failed to emit (both from ``app/runs/execute.py``),
applying :func:`decide`. The last row is decided by the instance that finds the owner lost: on
Redis its reaper (``app/backends/redis/reaper.py``) logs the events of
``app/backends/redis/lost_run.py``: what the run left open is closed, then that ``run.failed``.

What follows a run's end is :class:`RunEndHooks`, the same for a run ended by its owner and for
one ended by the reaper on another instance:

1. the archive writes the conversation with its end (:meth:`app.archive.Archive.run_ended`), once
   the end is logged;
2. the completion webhook goes into the outbox (``app/observability/webhooks``) before the run
   slot is released, so that an instance that dies right after has handed it over.

The owner calls :meth:`RunEndHooks.owner_ended` once its terminal and the meta saved after it are
logged, before it releases the slot (``app/runs/manager.py``). The reaper logs the end and releases
the slot in one step, so it calls :meth:`RunEndHooks.run_lost` (the webhook) before that step and
:meth:`RunEndHooks.lost_run_ended` (the archive) after it.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from app.backends import Backend, ConversationRef
from app.runs.retry import until_available
from app.telemetry.run_ops import lost_run_traced
from providers.contract import AgentEvent

if TYPE_CHECKING:
    from app.archive import Archive
    from app.observability.webhooks import WebhookDispatcher
    from app.runs.execute import ActiveRun
    from app.telemetry import Telemetry

__all__ = [
    "PROVIDER_ERROR",
    "RunEndHooks",
    "close_unterminated",
    "decide",
    "decide_end",
    "terminal_event",
]

logger = logging.getLogger("app.runs")

#: The error of a run whose provider ended it without a terminal event (a provider bug).
PROVIDER_ERROR: dict[str, Any] = {
    "code": "provider_error",
    "message": "The provider ended the run abnormally.",
}


def decide(event: AgentEvent, abort: str | None) -> AgentEvent:
    """The terminal to log for the run's own ``event`` when ``abort`` (its reason) was
    accepted before the end was decided, or None was: the table above."""
    if abort is None or event["type"] == "run.cancelled":
        return event
    return {
        **event,
        "type": "run.cancelled",
        "eventId": f"{event['eventId']}:cancelled",
        "payload": {"reason": abort},
    }


def terminal_event(
    state: dict[str, Any], session_id: str, run_id: str, type_: str, payload: dict[str, Any]
) -> AgentEvent:
    """An event the gateway emits for ``run_id`` itself, next in the run's numbering."""
    sequence = int(state.get("lastSequenceByRun", {}).get(run_id, -1)) + 1
    return {
        "protocolVersion": "0.1",
        "type": type_,
        "eventId": f"{run_id}:{sequence}:{type_}",
        "sessionId": session_id,
        "runId": run_id,
        "sequence": sequence,
        "timestamp": time.time() * 1000,
        "payload": payload,
    }


async def decide_end(
    backend: Backend, ref: ConversationRef, active: ActiveRun, event: AgentEvent
) -> AgentEvent:
    """Decide the run's end for its own terminal ``event``: from here on, aborts come too late.
    An abort accepted here is the run's signal; one accepted elsewhere, the backend's answer."""
    active.ending = True  # from here on, local aborts answer "aborted": false
    reason: str | None = active.signal.reason
    if reason is None:
        reason = await until_available(
            lambda: backend.end_run(ref, active.run_id), f"ending run {active.run_id}"
        )
    return decide(event, reason)


async def close_unterminated(
    backend: Backend,
    ref: ConversationRef,
    session_id: str,
    active: ActiveRun,
    error: dict[str, Any] = PROVIDER_ERROR,
) -> AgentEvent | None:
    """Log the terminal the provider failed to emit, decided as ``run.failed`` ``error`` (and
    ``run.started`` first if even that is missing); answers the terminal logged."""
    snapshot = await until_available(lambda: backend.snapshot(ref), f"closing run {active.run_id}")
    if snapshot is None:
        return None
    state = snapshot.state
    run_id = active.run_id
    if run_id not in state.get("runs", {}):
        await backend.append_event(
            ref, terminal_event(state, session_id, run_id, "run.started", {})
        )
        state = (await backend.snapshot(ref) or snapshot).state
    event = terminal_event(state, session_id, run_id, "run.failed", {"error": dict(error)})
    decided = await decide_end(backend, ref, active, event)
    await backend.append_event(ref, decided)
    return decided


class RunEndHooks:
    """What follows every run's end: the archive's write, then the completion webhook.

    Also the backend's lost-run listener (``Backend.watch_lost_runs``): the runs another
    instance's owner lost, ended here, run the same hooks. Each hook bounds its own wait; one
    that fails is logged and the next one still runs.
    """

    def __init__(
        self,
        archive: Archive | None = None,
        webhooks: WebhookDispatcher | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.archive = archive
        self.webhooks = webhooks if webhooks is not None and webhooks.enabled else None
        #: [telemetry]: a lost run ends with a span in its trace (``app/telemetry/run_ops.py``).
        self.telemetry = telemetry
        #: Reads the lost run's trace (its conversation meta); set with ``telemetry``.
        self.backend: Backend | None = None

    @property
    def any(self) -> bool:
        """Some hook is on (else a lost run need not be told)."""
        return self.archive is not None or self.webhooks is not None or self.telemetry is not None

    async def owner_ended(self, ref: ConversationRef, run_id: str) -> None:
        """Its owner ended ``run_id`` here: its terminal and its meta are logged, it still
        holds the run slot."""
        self._archive(ref, run_id)
        if self.webhooks is not None:
            try:
                await self.webhooks.run_ended(ref, run_id)
            except Exception:
                logger.exception("the webhook of run %s could not be handed over", run_id)

    async def run_lost(self, ref: ConversationRef, run_id: str, run: dict[str, Any]) -> None:
        """This instance ends ``run`` (its record as ended) because its owner was lost; called
        before the end is logged and the slot released in one step."""
        if self.telemetry is not None and self.backend is not None:
            try:
                await lost_run_traced(self.telemetry, self.backend, ref, run_id)
            except Exception:
                logger.exception("the span of lost run %s could not be made", run_id)
        if self.webhooks is not None:
            try:
                await self.webhooks.run_lost(ref, run_id, run)
            except Exception:
                logger.exception("the webhook of run %s could not be handed over", run_id)

    async def lost_run_ended(self, ref: ConversationRef, run_id: str) -> None:
        """The end of a run whose owner was lost is logged (by this instance)."""
        self._archive(ref, run_id)

    def _archive(self, ref: ConversationRef, run_id: str) -> None:
        if self.archive is not None:
            try:
                self.archive.run_ended(ref)
            except Exception:
                logger.exception("the end of run %s could not be archived", run_id)
