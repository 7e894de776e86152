"""Executing one run: options from the conversation, the runner, and the one writer per run.

The runner hands over the checked events of each upstream read in one call; they go through
the run's :class:`.event_pipe.EventPipe`: reduced and logged in batches (whatever accumulated
while the previous write was in flight), so the runner never waits a round trip per event and
subscribers see each batch at once. A run always
ends with a terminal event: when the runner raises (a provider bug) or returns without one, the
gateway appends ``run.failed`` (``provider_error``) or ``run.cancelled`` itself. How the run ends
is decided in :mod:`app.runs.ending`.
"""

from __future__ import annotations

import asyncio
import logging
import operator
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.backends import Backend, ConversationMeta, ConversationRef, LogEntry
from app.backends.types import LogItem
from app.config import Settings
from app.errors import UnknownProvider
from app.observability.logs import log_context
from app.observability.metrics import GatewayMetrics
from app.runs.catalog import ProviderCatalog
from app.runs.ending import close_unterminated, decide_end
from app.runs.event_pipe import EventPipe
from app.runs.limits import ARTIFACT_EVENTS, cap_artifact
from app.runs.retry import until_available
from app.runs.start_slots import Started
from app.telemetry import Telemetry
from app.telemetry.logs import span_in_logs
from app.telemetry.run_span import RunSpan
from core.runs import RUN_TERMINAL_TYPES, TITLE_MAX_CHARS, AbortReason, QueuedCancelReason
from providers.contract import AgentEvent, Command, RunOptions
from providers.history import derive_history
from providers.runner import run_agent_provider
from providers.signal import AbortSignal

if TYPE_CHECKING:
    from opentelemetry.context import Context

__all__ = [
    "START_WAIT_SECONDS",
    "ActiveRun",
    "CommandQueue",
    "RunRequest",
    "execute_run",
    "title_of",
]

logger = logging.getLogger("app.runs")
#: How long the 202 of a started run waits for its ``run.started`` to be logged (at most).
START_WAIT_SECONDS = 5.0


@dataclass(slots=True)
class RunRequest:
    """A run accepted by the gateway, started now or queued."""

    run_id: str
    input: dict[str, Any]
    provider: str
    emit_user_message: bool = True
    #: Set once the run's ``run.started`` is in the log (and state), or the run is over or
    #: dropped before it started (:meth:`finish`).
    started: Started = field(default_factory=Started)
    #: Cancelled before it started (a later interrupt, an abort naming it): it logs its start,
    #: its user message and ``run.cancelled`` in its turn, without reaching the upstream.
    cancelled: QueuedCancelReason | None = None
    #: ``[telemetry]``: the accepting request's ``traceparent`` (the run span's parent), and
    #: when it was accepted here to wait its turn (``time.monotonic()``; None: it did not).
    trace: str | None = None
    accepted_at: float | None = None
    #: ``[telemetry]``: the accepting request's context, when it was accepted here (its span
    #: is the run span's parent without reading ``trace`` back); None for a run adopted.
    parent: Context | None = None

    def finish(self) -> None:
        """The run is over, or will never start: its start's waiters go on."""
        self.started.set()

    async def wait_started(self, within: float = START_WAIT_SECONDS) -> bool:
        """Wait (bounded) until ``run.started`` is logged or the run ended; True if it did.

        The 202 of a started run waits for this, so a ``GET …/state`` sent after it, to any
        instance, already shows the run as active. One event and one timer: every run start
        waits here, and a wait on two events took two tasks.
        """
        if self.started.is_set():
            return True
        try:
            async with asyncio.timeout(within):
                await self.started.wait()
        except TimeoutError:
            return False
        return True


class CommandQueue(asyncio.Queue[Command]):
    """The run's command queue; ``waiting`` is set while the runner blocks on it.

    The runner reads a command only once everything the provider produced so far is logged
    and nothing but the app's answer can continue the run, so ``waiting`` tells a follower
    on this instance (the AG-UI endpoint) that the run now waits on the app.
    """

    def __init__(self) -> None:
        super().__init__()
        self.waiting = asyncio.Event()

    async def get(self) -> Command:
        self.waiting.set()
        try:
            return await super().get()
        finally:
            self.waiting.clear()


class ActiveRun:
    """The owner's handle on the running run (a :class:`app.backends.RunControl`)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.signal = AbortSignal()
        self.commands = CommandQueue()
        #: Targets (approval or tool ids) with a command delivered and not yet reflected.
        self.in_flight: set[str] = set()
        #: Its terminal event is logged (it still holds the slot while it finishes up).
        self.ended = False
        #: How it ends is decided (its terminal is being logged): aborts come too late.
        self.ending = False
        #: Its span while it executes (``[telemetry]``), else None.
        self.trace: RunSpan | None = None

    def abort(self, reason: AbortReason) -> bool:
        """Abort the run; False (and nothing changes) once its end is decided."""
        if self.ending:
            return False
        self.signal.abort(reason)
        if self.trace is not None:
            self.trace.event("run.abort", {"agent_gateway.abort.reason": reason})
        return True

    def deliver(self, command: Command) -> None:
        self.commands.put_nowait(command)
        if self.trace is not None:
            self.trace.event("run.command", {"agent_gateway.command.type": command.type})


def title_of(input: dict[str, Any]) -> str | None:
    """The session title: the first prompt's text, cut to ``TITLE_MAX_CHARS`` characters."""
    prompt = input.get("prompt")
    if isinstance(prompt, str) and prompt:
        return prompt[:TITLE_MAX_CHARS]
    content = input.get("content")
    if isinstance(content, str) and content:
        return content[:TITLE_MAX_CHARS]
    if isinstance(content, list):
        texts = [
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        ]
        text = " ".join(t for t in texts if isinstance(t, str) and t)
        return text[:TITLE_MAX_CHARS] or None
    return None


#: Event types ``on_events`` may change (capped, decided as the run's end): other events go
#: to the log as the runner checked them.
_CHANGED_BY_GATEWAY = ARTIFACT_EVENTS | RUN_TERMINAL_TYPES
_event_type = operator.itemgetter("type")  # checked events (protocol.md §6) all have one
_entry_type = operator.attrgetter("event_type")


def passes_unchanged(checked: list[AgentEvent]) -> bool:
    """No event of ``checked`` is one the gateway may change (an artifact to cap, a terminal
    to decide): all go to the log exactly as the runner checked them."""
    return _CHANGED_BY_GATEWAY.isdisjoint(map(_event_type, checked))


async def execute_run(
    backend: Backend,
    catalog: ProviderCatalog,
    settings: Settings,
    ref: ConversationRef,
    request: RunRequest,
    active: ActiveRun,
    metrics: GatewayMetrics | None = None,
    telemetry: Telemetry | None = None,
) -> None:
    """Run ``request`` to its terminal event, appending every event to the conversation."""
    with log_context(run_id=active.run_id, provider=request.provider):
        if telemetry is None:
            await _execute_run(backend, catalog, settings, ref, request, active, metrics, None)
            return
        accepted = request.accepted_at
        span = RunSpan(
            telemetry,
            ref.principal,
            ref.key,
            active.run_id,
            request.provider,
            request.trace,
            None if accepted is None else time.monotonic() - accepted,
            request.parent,
        )
        active.trace = span
        try:
            with span_in_logs(span.span, span.context):
                await _execute_run(backend, catalog, settings, ref, request, active, metrics, span)
        finally:
            active.trace = None
            span.end()


async def _execute_run(
    backend: Backend,
    catalog: ProviderCatalog,
    settings: Settings,
    ref: ConversationRef,
    request: RunRequest,
    active: ActiveRun,
    metrics: GatewayMetrics | None,
    span: RunSpan | None,
) -> None:
    starting = f"starting run {active.run_id}"
    snapshot = await until_available(lambda: backend.snapshot(ref), starting)
    if snapshot is None:  # deleted before the run could start
        return
    meta = snapshot.meta
    try:
        provider = catalog.get(request.provider)
    except UnknownProvider as exc:  # adopted from an instance configured with other providers
        error = {"code": exc.code, "message": exc.message}
        ended = await close_unterminated(backend, ref, meta.session_id, active, error)
        if span is not None and ended is not None:
            span.on_events([ended])
        return
    run_input = request.input
    explicit = run_input.get("messages")
    history = list(explicit) if isinstance(explicit, list) else derive_history(snapshot.state)
    start_session = not meta.session_started
    transcript = meta.transcripts.setdefault(request.provider, {})
    terminal_seen = False
    tracker = metrics.run_tracker(request.provider, active.signal) if metrics else None

    artifact_cap = settings.limits.max_inline_artifact_bytes

    def on_logged(entries: list[LogEntry]) -> None:
        nonlocal terminal_seen
        if request.started.is_set() and RUN_TERMINAL_TYPES.isdisjoint(map(_entry_type, entries)):
            return  # the common case (deltas of a started run): no per-entry loop in Python
        for entry in entries:
            if entry.run_id != active.run_id:
                continue
            if entry.event_type == "run.started":
                request.started.set()
            elif entry.is_run_terminal:
                terminal_seen = active.ended = True
                request.started.set()

    pipe = EventPipe(backend, ref, on_logged)

    run_id = active.run_id

    async def on_events(checked: list[AgentEvent]) -> None:
        """The events of one upstream read, checked by the runner: to the pipe in one go."""
        if passes_unchanged(checked):
            # The common case (no artifact to cap, no terminal): every event goes on unchanged,
            # built in one comprehension instead of a loop of calls (BENCHMARKS.md, "Costs behind
            # the code's shortcuts").
            if tracker is not None:
                tracker.on_events(checked)
            if span is not None:
                span.on_events(checked)
            await pipe.put_all([LogItem(event, checked=True) for event in checked])
            return
        events: list[AgentEvent] = []
        items: list[LogItem] = []
        for original in checked:
            event = cap_artifact(original, artifact_cap)  # state never grows from one event
            if event["type"] in RUN_TERMINAL_TYPES and event["runId"] == run_id:
                event = await decide_end(backend, ref, active, event)
            events.append(event)
            # Unchanged since the runner's check: the store does not validate it again. An
            # event the gateway changed (capped, turned into run.cancelled) is validated.
            items.append(LogItem(event, checked=event is original))
        if tracker is not None:
            tracker.on_events(events)
        if span is not None:
            span.on_events(events)
        await pipe.put_all(items)

    async def on_extension(key: str, value: Any) -> None:
        await pipe.put(LogItem.of_extension(key, value))

    options = RunOptions(
        session_id=meta.session_id,
        run_id=active.run_id,
        signal=active.signal,
        history=history,
        start_session=start_session,
        session_title=meta.title if start_session else None,
        emit_user_message=request.emit_user_message,
        transcript=transcript,
        wait_timeout_seconds=settings.gateway.wait_timeout_seconds,
        commands=active.commands,
        on_extension=on_extension,
        max_upstream_event_bytes=settings.limits.max_upstream_event_bytes,
        tracing=span,
    )
    meta.session_started = True
    meta.last_provider = request.provider
    meta.last_input = run_input
    meta.last_run_id = active.run_id
    meta.last_run_trace = None if span is None else span.traceparent
    meta.updated_at = time.time() * 1000  # the conversation list's order (newest first)
    # Saved while the run starts (its events do not wait for it), before the meta at its end.
    saving = asyncio.ensure_future(until_available(lambda: backend.save_meta(ref, meta), starting))
    saved: asyncio.Future[None] | None = None
    try:
        try:
            await run_agent_provider(provider, run_input, options, None, on_events=on_events)
        finally:
            # The meta after the run (its transcripts are final) is saved while its last events
            # are written: before the slot is released, not after the terminal is logged.
            saved = asyncio.ensure_future(_save_meta_after(saving, backend, ref, meta, run_id))
        await pipe.flush()
    except Exception:
        logger.exception("run %s ended with an error in the provider", active.run_id)
    finally:
        if saved is None:
            saved = asyncio.ensure_future(_save_meta_after(saving, backend, ref, meta, run_id))
        await pipe.close()
        if not terminal_seen:
            try:
                ended = await close_unterminated(backend, ref, meta.session_id, active)
                if span is not None and ended is not None:
                    span.on_events([ended])
            except Exception:
                logger.exception("could not close run %s", active.run_id)
        if tracker is not None:
            await tracker.finish(
                run_id, lambda: backend.run_issues(ref, run_id), cancelled=active.signal.aborted
            )
        await saved


async def _save_meta_after(
    saving: asyncio.Future[None],
    backend: Backend,
    ref: ConversationRef,
    meta: ConversationMeta,
    run_id: str,
) -> None:
    """The meta at the run's end, once the meta at its start is saved (they land in order)."""
    await saving
    await _save_meta_at_end(backend, ref, meta, run_id)


async def _save_meta_at_end(
    backend: Backend, ref: ConversationRef, meta: ConversationMeta, run_id: str
) -> None:
    """The meta after the run (transcripts, time); a title set (PATCH) meanwhile stays."""
    what = f"saving the meta of run {run_id}"
    meta.updated_at = time.time() * 1000
    await until_available(lambda: backend.save_meta(ref, meta, keep_title=True), what)
