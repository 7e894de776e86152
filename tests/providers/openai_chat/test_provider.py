"""openai-chat: request building, usage, and failures mid-stream (synthetic chunks)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from providers.openai_chat import (
    OpenAIChatProvider,
    build_chat_request,
    decode_chunk,
    normalise_openai_usage,
)
from providers.testing import assert_provider_contract, make_options, run_collect
from tests.providers.support.mock_upstreams import openai_frames, serve_mock
from tests.providers.support.replay_helpers import frames_to_chunks, terminal, tool_calls


def data(payload: Any) -> str:
    return f"data: {orjson.dumps(payload).decode()}\n\n"


def delta_chunk(delta: dict[str, Any], finish: str | None = None, index: int = 0) -> str:
    return data(
        {
            "id": "c",
            "model": "m",
            "choices": [{"index": index, "delta": delta, "finish_reason": finish}],
        }
    )


async def run_frames(*turns: list[str], commands: list[Any] = ()) -> list[dict[str, Any]]:  # type: ignore[assignment]
    return await assert_provider_contract(
        OpenAIChatProvider(),
        turns=[frames_to_chunks(turn) for turn in turns],
        options=make_options(wait_timeout_seconds=5),
        commands=commands,
    )


async def test_error_payload_mid_stream_fails_the_run_and_the_open_message() -> None:
    events = await run_frames(
        [
            delta_chunk({"role": "assistant", "content": "Hel"}),
            data(
                {
                    "error": {
                        "message": "The server had an error",
                        "type": "server_error",
                        "code": None,
                    }
                }
            ),
        ]
    )
    types = [e["type"] for e in events]
    assert types[-2:] == ["message.failed", "run.failed"]
    error = terminal(events)["payload"]["error"]
    assert error == {
        "code": "upstream_error",
        "message": "The server had an error",
        "details": {"type": "server_error"},
    }


async def test_stream_without_finish_reason_is_dropped() -> None:
    events = await run_frames([delta_chunk({"content": "partial"}), "data: [DONE]\n\n"])
    assert terminal(events)["payload"]["error"]["code"] == "upstream_dropped"


async def test_malformed_chunk() -> None:
    events = await run_frames(["data: {not json\n\n"])
    assert terminal(events)["payload"]["error"]["code"] == "upstream_malformed_chunk"


async def test_length_inside_tool_arguments_fails_the_tool_and_completes() -> None:
    first = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "f", "arguments": '{"a":'},
    }
    events = await run_frames(
        [delta_chunk({"tool_calls": [first]}), delta_chunk({}, "length"), "data: [DONE]\n\n"]
    )
    failed = next(e for e in events if e["type"] == "tool.failed")
    assert failed["payload"]["error"]["code"] == "truncated_arguments"
    assert terminal(events)["type"] == "run.completed"
    assert terminal(events)["payload"]["output"] == {"stopReason": "length"}


@pytest.mark.parametrize(
    "late",
    [
        {"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]},
        {"content": "more"},
        {"reasoning_content": "hmm"},
    ],
)
async def test_a_delta_after_the_choice_finished_fails_the_run_cleanly(
    late: dict[str, Any],
) -> None:
    call = {"index": 0, "id": "a", "function": {"name": "f", "arguments": "{"}}
    events = await run_frames(  # the contract check inside: no reopened or grown entity
        [
            delta_chunk({"content": "Hi"}),
            delta_chunk({"tool_calls": [call]}),
            delta_chunk({}, "tool_calls"),
            delta_chunk(late),
            "data: [DONE]\n\n",
        ]
    )
    error = terminal(events)["payload"]["error"]
    assert error["code"] == "upstream_protocol_error"
    assert "after its finish_reason" in error["message"]
    opened = [e for e in events if e["type"] == "message.started"]
    assert [e["payload"]["messageId"] for e in opened].count("msg_1") == 1


@pytest.mark.parametrize("odd", [5, ["x"], {"a": 1}, True])
async def test_a_tool_call_id_that_is_not_a_string_is_replaced(odd: Any) -> None:
    call = {"index": 0, "id": odd, "function": {"name": "f", "arguments": "{}"}}
    events = await run_frames(  # the contract check inside: every event valid
        [delta_chunk({"tool_calls": [call]}), delta_chunk({}, "tool_calls"), "data: [DONE]\n\n"]
    )
    requested = next(e for e in events if e["type"] == "tool.requested")
    assert requested["payload"]["toolCallId"] == "call_1_0_0"


async def test_a_tool_name_that_is_not_a_string_is_no_name() -> None:
    call = {"index": 0, "id": "a", "function": {"name": 7, "arguments": "{}"}}
    events = await run_frames(
        [delta_chunk({"tool_calls": [call]}), delta_chunk({}, "tool_calls"), "data: [DONE]\n\n"]
    )
    assert not [e for e in events if e["type"] == "tool.requested"]
    assert terminal(events)["payload"]["error"]["code"] == "upstream_protocol_error"


async def test_a_chunk_without_deltas_after_the_finish_is_fine() -> None:
    events = await run_frames(
        [
            delta_chunk({"content": "Hi"}),
            delta_chunk({}, "stop"),
            delta_chunk({}),  # e.g. a trailing usage-only chunk of a compatible server
            "data: [DONE]\n\n",
        ]
    )
    assert terminal(events)["type"] == "run.completed"


async def test_arguments_before_the_name_are_buffered() -> None:
    no_name = {"index": 0, "id": "call_1", "function": {"arguments": '{"q"'}}
    named = {"index": 0, "function": {"name": "search", "arguments": ':"x"}'}}
    later_empty = {"index": 0, "function": {"name": "", "arguments": ""}}
    events = await run_frames(
        [
            delta_chunk({"tool_calls": [no_name]}),
            delta_chunk({"tool_calls": [named]}),
            delta_chunk({"tool_calls": [later_empty]}),
            delta_chunk({}, "tool_calls"),
            "data: [DONE]\n\n",
        ],
        openai_frames(text="ok"),
        commands=[("tool.submit_result", {"toolCallId": "call_1", "result": 1})],
    )
    assert tool_calls(events) == [("search", {"q": "x"}, "completed")]


async def test_vllm_reasoning_in_both_fields_is_not_doubled() -> None:
    events = await run_frames(
        [
            delta_chunk({"reasoning": "think", "reasoning_content": "think"}),
            delta_chunk({"content": "answer"}, "stop"),
            "data: [DONE]\n\n",
        ]
    )
    deltas = [e["payload"]["delta"] for e in events if e["type"] == "reasoning.delta"]
    assert deltas == ["think"]


async def test_http_error_from_the_upstream() -> None:
    async with serve_mock([]) as mock:  # no scripted answer: the mock answers HTTP 500
        provider = OpenAIChatProvider(url=mock.url)
        events = await run_collect(provider, {"prompt": "x"})
    error = terminal(events)["payload"]["error"]
    assert error["code"] == "upstream_http_error" and error["retryable"] is True
    assert error["details"]["status"] == 500


def test_request_builder() -> None:
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look:"},
                {"type": "image", "url": "https://x/i.png"},
            ],
        },
        {
            "role": "assistant",
            "content": "A cat.",
            "toolCalls": [{"id": "c1", "name": "f", "arguments": ""}],
        },
        {"role": "tool", "toolCallId": "c1", "content": "42"},
    ]
    body = build_chat_request(
        model="gpt-x",
        history=history,
        user_content="Thanks",
        tools=[{"name": "f", "description": "d", "parameters": {"type": "object"}}],
        params={"temperature": 0.2, "stream": False},
    )
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look:"},
                {"type": "image_url", "image_url": {"url": "https://x/i.png"}},
            ],
        },
        {
            "role": "assistant",
            "content": "A cat.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
        {"role": "user", "content": "Thanks"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {"name": "f", "description": "d", "parameters": {"type": "object"}},
        }
    ]
    assert body["temperature"] == 0.2
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


def test_usage_normalisation_and_decoding() -> None:
    assert normalise_openai_usage(
        {
            "prompt_tokens": 100,
            "completion_tokens": 50,
            "total_tokens": 150,
            "prompt_tokens_details": {"cached_tokens": 80},
            "completion_tokens_details": {"reasoning_tokens": 20},
        }
    ) == {
        "inputTokens": 100,
        "outputTokens": 50,
        "totalTokens": 150,
        "reasoningTokens": 20,
        "cachedInputTokens": 80,
    }
    groq = decode_chunk(
        orjson.dumps(
            {"choices": [], "x_groq": {"usage": {"prompt_tokens": 3, "completion_tokens": 4}}}
        ).decode()
    )
    assert groq.usage is not None and normalise_openai_usage(groq.usage)["totalTokens"] == 7
    assert decode_chunk("[DONE]").done


async def test_abort_mid_stream_cancels_and_closes_the_upstream() -> None:
    frames = openai_frames(text="a long answer " * 20)
    async with serve_mock([frames], delay=0.05) as mock:
        provider = OpenAIChatProvider(url=mock.url)
        events = await run_collect(
            provider, {"prompt": "x"}, abort_when=lambda evs: evs[-1]["type"] == "message.delta"
        )
        for _ in range(100):
            if mock.disconnects:
                break
            await asyncio.sleep(0.02)
    assert [e["type"] for e in events][-2:] == ["message.cancelled", "run.cancelled"]
    assert terminal(events)["payload"]["reason"] == "aborted"
    assert mock.disconnects == 1


def test_public_surface_and_registration() -> None:
    import providers.openai_chat as package
    from providers.registry import create_provider

    assert sorted(package.__all__) == [
        "ChatChunk",
        "OpenAIChatProvider",
        "build_chat_request",
        "decode_chunk",
        "normalise_openai_usage",
    ]
    provider = create_provider(
        "llm", "openai-chat", {"url": "http://x/v1/chat/completions", "model": "m"}
    )
    assert isinstance(provider, OpenAIChatProvider)
    assert provider.capabilities.transports == ("sse",)
    assert "tool.submit_result" in provider.capabilities.commands


async def test_explicit_input_messages_replace_the_history() -> None:
    from providers.transports import IterableTransport

    bodies: list[Any] = []

    def source(request: Any, _signal: Any) -> list[Any]:
        bodies.append(request.json)
        return frames_to_chunks(openai_frames(text="ok"))

    provider = OpenAIChatProvider(model="m", params={"temperature": 0})
    provider.transport = IterableTransport(source, kind="sse")
    history = [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "before"}]
    options = make_options(history=[{"role": "user", "content": "ignored"}])
    events = await run_collect(
        provider,
        {"prompt": "now", "messages": history, "params": {"temperature": 0.5, "seed": 1}},
        options=options,
    )
    assert terminal(events)["type"] == "run.completed"
    (body,) = bodies
    assert body["messages"] == [*history, {"role": "user", "content": "now"}]
    assert body["temperature"] == 0.5 and body["seed"] == 1


async def test_openrouter_reasoning_details_kept_in_meta() -> None:
    detail = {"type": "reasoning.text", "text": "think", "signature": "sig", "index": 0}
    events = await run_frames(
        [
            delta_chunk({"reasoning": "think", "reasoning_details": [detail]}),
            delta_chunk({"content": "answer"}, "stop"),
            "data: [DONE]\n\n",
        ]
    )
    completed = next(e for e in events if e["type"] == "reasoning.completed")
    assert completed["meta"] == {"reasoningDetails": [detail]}


def test_decode_text_chunks_and_mixed_deltas_keep_every_segment() -> None:
    def segments(delta: dict[str, Any]) -> list[tuple[str, str]]:
        chunk = decode_chunk(orjson.dumps({"choices": [{"index": 0, "delta": delta}]}).decode())
        return [(s.kind, s.text) for s in chunk.choices[0].segments]

    assert segments({"content": "hi"}) == [("content", "hi")]
    assert segments({"role": "assistant", "content": "hi"}) == [("content", "hi")]
    assert segments({"role": "assistant", "content": ""}) == []
    assert segments({"content": None}) == []
    assert segments({"content": [{"type": "text", "text": "a"}]}) == [("content", "a")]
    # role + something other than content, or content + more: every field is read.
    assert segments({"role": "assistant", "reasoning_content": "r"}) == [("reasoning", "r")]
    assert segments({"content": "c", "reasoning_content": "r"}) == [
        ("reasoning", "r"),
        ("content", "c"),
    ]
    assert segments({"role": "assistant", "content": "c", "refusal": "no"}) == [
        ("content", "c"),
        ("refusal", "no"),
    ]
    calls = decode_chunk(
        orjson.dumps(
            {"choices": [{"delta": {"role": "assistant", "tool_calls": [{"index": 0, "id": "t"}]}}]}
        ).decode()
    )
    assert calls.choices[0].tool_calls[0].id == "t"
    assert decode_chunk(" [DONE] ").done
