"""Hypothesis on every network provider's chunk mapping and on the SSE event parser.

Chunks are real recorded upstream streams from the shared fixtures, mutated (dropped,
duplicated, swapped, cut, values replaced with random JSON including integers far beyond 64
bits), or entirely random. Whatever arrives, a run must: raise nothing, end with exactly one run
terminal (its last event), leave no entity open, pass the contract validator, and emit only
events the gateway can serialize (orjson, as the backends do).
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from httpx_sse import ServerSentEvent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.events import RUN_TERMINAL_TYPES
from providers.contract import AgentEvent, AgentProvider
from providers.errors import UpstreamEventTooLarge, UpstreamMalformedChunk
from providers.recorded import parse_sse_text
from providers.recorded_replay import recorded_turns
from providers.registry import create_provider
from providers.testing import make_options, run_collect
from providers.transports import IterableTransport
from providers.transports.sse import SSEParser
from providers.validator import validate_agent_provider_events
from tests.providers.support.helpers import OracleSSEParser
from tests.providers.support.mock_upstreams import responses_every_item_frames
from tests.providers.support.replay_helpers import FIXTURES, final_state

FUZZ = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)
OPEN_STATUSES = frozenset({"streaming", "running", "pending", "waiting", "in_progress"})
ENTITY_MAPS = ("messages", "reasoning", "toolCalls", "approvals", "tasks", "artifacts")


def _fixtures(kind: str, names: list[str]) -> list[list[list[Any]]]:
    return [recorded_turns(FIXTURES / name, kind) for name in names]


RECORDINGS: dict[str, list[str]] = {
    "openai-chat": [
        "openai-chat/openai-text.chunks.txt",
        "openai-chat/deepseek-tool-call.chunks.txt",
        "openai-chat/mistral-reasoning.chunks.txt",
        "openai-chat/groq-tool-call.chunks.txt",
    ],
    "openai-responses": [
        "openai-responses/openai-reasoning-encrypted-content.1.chunks.txt",
        "openai-responses/github-copilot-id-rotation.1.chunks.txt",
        "openai-responses/openai-phase.1.chunks.txt",
        "openai-responses/openai-node-ResponseStream.reasoning.sse",
        "openai-responses/openai-error.1.chunks.txt",
        "openai-responses/openai-client-tool-search.2.chunks.txt",
        "openai-responses/openai-shell-local-multiturn.1.chunks.txt",
        "openai-responses/openai-node-ResponseStream.standard-text.sse",
    ],
    "anthropic-messages": [
        "anthropic/anthropic-text.chunks.txt",
        "anthropic/tool_use_response.txt",
        "anthropic/anthropic-web-search-tool.1.chunks.txt",
        "anthropic/incomplete_partial_json_response.txt",
    ],
    "ag-ui": [
        "ag-ui/ag-ui-validate/valid/agentic-chat.jsonl",
        "ag-ui/ag-ui-validate/valid/human-in-the-loop.jsonl",
        "ag-ui/ag-ui-validate/valid/shared-state.jsonl",
        "ag-ui/ag-ui-validate/valid/backend-tool-rendering.jsonl",
    ],
}


def _native(seq: int, kind: str, payload: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "protocolVersion": "0.1",
        "type": kind,
        "eventId": f"u{seq}",
        "sessionId": "up-s",
        "runId": "up-r",
        "sequence": seq,
        "timestamp": 1.0,
        "payload": payload,
        **extra,
    }


NATIVE_RUN = [
    _native(0, "run.started", {}),
    _native(1, "message.started", {"messageId": "m1", "role": "assistant"}),
    _native(2, "message.delta", {"messageId": "m1", "delta": "hi"}),
    _native(3, "tool.requested", {"toolCallId": "t1", "name": "lookup"}),
    _native(4, "artifact.created", {"artifactId": "a1", "name": "f", "content": {"n": 1}}),
    _native(5, "artifact.completed", {"artifactId": "a1"}),
    _native(6, "tool.completed", {"toolCallId": "t1", "result": [1, 2]}),
    _native(7, "message.completed", {"messageId": "m1"}),
    _native(8, "run.completed", {}, meta={"trace": "x"}),
]


def _as_sse(chunk: Any) -> Any:
    """Dict chunks (AG-UI JSONL recordings) as the SSE events a real transport yields."""
    if isinstance(chunk, dict):
        return ServerSentEvent(data=json.dumps(chunk))
    return chunk


def _turns(kind: str, index: int) -> list[list[Any]]:
    if kind == "agent-event":
        return [[ServerSentEvent(data=json.dumps(event)) for event in NATIVE_RUN]]
    recording = recorded_turns(FIXTURES / RECORDINGS[kind][index], kind)
    return [[_as_sse(chunk) for chunk in turn] for turn in recording]


def _provider(kind: str) -> AgentProvider:
    return create_provider("p", kind, {"url": "http://upstream.invalid/x", "model": "m"})


# -- strategies ---------------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**100), max_value=2**100)
    | st.sampled_from([10**400, -(10**400), 2**64, 2**53 + 1])
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
# (operation, position, extra value)
mutations = st.lists(
    st.tuples(
        st.sampled_from(["drop", "dup", "swap", "cut", "replace", "retype", "garbage", "huge_ts"]),
        st.integers(min_value=0, max_value=10_000),
        json_values,
    ),
    min_size=1,
    max_size=6,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out.extend(_paths(value, (*prefix, key)))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out.extend(_paths(value, (*prefix, i)))
    return out


def _set(node: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    node[path[0]] = _set(node[path[0]], path[1:], value)
    return node


def _mutate_data(data: str, op: str, pick: int, value: Any) -> str:
    try:
        parsed = json.loads(data)
    except ValueError:
        return data[: pick % (len(data) + 1)]
    if op == "cut":
        return data[: pick % (len(data) + 1)]
    if op == "huge_ts" and isinstance(parsed, dict):
        parsed["timestamp"] = 10**400 if pick % 2 else 2**70
        return json.dumps(parsed)
    paths = _paths(parsed)
    path = paths[pick % len(paths)]
    if op == "retype" and isinstance(parsed, dict) and "type" in parsed:
        path = ("type",)
    return json.dumps(_set(parsed, path, value))


def _apply(turns: list[list[Any]], ops: list[tuple[str, int, Any]]) -> list[list[Any]]:
    turns = [list(turn) for turn in turns]
    for op, pick, value in ops:
        turn = turns[pick % len(turns)]
        if not turn:
            continue
        i = pick % len(turn)
        chunk = turn[i]
        if op == "drop":
            del turn[i]
        elif op == "dup":
            turn.insert(i, chunk)
        elif op == "swap":
            j = (pick // 7) % len(turn)
            turn[i], turn[j] = turn[j], turn[i]
        elif op == "garbage":
            turn.insert(i, ServerSentEvent(event="message", data=json.dumps(value)))
        elif isinstance(chunk, ServerSentEvent):
            data = _mutate_data(chunk.data, op, pick, value)
            turn[i] = ServerSentEvent(event=chunk.event, data=data, id=chunk.id)
    return turns


random_chunks = st.lists(
    st.one_of(
        st.builds(
            lambda event, data: ServerSentEvent(event=event, data=data),
            st.sampled_from(
                [
                    "message",
                    "error",
                    "ping",
                    "message_start",
                    "content_block_delta",
                    "response.output_item.added",
                    "response.output_text.delta",
                ]
            ),
            st.text(max_size=40),
        ),
        st.builds(lambda v: ServerSentEvent(data=json.dumps(v)), json_values),
    ),
    max_size=12,
)


# -- the property -------------------------------------------------------------------------------


async def _run(kind: str, turns: list[list[Any]]) -> list[AgentEvent]:
    provider = _provider(kind)
    remaining = [list(turn) for turn in turns]

    def source(_request: Any, _signal: Any) -> list[Any]:
        return remaining.pop(0) if remaining else []

    provider.transport = IterableTransport(source, kind=provider.transport.kind)
    options = make_options(wait_timeout_seconds=0.02)
    return await run_collect(provider, {"prompt": "hello"}, options=options)


def _check_run(kind: str, events: list[AgentEvent]) -> None:
    terminals = [e for e in events if e["type"] in RUN_TERMINAL_TYPES]
    assert len(terminals) == 1, [e["type"] for e in events]
    assert events[-1] is terminals[0]
    error = terminals[0]["payload"].get("error") or {}
    assert error.get("code") != "provider_error", error  # the provider raised: a bug
    for event in events:
        orjson.dumps(event)  # what the backends do with every event: never raises
    state = final_state(events)
    for name in ENTITY_MAPS:
        for entity in state.get(name, {}).values():
            assert entity.get("status") not in OPEN_STATUSES, (name, entity)
    issues = validate_agent_provider_events(_provider(kind).capabilities, events)
    assert issues == [], issues


KINDS = ["openai-chat", "openai-responses", "anthropic-messages", "ag-ui", "agent-event"]


@pytest.mark.parametrize("kind", KINDS)
async def test_recordings_replay_cleanly(kind: str) -> None:
    for index in range(len(RECORDINGS.get(kind, [None]))):
        _check_run(kind, await _run(kind, _turns(kind, index)))


@pytest.mark.parametrize("kind", KINDS)
@FUZZ
@given(data=st.data(), ops=mutations)
async def test_mutated_recordings(kind: str, data: st.DataObject, ops: Any) -> None:
    index = data.draw(st.integers(0, len(RECORDINGS.get(kind, [None])) - 1))
    _check_run(kind, await _run(kind, _apply(_turns(kind, index), ops)))


@pytest.mark.parametrize("kind", KINDS)
@FUZZ
@given(chunks=random_chunks)
async def test_random_chunks(kind: str, chunks: list[Any]) -> None:
    _check_run(kind, await _run(kind, [chunks]))


@FUZZ
@given(ops=mutations)
async def test_mutated_responses_stream_with_every_item_kind(ops: Any) -> None:
    turns = [parse_sse_text("".join(responses_every_item_frames()))]
    _check_run("openai-responses", await _run("openai-responses", _apply(turns, ops)))


# -- the SSE event parser -----------------------------------------------------------------------


def _parse(pieces: list[str], limit: int) -> list[tuple[str, str, str]] | str:
    parser = SSEParser(limit)
    out = []
    try:
        for piece in pieces:
            out.extend(parser.feed(piece))
        out.extend(parser.close())
    except UpstreamEventTooLarge:
        return "too-large"
    except UpstreamMalformedChunk:
        return "malformed"
    return [(e.event, e.data, e.id) for e in out]


sse_text = st.lists(
    st.one_of(
        st.sampled_from(["data: ", "data:", "event: x\n", "id: 7\n", "retry: 5\n", ": c\n"]),
        st.sampled_from(["\n", "\r\n", "\r", "\n\n", "\r\n\r\n"]),
        st.text(max_size=30),
    ),
    max_size=30,
).map("".join)


@FUZZ
@given(text=sse_text, cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=8))
def test_sse_parser_is_chunking_invariant_and_bounded(text: str, cuts: list[int]) -> None:
    bounds = sorted({c % (len(text) + 1) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *bounds], [*bounds, len(text)], strict=True)]
    whole = _parse([text], 64)
    split = _parse(pieces, 64)
    if whole != "too-large" and split != "too-large":
        assert whole == split
    if isinstance(whole, list):
        for _event, data, _id in whole:
            assert len(data) <= 64 * 2 + 2  # bounded by the limit (data lines of one event)


def _parse_with(parser: Any, pieces: list[str]) -> list[tuple[Any, ...]] | str:
    out = []
    try:
        for piece in pieces:
            out.extend(parser.feed(piece))
        out.extend(parser.close())
    except (UpstreamEventTooLarge, OverflowError):
        return "too-large"
    except (UpstreamMalformedChunk, ValueError):
        return "malformed"
    return [(e.event, e.data, e.id, e.retry) for e in out]


sse_lines = st.lists(
    st.one_of(
        st.sampled_from(
            ["data: ", "data:", "data", "event: x\n", "event:", "id: 7\n", "id: a\x00b\n",
             "id:\n", "retry: 5\n", "retry: x\n", ": c\n", ":", "other: v\n", " data: x"]
        ),
        st.sampled_from(["\n", "\r\n", "\r", "\n\n", "\r\n\r\n", "\r\r"]),
        st.text(alphabet="ab :\r\n\x00", max_size=20),
    ),
    max_size=40,
).map("".join)  # fmt: skip


@settings(max_examples=400, deadline=None, database=None)
@given(
    text=sse_lines,
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=10),
    limit=st.sampled_from([8, 64, 4096]),
    strict=st.booleans(),
)
def test_sse_parser_matches_httpx_sse_decoders(
    text: str, cuts: list[int], limit: int, strict: bool
) -> None:
    bounds = sorted({c % (len(text) + 1) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *bounds], [*bounds, len(text)], strict=True)]
    pieces = [p for p in pieces if p]  # httpx never hands the parser an empty piece
    assert _parse_with(SSEParser(limit, strict_fields=strict), pieces) == _parse_with(
        OracleSSEParser(limit, strict_fields=strict), pieces
    )


def test_sse_parser_refuses_a_line_without_end() -> None:
    parser = SSEParser(1024)
    with pytest.raises(UpstreamEventTooLarge):
        for _ in range(100):
            parser.feed("x" * 64)


async def test_huge_timestamps_from_a_native_upstream() -> None:
    """A timestamp beyond double range is a malformed chunk; 2**70 is a finite float."""
    for ts, ok in ((10**400, False), (2**70, True)):
        events = [dict(e) for e in NATIVE_RUN]
        events[2] = {**events[2], "timestamp": ts}
        turns = [[ServerSentEvent(data=json.dumps(e)) for e in events]]
        result = await _run("agent-event", turns)
        _check_run("agent-event", result)
        assert (result[-1]["type"] == "run.completed") is ok, result[-1]
