"""What only ``openai-responses``' recordings show (every recording is replayed by
``test_replay.py``)."""

from __future__ import annotations

from typing import Any

from providers.contract import AgentEvent
from providers.recorded import load_jsonl_objects, load_recorded_stream
from tests.providers.support.replay_cases import OPENAI_RESPONSES
from tests.providers.support.replay_helpers import assistant_texts, terminal
from tests.providers.support.replay_specs import OPENAI_RESPONSES_SPEC
from tests.providers.support.replay_specs import replay as replay_spec


async def replay(name: str, transcript: dict[str, Any] | None = None) -> list[AgentEvent]:
    return await replay_spec(OPENAI_RESPONSES_SPEC, name, transcript)


async def test_concatenated_tool_loop_is_one_run_and_sums_usage() -> None:
    events = await replay("openai-reasoning-encrypted-content.1.chunks.txt")
    assert [e["type"] for e in events].count("run.started") == 1
    # ids are the upstream call_ids; name and call_id came from output_item.added only
    requested = [e["payload"]["toolCallId"] for e in events if e["type"] == "tool.requested"]
    assert requested == [
        "call_AB6AaRZ1FYZB2RwS6A5vbdqn",
        "call_Q6pW65MUgW9vF59BmItYGos3",
        "call_Zl5vIMnD7dVAjgU6FkhmiCZh",
    ]
    usage = terminal(events)["payload"]["usage"]
    raw = terminal(events)["meta"]["usage"]
    assert len(raw) == 4
    assert usage["inputTokens"] == sum(u["input_tokens"] for u in raw)
    assert usage["outputTokens"] == sum(u["output_tokens"] for u in raw)


async def test_encrypted_reasoning_stays_in_the_transcript() -> None:
    transcript: dict[str, Any] = {}
    events = await replay("openai-reasoning-encrypted-content.1.chunks.txt", transcript)
    lines = load_jsonl_objects(
        (OPENAI_RESPONSES / "openai-reasoning-encrypted-content.1.chunks.txt").read_text()
    )
    secrets = [
        (line["type"], line["item"]["encrypted_content"])
        for line in lines
        if "encrypted_content" in line.get("item", {})
    ]
    assert [kind for kind, _ in secrets] == [
        "response.output_item.added",
        "response.output_item.done",
    ]
    assert all(secret not in repr(events) for _, secret in secrets)
    kept = [
        item
        for turn in transcript["responseTurns"]
        for item in turn["items"]
        if item["type"] == "reasoning"
    ]
    assert [item["encrypted_content"] for item in kept] == [secrets[1][1]]


async def test_item_id_rotation_keyed_on_output_index() -> None:
    events = await replay("github-copilot-id-rotation.1.chunks.txt")
    messages = [e for e in events if e["type"] == "message.started"]
    assert [m["payload"]["role"] for m in messages] == ["user", "assistant"]
    assert messages[1]["meta"]["phase"] == "final_answer"


async def test_output_index_gap_gives_two_messages_with_phase() -> None:
    events = await replay("openai-phase.1.chunks.txt")
    started = [e for e in events if e["type"] == "message.started"]
    phases = [e["meta"]["phase"] for e in started if e.get("meta")]
    assert phases == ["commentary", "final_answer"]
    assert len(assistant_texts(events)) == 2


async def test_nested_error_event_fails_with_the_upstream_code() -> None:
    events = await replay("openai-error.1.chunks.txt")
    error = terminal(events)["payload"]["error"]
    assert error["code"] == "upstream_error"
    assert error["details"]["code"] == "insufficient_quota"
    assert "quota" in error["message"]


async def test_done_sentinel_after_the_terminal_is_tolerated() -> None:
    chunks = load_recorded_stream(
        OPENAI_RESPONSES / "openai-node-ResponseStream.standard-text.sse", "openai-responses"
    )
    assert chunks[-1].data == "[DONE]"
    events = await replay("openai-node-ResponseStream.standard-text.sse")
    assert assistant_texts(events) == ["Hello world"]
