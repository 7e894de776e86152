"""The three reference providers behind the real gateway (uvicorn on loopback), each talking
to a loopback mock upstream: the app derives turn 2's history, persists the provider
transcript between runs (Anthropic thinking signature, AG-UI thread and state), exposes the
AG-UI shared state as the ``agui.state`` extension, and routes a tool result through HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx

from tests.app.support.gateway_server import StartGateway, make_settings
from tests.providers.support.mock_upstreams import (
    agui_run,
    anthropic_frames,
    openai_frames,
    serve_mock,
)


async def wait_state(
    client: httpx.AsyncClient, key: str, ready: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    for _ in range(500):
        response = await client.get(f"/v1/conversations/{key}/state")
        if response.status_code == 200:
            state: dict[str, Any] = response.json()
            if ready(state):
                return state
        await asyncio.sleep(0.02)
    raise AssertionError("the conversation never reached the expected state")


def idle(state: dict[str, Any]) -> bool:
    return not state["isRequesting"]


def waiting_tool(state: dict[str, Any]) -> bool:
    return any(t["status"] == "running" for t in state["agentState"]["toolCalls"].values())


async def two_turns(
    start_gateway: StartGateway, kind: str, responses: list[Any], **extra: Any
) -> tuple[Any, dict[str, Any]]:
    async with serve_mock(responses) as mock:
        provider = {"kind": kind, "url": mock.url, "model": "mock", **extra}
        settings = make_settings(gateway={"default_provider": "llm"}, providers={"llm": provider})
        gateway = await start_gateway(settings)
        try:
            async with gateway.client() as client:
                for prompt in ("Hello", "Again"):
                    answer = await client.post(
                        "/v1/conversations/c1/runs", json={"input": {"prompt": prompt}}
                    )
                    assert answer.status_code == 202, answer.text
                    state = await wait_state(client, "c1", idle)
        finally:
            await gateway.stop()
    return mock, state


def contents(state: dict[str, Any]) -> list[tuple[str, Any, str]]:
    return [(m["message"]["role"], m["message"]["content"], m["status"]) for m in state["messages"]]


async def test_openai_chat_behind_the_gateway(start_gateway: StartGateway) -> None:
    mock, state = await two_turns(
        start_gateway, "openai-chat", [openai_frames(text="Hi!"), openai_frames(text="Hi again!")]
    )
    assert contents(state) == [
        ("user", "Hello", "local"),
        ("assistant", "Hi!", "success"),
        ("user", "Again", "local"),
        ("assistant", "Hi again!", "success"),
    ]
    assert mock.requests[1]["messages"] == [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi!"},
        {"role": "user", "content": "Again"},
    ]


async def test_anthropic_transcript_persists_between_runs(start_gateway: StartGateway) -> None:
    responses = [
        anthropic_frames(thinking="hmm", signature="sig-9", text="Hi!"),
        anthropic_frames(text="Again!"),
    ]
    mock, state = await two_turns(
        start_gateway, "anthropic-messages", responses, headers={"x-api-key": "secret"}
    )
    assert mock.headers[0]["x-api-key"] == "secret"
    assistant = mock.requests[1]["messages"][1]
    assert assistant["content"][0] == {"type": "thinking", "thinking": "hmm", "signature": "sig-9"}
    assert "secret" not in str(state)


async def test_agui_state_extension_and_thread_behind_the_gateway(
    start_gateway: StartGateway,
) -> None:
    def first(body: dict[str, Any]) -> list[str]:
        frames = agui_run(body, text="Hi!")
        patch = 'data: {"type":"STATE_SNAPSHOT","snapshot":{"n":1}}\n\n'
        delta = 'data: {"type":"STATE_DELTA","delta":[{"op":"replace","path":"/n","value":2}]}\n\n'
        return [frames[0], patch, delta, *frames[1:]]

    mock, state = await two_turns(
        start_gateway, "ag-ui", [first, lambda body: agui_run(body, text="Again!")]
    )
    assert state["extensions"]["agui.state"] == {"n": 2}
    one, two = mock.requests
    assert one["threadId"] == two["threadId"]
    assert two["state"] == {"n": 2}


async def test_tool_result_through_http_continues_the_same_run(
    start_gateway: StartGateway,
) -> None:
    tool = {"name": "get_weather", "description": "w", "parameters": {"type": "object"}}
    responses = [
        openai_frames(tool_calls=[("call_1", "get_weather", '{"city":"Oslo"}')]),
        openai_frames(text="Cold in Oslo."),
    ]
    async with serve_mock(responses) as mock:
        settings = make_settings(
            gateway={"default_provider": "llm"},
            providers={"llm": {"kind": "openai-chat", "url": mock.url}},
        )
        gateway = await start_gateway(settings)
        try:
            async with gateway.client() as client:
                answer = await client.post(
                    "/v1/conversations/c2/runs",
                    json={"input": {"prompt": "Weather?", "tools": [tool]}},
                )
                run_id = answer.json()["runId"]
                await wait_state(client, "c2", waiting_tool)
                result = await client.post(
                    "/v1/conversations/c2/tools/call_1/result", json={"result": {"c": -3}}
                )
                assert result.status_code == 202, result.text
                state = await wait_state(client, "c2", idle)
        finally:
            await gateway.stop()
    runs = state["agentState"]["runs"]
    assert list(runs) == [run_id] and runs[run_id]["status"] == "completed"
    assert contents(state)[-1] == ("assistant", "Cold in Oslo.", "success")
    assert mock.requests[1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": '{"c":-3}',
    }
