"""Runner and validator cases of conformance-cases.md (ported from runAgentProvider.test.ts)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from core.factory import EventFactory
from providers.contract import AGENT_EVENT_PROTOCOL, Capabilities, RunOptions
from providers.runner import AgentProviderProtocolError, run_agent_provider
from providers.signal import AbortSignal
from providers.transports import IterableTransport
from providers.validator import validate_agent_provider_events

EVENT_TYPES = (
    "run.started",
    "message.started",
    "message.delta",
    "message.completed",
    "message.failed",
    "run.completed",
    "run.failed",
)


@dataclasses.dataclass
class FixtureContext:
    events: EventFactory
    message_id: str = "message-1"


@dataclasses.dataclass
class FixtureProvider:
    """The reference's fixture provider, as a plain object (recognised by protocol, not class)."""

    transport: Any
    id: str = "fixture.provider"
    protocol: Mapping[str, str] = dataclasses.field(default_factory=lambda: AGENT_EVENT_PROTOCOL)
    capabilities: Capabilities = dataclasses.field(
        default_factory=lambda: Capabilities(
            event_types=EVENT_TYPES, transports=("async-iterable",)
        )
    )
    start_override: Any = None

    def create_context(self, options: RunOptions) -> FixtureContext:
        return FixtureContext(EventFactory(options.session_id, options.run_id, options.now))

    def start(self, input: Any, ctx: FixtureContext) -> list[dict[str, Any]]:
        if self.start_override is not None:
            return list(self.start_override)
        return [
            ctx.events.create("run.started", {"input": input}),
            ctx.events.create(
                "message.started", {"messageId": ctx.message_id, "role": "assistant"}
            ),
        ]

    async def prepare_request(self, input: Any, ctx: FixtureContext) -> Any:
        return input

    def transform_chunk(self, chunk: Any, ctx: FixtureContext) -> list[dict[str, Any]]:
        return [ctx.events.create("message.delta", {"messageId": ctx.message_id, "delta": chunk})]

    def flush(self, ctx: FixtureContext) -> list[dict[str, Any]]:
        return [
            ctx.events.create("message.completed", {"messageId": ctx.message_id}),
            ctx.events.create("run.completed", {}),
        ]

    def transform_error(self, error: BaseException, ctx: FixtureContext) -> list[dict[str, Any]]:
        agent_error = {"message": str(error) or type(error).__name__}
        return [
            ctx.events.create(
                "message.failed", {"messageId": ctx.message_id, "error": agent_error}
            ),
            ctx.events.create("run.failed", {"error": agent_error}),
        ]


def options(session_id: str = "session-1", run_id: str = "run-1", **kw: Any) -> RunOptions:
    return RunOptions(session_id=session_id, run_id=run_id, signal=AbortSignal(), **kw)


async def collect(provider: Any, input: Any, opts: RunOptions) -> list[dict[str, Any]]:
    emitted: list[dict[str, Any]] = []

    async def on_event(event: dict[str, Any]) -> None:
        emitted.append(event)

    await run_agent_provider(provider, input, opts, on_event)
    return emitted


async def test_happy_path_over_async_transport() -> None:
    def source(request: Any, _signal: AbortSignal) -> AsyncIterator[str]:
        async def gen() -> AsyncIterator[str]:
            yield f"{request} "
            yield "world"

        return gen()

    provider = FixtureProvider(IterableTransport(source))
    emitted = await collect(provider, "hello", options(now=lambda: 1.0))
    assert [e["type"] for e in emitted] == [
        "run.started",
        "message.started",
        "message.delta",
        "message.delta",
        "message.completed",
        "run.completed",
    ]
    assert [e["payload"].get("delta") for e in emitted[2:4]] == ["hello ", "world"]
    assert validate_agent_provider_events(provider.capabilities, emitted) == []


async def test_transport_fails_before_first_chunk() -> None:
    async def failing() -> AsyncIterator[str]:
        raise RuntimeError("offline")
        yield "never"  # pragma: no cover

    provider = FixtureProvider(IterableTransport(failing()))
    emitted = await collect(provider, "hello", options())
    assert [e["type"] for e in emitted] == [
        "run.started",
        "message.started",
        "message.failed",
        "run.failed",
    ]
    assert emitted[-1]["payload"]["error"] == {"message": "offline"}
    assert validate_agent_provider_events(provider.capabilities, emitted) == []


def test_validator_reports_invalid_sequence() -> None:
    provider = FixtureProvider(IterableTransport([]))
    factory = EventFactory("s", "r")
    events = [
        factory.create("run.started", {}, sequence=1),
        factory.create("message.started", {"messageId": "m", "role": "assistant"}, sequence=0),
    ]
    codes = [i["code"] for i in validate_agent_provider_events(provider.capabilities, events)]
    assert {"invalid_sequence", "missing_run_terminal", "invalid_lifecycle"} <= set(codes)
    issue = next(
        i
        for i in validate_agent_provider_events(provider.capabilities, events)
        if i["code"] == "invalid_sequence"
    )
    assert issue["message"] == "Sequence 0 must be greater than 1."


async def test_malformed_payload_and_incompatible_protocol() -> None:
    provider = FixtureProvider(IterableTransport([]))
    malformed = {
        **EventFactory("s", "r").create("message.started", {"messageId": "m", "role": "assistant"}),
        "payload": {},
    }
    issues = validate_agent_provider_events(provider.capabilities, [malformed])
    assert issues[0] == {
        "code": "invalid_event",
        "eventId": "r:0:message.started",
        "message": "Provider emitted an invalid Agent Event envelope or payload.",
    }

    bad = dataclasses.replace(provider, start_override=[malformed])
    with pytest.raises(AgentProviderProtocolError, match="emitted an invalid event"):
        await collect(bad, "hello", options("s", "r"))

    incompatible = dataclasses.replace(provider, protocol={"name": "agent-event", "version": "0.2"})
    with pytest.raises(Exception, match=re.escape('unsupported agent protocol "0.2"')):
        await collect(incompatible, "hello", options("s", "r"))


def test_validator_mixed_violations() -> None:
    provider = FixtureProvider(IterableTransport([]))
    first = EventFactory("s1", "r1")
    second = EventFactory("s2", "r2")
    started = first.create("run.started", {}, event_id="duplicate")
    events = [
        started,
        dict(started),
        second.create("task.created", {"taskId": "task", "title": "Task"}),
        first.create("run.completed", {}),
        first.create("run.failed", {"error": {"message": "late"}}),
    ]
    codes = {i["code"] for i in validate_agent_provider_events(provider.capabilities, events)}
    assert codes >= {
        "duplicate_event_id",
        "inconsistent_run",
        "invalid_lifecycle",
        "invalid_sequence",
        "multiple_run_terminals",
        "undeclared_event_type",
    }


async def test_undeclared_transport_and_consumer_errors() -> None:
    unsupported = FixtureProvider(IterableTransport(["unused"], kind="websocket"))
    with pytest.raises(Exception, match='does not declare transport "websocket"'):
        await collect(unsupported, "hello", options("s", "r"))

    supported = FixtureProvider(IterableTransport(["hello"]))
    consumer_error = RuntimeError("consumer failed")

    async def on_event(_event: dict[str, Any]) -> None:
        raise consumer_error

    text_input: Any = "hello"  # the fixture provider takes any input, as collect() passes it
    with pytest.raises(RuntimeError) as caught:
        await run_agent_provider(supported, text_input, options("s", "r"), on_event)
    assert caught.value is consumer_error


async def test_event_outside_run_and_undeclared_type_are_protocol_errors() -> None:
    provider = FixtureProvider(IterableTransport([]))
    foreign = EventFactory("s", "other").create("run.started", {})
    with pytest.raises(AgentProviderProtocolError, match="outside the active session or run"):
        await collect(
            dataclasses.replace(provider, start_override=[foreign]), "x", options("s", "r")
        )
    undeclared = EventFactory("s", "r").create("task.created", {"taskId": "t", "title": "T"})
    with pytest.raises(
        AgentProviderProtocolError, match=re.escape('undeclared event type "task.created"')
    ):
        await collect(
            dataclasses.replace(provider, start_override=[undeclared]), "x", options("s", "r")
        )
