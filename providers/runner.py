"""``run_agent_provider``: drive one provider run (protocol.md §6), with waiting and continuation.

Exactly the reference checks and messages of ``runAgentProvider.ts``: protocol version, declared
transport, and for every emitted event validity, same session/run and declared type (raised as
:class:`AgentProviderProtocolError`). An exception of the consumer (``on_event``,
``on_extension``) propagates as the very same object and never reaches the provider; every other
error, abort included, goes to ``provider.transform_error``.

Step 8: when the stream ends without a run terminal (something waits on the app), the runner
waits for a command (``options.commands``), the abort signal, ``wait_timeout_seconds``, or the
earliest ``expiresAt`` of a waiting approval (then it hands the provider an internal
``approval.expire`` command). Commands go to ``provider.execute_command``; their events pass the
same checks and error routing. A wait timeout reaches ``transform_error`` as
:class:`WaitTimeout`, an abort while waiting as :class:`AbortError`.

A provider may offer ``transform_chunks(chunks, ctx)``: the events ``transform_chunk`` would
give for each chunk of one upstream read, in one list. The runner then maps a read in one call
(with a transport that yields reads, ``open_batches``) and checks every event as before; the
extension values such a provider queues are handed over after the read's events.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from core.events import RUN_TERMINAL_TYPES, validate_event
from providers.contract import AgentEvent, AgentProvider, Command, OnEvent, OnEvents, RunOptions
from providers.errors import AbortError, ProviderError, WaitTimeout
from providers.tracing import start_call

__all__ = ["AgentProviderProtocolError", "run_agent_provider"]

PROTOCOL_VERSION = "0.1"


class AgentProviderProtocolError(Exception):
    """The provider broke the contract (invalid, foreign or undeclared event)."""


class _ConsumerError(Exception):
    def __init__(self, cause: BaseException) -> None:
        super().__init__("Agent event consumer failed.")
        self.cause = cause


class _Run:
    """What the runner itself tracks of the emitted stream."""

    __slots__ = ("approvals", "ended")

    def __init__(self) -> None:
        self.ended = False
        self.approvals: dict[str, float] = {}  # approvalId -> expiresAt (ms)


async def run_agent_provider(
    provider: AgentProvider,
    input: Mapping[str, Any],
    options: RunOptions,
    on_event: OnEvent | None,
    *,
    on_events: OnEvents | None = None,
) -> None:
    """Run ``provider`` to its end, handing every checked event to the consumer.

    The consumer is ``on_event`` (one call per event) or ``on_events``: one call per upstream
    read (per chunk for a transport without ``open_batches``; per provider call otherwise)
    with the checked events in order, never an empty list. Every event is checked before
    either sees it; the events checked before a failing check, a provider error or an abort
    are handed over first, so both consumers see the same events in the same order.
    """
    if (on_event is None) == (on_events is None):
        raise ValueError("Pass exactly one of on_event and on_events.")
    version = provider.protocol.get("version")
    if version != PROTOCOL_VERSION:
        raise ValueError(f'Provider "{provider.id}" uses unsupported agent protocol "{version}".')
    transport = provider.transport
    if transport.kind not in provider.capabilities.transports:
        raise ValueError(f'Provider "{provider.id}" does not declare transport "{transport.kind}".')

    signal = options.signal
    ctx = provider.create_context(options)
    run = _Run()
    event_types = provider.capabilities.event_types
    session_id, run_id = options.session_id, options.run_id
    #: Checked events not yet handed to the consumer.
    pending: list[AgentEvent] = []

    declared = frozenset(event_types)

    def collect(events: Iterable[AgentEvent]) -> None:
        # Checks inline, no await: this loop carries every event of the run.
        for event in events:
            if validate_event(event) is not None:
                raise AgentProviderProtocolError(
                    f'Provider "{provider.id}" emitted an invalid event.'
                )
            if event["sessionId"] != session_id or event["runId"] != run_id:
                raise AgentProviderProtocolError(
                    f'Provider "{provider.id}" emitted an event outside the active session or run.'
                )
            kind = event["type"]
            if kind not in declared:
                raise AgentProviderProtocolError(
                    f'Provider "{provider.id}" emitted undeclared event type "{kind}".'
                )
            if kind in _OBSERVED:
                _observe(run, event)
            pending.append(event)

    async def hand_over() -> None:
        """Give the consumer the checked events collected so far."""
        if not pending:
            return
        batch = pending.copy()
        pending.clear()
        try:
            if on_events is not None:
                await on_events(batch)
            else:
                assert on_event is not None
                for event in batch:
                    await on_event(event)
        except Exception as error:
            raise _ConsumerError(error) from error

    take = getattr(ctx, "take_extensions", None) if options.on_extension is not None else None

    async def hand_extensions(values: list[tuple[str, Any]]) -> None:
        """Hand over extension values ``take`` gave (after the events before them)."""
        assert options.on_extension is not None
        await hand_over()
        for key, value in values:
            try:
                await options.on_extension(key, value)
            except Exception as error:
                raise _ConsumerError(error) from error

    async def extensions() -> None:
        """Hand over the extension values queued so far (after the events before them)."""
        if take is not None and (values := take()):
            await hand_extensions(values)

    async def emit_all(events: Iterable[AgentEvent]) -> None:
        try:
            collect(events)
        finally:
            await hand_over()  # what passed its check before a failure goes first
        await extensions()

    tracing = options.tracing

    async def route(error: Exception) -> None:
        if tracing is not None:
            tracing.end_call(error)
        await emit_all(provider.transform_error(error, ctx))

    try:
        try:
            await emit_all(provider.start(input, ctx))
            if signal.aborted:  # aborted before it began: the upstream is never contacted
                raise AbortError.from_signal(signal)
            request = await provider.prepare_request(input, ctx)
            if tracing is not None:  # the model call's span, over its whole stream
                request = start_call(tracing, request)
            open_batches = getattr(transport, "open_batches", None)
            if open_batches is not None:
                transform_chunks = getattr(provider, "transform_chunks", None)
                # The chunks of one upstream read come as one list: one generator step and one
                # hand-over per read.
                batches = open_batches(request, signal)
                try:
                    async for batch in batches:
                        if transform_chunks is not None:
                            # The provider maps the whole read in one call; nothing awaits
                            # between its chunks, so the abort check after it sees the same.
                            collect(transform_chunks(batch, ctx))
                            if take is not None and (values := take()):
                                await hand_extensions(values)
                        else:
                            for chunk in batch:
                                collect(provider.transform_chunk(chunk, ctx))
                                # take() inline: not a coroutine per chunk for nothing
                                # queued, nearly always (BENCHMARKS.md, "Costs behind the
                                # code's shortcuts").
                                if take is not None and (values := take()):
                                    await hand_extensions(values)
                                if signal.aborted:
                                    raise AbortError.from_signal(signal)
                        await hand_over()
                        if signal.aborted:
                            raise AbortError.from_signal(signal)
                finally:
                    await _aclose(batches)
            else:
                chunks = transport.open(request, signal)
                try:
                    async for chunk in chunks:
                        await emit_all(provider.transform_chunk(chunk, ctx))
                        if signal.aborted:
                            raise AbortError.from_signal(signal)
                finally:
                    await _aclose(chunks)
            await emit_all(provider.flush(ctx))
            if tracing is not None:
                tracing.end_call()
        except _ConsumerError:
            raise
        except AgentProviderProtocolError:
            await hand_over()  # the events that passed before the one that failed
            raise
        except Exception as error:
            await hand_over()  # the events before the error come before its handling
            await route(error)
            return
        await _wait_and_continue(provider, ctx, options, run, emit_all, route)
    except _ConsumerError as consumer:
        raise consumer.cause from None


async def _wait_and_continue(
    provider: AgentProvider,
    ctx: Any,
    options: RunOptions,
    run: _Run,
    emit_all: Any,
    route: Any,
) -> None:
    execute = getattr(provider, "execute_command", None)
    now_ms = options.now or (lambda: time.time() * 1000.0)
    while not run.ended:
        command: Command | None = None
        try:
            command = await _next_command(options, run, now_ms)
            if command is None:
                raise WaitTimeout(options.wait_timeout_seconds)
            if command.type == "run.cancel":
                raise AbortError("aborted")
            if execute is None:
                raise ProviderError(
                    f'Provider "{provider.id}" does not support command "{command.type}".'
                )
            events: AsyncIterator[AgentEvent] = execute(command, ctx)
            try:
                async for event in events:
                    await emit_all([event])
            finally:
                await _aclose(events)
        except (_ConsumerError, AgentProviderProtocolError):
            raise
        except Exception as error:
            await route(error)
            return


async def _next_command(options: RunOptions, run: _Run, now_ms: Any) -> Command | None:
    """The next command, an internal ``approval.expire``, or None on wait timeout.
    Raises :class:`AbortError` when the signal aborts first."""
    signal = options.signal
    loop = asyncio.get_running_loop()
    wait_timeout = options.wait_timeout_seconds
    deadline = loop.time() + wait_timeout if wait_timeout is not None else None
    if signal.aborted:
        raise AbortError.from_signal(signal)
    if not options.commands.empty():
        return options.commands.get_nowait()
    expiring = min(run.approvals.items(), key=lambda item: item[1], default=None)
    timeout: float | None = None
    if deadline is not None:
        timeout = max(0.0, deadline - loop.time())
    if expiring is not None:
        until_expiry = max(0.0, (expiring[1] - now_ms()) / 1000.0)
        if timeout is None or until_expiry <= timeout:
            timeout, deadline = until_expiry, None
    get_task: asyncio.Task[Command] = asyncio.ensure_future(options.commands.get())
    abort_task: asyncio.Task[Any] = asyncio.ensure_future(signal.wait())
    try:
        await asyncio.wait({get_task, abort_task}, timeout=timeout, return_when="FIRST_COMPLETED")
    finally:
        for task in (get_task, abort_task):
            if not task.done():
                task.cancel()
    if get_task.done() and not get_task.cancelled():
        return get_task.result()
    if signal.aborted:
        raise AbortError.from_signal(signal)
    if deadline is None and expiring is not None:
        run.approvals.pop(expiring[0], None)
        return Command("approval.expire", {"approvalId": expiring[0]})
    return None


#: The event types :func:`_observe` tracks (run end, approval deadlines).
_OBSERVED = frozenset({*RUN_TERMINAL_TYPES, "approval.requested", "approval.resolved"})


def _observe(run: _Run, event: AgentEvent) -> None:
    kind = event["type"]
    if kind in RUN_TERMINAL_TYPES:
        run.ended = True
    elif kind == "approval.requested":
        expires_at = event["payload"].get("expiresAt")
        if expires_at is not None:
            run.approvals[event["payload"]["approvalId"]] = float(expires_at)
    elif kind == "approval.resolved":
        run.approvals.pop(event["payload"]["approvalId"], None)


async def _aclose(iterator: Any) -> None:
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        await aclose()
