"""The runner's batch consumer (``on_events``): one hand-over per upstream read, and exactly the
events, extensions, order and errors of the per-event consumer (``on_event``)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.factory import EventFactory
from providers.contract import AGENT_EVENT_PROTOCOL, AgentTransport, Capabilities, RunOptions
from providers.errors import AbortError, ProviderError
from providers.runner import AgentProviderProtocolError, run_agent_provider
from providers.signal import AbortSignal

EVENT_TYPES = (
    "run.started",
    "message.started",
    "message.delta",
    "message.completed",
    "message.failed",
    "run.completed",
    "run.failed",
    "run.cancelled",
)

#: What one upstream chunk makes the provider do.
OPS = ("delta", "two", "none", "ext", "invalid", "foreign", "undeclared", "boom")


@dataclasses.dataclass
class Ctx:
    events: EventFactory
    extensions: list[tuple[str, Any]] = dataclasses.field(default_factory=list)

    def take_extensions(self) -> list[tuple[str, Any]]:
        out, self.extensions = self.extensions, []
        return out


class BatchTransport:
    """Hands the runner the chunks of each "read" as one list (like ``SSETransport``)."""

    kind = "async-iterable"

    def __init__(self, reads: list[list[str]]) -> None:
        self.reads = reads
        self.reads_taken = 0

    async def aclose(self) -> None:
        return None

    async def open_batches(self, request: Any, signal: AbortSignal) -> AsyncIterator[list[str]]:
        for read in self.reads:
            self.reads_taken += 1
            yield read

    async def open(self, request: Any, signal: AbortSignal) -> AsyncIterator[str]:
        """The transport contract's chunk by chunk reading (the runner takes the batches)."""
        async for read in self.open_batches(request, signal):
            for chunk in read:
                yield chunk


@dataclasses.dataclass
class ScriptedProvider:
    transport: AgentTransport
    id: str = "scripted"
    protocol: Mapping[str, str] = dataclasses.field(default_factory=lambda: AGENT_EVENT_PROTOCOL)
    capabilities: Capabilities = dataclasses.field(
        default_factory=lambda: Capabilities(
            event_types=EVENT_TYPES, transports=("async-iterable",)
        )
    )

    def create_context(self, options: RunOptions) -> Ctx:
        return Ctx(EventFactory(options.session_id, options.run_id, lambda: 1.0))

    def start(self, input: Any, ctx: Ctx) -> list[dict[str, Any]]:
        return [
            ctx.events.create("run.started", {}),
            ctx.events.create("message.started", {"messageId": "m", "role": "assistant"}),
        ]

    async def prepare_request(self, input: Any, ctx: Ctx) -> Any:
        return input

    def _delta(self, ctx: Ctx, text: str) -> dict[str, Any]:
        return ctx.events.create("message.delta", {"messageId": "m", "delta": text})

    def transform_chunk(self, chunk: str, ctx: Ctx) -> list[dict[str, Any]]:
        op, _, n = chunk.partition(":")
        if op == "delta":
            return [self._delta(ctx, n)]
        if op == "two":
            return [self._delta(ctx, n + "a"), self._delta(ctx, n + "b")]
        if op == "none":
            return []
        if op == "ext":
            ctx.extensions.append(("x.ext", n))
            return [self._delta(ctx, n)]
        if op == "invalid":
            return [self._delta(ctx, n), {**self._delta(ctx, n), "sequence": -1}]
        if op == "foreign":
            return [{**self._delta(ctx, n), "runId": "another"}]
        if op == "undeclared":
            return [ctx.events.create("tool.running", {"toolCallId": "t"})]
        raise ProviderError(f"boom {n}")

    def flush(self, ctx: Ctx) -> list[dict[str, Any]]:
        return [
            ctx.events.create("message.completed", {"messageId": "m"}),
            ctx.events.create("run.completed", {}),
        ]

    def transform_error(self, error: BaseException, ctx: Ctx) -> list[dict[str, Any]]:
        failure = {"code": "provider_error", "message": str(error)}
        if isinstance(error, AbortError):
            return [
                ctx.events.create("message.failed", {"messageId": "m", "error": failure}),
                ctx.events.create("run.cancelled", {"reason": "aborted"}),
            ]
        return [
            ctx.events.create("message.failed", {"messageId": "m", "error": failure}),
            ctx.events.create("run.failed", {"error": failure}),
        ]


Trace = list[tuple[str, Any]]


async def run_traced(
    reads: list[list[str]], *, batched: bool, stop_after: int | None = None
) -> tuple[Trace, list[int], BatchTransport]:
    """Run the script; the trace of what the consumer saw (ending with the outcome) and the
    sizes of the batches handed over. ``stop_after``: the consumer aborts the run once it has
    seen that many events."""
    trace: Trace = []
    batches: list[int] = []
    signal = AbortSignal()
    seen = 0

    def see(event: dict[str, Any]) -> None:
        nonlocal seen
        trace.append(("event", (event["type"], event["payload"].get("delta"))))
        seen += 1
        if stop_after is not None and seen >= stop_after:
            signal.abort("aborted")

    async def on_event(event: dict[str, Any]) -> None:
        see(event)

    async def on_events(events: list[dict[str, Any]]) -> None:
        assert events, "never an empty batch"
        batches.append(len(events))
        for event in events:
            see(event)

    async def on_extension(key: str, value: Any) -> None:
        trace.append(("extension", (key, value)))

    transport = BatchTransport(reads)
    provider = ScriptedProvider(transport)
    options = RunOptions(
        session_id="s", run_id="r", signal=signal, on_extension=on_extension, now=lambda: 1.0
    )
    try:
        if batched:
            await run_agent_provider(provider, {}, options, None, on_events=on_events)
        else:
            await run_agent_provider(provider, {}, options, on_event)
        trace.append(("outcome", None))
    except AgentProviderProtocolError as error:
        trace.append(("outcome", str(error)))
    return trace, batches, transport


def _script(reads: list[list[str]]) -> list[list[str]]:
    return [[f"{op}:{i}.{j}" for j, op in enumerate(read)] for i, read in enumerate(reads)]


@settings(deadline=None, max_examples=150)
@given(st.lists(st.lists(st.sampled_from(OPS), min_size=1, max_size=6), min_size=0, max_size=6))
async def test_batches_see_what_one_event_at_a_time_sees(ops: list[list[str]]) -> None:
    reads = _script(ops)
    one, _, _ = await run_traced(reads, batched=False)
    batched, sizes, _ = await run_traced(reads, batched=True)
    assert batched == one
    assert sum(sizes) == sum(1 for kind, _ in one if kind == "event")


async def test_one_hand_over_per_upstream_read() -> None:
    reads = _script([["delta"] * 16, ["two"] * 3, ["none", "delta"], ["none"]])
    trace, sizes, _ = await run_traced(reads, batched=True)
    # start, one per read (none for a read that made no event), flush
    assert sizes == [2, 16, 6, 1, 2]
    assert trace[-1] == ("outcome", None)


async def test_an_invalid_event_is_still_caught_after_what_passed_before_it() -> None:
    reads = _script([["delta", "delta", "invalid", "delta"], ["delta"]])
    trace, _, transport = await run_traced(reads, batched=True)
    deltas = [v for kind, v in trace if kind == "event" and v[0] == "message.delta"]
    # the two deltas before, and the valid first event of the "invalid" chunk; nothing after
    assert [d for _, d in deltas] == ["0.0", "0.1", "0.2"]
    assert trace[-1] == ("outcome", 'Provider "scripted" emitted an invalid event.')
    assert transport.reads_taken == 1


async def test_an_extension_comes_after_the_events_before_it_and_before_the_rest() -> None:
    reads = _script([["delta", "ext", "delta"]])
    trace, sizes, _ = await run_traced(reads, batched=True)
    kinds = [(kind, v[1] if kind == "event" else v) for kind, v in trace[2:6]]
    assert kinds == [
        ("event", "0.0"),
        ("event", "0.1"),
        ("extension", ("x.ext", "0.1")),
        ("event", "0.2"),
    ]
    assert sizes[:3] == [2, 2, 1]


async def test_a_consumer_abort_ends_the_run_after_that_read() -> None:
    reads = _script([["delta"] * 4, ["delta"] * 4, ["delta"] * 4])
    trace, _, transport = await run_traced(reads, batched=True, stop_after=4)
    types = [v[0] for kind, v in trace if kind == "event"]
    assert types[-1] == "run.cancelled"
    assert types.count("message.delta") == 4  # the first read's: no later read is processed
    assert transport.reads_taken == 1


@pytest.mark.parametrize(
    ("on_event", "on_events"), [(None, None), ("both", "both")], ids=["none", "both"]
)
async def test_exactly_one_consumer(on_event: Any, on_events: Any) -> None:
    async def consume(_: Any) -> None:
        return None

    provider = ScriptedProvider(BatchTransport([]))
    options = RunOptions(session_id="s", run_id="r", signal=AbortSignal())
    with pytest.raises(ValueError, match="exactly one"):
        await run_agent_provider(
            provider,
            {},
            options,
            consume if on_event else None,
            on_events=consume if on_events else None,
        )
