"""Replay every recorded ``openai-responses/`` stream through the provider (fixtures README rules).

``openai-reasoning-encrypted-content`` concatenates the four responses of one tool loop: it is
split at each ``response.created`` and replayed as successive model calls of one run, each tool
result submitted in between. Other tool recordings end in a hand-off to the app: the test
submits the result and answers the continuation with a short synthetic text response. The
error recording (``error`` then ``response.failed``) ends the run ``run.failed``."""

from __future__ import annotations

from typing import Any

import pytest

from providers.contract import AgentEvent
from providers.openai_responses import OpenAIResponsesProvider
from providers.recorded import load_jsonl_objects, load_recorded_stream, split_turns
from providers.testing import assert_provider_contract, make_options
from tests.providers.mock_upstreams import responses_frames
from tests.providers.replay_cases import (
    OPENAI_RESPONSES,
    OPENAI_RESPONSES_CASES,
    OPENAI_RESPONSES_CONCATENATED,
)
from tests.providers.replay_helpers import (
    assistant_texts,
    frames_to_chunks,
    reasoning_texts,
    submit_next_tool,
    terminal,
    tool_calls,
)


def turns_of(name: str) -> list[list[Any]]:
    chunks = load_recorded_stream(OPENAI_RESPONSES / name, "openai-responses")
    if name in OPENAI_RESPONSES_CONCATENATED:
        return split_turns(chunks, lambda chunk: chunk.event == "response.created")
    return [chunks, frames_to_chunks(responses_frames(text="Done."))]


async def replay(name: str, transcript: dict[str, Any] | None = None) -> list[AgentEvent]:
    failed = OPENAI_RESPONSES_CASES[name][3] is None
    return await assert_provider_contract(
        OpenAIResponsesProvider(),
        turns=turns_of(name),
        options=make_options(
            wait_timeout_seconds=5, transcript=transcript if transcript is not None else {}
        ),
        commands=[submit_next_tool({"ok": True}) for _ in range(3)],
        expect_terminal="run.failed" if failed else "run.completed",
    )


@pytest.mark.parametrize("name", sorted(OPENAI_RESPONSES_CASES))
async def test_replay(name: str) -> None:
    text, tools, reasoning, stop = OPENAI_RESPONSES_CASES[name]
    events = await replay(name)
    texts = assistant_texts(events)
    if text is not None:
        assert isinstance(texts[0], str) and texts[0].startswith(text)
    else:
        assert texts in ([], ["Done."])
    assert tool_calls(events) == tools
    for event in events:
        if event["type"] == "tool.requested":
            assert event["meta"]["executor"] == "app"
    assert [r[: len(p)] for r, p in zip(reasoning_texts(events), reasoning, strict=True)] == (
        reasoning
    )
    if stop is not None:
        done = terminal(events)
        assert done["payload"]["output"]["stopReason"] == stop
        assert done["payload"]["usage"]["totalTokens"] >= 0  # synthetic mocks report zeros


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
