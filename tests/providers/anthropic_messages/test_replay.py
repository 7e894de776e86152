"""What only ``anthropic/``'s recordings show (each recording is replayed by
``test_replay.py``)."""

from __future__ import annotations

from typing import Any

from providers.contract import AgentEvent
from tests.providers.support.replay_helpers import terminal
from tests.providers.support.replay_specs import ANTHROPIC_SPEC
from tests.providers.support.replay_specs import replay as replay_spec


async def replay(name: str, transcript: dict[str, Any] | None = None) -> list[AgentEvent]:
    return await replay_spec(ANTHROPIC_SPEC, name, transcript)


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
