"""The runner's checks of each emitted event (protocol.md §6): valid, of the active session
and run, of a declared type; a streamed delta is checked like any other event."""

from __future__ import annotations

import math
from typing import Any

import pytest

from core.factory import EventFactory
from providers.contract import AGENT_EVENT_PROTOCOL, AgentTransport, Capabilities, RunOptions
from providers.runner import AgentProviderProtocolError, run_agent_provider
from providers.signal import AbortSignal
from providers.transports import IterableTransport

SESSION, RUN = "ses", "run"


class Liar:
    """Not a string, yet equal to everything."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__


def _delta(**changes: Any) -> dict[str, Any]:
    event = EventFactory(SESSION, RUN, lambda: 1000.5).create(
        "message.delta", {"messageId": "m", "delta": "hi"}
    )
    event.update(changes)
    return event


class _DeltaProvider:
    """Emits ``run.started`` and one ``reasoning.delta`` per chunk, declaring only ``declared``."""

    id = "deltas"
    protocol = AGENT_EVENT_PROTOCOL

    def __init__(self, declared: tuple[str, ...], event: dict[str, Any] | None = None) -> None:
        self.capabilities = Capabilities(event_types=declared, transports=("async-iterable",))
        self.transport: AgentTransport = IterableTransport(lambda _r, _s: ["c"])
        self.event = event

    def create_context(self, options: RunOptions) -> EventFactory:
        return EventFactory(options.session_id, options.run_id, lambda: 1.5)

    def start(self, input: Any, ctx: EventFactory) -> list[dict[str, Any]]:
        return [ctx.create("run.started", {})]

    async def prepare_request(self, input: Any, ctx: EventFactory) -> Any:
        return None

    def transform_chunk(self, chunk: Any, ctx: EventFactory) -> list[dict[str, Any]]:
        if self.event is not None:
            return [self.event]
        return [ctx.create("reasoning.delta", {"reasoningId": "r", "delta": "x"})]

    def flush(self, ctx: EventFactory) -> list[dict[str, Any]]:
        return [ctx.create("run.completed", {})]

    def transform_error(self, error: BaseException, ctx: EventFactory) -> list[dict[str, Any]]:
        return [ctx.create("run.failed", {"error": {"message": str(error)}})]


async def _run(provider: _DeltaProvider, session: str = SESSION) -> list[str]:
    seen: list[str] = []

    async def on_event(event: dict[str, Any]) -> None:
        seen.append(event["type"])

    options = RunOptions(session_id=session, run_id=RUN, signal=AbortSignal())
    await run_agent_provider(provider, {}, options, on_event)
    return seen


async def test_an_undeclared_delta_type_is_still_refused() -> None:
    provider = _DeltaProvider(("run.started", "run.completed", "run.failed"))
    refused = r'undeclared event type "reasoning\.delta"'
    with pytest.raises(AgentProviderProtocolError, match=refused):
        await _run(provider)


async def test_a_declared_delta_passes() -> None:
    provider = _DeltaProvider(("run.started", "reasoning.delta", "run.completed"))
    assert await _run(provider) == ["run.started", "reasoning.delta", "run.completed"]


async def test_a_delta_of_another_run_or_invalid_is_refused_by_the_full_checks() -> None:
    declared = ("run.started", "message.delta", "run.completed")
    foreign = _delta(runId="another")
    with pytest.raises(AgentProviderProtocolError, match="outside the active session or run"):
        await _run(_DeltaProvider(declared, foreign))
    invalid = _delta(timestamp=math.inf)
    with pytest.raises(AgentProviderProtocolError, match="emitted an invalid event"):
        await _run(_DeltaProvider(declared, invalid))


@pytest.mark.parametrize("key", ["sessionId", "runId", "eventId", "type"])
async def test_a_non_string_equal_to_everything_is_refused(key: str) -> None:
    declared = ("run.started", "message.delta", "run.completed")
    with pytest.raises(AgentProviderProtocolError, match="emitted an invalid event"):
        await _run(_DeltaProvider(declared, _delta(**{key: Liar()})))
