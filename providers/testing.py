"""Test helpers every provider's tests use.

``await assert_provider_contract(provider, *chunks, input=..., commands=...)`` runs ``provider``
through :func:`providers.runner.run_agent_provider` over an in-memory transport that yields
``chunks`` (with the kind of the provider's own transport, so the declared transports still
hold), feeds ``commands`` when the run waits on the app, asserts the contract validator finds
no issue and returns the emitted events.

- ``turns=[[...], [...]]`` instead of ``chunks``: one chunk list per upstream request
  (continuations open the transport again). With neither, the provider's own transport is
  used (in-process runtimes such as ``local-demo``).
- A command is a :class:`Command`, a ``(type, payload)`` pair, or a callable
  ``f(events) -> Command | tuple`` resolved when the runner takes it (so it can pick ids from
  the events emitted so far).
- ``abort_when(events) -> bool`` aborts the run's signal after an event.

``sse_reads_transport(reads)``: a real :class:`SSETransport` whose upstream is in memory and
answers every request with ``reads``, each item one read of the body (``ByteReads``).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any

import httpx

from providers.contract import AgentEvent, AgentProvider, Command, RunOptions
from providers.runner import run_agent_provider
from providers.signal import AbortSignal
from providers.transports import IterableTransport, SSETransport
from providers.validator import validate_agent_provider_events

__all__ = [
    "ByteReads",
    "CommandLike",
    "assert_provider_contract",
    "make_options",
    "run_collect",
    "sse_reads_transport",
]

CommandLike = Command | tuple[str, Mapping[str, Any]] | Callable[[list[AgentEvent]], Any]


class ByteReads(httpx.AsyncByteStream):
    """A response body that arrives as ``reads``: one item per read."""

    def __init__(self, reads: Sequence[bytes]) -> None:
        self.reads = reads

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for read in self.reads:
            yield read


def sse_reads_transport(reads: Sequence[bytes]) -> SSETransport:
    """An SSE transport whose upstream answers every request ``200 text/event-stream`` with
    ``reads`` (each item one read): the transport's own parsing and batching, no socket."""

    def handler(request: httpx.Request) -> httpx.Response:
        headers = {"content-type": "text/event-stream"}
        return httpx.Response(200, headers=headers, stream=ByteReads(reads))

    return SSETransport(client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))


def _to_command(value: Any, events: list[AgentEvent]) -> Command:
    if callable(value) and not isinstance(value, Command | tuple):
        value = value(events)
    if isinstance(value, tuple):
        return Command(value[0], value[1])
    if not isinstance(value, Command):
        raise TypeError(f"Not a command: {value!r}")
    return value


class _LazyCommands(asyncio.Queue[Any]):
    """A command queue resolving callables against the events when the runner takes them."""

    def __init__(self, events: list[AgentEvent]) -> None:
        super().__init__()
        self._events = events

    def _get(self) -> Any:
        return _to_command(super()._get(), self._events)


def make_options(
    session_id: str = "ses_test",
    run_id: str = "run_test",
    **overrides: Any,
) -> RunOptions:
    """RunOptions for tests: a fresh signal, ``now`` fixed at 1000 ms unless given."""
    overrides.setdefault("signal", AbortSignal())
    overrides.setdefault("now", lambda: 1000.0)
    return RunOptions(session_id=session_id, run_id=run_id, **overrides)


async def run_collect(
    provider: AgentProvider,
    input: Mapping[str, Any],
    *,
    options: RunOptions | None = None,
    commands: Iterable[CommandLike] = (),
    abort_when: Callable[[list[AgentEvent]], bool] | None = None,
) -> list[AgentEvent]:
    """Run ``provider`` and return every event it emitted (no validation)."""
    events: list[AgentEvent] = []
    queue = _LazyCommands(events)
    for command in commands:
        queue.put_nowait(command)
    if options is None:
        options = make_options(commands=queue)
    else:
        pending = []
        while not options.commands.empty():
            pending.append(options.commands.get_nowait())
        options.commands = queue
        for command in pending:
            queue.put_nowait(command)
    signal = options.signal

    async def on_event(event: AgentEvent) -> None:
        events.append(event)
        if abort_when is not None and abort_when(events):
            signal.abort()

    await run_agent_provider(provider, input, options, on_event)
    return events


async def assert_provider_contract(
    provider: AgentProvider,
    *chunks: Any,
    input: Mapping[str, Any] | None = None,
    turns: Sequence[Sequence[Any]] | None = None,
    commands: Iterable[CommandLike] = (),
    options: RunOptions | None = None,
    abort_when: Callable[[list[AgentEvent]], bool] | None = None,
    expect_terminal: str | None = None,
) -> list[AgentEvent]:
    """Run ``provider`` over ``chunks`` (or ``turns``) and assert zero validator issues."""
    subject = provider
    if turns is not None or chunks:
        remaining = [list(turn) for turn in (turns if turns is not None else [chunks])]

        def source(_request: Any, _signal: AbortSignal) -> list[Any]:
            return remaining.pop(0) if remaining else []

        subject = copy.copy(provider)
        subject.transport = IterableTransport(source, kind=provider.transport.kind)
    events = await run_collect(
        subject,
        input if input is not None else {"prompt": "hello"},
        options=options,
        commands=commands,
        abort_when=abort_when,
    )
    issues = validate_agent_provider_events(provider.capabilities, events)
    assert issues == [], f"contract issues: {issues}\nevents: {[e['type'] for e in events]}"
    if expect_terminal is not None:
        assert events and events[-1]["type"] == expect_terminal, (
            f"expected {expect_terminal}, got {events[-1]['type'] if events else None}"
        )
    return events
