"""One scripted conversation in the three dialects reduces to the same projection.

The script: the user asks for the weather; the model reasons, says it will check, and calls
``get_weather {"city": "Paris"}``; the app returns ``{"tempC": 21}``; the model answers. Each
dialect speaks it in its own wire format over a real SSE connection to a loopback mock; the
message projection (ids, roles, contents, statuses) and the tool call names, arguments and
results must be identical, and so must the reasoning text."""

from __future__ import annotations

from typing import Any

import orjson

from core.projection import project_messages
from providers.ag_ui import AguiProvider
from providers.anthropic_messages import AnthropicMessagesProvider
from providers.contract import AgentEvent, AgentProvider
from providers.history import replay_events
from providers.openai_chat import OpenAIChatProvider
from providers.testing import make_options, run_collect
from providers.validator import validate_agent_provider_events
from tests.providers.support.mock_upstreams import (
    Frames,
    agui_frames,
    anthropic_frames,
    openai_frames,
    serve_mock,
)

PROMPT = "What's the weather in Paris?"
REASONING = "The user wants the weather; call the tool."
SAY = "Let me check."
ARGS = '{"city":"Paris"}'
RESULT = {"tempC": 21}
ANSWER = "It is 21°C in Paris."
TOOL = {"name": "get_weather", "description": "Weather", "parameters": {"type": "object"}}


def agui_script(body: dict[str, Any], first: bool) -> Frames:
    thread, run = body["threadId"], body["runId"]
    events: list[dict[str, Any]] = [{"type": "RUN_STARTED", "threadId": thread, "runId": run}]
    if first:
        events += [
            {"type": "REASONING_START", "messageId": "r1"},
            {"type": "REASONING_MESSAGE_START", "messageId": "rsn_1", "role": "reasoning"},
            {"type": "REASONING_MESSAGE_CONTENT", "messageId": "rsn_1", "delta": REASONING},
            {"type": "REASONING_MESSAGE_END", "messageId": "rsn_1"},
            {"type": "REASONING_END", "messageId": "r1"},
            {"type": "TEXT_MESSAGE_START", "messageId": "msg_1", "role": "assistant"},
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": "msg_1", "delta": SAY},
            {"type": "TEXT_MESSAGE_END", "messageId": "msg_1"},
            {"type": "TOOL_CALL_START", "toolCallId": "call_1", "toolCallName": "get_weather"},
            {"type": "TOOL_CALL_ARGS", "toolCallId": "call_1", "delta": ARGS},
            {"type": "TOOL_CALL_END", "toolCallId": "call_1"},
        ]
    else:
        events += [
            {"type": "TEXT_MESSAGE_START", "messageId": "msg_2", "role": "assistant"},
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": "msg_2", "delta": ANSWER},
            {"type": "TEXT_MESSAGE_END", "messageId": "msg_2"},
        ]
    events.append({"type": "RUN_FINISHED", "threadId": thread, "runId": run})
    return agui_frames(events)


SCRIPTS: dict[str, tuple[Any, list[Any]]] = {
    "openai-chat": (
        OpenAIChatProvider,
        [
            openai_frames(
                reasoning=REASONING, text=SAY, tool_calls=[("call_1", "get_weather", ARGS)]
            ),
            openai_frames(text=ANSWER),
        ],
    ),
    "anthropic-messages": (
        AnthropicMessagesProvider,
        [
            anthropic_frames(
                thinking=REASONING, text=SAY, tool_uses=[("call_1", "get_weather", ARGS)]
            ),
            anthropic_frames(text=ANSWER),
        ],
    ),
    "ag-ui": (
        AguiProvider,
        [lambda body: agui_script(body, True), lambda body: agui_script(body, False)],
    ),
}


async def converse(dialect: str) -> list[AgentEvent]:
    factory, responses = SCRIPTS[dialect]
    async with serve_mock(responses) as mock:
        provider: AgentProvider = factory(url=mock.url)

        def submit(events: list[AgentEvent]) -> tuple[str, dict[str, Any]]:
            return ("tool.submit_result", {"toolCallId": "call_1", "result": RESULT})

        options = make_options(start_session=True, wait_timeout_seconds=10)
        events = await run_collect(
            provider, {"prompt": PROMPT, "tools": [TOOL]}, options=options, commands=[submit]
        )
    assert validate_agent_provider_events(provider.capabilities, events) == []
    assert len(mock.requests) == 2
    return events


def summary(events: list[AgentEvent]) -> dict[str, Any]:
    state = replay_events(events)
    projection = [
        {
            "id": item["id"],
            "status": item["status"],
            "role": item["message"]["role"],
            "content": item["message"]["content"],
            "messageStatus": item["message"]["status"],
        }
        for item in project_messages(state)
    ]
    tools = [
        (t["name"], orjson.loads(t["arguments"]), t.get("result"), t["status"])
        for t in state["toolCalls"].values()
    ]
    reasoning = [r["content"] for r in state["reasoning"].values()]
    (run,) = state["runs"].values()
    return {"projection": projection, "tools": tools, "reasoning": reasoning, "run": run["status"]}


async def test_three_dialects_reduce_to_the_same_conversation() -> None:
    results = {dialect: summary(await converse(dialect)) for dialect in SCRIPTS}
    expected = {
        "projection": [
            {
                "id": "8:run_testuser",
                "status": "local",
                "role": "user",
                "content": PROMPT,
                "messageStatus": "completed",
            },
            {
                "id": "8:run_testmsg_1",
                "status": "success",
                "role": "assistant",
                "content": SAY,
                "messageStatus": "completed",
            },
            {
                "id": "8:run_testmsg_2",
                "status": "success",
                "role": "assistant",
                "content": ANSWER,
                "messageStatus": "completed",
            },
        ],
        "tools": [("get_weather", {"city": "Paris"}, RESULT, "completed")],
        "reasoning": [REASONING],
        "run": "completed",
    }
    for dialect, result in results.items():
        assert result == expected, dialect
