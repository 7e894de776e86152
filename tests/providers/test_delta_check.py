"""``is_plain_delta``: the runner's short check accepts only what its full checks accept."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.events import validate_event
from core.factory import EventFactory
from providers.contract import AGENT_EVENT_PROTOCOL, Capabilities, RunOptions
from providers.delta_check import DELTA_ID_FIELDS, is_plain_delta, is_run_id
from providers.runner import AgentProviderProtocolError, run_agent_provider
from providers.signal import AbortSignal
from providers.transports import IterableTransport
from tests.core.strategies import ENVELOPE_KEYS

SESSION, RUN = "ses", "run"


class Str(str):
    """A str subclass: equal to the run's ids, yet not of type ``str``."""


class Liar:
    """Not a string, yet equal to everything."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__


def _delta(kind: str = "message.delta", **changes: Any) -> dict[str, Any]:
    event = EventFactory(SESSION, RUN, lambda: 1000.5).create(
        kind, {DELTA_ID_FIELDS[kind]: "m", "delta": "hi"}
    )
    event.update(changes)
    return event


ODD_VALUES = st.sampled_from(
    [
        None,
        "",
        "x",
        Str("ses"),
        Str("run"),
        Liar(),
        SESSION,
        RUN,
        "0.1",
        "message.delta",
        "reasoning.delta",
        "tool.arguments_delta",
        "message.started",
        0,
        -1,
        True,
        2**53 - 1,
        2**53,
        1.0,
        math.inf,
        -math.inf,
        math.nan,
        1e308,
        [],
        {},
        {"messageId": "m", "delta": "d"},
        {"messageId": "", "delta": "d"},
        {"messageId": "m", "delta": 3},
        {"messageId": "m", "delta": [{"type": "text", "text": "x"}]},
        {"reasoningId": "r", "delta": "d"},
        {"toolCallId": "t", "delta": ""},
        {"messageId": "m", "delta": "d", "x": 1},
    ]
)
KEYS = st.sampled_from(ENVELOPE_KEYS)


@settings(max_examples=600, deadline=None)
@given(
    kind=st.sampled_from(sorted(DELTA_ID_FIELDS)),
    changes=st.dictionaries(KEYS, ODD_VALUES, max_size=3),
    drop=st.lists(KEYS, max_size=2),
)
def test_an_accepted_event_passes_every_full_check(
    kind: str, changes: dict[str, Any], drop: list[str]
) -> None:
    event = _delta(kind, **changes)
    for key in drop:
        event.pop(key, None)
    if is_plain_delta(event, SESSION, RUN):
        assert validate_event(event) is None
        assert type(event["sessionId"]) is str and event["sessionId"] == SESSION
        assert type(event["runId"]) is str and event["runId"] == RUN


@pytest.mark.parametrize("kind", sorted(DELTA_ID_FIELDS))
def test_the_factorys_deltas_take_the_short_check(kind: str) -> None:
    event = _delta(kind)
    assert is_plain_delta(event, SESSION, RUN)
    assert not is_plain_delta({**event, "meta": {"a": 1}}, SESSION, RUN)  # full checks instead
    assert not is_plain_delta(event, SESSION, "other")
    assert not is_plain_delta({**event, "timestamp": 1000}, SESSION, RUN)  # int: full checks
    assert not is_plain_delta({**event, "type": ["unhashable"]}, SESSION, RUN)


@pytest.mark.parametrize("key", ["sessionId", "runId", "eventId", "type"])
def test_a_non_string_equal_to_everything_takes_the_full_checks(key: str) -> None:
    event = _delta(**{key: Liar()})
    assert validate_event(event) is not None
    assert not is_plain_delta(event, SESSION, RUN)


def test_run_ids() -> None:
    assert is_run_id("r")
    assert not is_run_id("")
    assert not is_run_id(Str("r"))
    assert not is_run_id(None)


class _DeltaProvider:
    """Emits ``run.started`` and one ``reasoning.delta`` per chunk, declaring only ``declared``."""

    id = "deltas"
    protocol = AGENT_EVENT_PROTOCOL

    def __init__(self, declared: tuple[str, ...], event: dict[str, Any] | None = None) -> None:
        self.capabilities = Capabilities(event_types=declared, transports=("async-iterable",))
        self.transport = IterableTransport(lambda _r, _s: ["c"])
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
