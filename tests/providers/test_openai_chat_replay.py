"""Replay every recorded ``openai-chat/`` stream through the provider (fixtures README rules).

Tool-call recordings are complete model turns that end in a hand-off to the app: the test
submits each tool's result and answers the continuation request with a short synthetic text
turn, so every run ends with ``run.completed`` and zero contract issues."""

from __future__ import annotations

from typing import Any

import pytest

from providers.openai_chat import OpenAIChatProvider
from providers.recorded import load_recorded_stream
from providers.testing import assert_provider_contract, make_options
from tests.providers.mock_upstreams import openai_frames
from tests.providers.replay_cases import OPENAI_CHAT
from tests.providers.replay_cases import OPENAI_CHAT_CASES as CASES
from tests.providers.replay_helpers import (
    assistant_texts,
    frames_to_chunks,
    reasoning_texts,
    submit_next_tool,
    terminal,
    tool_calls,
)

DIR = OPENAI_CHAT


async def replay(name: str) -> list[dict[str, Any]]:
    chunks = load_recorded_stream(DIR / name, "openai-chat")
    final = frames_to_chunks(openai_frames(text="Done."))
    return await assert_provider_contract(
        OpenAIChatProvider(),
        turns=[chunks, final],
        options=make_options(wait_timeout_seconds=5),
        commands=[submit_next_tool({"ok": True}) for _ in range(2)],
        expect_terminal="run.completed",
    )


@pytest.mark.parametrize("name", sorted(CASES))
async def test_replay(name: str) -> None:
    text, tools, reasoning, stop = CASES[name]
    events = await replay(name)
    texts = assistant_texts(events)
    if text is not None:
        assert isinstance(texts[0], str) and texts[0].startswith(text)
    assert [(n, a) for n, a, _ in tool_calls(events)] == tools
    assert all(status == "completed" for _, _, status in tool_calls(events))
    if tools:
        assert texts[-1] == "Done."  # the continuation after the tool results
        for event in events:
            if event["type"] == "tool.requested":
                assert event["meta"]["executor"] == "app"
    rsn = reasoning_texts(events)
    if reasoning is None:
        assert rsn == []
    else:
        assert len(rsn) == 1 and rsn[0].startswith(reasoning)
    done = terminal(events)
    assert done["payload"]["output"]["stopReason"] == stop
    assert done["payload"]["usage"]["inputTokens"] > 0


async def test_n_choices_give_one_message_each() -> None:
    events = await replay("a491adda08c3d4fde95f5b2ee3f60f7f745f1a56d82e62f58031cc2add502380.bin")
    texts = assistant_texts(events)
    assert len(texts) == 3 and all('"units":"f"}' in t or '"units":"c"}' in t for t in texts)
    assert terminal(events)["payload"]["output"]["stopReasons"] == ["stop"] * 3
    usage = terminal(events)["payload"]["usage"]
    assert usage["inputTokens"] == 79 and usage["outputTokens"] == 42  # one shared usage chunk


async def test_refusal_is_message_content_with_meta() -> None:
    events = await replay("173417d553406f034f643e5db3f8d591fb691ebac56f5ae39a22cc7d455c5353.bin")
    started = next(
        e for e in events if e["type"] == "message.started" and e["payload"]["role"] == "assistant"
    )
    assert started["meta"]["refusal"] is True


async def test_usage_on_finish_chunk_and_raw_usage_in_meta() -> None:
    events = await replay("deepseek-reasoning.chunks.txt")
    done = terminal(events)
    assert done["payload"]["usage"] == {
        "inputTokens": 18,
        "outputTokens": 219,
        "totalTokens": 237,
        "reasoningTokens": 205,
        "cachedInputTokens": 0,
    }
    assert done["meta"]["usage"][0]["prompt_cache_miss_tokens"] == 18


async def test_empty_later_name_never_overwrites_and_index_from_one() -> None:
    events = await replay("mistral-incremental-tool-call.chunks.txt")
    requested = [e for e in events if e["type"] == "tool.requested"]
    assert [e["payload"]["name"] for e in requested] == ["webSearchTool"]
    events = await replay("anthropic-fallback-tool-call.sse")
    requested = [e for e in events if e["type"] == "tool.requested"]
    assert requested[0]["payload"]["index"] == 1
