"""anthropic-messages: failures mid-stream, redacted thinking, request history blocks, usage."""

from __future__ import annotations

from typing import Any

import orjson

from providers.anthropic_messages import (
    AnthropicMessagesProvider,
    build_messages_request,
    normalise_anthropic_usage,
)
from providers.testing import assert_provider_contract, make_options
from tests.providers.support.mock_upstreams import anthropic_frames
from tests.providers.support.replay_helpers import frames_to_chunks, terminal, tool_calls


def ev(name: str, **payload: Any) -> str:
    return f"event: {name}\ndata: {orjson.dumps({'type': name, **payload}).decode()}\n\n"


START = ev(
    "message_start",
    message={"id": "msg_x", "model": "m", "usage": {"input_tokens": 5, "output_tokens": 1}},
)


async def run_frames(
    *turns: list[str],
    transcript: dict[str, Any] | None = None,
    commands: tuple[Any, ...] = (),
) -> list[dict[str, Any]]:
    options = make_options(
        wait_timeout_seconds=5, transcript=transcript if transcript is not None else {}
    )
    return await assert_provider_contract(
        AnthropicMessagesProvider(),
        turns=[frames_to_chunks(t) for t in turns],
        options=options,
        commands=commands,
    )


async def test_error_event_mid_stream_fails_the_run() -> None:
    events = await run_frames(
        [
            START,
            ev("content_block_start", index=0, content_block={"type": "text", "text": ""}),
            ev("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hel"}),
            ev("error", error={"type": "overloaded_error", "message": "Overloaded"}),
        ]
    )
    assert [e["type"] for e in events][-2:] == ["message.failed", "run.failed"]
    assert terminal(events)["payload"]["error"] == {
        "code": "upstream_error",
        "message": "Overloaded",
        "retryable": True,
        "details": {"type": "overloaded_error"},
    }


async def test_stream_without_message_stop_is_dropped() -> None:
    events = await run_frames(
        [START, ev("content_block_start", index=0, content_block={"type": "text", "text": ""})]
    )
    assert terminal(events)["payload"]["error"]["code"] == "upstream_dropped"


async def test_redacted_thinking_is_redacted_reasoning_and_sent_back() -> None:
    transcript: dict[str, Any] = {}
    events = await run_frames(
        [
            START,
            ev(
                "content_block_start",
                index=0,
                content_block={"type": "redacted_thinking", "data": "OPAQUE"},
            ),
            ev("content_block_stop", index=0),
            ev("content_block_start", index=1, content_block={"type": "text", "text": ""}),
            ev("content_block_delta", index=1, delta={"type": "text_delta", "text": "Hi"}),
            ev("content_block_stop", index=1),
            ev("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 3}),
            ev("message_stop"),
        ],
        transcript=transcript,
    )
    started = next(e for e in events if e["type"] == "reasoning.started")
    assert started["payload"]["redacted"] is True
    history = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "Hi"}]
    body = build_messages_request(model="m", history=history, transcript=transcript)
    assert body["messages"][1]["content"] == [
        {"type": "redacted_thinking", "data": "OPAQUE"},
        {"type": "text", "text": "Hi"},
    ]


async def test_unknown_events_and_blocks_are_ignored() -> None:
    events = await run_frames(
        [
            START,
            ev("future_event", x=1),
            ev("content_block_start", index=0, content_block={"type": "future_block"}),
            ev("content_block_delta", index=0, delta={"type": "future_delta"}),
            ev("content_block_stop", index=0),
            ev("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 1}),
            ev("message_stop"),
        ]
    )
    assert terminal(events)["type"] == "run.completed"


def test_history_without_transcript_builds_tool_blocks() -> None:
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "",
            "toolCalls": [{"id": "t1", "name": "w", "arguments": '{"c":"P"}'}],
        },
        {"role": "tool", "toolCallId": "t1", "content": '{"tempC":21}'},
        {"role": "assistant", "content": "Sunny."},
    ]
    body = build_messages_request(
        model="m", history=history, transcript={}, user_content="Thanks", params={"max_tokens": 99}
    )
    assert body["system"] == "Be brief."
    assert body["max_tokens"] == 99 and body["stream"] is True
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "w", "input": {"c": "P"}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": '{"tempC":21}'}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Sunny."}]},
        {"role": "user", "content": [{"type": "text", "text": "Thanks"}]},
    ]


def test_usage_normalisation() -> None:
    assert normalise_anthropic_usage(
        {
            "input_tokens": 10,
            "cache_read_input_tokens": 30,
            "cache_creation_input_tokens": 5,
            "output_tokens": 7,
        }
    ) == {"inputTokens": 45, "outputTokens": 7, "totalTokens": 52, "cachedInputTokens": 30}


async def test_mock_frames_round_trip() -> None:
    events = await run_frames(anthropic_frames(text="Hello"))
    assert terminal(events)["payload"]["usage"] == {
        "inputTokens": 10,
        "outputTokens": 7,
        "totalTokens": 17,
    }
    assert terminal(events)["meta"]["usage"] == [{"input_tokens": 10, "output_tokens": 7}]


def test_public_surface_and_registration() -> None:
    import providers.anthropic_messages as package
    from providers.registry import create_provider

    assert sorted(package.__all__) == [
        "ANTHROPIC_VERSION",
        "AnthropicMessagesProvider",
        "build_messages_request",
        "normalise_anthropic_usage",
    ]
    provider = create_provider(
        "claude",
        "anthropic-messages",
        {"url": "http://x/v1/messages", "headers": {"x-api-key": "k"}},
    )
    assert isinstance(provider, AnthropicMessagesProvider)
    assert provider.headers == {"anthropic-version": "2023-06-01", "x-api-key": "k"}


async def test_tool_input_complete_in_the_start_block() -> None:
    block = {"type": "tool_use", "id": "toolu_p", "name": "lookup", "input": {"q": "x"}}
    events = await run_frames(
        [
            START,
            ev("content_block_start", index=0, content_block=block),
            ev("content_block_stop", index=0),
            ev("message_delta", delta={"stop_reason": "tool_use"}, usage={"output_tokens": 2}),
            ev("message_stop"),
        ],
        anthropic_frames(text="ok"),
        commands=(("tool.submit_result", {"toolCallId": "toolu_p", "result": 1}),),
    )
    assert tool_calls(events) == [("lookup", {"q": "x"}, "completed")]
