"""One AG-UI request's event stream: RUN_STARTED, the run's events from the accept cursor,
then RUN_FINISHED / RUN_ERROR at the run's end or when the run waits on the client.

A client that leaves before that end aborts the gateway run (AG-UI's cancellation model: the
native routes keep "detach is not abort"); once the end is sent, leaving aborts nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

from ag_ui.core import BaseEvent
from ag_ui.encoder import EventEncoder
from sse_starlette.event import ServerSentEvent
from sse_starlette.sse import EventSourceResponse
from starlette.types import Receive, Scope, Send

from app.agui.encoder import AguiEncoder
from app.agui.tracker import RunTracker
from app.backends import ConversationRef, LogEntry
from app.gateway import Gateway
from app.runs.execute import CommandQueue
from core.runs import RUN_TERMINAL_TYPES

__all__ = ["AguiStream", "agui_response"]

logger = logging.getLogger("app.agui")
BATCH = 256
#: How long one read of the log waits for new entries before the waiting check runs again.
POLL_SECONDS = 0.2
#: When the run is owned by another instance, the run must look like it waits on the client
#: for this long (nothing logged) before the request's stream ends.
QUIET_SECONDS = 0.5


class AguiStream:
    """Follows one gateway run for one AG-UI request."""

    def __init__(
        self,
        gateway: Gateway,
        ref: ConversationRef,
        run_id: str,
        cursor: str,
        encoder: AguiEncoder,
        tracker: RunTracker,
        *,
        continuation: bool,
    ) -> None:
        self.gateway = gateway
        self.ref = ref
        self.run_id = run_id
        self.cursor = cursor
        self.encoder = encoder
        self.tracker = tracker
        #: The request's RUN_FINISHED / RUN_ERROR was sent.
        self.ended = False
        #: The run that is logging now (extensions carry no run id): ours when continuing.
        self._current: str | None = run_id if continuation else None
        self._wire = EventEncoder()

    def _encode(self, events: list[BaseEvent]) -> bytes:
        return "".join(self._wire.encode(event) for event in events).encode()

    def _entry(self, entry: LogEntry) -> list[BaseEvent]:
        value = entry.decoded()
        if entry.kind != "event":
            if self._current != self.run_id or not isinstance(value, dict):
                return []
            return self.encoder.extension(str(value.get("key")), value.get("value"))
        run_id = value.get("runId")
        if entry.event_type == "run.started":
            self._current = run_id
        elif entry.event_type in RUN_TERMINAL_TYPES and run_id == self._current:
            self._current = None
        if run_id != self.run_id:
            return []  # an earlier run's end (interrupt, enqueue): not this request's
        self.tracker.observe(value)
        return self.encoder.event(value)

    def _waits_here(self) -> bool | None:
        """The runner of this run waits for a command (None: it runs on another instance)."""
        active = self.gateway.runs.active(self.ref)
        if active is None or active.run_id != self.run_id:
            return None
        queue = active.commands
        return queue.waiting.is_set() if isinstance(queue, CommandQueue) else None

    async def frames(self) -> AsyncIterator[bytes]:
        backend = self.gateway.backend
        yield self._encode([self.encoder.started()])
        pos = self.cursor
        pending: list[LogEntry] = []
        last_entry = time.monotonic()
        while True:
            if pending:
                entries, pending = pending, []
            else:
                result = await backend.read(self.ref, pos, limit=BATCH, wait=POLL_SECONDS)
                if result.status != "ok":
                    yield self._end(self.encoder.lost("The run's events are gone.", "stream_lost"))
                    return
                entries = result.entries
            for entry in entries:
                pos = entry.cursor
                out = self._entry(entry)
                if out:
                    yield self._encode(out)
                if self.encoder.finished:
                    self.ended = True
                    return
            now = time.monotonic()
            if entries:
                last_entry = now
            waiting = self.tracker.waiting_on()
            if waiting is not None:
                here = self._waits_here()
                if here or (here is None and now - last_entry >= QUIET_SECONDS):
                    # Everything is logged before the runner waits: read up to the head first.
                    probe = await backend.read(self.ref, pos, limit=BATCH, wait=0)
                    if probe.status == "ok" and probe.entries:
                        pending = probe.entries
                        continue
                    yield self._end(self.encoder.waiting(waiting))
                    return
            if self.gateway.closing.is_set() and not entries:
                yield self._end(self.encoder.lost("The gateway is shutting down.", "shutting_down"))
                return

    def _end(self, events: list[BaseEvent]) -> bytes:
        self.ended = True
        return self._encode(events)


class _AguiResponse(EventSourceResponse):
    stream: AguiStream
    slot: str | None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        stream = self.stream
        gateway = stream.gateway
        try:
            with gateway.metrics.track_subscriber("sse"):
                await super().__call__(scope, receive, send)
        except Exception:
            logger.info("an AG-UI stream ended with an error", exc_info=True)
        finally:
            try:
                if not stream.ended:  # the client left before this request's end: cancel the run
                    with contextlib.suppress(Exception):
                        await asyncio.shield(gateway.runs.abort(stream.ref, stream.run_id))
            finally:
                # Freed last: once the slot is free, the abort decision above has been made.
                await gateway.runs.limits.release_subscriber(stream.ref, self.slot)


def _ping() -> ServerSentEvent:
    return ServerSentEvent(comment="ping", sep="\n")


def agui_response(stream: AguiStream, slot: str | None) -> EventSourceResponse:
    """The ``text/event-stream`` answer of an AG-UI request; it frees the subscriber ``slot``
    the caller took for ``stream.ref`` (``GatewayLimits.acquire_subscriber``) when it ends."""
    settings = stream.gateway.settings.gateway
    response = _AguiResponse(
        stream.frames(),
        headers={"Cache-Control": "no-cache"},
        ping=settings.heartbeat_seconds,
        ping_message_factory=_ping,
        send_timeout=settings.send_timeout_seconds,
        sep="\n",
    )
    response.stream = stream
    response.slot = slot
    return response
