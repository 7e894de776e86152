"""The ``openai-responses`` provider against a loopback mock speaking the real Responses wire
format over SSE (uvicorn, the real SSE transport): text, reasoning, one and two parallel
function calls with results in one run, HTTP errors before the stream, an ``error`` event
mid-stream, a dropped connection, a stall past the idle timeout, and abort closing the
upstream. History: the next turn's request carries the whole first turn in ``input``."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from providers.contract import AgentEvent, Command
from providers.history import derive_history, replay_events
from providers.openai_responses import OpenAIResponsesProvider
from providers.testing import make_options, run_collect
from providers.transports import SSETransport
from providers.validator import validate_agent_provider_events
from tests.providers.support.mock_upstreams import (
    DROP,
    STALL,
    HttpStatus,
    responses_event,
    responses_frames,
    serve_mock,
)
from tests.providers.support.replay_helpers import (
    assistant_texts,
    reasoning_texts,
    submit_next_tool,
    terminal,
    tool_calls,
)

KEY = "sk-test-secret-key"
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
ENCRYPTED = "gAAAAAB-opaque-encrypted-reasoning-state"


def provider_for(url: str, **transport: Any) -> OpenAIResponsesProvider:
    return OpenAIResponsesProvider(
        url=url,
        model="gpt-mock",
        headers={"Authorization": f"Bearer {KEY}"},
        params={"reasoning": {"effort": "low", "summary": "auto"}},
        transport=SSETransport(**transport),
    )


async def run_turn(
    provider: OpenAIResponsesProvider,
    input: dict[str, Any],
    *,
    earlier: list[AgentEvent] | None = None,
    transcript: dict[str, Any] | None = None,
    run_id: str = "run_1",
    commands: list[Any] | None = None,
    **options: Any,
) -> list[AgentEvent]:
    events = await run_collect(
        provider,
        input,
        options=make_options(
            run_id=run_id,
            history=derive_history(replay_events(earlier or [])),
            start_session=not earlier,
            wait_timeout_seconds=10,
            transcript=transcript if transcript is not None else {},
            **options,
        ),
        commands=commands or [],
    )
    assert validate_agent_provider_events(provider.capabilities, events) == []
    assert KEY not in repr(events)
    return events


def types(events: list[AgentEvent]) -> list[str]:
    return [e["type"] for e in events]


# ---------------------------------------------------------------- streams


async def test_text_and_the_stateless_request() -> None:
    async with serve_mock([responses_frames(text="Hello there!", done=True)]) as mock:
        events = await run_turn(provider_for(mock.url), {"prompt": "Hi"})
    assert assistant_texts(events) == ["Hello there!"]
    done = terminal(events)
    assert done["type"] == "run.completed"
    assert done["payload"]["output"]["stopReason"] == "completed"
    assert done["payload"]["usage"] == {
        "inputTokens": 10,
        "outputTokens": 5,
        "totalTokens": 15,
        "reasoningTokens": 0,
        "cachedInputTokens": 2,
    }
    assert mock.headers[0]["authorization"] == f"Bearer {KEY}"
    (body,) = mock.requests
    assert body["model"] == "gpt-mock"
    assert body["stream"] is True and body["store"] is False
    assert body["include"] == ["reasoning.encrypted_content"]
    assert body["reasoning"] == {"effort": "low", "summary": "auto"}
    assert body["input"] == [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}]


async def test_reasoning_summary_then_text() -> None:
    frames = responses_frames(reasoning="Think first.", encrypted=ENCRYPTED, text="Answer.")
    async with serve_mock([frames]) as mock:
        events = await run_turn(provider_for(mock.url), {"prompt": "Why?"})
    assert reasoning_texts(events) == ["Think first."]
    assert assistant_texts(events) == ["Answer."]
    assert ENCRYPTED not in repr(events)
    assert terminal(events)["payload"]["usage"]["reasoningTokens"] == 3


async def test_one_tool_call_round_trip_in_one_run() -> None:
    responses = [
        responses_frames(
            reasoning="Need the weather.",
            encrypted=ENCRYPTED,
            tool_calls=[("call_1", "get_weather", '{"city":"Paris"}')],
        ),
        responses_frames(text="It is sunny in Paris."),
    ]
    async with serve_mock(responses) as mock:
        events = await run_turn(
            provider_for(mock.url),
            {"prompt": "Weather in Paris?", "tools": [WEATHER_TOOL]},
            commands=[submit_next_tool({"temp": 21})],
        )
    assert types(events).count("run.started") == 1
    assert tool_calls(events) == [("get_weather", {"city": "Paris"}, "completed")]
    requested = next(e for e in events if e["type"] == "tool.requested")
    assert requested["payload"]["toolCallId"] == "call_1"
    assert requested["meta"]["executor"] == "app"
    assert assistant_texts(events) == ["It is sunny in Paris."]
    first, second = mock.requests
    assert first["tools"] == [{"type": "function", **WEATHER_TOOL}]
    user = {"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]}
    reasoning, call, output = second["input"][1:]
    assert second["input"][0] == user
    assert reasoning["type"] == "reasoning" and reasoning["encrypted_content"] == ENCRYPTED
    assert {k: call[k] for k in ("type", "call_id", "name", "arguments")} == {
        "type": "function_call",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"city":"Paris"}',
    }
    assert output == {"type": "function_call_output", "call_id": "call_1", "output": '{"temp":21}'}
    assert terminal(events)["payload"]["usage"]["inputTokens"] == 20  # two model calls


async def test_two_parallel_tool_calls_continue_once_both_results_are_in() -> None:
    calls = [
        ("call_a", "get_weather", '{"city":"Paris"}'),
        ("call_b", "get_weather", '{"city":"Rome"}'),
    ]
    responses = [responses_frames(tool_calls=calls), responses_frames(text="Both sunny.")]
    async with serve_mock(responses) as mock:
        events = await run_turn(
            provider_for(mock.url),
            {"prompt": "Paris and Rome?", "tools": [WEATHER_TOOL]},
            commands=[
                Command("tool.submit_result", {"toolCallId": "call_b", "result": "rome: 25"}),
                Command("tool.submit_result", {"toolCallId": "call_a", "result": "paris: 21"}),
            ],
        )
    assert [(n, a) for n, a, _ in tool_calls(events)] == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "Rome"}),
    ]
    assert len(mock.requests) == 2  # one continuation, after both results
    items = mock.requests[1]["input"][1:]
    # the calls of one response, then their outputs in the calls' order (not the submission's)
    assert [(i["type"], i["call_id"]) for i in items] == [
        ("function_call", "call_a"),
        ("function_call", "call_b"),
        ("function_call_output", "call_a"),
        ("function_call_output", "call_b"),
    ]
    assert [i.get("output") for i in items[2:]] == ["paris: 21", "rome: 25"]
    assert assistant_texts(events) == ["Both sunny."]


async def test_second_turn_carries_the_whole_first_turn() -> None:
    transcript: dict[str, Any] = {}
    responses = [
        responses_frames(
            reasoning="Look it up.",
            encrypted=ENCRYPTED,
            tool_calls=[("call_1", "get_weather", '{"city":"Oslo"}')],
        ),
        responses_frames(text="Cold in Oslo."),
        responses_frames(text="You are welcome."),
    ]
    async with serve_mock(responses) as mock:
        provider = provider_for(mock.url)
        turn1 = await run_turn(
            provider,
            {"prompt": "Oslo weather?", "tools": [WEATHER_TOOL]},
            transcript=transcript,
            commands=[submit_next_tool("-5C")],
        )
        turn2 = await run_turn(
            provider, {"prompt": "Thanks"}, earlier=turn1, transcript=transcript, run_id="run_2"
        )
    assert assistant_texts(turn2) == ["You are welcome."]
    items = mock.requests[2]["input"]
    assert items[0] == {
        "role": "user",
        "content": [{"type": "input_text", "text": "Oslo weather?"}],
    }
    assert items[1]["type"] == "reasoning" and items[1]["encrypted_content"] == ENCRYPTED
    assert (items[2]["type"], items[2]["call_id"]) == ("function_call", "call_1")
    assert items[3] == {"type": "function_call_output", "call_id": "call_1", "output": "-5C"}
    assert items[4]["type"] == "message" and items[4]["role"] == "assistant"
    assert items[4]["content"][0]["text"] == "Cold in Oslo."
    assert items[5] == {"role": "user", "content": [{"type": "input_text", "text": "Thanks"}]}
    assert len(items) == 6
    assert ENCRYPTED not in repr(turn1 + turn2)


async def test_history_without_transcript_is_rebuilt_from_the_state() -> None:
    """Another instance (or a lost transcript): text and calls rebuilt, reasoning left out."""
    responses = [
        responses_frames(tool_calls=[("call_1", "get_weather", '{"city":"Oslo"}')]),
        responses_frames(text="Cold."),
        responses_frames(text="Bye."),
    ]
    async with serve_mock(responses) as mock:
        provider = provider_for(mock.url)
        turn1 = await run_turn(
            provider, {"prompt": "Oslo?"}, commands=[submit_next_tool({"t": -5})]
        )
        await run_turn(provider, {"prompt": "Ok"}, earlier=turn1, run_id="run_2")
    assert mock.requests[2]["input"][1:] == [
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city":"Oslo"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": '{"t":-5}'},
        {"role": "assistant", "content": "Cold."},
        {"role": "user", "content": [{"type": "input_text", "text": "Ok"}]},
    ]


async def test_incomplete_response_completes_with_its_reason_and_fails_the_cut_call() -> None:
    frames = responses_frames(text="Partial", status="incomplete")
    cut = [
        responses_event(
            "response.output_item.added",
            output_index=1,
            item={"id": "fc_1", "type": "function_call", "call_id": "call_x", "name": "f"},
        ),
        responses_event(
            "response.function_call_arguments.delta", output_index=1, item_id="fc_1", delta='{"a'
        ),
    ]
    frames = frames[:-1] + cut + frames[-1:]
    async with serve_mock([frames]) as mock:
        events = await run_turn(provider_for(mock.url), {"prompt": "x"})
    done = terminal(events)
    assert done["type"] == "run.completed"
    assert done["payload"]["output"]["stopReason"] == "max_output_tokens"
    failed = next(e for e in events if e["type"] == "tool.failed")
    assert failed["payload"]["error"]["code"] == "truncated_arguments"
    assert assistant_texts(events) == ["Partial"]


# ---------------------------------------------------------------- failures


@pytest.mark.parametrize(("status", "retryable"), [(401, False), (429, True), (500, True)])
async def test_http_status_before_the_stream(status: int, retryable: bool) -> None:
    body = {"error": {"message": f"status {status}", "type": "invalid_request_error"}}
    async with serve_mock([HttpStatus(status, body)]) as mock:
        events = await run_turn(provider_for(mock.url), {"prompt": "x"})
    error = terminal(events)["payload"]["error"]
    assert terminal(events)["type"] == "run.failed"
    assert error["code"] == "upstream_http_error"
    assert error["details"]["status"] == status
    assert error["retryable"] is retryable
    assert f"status {status}" in error["details"]["body"]


async def test_error_event_mid_stream_fails_the_open_message() -> None:
    frames = responses_frames(text="Hello world")
    first_delta = next(i for i, f in enumerate(frames) if "output_text.delta" in f)
    error = {"type": "server_error", "code": "server_error", "message": "Boom."}
    frames = [
        *frames[: first_delta + 1],
        responses_event("error", sequence_number=99, code="server_error", message="Boom."),
        responses_event("response.failed", response={"status": "failed", "error": error}),
    ]
    async with serve_mock([frames]) as mock:
        events = await run_turn(provider_for(mock.url), {"prompt": "x"})
    assert types(events)[-2:] == ["message.failed", "run.failed"]
    failure = terminal(events)["payload"]["error"]
    assert failure["code"] == "upstream_error"
    assert failure["details"]["code"] == "server_error"
    assert failure["message"] == "Boom."


@pytest.mark.parametrize("end", ["drop", "clean-close"])
async def test_stream_without_terminal_fails_upstream_dropped(end: str) -> None:
    frames = responses_frames(text="Hello world")
    first_delta = next(i for i, f in enumerate(frames) if "output_text.delta" in f)
    frames = frames[: first_delta + 1] + ([DROP] if end == "drop" else [])
    async with serve_mock([frames]) as mock:
        events = await run_turn(provider_for(mock.url), {"prompt": "x"})
    assert types(events)[-2:] == ["message.failed", "run.failed"]
    assert terminal(events)["payload"]["error"]["code"] == "upstream_dropped"


async def test_stall_past_the_idle_timeout() -> None:
    frames = responses_frames(text="Hello world")
    first_delta = next(i for i, f in enumerate(frames) if "output_text.delta" in f)
    async with serve_mock([[*frames[: first_delta + 1], STALL]]) as mock:
        started = time.monotonic()
        events = await run_turn(provider_for(mock.url, idle_timeout_seconds=0.3), {"prompt": "x"})
        elapsed = time.monotonic() - started
        await asyncio.wait_for(mock.disconnected.wait(), 5)
    assert terminal(events)["payload"]["error"]["code"] == "upstream_idle_timeout"
    assert types(events)[-2] == "message.failed"
    assert elapsed < 5


async def test_abort_closes_the_upstream() -> None:
    frames = responses_frames(text="a long answer " * 40)
    async with serve_mock([frames], delay=0.05) as mock:
        options = make_options()

        def after_two_deltas(evs: list[AgentEvent]) -> bool:
            return types(evs).count("message.delta") >= 2

        events = await run_collect(
            provider_for(mock.url), {"prompt": "x"}, options=options, abort_when=after_two_deltas
        )
        await asyncio.wait_for(mock.disconnected.wait(), 5)
    assert types(events)[-2:] == ["message.cancelled", "run.cancelled"]
    assert terminal(events)["payload"]["reason"] == "aborted"
    assert mock.disconnects == 1
