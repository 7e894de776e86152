"""Replay every recorded ``anthropic/`` stream through the provider (fixtures README rules).

``anthropic-tool-search-deferred-bm25`` concatenates three responses of one tool loop: it is
split at each ``message_start`` and replayed as successive upstream turns of one run. Other
tool recordings end in a hand-off to the app: the test submits the result and answers the
continuation with a short synthetic text turn."""

from __future__ import annotations

from typing import Any

import pytest

from providers.anthropic_messages import AnthropicMessagesProvider
from providers.recorded import load_recorded_stream, split_turns
from providers.testing import assert_provider_contract, make_options
from tests.providers.mock_upstreams import anthropic_frames
from tests.providers.replay_cases import ANTHROPIC
from tests.providers.replay_cases import ANTHROPIC_CASES as CASES
from tests.providers.replay_helpers import (
    assistant_texts,
    frames_to_chunks,
    reasoning_texts,
    submit_next_tool,
    terminal,
    tool_calls,
)

DIR = ANTHROPIC


def turns_of(name: str) -> list[list[Any]]:
    chunks = load_recorded_stream(DIR / name, "anthropic-messages")
    if name == "anthropic-tool-search-deferred-bm25.chunks.txt":
        return split_turns(chunks, lambda chunk: chunk.event == "message_start")
    return [chunks, frames_to_chunks(anthropic_frames(text="Done."))]


async def replay(name: str) -> list[dict[str, Any]]:
    return await assert_provider_contract(
        AnthropicMessagesProvider(),
        turns=turns_of(name),
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
    else:
        assert texts in ([], ["Done."])
    got = tool_calls(events)
    assert [(n, s) for n, _, s in got] == [(n, s) for n, _, s in tools]
    for (_, args, _), (_, want, _) in zip(got, tools, strict=True):
        if want is not None:
            assert args == want
    assert [
        r[: len(p)] for r, p in zip(reasoning_texts(events), reasoning, strict=True)
    ] == reasoning
    assert terminal(events)["payload"]["output"]["stopReason"] == stop


async def test_concatenated_responses_are_one_run_with_server_tool() -> None:
    events = await replay("anthropic-tool-search-deferred-bm25.chunks.txt")
    assert [e["type"] for e in events].count("run.started") == 1
    server = [e for e in events if e["payload"].get("toolCallId", "").startswith("srvtoolu_")]
    assert [e["type"] for e in server] == [
        "tool.requested",
        *["tool.arguments_delta"] * 7,
        "tool.running",
        "tool.completed",
    ]
    assert server[0]["meta"]["executor"] == "server"
    assert server[-1]["payload"]["result"]["type"] == "tool_search_tool_search_result"
    # usage summed over the three model calls, message_delta values winning
    assert terminal(events)["payload"]["usage"]["inputTokens"] == 879 + 1398 + 1639


async def test_thinking_signature_kept_in_meta() -> None:
    events = await replay("stream-a-refusal.sse")
    completed = next(e for e in events if e["type"] == "reasoning.completed")
    assert completed["meta"]["signature"]
    assert terminal(events)["payload"]["usage"]["reasoningTokens"] == 67


async def test_message_delta_usage_supersedes_message_start() -> None:
    events = await replay("anthropic-message-delta-input-tokens.chunks.txt")
    usage = terminal(events)["payload"]["usage"]
    assert usage["inputTokens"] == 61 and usage["outputTokens"] == 2


async def test_max_tokens_inside_tool_use_fails_the_tool_and_ends_cleanly() -> None:
    events = await replay("incomplete_partial_json_response.txt")
    failed = next(e for e in events if e["type"] == "tool.failed")
    assert failed["payload"]["error"]["code"] == "truncated_arguments"
    assert terminal(events)["type"] == "run.completed"
