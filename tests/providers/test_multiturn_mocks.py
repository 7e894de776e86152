"""Multi-turn runs against loopback mock upstreams speaking each real wire format over SSE.

The mocks record every request body: turn 2 must carry turn 1's history; a tool round trip
(request → hand-off → submit result → the model answers) completes within one run; an AG-UI
interrupt → approve → resume completes within one run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from providers.ag_ui import AguiProvider
from providers.anthropic_messages import AnthropicMessagesProvider
from providers.contract import AgentEvent, AgentProvider, Command
from providers.history import derive_history, replay_events
from providers.openai_chat import OpenAIChatProvider
from providers.testing import make_options, run_collect
from providers.validator import validate_agent_provider_events
from tests.providers.support.mock_upstreams import (
    agui_run,
    anthropic_frames,
    openai_frames,
    serve_mock,
)
from tests.providers.support.replay_helpers import (
    assistant_texts,
    submit_next_tool,
    terminal,
    tool_calls,
)

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


async def run_turn(
    provider: AgentProvider,
    input: dict[str, Any],
    *,
    earlier: Sequence[AgentEvent] = (),
    run_id: str = "run_1",
    commands: Sequence[Any] = (),
    transcript: dict[str, Any] | None = None,
) -> list[AgentEvent]:
    options = make_options(
        run_id=run_id,
        history=derive_history(replay_events(earlier)),
        start_session=not earlier,
        wait_timeout_seconds=10,
        transcript=transcript if transcript is not None else {},
    )
    events = await run_collect(provider, input, options=options, commands=commands)
    assert validate_agent_provider_events(provider.capabilities, events) == []
    return events


# ---------------------------------------------------------------- OpenAI Chat


async def test_openai_turn_two_carries_history() -> None:
    async with serve_mock([openai_frames(text="Hi there!"), openai_frames(text="Sunny.")]) as mock:
        provider = OpenAIChatProvider(
            url=mock.url, model="gpt-mock", headers={"Authorization": "Bearer k"}
        )
        turn1 = await run_turn(provider, {"prompt": "Hello"})
        turn2 = await run_turn(provider, {"prompt": "Weather?"}, earlier=turn1, run_id="run_2")
    assert assistant_texts(turn2) == ["Sunny."]
    assert mock.headers[0]["authorization"] == "Bearer k"
    first, second = mock.requests
    assert first["model"] == "gpt-mock" and first["stream"] is True
    assert first["stream_options"] == {"include_usage": True}
    assert first["messages"] == [{"role": "user", "content": "Hello"}]
    assert second["messages"] == [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there!"},
        {"role": "user", "content": "Weather?"},
    ]


async def test_openai_tool_round_trip_in_one_run() -> None:
    responses = [
        openai_frames(
            reasoning="Need weather.", tool_calls=[("call_1", "get_weather", '{"city":"Paris"}')]
        ),
        openai_frames(text="It is sunny in Paris."),
    ]
    async with serve_mock(responses) as mock:
        provider = OpenAIChatProvider(url=mock.url, model="gpt-mock")
        events = await run_turn(
            provider,
            {"prompt": "Weather in Paris?", "tools": [WEATHER_TOOL]},
            commands=[submit_next_tool({"tempC": 21})],
        )
    assert terminal(events)["type"] == "run.completed"
    assert [e["type"] for e in events].count("run.started") == 1
    assert tool_calls(events) == [("get_weather", {"city": "Paris"}, "completed")]
    assert assistant_texts(events) == ["It is sunny in Paris."]
    first, second = mock.requests
    assert first["tools"][0]["function"]["name"] == "get_weather"
    assert second["messages"] == [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"tempC":21}'},
    ]
    # usage summed over both model calls
    assert terminal(events)["payload"]["usage"]["inputTokens"] == 20


# ---------------------------------------------------------------- Anthropic Messages


async def test_anthropic_turn_two_carries_history_and_signature() -> None:
    responses = [
        anthropic_frames(thinking="Greet back.", signature="sig-1", text="Hi there!"),
        anthropic_frames(text="Sunny."),
    ]
    async with serve_mock(responses) as mock:
        provider = AnthropicMessagesProvider(
            url=mock.url, model="claude-mock", headers={"x-api-key": "k"}
        )
        transcript: dict[str, Any] = {}
        turn1 = await run_turn(provider, {"prompt": "Hello"}, transcript=transcript)
        await run_turn(
            provider, {"prompt": "Weather?"}, earlier=turn1, run_id="run_2", transcript=transcript
        )
    assert mock.headers[0]["anthropic-version"] == "2023-06-01"
    first, second = mock.requests
    assert first["max_tokens"] > 0 and first["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Hello"}]}
    ]
    assert second["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Hello"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Greet back.", "signature": "sig-1"},
                {"type": "text", "text": "Hi there!"},
            ],
        },
        {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
    ]


async def test_anthropic_tool_round_trip_in_one_run() -> None:
    responses = [
        anthropic_frames(
            thinking="Call the tool.",
            signature="sig-t",
            tool_uses=[("toolu_1", "get_weather", '{"city":"Paris"}')],
        ),
        anthropic_frames(text="It is sunny in Paris."),
    ]
    async with serve_mock(responses) as mock:
        provider = AnthropicMessagesProvider(url=mock.url, model="claude-mock")
        events = await run_turn(
            provider,
            {"prompt": "Weather in Paris?", "tools": [WEATHER_TOOL]},
            commands=[submit_next_tool({"tempC": 21})],
        )
    assert terminal(events)["type"] == "run.completed"
    assert tool_calls(events) == [("get_weather", {"city": "Paris"}, "completed")]
    assert assistant_texts(events) == ["It is sunny in Paris."]
    first, second = mock.requests
    assert first["tools"] == [
        {
            "name": "get_weather",
            "description": "Weather for a city",
            "input_schema": WEATHER_TOOL["parameters"],
        }
    ]
    assert second["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Call the tool.", "signature": "sig-t"},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"tempC":21}'}
            ],
        },
    ]


# ---------------------------------------------------------------- AG-UI


async def test_agui_turn_two_carries_history_thread_and_state() -> None:
    def first(body: dict[str, Any]) -> list[str]:
        frames = agui_run(body, text="Hi there!")
        state = 'data: {"type":"STATE_SNAPSHOT","snapshot":{"count":1}}\n\n'
        return [frames[0], state, *frames[1:]]

    responses = [first, lambda body: agui_run(body, text="Again.")]
    async with serve_mock(responses) as mock:
        provider = AguiProvider(url=mock.url)
        transcript: dict[str, Any] = {}
        turn1 = await run_turn(provider, {"prompt": "Hello"}, transcript=transcript)
        await run_turn(
            provider, {"prompt": "More"}, earlier=turn1, run_id="run_2", transcript=transcript
        )
    one, two = mock.requests
    assert one["threadId"] == two["threadId"] == "ses_test"
    assert (one["runId"], two["runId"]) == ("run_1", "run_2")
    assert "state" not in one and two["state"] == {"count": 1}
    assert one["messages"][0]["id"] == two["messages"][0]["id"]  # stable message ids
    assert [(m["role"], m.get("content")) for m in two["messages"]] == [
        ("user", "Hello"),
        ("assistant", "Hi there!"),
        ("user", "More"),
    ]


async def test_agui_interrupt_approve_resume_in_one_run() -> None:
    interrupt = {
        "type": "interrupt",
        "interrupts": [
            {
                "id": "int_1",
                "reason": "approval_required",
                "toolCallId": "call_1",
                "message": "Delete 3 files?",
            }
        ],
    }
    responses = [
        lambda body: agui_run(
            body,
            text="Need approval.",
            tool_calls=[("call_1", "delete_files", '{"count":3}')],
            outcome=interrupt,
        ),
        lambda body: agui_run(body, text="Deleted."),
    ]
    approve = Command(
        "approval.resolve", {"approvalId": "int_1", "decision": "approved", "data": {"note": "ok"}}
    )
    async with serve_mock(responses) as mock:
        provider = AguiProvider(url=mock.url)
        events = await run_turn(provider, {"prompt": "Clean up"}, commands=[approve])
    types = [e["type"] for e in events]
    assert types.count("run.started") == 1 and types.count("run.completed") == 1
    assert terminal(events)["type"] == "run.completed"
    requested = next(e for e in events if e["type"] == "approval.requested")
    assert requested["payload"]["approvalId"] == "int_1"
    assert requested["payload"]["toolCallId"] == "call_1"
    assert requested["payload"]["description"] == "Delete 3 files?"
    resolved = next(e for e in events if e["type"] == "approval.resolved")
    assert resolved["payload"] == {
        "approvalId": "int_1",
        "decision": "approved",
        "data": {"note": "ok"},
    }
    assert tool_calls(events) == [("delete_files", {"count": 3}, "completed")]
    assert assistant_texts(events) == ["Need approval.", "Deleted."]
    first, second = mock.requests
    assert second["threadId"] == first["threadId"]
    assert second["runId"] != first["runId"] and second["parentRunId"] == first["runId"]
    assert second["resume"] == [
        {
            "interruptId": "int_1",
            "status": "resolved",
            "payload": {"decision": "approved", "data": {"note": "ok"}},
        }
    ]
    # the interrupted call is answered by ``resume``, not by a tool message as well
    assert [m["role"] for m in second["messages"]] == ["user", "assistant"]
    assert second["messages"][1]["toolCalls"][0]["id"] == "call_1"


async def test_agui_frontend_tool_round_trip_in_one_run() -> None:
    responses = [
        lambda body: agui_run(body, tool_calls=[("call_9", "get_weather", '{"city":"Paris"}')]),
        lambda body: agui_run(body, text="Sunny."),
    ]
    async with serve_mock(responses) as mock:
        provider = AguiProvider(url=mock.url)
        events = await run_turn(
            provider,
            {"prompt": "Weather?", "tools": [WEATHER_TOOL]},
            commands=[submit_next_tool({"tempC": 21})],
        )
    requested = next(e for e in events if e["type"] == "tool.requested")
    assert requested["meta"] == {"executor": "app"}
    assert terminal(events)["type"] == "run.completed"
    assert tool_calls(events) == [("get_weather", {"city": "Paris"}, "completed")]
    first, second = mock.requests
    assert first["tools"] == [WEATHER_TOOL]
    messages = second["messages"]
    assert messages[1]["role"] == "assistant"
    assert messages[1]["toolCalls"][0]["id"] == "call_9"
    assert messages[2] == {
        "id": messages[2]["id"],
        "role": "tool",
        "content": '{"tempC":21}',
        "toolCallId": "call_9",
    }


async def test_anthropic_pause_turn_is_continued_in_the_same_run() -> None:
    responses = [
        anthropic_frames(text="Searching…", stop_reason="pause_turn"),
        anthropic_frames(text="Found it."),
    ]
    async with serve_mock(responses) as mock:
        provider = AnthropicMessagesProvider(url=mock.url, model="claude-mock")
        events = await run_turn(provider, {"prompt": "Search"})
    assert terminal(events)["type"] == "run.completed"
    assert terminal(events)["payload"]["output"]["stopReason"] == "end_turn"
    assert assistant_texts(events) == ["Searching…", "Found it."]
    assert mock.requests[1]["messages"][-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Searching…"}],
    }
