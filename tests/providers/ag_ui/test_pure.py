"""Pure parts of the AG-UI provider: JSON Patch, legacy renames, chunk expansion, parsing."""

from __future__ import annotations

from typing import Any

import pytest
from ag_ui.core import RunFinishedEvent, TextMessageStartEvent
from hypothesis import given, settings
from hypothesis import strategies as st

from providers.ag_ui.json_patch import JsonPatchError, apply_patch
from providers.ag_ui.normalize import AguiNormalizer, parse_agui_event
from providers.errors import UpstreamProtocolError


def test_patch_all_operations() -> None:
    doc: dict[str, Any] = {
        "recipe": {"title": "Pasta", "ingredients": ["tomato"]},
        "old": 1,
        "tpl": {"a": 1},
    }
    patched = apply_patch(
        doc,
        [
            {"op": "add", "path": "/recipe/ingredients/-", "value": "garlic"},
            {"op": "test", "path": "/recipe/title", "value": "Pasta"},
            {"op": "replace", "path": "/recipe/title", "value": "Garlic Pasta"},
            {"op": "move", "from": "/old", "path": "/new"},
            {"op": "copy", "from": "/tpl", "path": "/recipe/tpl"},
            {"op": "remove", "path": "/tpl"},
            {"op": "add", "path": "/recipe/ingredients/0", "value": "salt"},
            {"op": "add", "path": "/a~1b", "value": True},
        ],
    )
    assert patched == {
        "recipe": {
            "title": "Garlic Pasta",
            "ingredients": ["salt", "tomato", "garlic"],
            "tpl": {"a": 1},
        },
        "new": 1,
        "a/b": True,
    }
    assert doc["recipe"]["ingredients"] == ["tomato"]  # never mutated


@pytest.mark.parametrize(
    ("doc", "patch", "fragment"),
    [
        ({"items": []}, [{"op": "replace", "path": "/items/3", "value": 1}], "out of range"),
        ({}, [{"op": "merge", "path": "/a", "value": 1}], "invalid op"),
        ({"a": 1}, [{"op": "test", "path": "/a", "value": 2}], "test failed"),
        ({}, [{"op": "remove", "path": "/missing"}], "does not exist"),
        ({}, [{"op": "add", "path": "/a"}], "missing 'value'"),
        ({"a": {}}, [{"op": "move", "from": "/a", "path": "/a/b"}], "children"),
    ],
)
def test_patch_errors(doc: object, patch: list[dict[str, object]], fragment: str) -> None:
    with pytest.raises(JsonPatchError, match=fragment):
        apply_patch(doc, patch)


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(st.text(alphabet="abc", min_size=1, max_size=3), st.integers(), max_size=5))
def test_patch_add_then_remove_round_trips(doc: dict[str, int]) -> None:
    added = apply_patch(doc, [{"op": "add", "path": "/zz~0", "value": [1]}])
    assert added["zz~"] == [1]
    assert apply_patch(added, [{"op": "remove", "path": "/zz~0"}]) == doc


def test_legacy_thinking_renamed_with_generated_ids() -> None:
    norm = AguiNormalizer()
    out = []
    for raw in [
        {"type": "THINKING_START", "title": "Analyzing"},
        {"type": "THINKING_CONTENT", "delta": "Let me think"},
        {"type": "THINKING_END"},
        {"type": "THINKING_TEXT_MESSAGE_START"},
        {"type": "THINKING_TEXT_MESSAGE_CONTENT", "delta": "more"},
        {"type": "THINKING_TEXT_MESSAGE_END"},
    ]:
        out += norm.feed(raw)
    types = [e["type"] for e in out]
    assert types == [
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "REASONING_END",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
    ]
    assert "title" not in out[0]
    assert out[1]["messageId"] == out[2]["messageId"] == out[3]["messageId"]
    assert out[0]["messageId"] == out[4]["messageId"] != out[1]["messageId"]
    assert out[5]["messageId"] == out[7]["messageId"] != out[1]["messageId"]
    for event in out:
        parse_agui_event(event)


def test_chunks_expand_like_the_client() -> None:
    norm = AguiNormalizer()
    out = []
    raws: list[dict[str, Any]] = [
        {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m1", "delta": "Chunked "},
        {"type": "TEXT_MESSAGE_CHUNK", "delta": "work."},
        {"type": "TOOL_CALL_CHUNK", "toolCallId": "t1", "toolCallName": "f", "delta": "{}"},
        {"type": "CUSTOM", "name": "x.y", "value": 1},
        {"type": "TOOL_CALL_CHUNK", "delta": ""},
        {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"},
    ]
    for raw in raws:
        out += norm.feed(raw)
    assert [(e["type"], e.get("messageId") or e.get("toolCallId")) for e in out] == [
        ("TEXT_MESSAGE_START", "m1"),
        ("TEXT_MESSAGE_CONTENT", "m1"),
        ("TEXT_MESSAGE_CONTENT", "m1"),
        ("TEXT_MESSAGE_END", "m1"),
        ("TOOL_CALL_START", "t1"),
        ("TOOL_CALL_ARGS", "t1"),
        ("CUSTOM", None),
        ("TOOL_CALL_END", "t1"),
        ("RUN_FINISHED", None),
    ]
    assert out[0]["role"] == "assistant"


def test_chunk_without_an_id_and_nothing_open_is_a_protocol_error() -> None:
    with pytest.raises(UpstreamProtocolError):
        AguiNormalizer().feed({"type": "TEXT_MESSAGE_CHUNK", "delta": "x"})


def test_parse_uses_the_sdk_models() -> None:
    assert isinstance(
        parse_agui_event({"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"}),
        TextMessageStartEvent,
    )
    finished = parse_agui_event(
        {
            "type": "RUN_FINISHED",
            "threadId": "t",
            "runId": "r",
            "outcome": {"type": "interrupt", "interrupts": [{"id": "i", "reason": "approve"}]},
        }
    )
    assert isinstance(finished, RunFinishedEvent)
    assert finished.outcome is not None and finished.outcome.type == "interrupt"
    with pytest.raises(UpstreamProtocolError, match="toolCallName"):
        parse_agui_event({"type": "TOOL_CALL_START", "toolCallId": "c"})
    with pytest.raises(UpstreamProtocolError):
        parse_agui_event({"type": "AGUI_PING"})


def test_public_surface_and_registration() -> None:
    import providers.ag_ui as package
    from providers.ag_ui import AguiProvider
    from providers.registry import create_provider

    assert sorted(package.__all__) == [
        "AGUI_EXTENSIONS",
        "AguiNormalizer",
        "AguiProvider",
        "JsonPatchError",
        "apply_patch",
        "build_run_agent_input",
        "decode_agui_chunk",
        "parse_agui_event",
    ]
    sse = create_provider("agent", "ag-ui", {"url": "http://x/agent"})
    ws = create_provider("agent", "ag-ui", {"url": "ws://x/agent", "transport": "websocket"})
    assert isinstance(sse, AguiProvider) and isinstance(ws, AguiProvider)
    assert sse.capabilities.transports == ("sse",) and ws.capabilities.transports == ("websocket",)
    assert sse.capabilities.extensions == (
        "agui.state",
        "agui.activity",
        "agui.custom",
        "agui.messages",
    )
