"""What only ``openai-chat``'s recordings show (each recording is replayed by
``test_replay.py``)."""

from __future__ import annotations

from typing import Any

from providers.contract import AgentEvent
from tests.providers.support.replay_helpers import assistant_texts, terminal
from tests.providers.support.replay_specs import OPENAI_CHAT_SPEC
from tests.providers.support.replay_specs import replay as replay_spec


async def replay(name: str, transcript: dict[str, Any] | None = None) -> list[AgentEvent]:
    return await replay_spec(OPENAI_CHAT_SPEC, name, transcript)


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
