"""The ``openai-responses`` provider behind the real gateway (uvicorn on loopback), on the memory
and the Redis backend, talking to a loopback mock upstream: a function call's result sent over
HTTP continues the same run, and the next run's request carries the first one whole, encrypted
reasoning included, from the transcript the backend persisted; the encrypted reasoning appears
in no state or event the gateway serves, and in no log record (the upstream requests' own
debug logs included)."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import orjson
import pytest
from httpx_sse import aconnect_sse

from tests.app.support.gateway_server import RunningGateway, StartGateway, make_settings
from tests.providers.support.mock_upstreams import responses_frames, serve_mock

ENCRYPTED = "gAAAAAB-gateway-kept-encrypted-reasoning"
TOOL = {"name": "get_weather", "description": "w", "parameters": {"type": "object"}}


async def until_event(client: httpx.AsyncClient, key: str, event_type: str) -> None:
    """Follow the conversation's log from its start until an event of ``event_type`` arrives
    (from the start: one logged before the stream opened would be inside a snapshot frame)."""
    path = f"/v1/conversations/{key}/events?since=0"
    async with aconnect_sse(client, "GET", path) as source:
        async for frame in source.aiter_sse():
            if frame.data and orjson.loads(frame.data).get("type") == event_type:
                return


async def finished(client: httpx.AsyncClient, key: str, run_id: str) -> dict[str, Any]:
    answer = await client.get(f"/v1/conversations/{key}/runs/{run_id}/wait", params={"timeout": 10})
    assert answer.status_code == 200, answer.text
    record: dict[str, Any] = answer.json()
    return record


async def test_tool_result_over_http_and_the_next_run_carries_the_first(
    start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    # The gateway's logging setup (run by other tests in this worker) keeps these at WARNING.
    for name in ("httpx", "httpcore"):
        caplog.set_level(logging.DEBUG, logger=name)
    responses = [
        responses_frames(
            reasoning="Check the weather.",
            encrypted=ENCRYPTED,
            tool_calls=[("call_1", "get_weather", '{"city":"Oslo"}')],
        ),
        responses_frames(text="Cold in Oslo."),
        responses_frames(text="You are welcome."),
    ]
    async with serve_mock(responses) as mock:
        provider = {"kind": "openai-responses", "url": mock.url, "model": "gpt-mock"}
        settings = make_settings(gateway={"default_provider": "llm"}, providers={"llm": provider})
        gateway: RunningGateway = await start_gateway(settings)
        try:
            async with gateway.client() as client:
                first = await client.post(
                    "/v1/conversations/c1/runs",
                    json={"input": {"prompt": "Oslo weather?", "tools": [TOOL]}},
                )
                assert first.status_code == 202, first.text
                await until_event(client, "c1", "tool.running")
                result = await client.post(
                    "/v1/conversations/c1/tools/call_1/result", json={"result": "-5C"}
                )
                assert result.status_code == 202, result.text
                assert (await finished(client, "c1", first.json()["runId"]))["status"] == (
                    "completed"
                )
                second = await client.post(
                    "/v1/conversations/c1/runs", json={"input": {"prompt": "Thanks"}}
                )
                assert (await finished(client, "c1", second.json()["runId"]))["status"] == (
                    "completed"
                )
                state = (await client.get("/v1/conversations/c1/state")).text
                async with client.stream(
                    "GET", "/v1/conversations/c1/events", params={"untilIdle": "true"}
                ) as stream:
                    served = (await stream.aread()).decode()
        finally:
            await gateway.stop()
    assert len(mock.requests) == 3
    continuation, next_run = mock.requests[1]["input"], mock.requests[2]["input"]
    assert [i.get("type", i.get("role")) for i in continuation] == [
        "user",
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert [i.get("type", i.get("role")) for i in next_run] == [
        "user",
        "reasoning",
        "function_call",
        "function_call_output",
        "message",
        "user",
    ]
    assert next_run[1]["encrypted_content"] == ENCRYPTED
    assert next_run[3]["output"] == "-5C"
    assert "You are welcome." in state
    assert "Check the weather." in served  # the reasoning text is served …
    assert ENCRYPTED not in state and ENCRYPTED not in served  # … its encrypted state is not
    # the capture saw the upstream requests (the one carrying the encrypted state among them)
    posts = [r for r in caplog.records if r.name == "httpx" and mock.url in r.getMessage()]
    assert len(posts) == 3
    assert ENCRYPTED not in caplog.text
