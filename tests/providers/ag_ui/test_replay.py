"""Replay every recorded AG-UI stream in ``fixtures/ag-ui/`` through the ``ag-ui`` provider.

How each kind of file is replayed (fixtures README):
- ``ag-ui-validate/valid/*.jsonl`` are complete runs: zero contract issues, texts, tools and
  arguments asserted. ``human-in-the-loop`` holds two upstream runs (interrupt, then resume):
  it is split at the second RUN_STARTED and replayed as the two upstream requests of ONE
  gateway run, the interrupt approved in between. ``tool-based-generative-ui`` calls a frontend
  tool: the result is submitted and a synthetic closing upstream run answers the continuation.
- ``ag-ui-validate/invalid/*``: each ends with ``run.failed`` ``upstream_protocol_error`` when
  its rule is an error, or is accepted (``run.completed``) when it is a warning or info; the
  ``scenario.json`` transport cases are served as their SSE text by a loopback upstream and
  read by the real SSE transport (AGUI501, a line without an SSE field, fails the run: the
  ag-ui provider reads SSE with strict field checking).
- Dart ``sse_streams.txt``: each ``##`` section is an SSE stream; complete runs replayed as
  they are, run-less fragments wrapped in a synthetic RUN_STARTED/RUN_FINISHED, and the
  "Malformed Examples" section parsed event by event (each event must be rejected).
- Dart ``events.json``: each named sequence is a run (``multiple_runs`` = two gateway runs);
  ``error_handling`` ends with ``run.failed`` ``upstream_error`` from its RUN_ERROR.
- .NET ``Compatibility/Fixtures/*.json``: ``activity-events`` and ``custom-and-raw-events`` are
  wrapped in a synthetic run; the others reuse ids or mix run lifecycles on purpose, so they are
  parsed event by event (normalizer + SDK models, unknown fields kept).
- ``sdks/fixtures/null-omission.json``: each ``input`` parsed and re-serialized to ``expected``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from providers.ag_ui import AguiNormalizer, AguiProvider, decode_agui_chunk, parse_agui_event
from providers.contract import AgentEvent
from providers.errors import UpstreamProtocolError
from providers.history import replay_events
from providers.recorded import load_jsonl_objects, parse_sse_text
from providers.testing import make_options, run_collect
from providers.transports import IterableTransport
from providers.validator import validate_agent_provider_events
from tests.providers.support.mock_upstreams import serve_mock
from tests.providers.support.replay_cases import (
    DART,
    DOTNET,
    DOTNET_EVENT_BY_EVENT,
    DOTNET_WRAPPED,
    RUN_FINISHED,
    RUN_STARTED,
    SDKS,
    VALID,
    VALIDATE,
    rule_dirs,
)
from tests.providers.support.replay_helpers import (
    assistant_texts,
    reasoning_texts,
    terminal,
    tool_calls,
)


def split_runs(events: list[Any]) -> list[list[Any]]:
    """Split at each RUN_STARTED that follows a run terminal (one list per upstream run)."""
    turns: list[list[Any]] = [[]]
    for event in events:
        if event.get("type") == "RUN_STARTED" and turns[-1]:
            turns.append([])
        turns[-1].append(event)
    return turns


async def replay(
    turns: list[list[Any]],
    *,
    tools: list[dict[str, Any]] = (),  # type: ignore[assignment]
    commands: list[Any] = (),  # type: ignore[assignment]
    kind: str = "sse",
) -> list[AgentEvent]:
    provider = AguiProvider()
    remaining = [list(turn) for turn in turns]
    provider.transport = IterableTransport(
        lambda _request, _signal: remaining.pop(0) if remaining else [], kind=kind
    )
    events = await run_collect(
        provider,
        {"prompt": "hi", "tools": list(tools)},
        options=make_options(wait_timeout_seconds=5),
        commands=commands,
    )
    assert validate_agent_provider_events(provider.capabilities, events) == []
    return events


def failure(events: list[AgentEvent]) -> dict[str, Any]:
    done = terminal(events)
    assert done["type"] == "run.failed", [e["type"] for e in events]
    error: dict[str, Any] = done["payload"]["error"]
    return error


# ---------------------------------------------------------------- ag-ui-validate/valid


@pytest.mark.parametrize("name", sorted(VALID))
async def test_valid_streams(name: str) -> None:
    case = VALID[name]
    events_in = load_jsonl_objects((VALIDATE / "valid" / name).read_text())
    turns = split_runs(events_in) + case.get("extra_turns", [])
    extensions: list[tuple[str, Any]] = []
    events = await replay(
        turns, tools=case.get("input_tools", []), commands=case.get("commands", [])
    )
    assert terminal(events)["type"] == "run.completed"
    assert [e["type"] for e in events].count("run.started") == 1
    if "texts" in case:
        assert assistant_texts(events) == case["texts"]
    assert [(n, a, s) for n, a, s in tool_calls(events)] == case.get("tools", [])
    if "reasoning" in case:
        assert reasoning_texts(events) == case["reasoning"]
    if "tasks" in case:
        created = [e["payload"]["title"] for e in events if e["type"] == "task.created"]
        assert created == case["tasks"]
        assert sum(e["type"] == "task.completed" for e in events) == len(case["tasks"])
    del extensions


async def _extensions_of(turns: list[list[Any]]) -> list[tuple[str, Any]]:
    provider = AguiProvider()
    remaining = [list(turn) for turn in turns]
    provider.transport = IterableTransport(
        lambda _r, _s: remaining.pop(0) if remaining else [], kind="sse"
    )
    seen: list[tuple[str, Any]] = []

    async def on_extension(key: str, value: Any) -> None:
        seen.append((key, value))

    options = make_options(wait_timeout_seconds=5, on_extension=on_extension)
    await run_collect(provider, {"prompt": "hi"}, options=options)
    return seen


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "shared-state.jsonl",
            {"recipe": {"title": "Garlic Pasta", "ingredients": ["tomato", "garlic"]}},
        ),
        ("predictive-state-updates.jsonl", {"document": "Hello world."}),
        (
            "agentic-generative-ui.jsonl",
            {"steps": [{"name": "plan", "status": "done"}, {"name": "execute", "status": "done"}]},
        ),
    ],
)
async def test_shared_state_after_snapshots_and_patches(name: str, expected: Any) -> None:
    events_in = load_jsonl_objects((VALIDATE / "valid" / name).read_text())
    seen = await _extensions_of([events_in])
    states = [value for key, value in seen if key == "agui.state"]
    assert states[-1] == expected


async def test_custom_and_raw_are_kept_as_extension() -> None:
    events_in = load_jsonl_objects(
        (VALIDATE / "valid" / "backend-tool-rendering.jsonl").read_text()
    )
    seen = await _extensions_of([events_in])
    custom = [value for key, value in seen if key == "agui.custom"]
    assert custom == [
        {
            "type": "RAW",
            "timestamp": 1755300002400,
            "event": {"kind": "langgraph_checkpoint", "checkpoint_id": "ckpt_42"},
            "source": "langgraph",
        }
    ]


# ---------------------------------------------------------------- ag-ui-validate/invalid


def _stream_lines(case: Path) -> list[str]:
    # one raw payload per line (AGUI502's line is not JSON: keep it as the data string)
    return [line for line in (case / "stream.jsonl").read_text().splitlines() if line.strip()]


async def _scenario_over_sse(case: Path) -> list[AgentEvent]:
    """A transport scenario served as its SSE text by a loopback upstream (real SSE transport)."""
    scenario = json.loads((case / "scenario.json").read_text())
    frames = [chunk["text"] for chunk in scenario["chunks"]]
    async with serve_mock([frames]) as mock:
        provider = AguiProvider(url=mock.url)
        events = await run_collect(
            provider, {"prompt": "hi"}, options=make_options(wait_timeout_seconds=5)
        )
    assert validate_agent_provider_events(provider.capabilities, events) == []
    return events


@pytest.mark.parametrize("case", rule_dirs(), ids=lambda p: p.name)
async def test_invalid_streams(case: Path) -> None:
    rule = case.name.split("-")[0]
    expected = json.loads((case / "expected.json").read_text())
    is_error = any(d["rule"] == rule and d["severity"] == "error" for d in expected)
    if (case / "stream.jsonl").exists():
        events = await replay([_stream_lines(case)])
    else:
        events = await _scenario_over_sse(case)
    if is_error:
        error = failure(events)
        assert error["code"] == "upstream_protocol_error"
        rules = {"AGUI303": "AGUI504", "AGUI508": "AGUI003"}  # reported by the schema / at EOF
        assert error["details"]["rule"] == rules.get(rule, rule)
    else:
        assert terminal(events)["type"] == "run.completed", rule


# ---------------------------------------------------------------- Dart sse_streams.txt


def dart_sections() -> dict[str, str]:
    text = (DART / "sse_streams.txt").read_text()
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def _wrap(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if events and events[0].get("type") == "RUN_STARTED":
        return events
    return [RUN_STARTED, *events, RUN_FINISHED]


DART_SSE: dict[str, dict[str, list[Any]]] = {
    "Simple Text Message Stream": {"texts": ["Hello, how can I help you today?"]},
    "Tool Call Stream": {"tools": [("search", {"query": "AG-UI"}, "failed")]},
    "Heartbeat and Comments": {"texts": ["Test"]},
    "Multi-line Data Fields": {"texts": []},  # a lone STATE_SNAPSHOT: wrapped
    "With Event IDs and Retry": {"texts": ["Message with ID"]},  # wrapped
    "Empty Lines and Spacing": {"texts": []},
    "Unicode and Special Characters": {
        "texts": ['Hello 你好 🌟 €Special: "quotes", \\backslash\\, \ttab']
    },
}


@pytest.mark.parametrize("section", sorted(DART_SSE))
async def test_dart_sse_sections(section: str) -> None:
    chunks = parse_sse_text(dart_sections()[section])
    events_in = [orjson.loads(chunk.data) for chunk in chunks]
    events = await replay([_wrap(events_in)])
    assert terminal(events)["type"] == "run.completed"
    case = DART_SSE[section]
    assert assistant_texts(events) == case.get("texts", [])
    assert tool_calls(events) == case.get("tools", [])


def test_dart_malformed_section_rejected_event_by_event() -> None:
    chunks = parse_sse_text(dart_sections()["Malformed Examples"])
    assert len(chunks) == 5
    for chunk in chunks:
        if not chunk.data.strip():
            assert decode_agui_chunk(chunk) is None  # an empty data line carries nothing
            continue
        with pytest.raises((UpstreamProtocolError, orjson.JSONDecodeError)):
            raw = orjson.loads(chunk.data)
            parse_agui_event(raw)


# ---------------------------------------------------------------- Dart events.json

DART_EVENTS = json.loads((DART / "events.json").read_text())


@pytest.mark.parametrize("name", sorted(DART_EVENTS))
async def test_dart_event_sequences(name: str) -> None:
    runs = split_runs(DART_EVENTS[name])
    for events_in in runs:
        events = await replay([events_in])
        if name == "error_handling":
            error = failure(events)
            assert error["code"] == "upstream_error"
            assert error["details"] == {"code": "TIMEOUT"}
            assert assistant_texts(events) == ["Processing..."]
            continue
        assert terminal(events)["type"] == "run.completed", name
    if name == "multiple_runs":
        assert len(runs) == 2
    if name in ("thinking_events", "thinking_text_message_legacy", "reasoning_events"):
        expected = {
            "thinking_events": ["Let me think about this... The user is asking about..."],
            "thinking_text_message_legacy": ["Let me think..."],
            "reasoning_events": ["Analyzing the request... considering options."],
        }[name]
        assert reasoning_texts(events) == expected
    if name == "concurrent_messages":
        state = replay_events(events)
        contents = {m["role"]: m["content"] for m in state["messages"].values()}
        assert contents == {
            "user": "hi",
            "assistant": "First message",
            "system": "System message continues...",
        }
    if name == "messages_snapshot_activity_reasoning":
        seen = await _extensions_of([DART_EVENTS[name]])
        (messages,) = [value for key, value in seen if key == "agui.messages"]
        assert [m["role"] for m in messages] == ["user", "activity", "reasoning", "assistant"]
    if name == "text_message_chunk":
        assert assistant_texts(events) == ["Complete message in a single chunk"]


# ---------------------------------------------------------------- .NET per-category fixtures


@pytest.mark.parametrize("name", DOTNET_WRAPPED)
async def test_dotnet_fragments_wrapped(name: str) -> None:
    events_in = json.loads((DOTNET / name).read_text())
    seen = await _extensions_of([_wrap(events_in)])
    keys = [key for key, _ in seen]
    if name == "activity-events.json":
        assert seen[-1] == (
            "agui.activity",
            {"msg_activity": {"activityType": "PLAN", "content": {"tasks": ["✓ search"]}}},
        )
    else:
        assert keys == ["agui.custom"] * 4


@pytest.mark.parametrize("name", DOTNET_EVENT_BY_EVENT)
def test_dotnet_fragments_event_by_event(name: str) -> None:
    events_in = json.loads((DOTNET / name).read_text())
    normalizer = AguiNormalizer()
    parsed = [parse_agui_event(wire) for raw in events_in for wire in normalizer.feed(raw)]
    assert [p.type.value for p in parsed] == [e["type"] for e in events_in]
    if name == "forward-compatibility.json":
        assert parsed[0].model_dump(by_alias=True)["futureField"] == "should be ignored"


def test_null_omission_cases_parse_to_expected() -> None:
    cases = json.loads((SDKS / "fixtures" / "null-omission.json").read_text())["stream"]
    assert cases
    for case in cases:
        event = parse_agui_event(case["input"])
        assert event.model_dump(mode="json", by_alias=True) == case["expected"], case["name"]


def test_predictive_state_expected_diagnostic_is_info_only() -> None:
    expected = json.loads(
        (VALIDATE / "valid" / "predictive-state-updates.expected.json").read_text()
    )
    assert {d["severity"] for d in expected} == {"info"}
