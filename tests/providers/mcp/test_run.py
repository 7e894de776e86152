"""Server tools inside provider runs, against a real MCP server and mock model upstreams
speaking each wire format: the model calls a server tool, the gateway runs it, the next model
call carries the result, all in one run; failures of the tool are the model's to read."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from providers.anthropic_messages import AnthropicMessagesProvider
from providers.contract import AgentEvent, Command
from providers.mcp import McpSettings
from providers.model_calls import ModelApiProvider
from providers.openai_chat import OpenAIChatProvider
from providers.openai_responses import OpenAIResponsesProvider
from providers.testing import make_options, run_collect
from providers.validator import validate_agent_provider_events
from tests.mcp_server import serve_mcp
from tests.providers.mcp.support import (
    mcp_server_process,
    of_type,
    serve_gated_mock,
    settings_for,
    types_of,
)
from tests.providers.support.mock_upstreams import (
    Frames,
    Responder,
    anthropic_frames,
    openai_frames,
    responses_frames,
    serve_mock,
)

Calls = list[tuple[str, str, str]]
Api = tuple[
    Callable[..., ModelApiProvider[Any]],
    Callable[[Calls], Frames],
    Callable[[str], Frames],
]

APIS: dict[str, Api] = {
    "openai-chat": (
        OpenAIChatProvider,
        lambda calls: openai_frames(tool_calls=calls),
        lambda text: openai_frames(text=text),
    ),
    "openai-responses": (
        OpenAIResponsesProvider,
        lambda calls: responses_frames(tool_calls=calls),
        lambda text: responses_frames(text=text),
    ),
    "anthropic-messages": (
        AnthropicMessagesProvider,
        lambda calls: anthropic_frames(tool_uses=calls),
        lambda text: anthropic_frames(text=text),
    ),
}


async def run(
    provider: ModelApiProvider[Any],
    *,
    commands: list[Any] | None = None,
    wait_timeout: float = 20,
    abort_when: Callable[[list[AgentEvent]], bool] | None = None,
    tools: list[dict[str, Any]] | None = None,
) -> list[AgentEvent]:
    options = make_options(wait_timeout_seconds=wait_timeout)
    input: dict[str, Any] = {"prompt": "go"}
    if tools:
        input["tools"] = tools
    events = await run_collect(
        provider, input, options=options, commands=commands or [], abort_when=abort_when
    )
    assert validate_agent_provider_events(provider.capabilities, events) == []
    return events


def tool_result_texts(request: dict[str, Any]) -> list[str]:
    """The tool results a model request carries, whatever the wire format."""
    found: list[str] = []
    for item in request.get("messages") or request.get("input") or []:
        if item.get("role") == "tool":
            found.append(str(item["content"]))
        elif item.get("type") == "function_call_output":
            found.append(str(item["output"]))
        elif isinstance(item.get("content"), list):
            for block in item["content"]:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    content = block.get("content")
                    if isinstance(content, list):
                        content = "".join(part.get("text", "") for part in content)
                    found.append(str(content))
    return found


def tool_names(request: dict[str, Any]) -> list[str]:
    names = []
    for tool in request.get("tools") or []:
        names.append(tool.get("name") or tool["function"]["name"])
    return names


@pytest.mark.parametrize("api", list(APIS))
async def test_call_and_continue_in_one_run(api: str) -> None:
    make, calls, text = APIS[api]
    app_tool = {"name": "get_time", "description": "Now", "parameters": {"type": "object"}}
    async with serve_mcp() as server:
        responses = [calls([("call_1", "tools__echo", '{"text":"hi","times":2}')]), text("ok")]
        async with serve_mock(responses) as mock:
            provider = make(url=mock.url, model="m", mcp=settings_for(server.url))
            events = await run(provider, tools=[app_tool])
    assert types_of(events, "tool.", "run.completed") == [
        "tool.requested",
        *["tool.arguments_delta"] * len(of_type(events, "tool.arguments_delta")),
        "tool.running",
        "tool.completed",
        "run.completed",
    ]
    requested = of_type(events, "tool.requested")[0]
    assert requested["payload"]["name"] == "tools__echo"
    assert requested["meta"]["executor"] == "gateway" and requested["meta"]["server"] == "tools"
    assert of_type(events, "tool.completed")[0]["payload"]["result"] == "hi hi"
    assert server.server.calls == [("echo", {"text": "hi", "times": 2})]
    first, second = mock.requests
    # the server's tools beside the app's own, name-spaced
    assert "get_time" in tool_names(first)
    assert {"tools__echo", "tools__slow", "tools__fails"} <= set(tool_names(first))
    assert tool_result_texts(second) == ["hi hi"]
    assert len(of_type(events, "run.started")) == 1


@pytest.mark.parametrize("api", list(APIS))
async def test_error_result_goes_to_the_model_not_the_run(api: str) -> None:
    make, calls, text = APIS[api]
    async with serve_mcp() as server:
        responses = [calls([("call_1", "tools__fails", '{"reason":"disk full"}')]), text("sorry")]
        async with serve_mock(responses) as mock:
            provider = make(url=mock.url, model="m", mcp=settings_for(server.url))
            events = await run(provider)
    failed = of_type(events, "tool.failed")[0]["payload"]["error"]
    assert failed["code"] == "tool_error" and "disk full" in failed["message"]
    assert of_type(events, "run.completed")
    assert "disk full" in tool_result_texts(mock.requests[1])[0]


async def test_two_servers_do_not_collide_and_headers_reach_the_server() -> None:
    async with serve_mcp() as one, serve_mcp() as two:
        settings = settings_for(one.url, "one")
        other = settings_for(two.url, "two", headers={"Authorization": "Bearer wrong"})
        both = McpSettings({**settings.servers, **other.servers})
        calls = [("c1", "one__needs_auth", "{}"), ("c2", "two__needs_auth", "{}")]
        async with serve_mock([openai_frames(tool_calls=calls), openai_frames(text="ok")]) as m:
            events = await run(OpenAIChatProvider(url=m.url, model="m", mcp=both))
    assert {"one__echo", "two__echo"} <= set(tool_names(m.requests[0]))
    ends = {e["payload"]["toolCallId"]: e for e in of_type(events, "tool.completed", "tool.failed")}
    assert ends["c1"]["payload"]["result"] == "authorised"
    assert ends["c2"]["payload"]["error"]["code"] == "tool_error"
    assert one.server.authorizations == ["Bearer test-mcp-token"]
    assert two.server.authorizations == ["Bearer wrong"]


@pytest.mark.parametrize(("max_parallel", "expected"), [(4, 3), (1, 1)])
async def test_parallel_calls_up_to_max_parallel(max_parallel: int, expected: int) -> None:
    calls = [(f"c{i}", "tools__slow", '{"seconds":0.4}') for i in range(3)]
    async with serve_mcp() as server:
        async with serve_mock([openai_frames(tool_calls=calls), openai_frames(text="ok")]) as m:
            settings = settings_for(server.url, max_parallel=max_parallel)
            events = await run(OpenAIChatProvider(url=m.url, model="m", mcp=settings))
    assert len(of_type(events, "tool.completed")) == 3 and of_type(events, "run.completed")
    assert server.server.max_in_flight == expected
    assert sorted(tool_result_texts(m.requests[1])) == ["slept 0.4"] * 3
    # tool.running marks the start of the MCP call: a call waiting for a slot is not running
    steps = [
        (e["type"], e["payload"]["toolCallId"])
        for e in of_type(events, "tool.running", "tool.completed", "tool.failed")
    ]
    running = [ident for kind, ident in steps if kind == "tool.running"]
    assert sorted(running) == ["c0", "c1", "c2"]
    if max_parallel == 1:  # each call starts only once the one before it has ended
        assert steps == [(kind, i) for i in running for kind in ("tool.running", "tool.completed")]
    else:  # all three start before the first of them ends
        assert [kind for kind, _ in steps] == ["tool.running"] * 3 + ["tool.completed"] * 3


async def test_waiting_call_is_pending_until_the_call_before_it_ends() -> None:
    """max_parallel = 1, two calls: the second's tool.running follows the first's end."""
    calls = [("c1", "tools__fails", '{"reason":"first"}'), ("c2", "tools__echo", '{"text":"b"}')]
    async with serve_mcp() as server:
        async with serve_mock([openai_frames(tool_calls=calls), openai_frames(text="ok")]) as m:
            settings = settings_for(server.url, max_parallel=1)
            events = await run(OpenAIChatProvider(url=m.url, model="m", mcp=settings))
    steps = [
        (e["type"], e["payload"]["toolCallId"])
        for e in of_type(events, "tool.running", "tool.completed", "tool.failed")
    ]
    first = steps.index(("tool.running", "c1"))
    assert steps[first + 1] == ("tool.failed", "c1")
    assert steps.index(("tool.running", "c2")) > first + 1
    assert steps[-1] == ("tool.completed", "c2") and of_type(events, "run.completed")
    assert [name for name, _ in server.server.calls] == ["fails", "echo"]


async def test_deny_and_allow_shape_what_the_model_sees() -> None:
    async with serve_mcp() as server:
        settings = settings_for(server.url, allow=("echo", "slow"), deny=("slow",))
        async with serve_mock([openai_frames(text="ok")]) as m:
            await run(OpenAIChatProvider(url=m.url, model="m", mcp=settings))
    assert [n for n in tool_names(m.requests[0]) if n.startswith("tools__")] == ["tools__echo"]


async def test_server_down_at_start_offers_no_tools_and_the_run_goes_on() -> None:
    async with serve_mcp() as server:
        url = server.url
    async with serve_mock([openai_frames(text="no tools today")]) as m:
        events = await run(OpenAIChatProvider(url=m.url, model="m", mcp=settings_for(url)))
    assert tool_names(m.requests[0]) == [] and of_type(events, "run.completed")


async def test_server_down_mid_conversation_is_a_tool_failure() -> None:
    responses = [
        openai_frames(text="listing cached"),
        openai_frames(tool_calls=[("c1", "tools__echo", '{"text":"x"}')]),
        openai_frames(text="the tool is down"),
    ]
    async with serve_mock(responses) as m:
        async with serve_mcp() as server:
            provider = OpenAIChatProvider(url=m.url, model="m", mcp=settings_for(server.url))
            await run(provider)  # lists the tools while the server is up
        events = await run(provider)  # the server is gone now
    error = of_type(events, "tool.failed")[0]["payload"]["error"]
    assert error["code"] == "mcp_unavailable" and "tools" in error["message"]
    assert of_type(events, "run.completed")
    assert "unreachable" in tool_result_texts(m.requests[2])[0]


async def test_server_down_mid_run_is_a_tool_failure() -> None:
    async with serve_mcp() as server:

        def listed_then_down(body: dict[str, Any]) -> Frames:
            server.server.down = True  # the tools were listed for this model call: now it fails
            return openai_frames(tool_calls=[("c1", "tools__echo", '{"text":"x"}')])

        responses: list[Frames | Responder] = [listed_then_down, openai_frames(text="it is down")]
        async with serve_mock(responses) as m:
            events = await run(
                OpenAIChatProvider(url=m.url, model="m", mcp=settings_for(server.url))
            )
    assert "tools__echo" in tool_names(m.requests[0])
    assert of_type(events, "tool.failed")[0]["payload"]["error"]["code"] == "mcp_unavailable"
    assert of_type(events, "run.completed") and len(m.requests) == 2
    assert server.server.calls == []


async def test_server_process_killed_mid_run_is_a_tool_failure() -> None:
    """The real server process dies after the tools were listed, before the model calls one:
    the call fails mcp_unavailable, the model reads that, the run completes."""
    responses = [
        openai_frames(tool_calls=[("c1", "tools__echo", '{"text":"x"}')]),
        openai_frames(text="the tool is down"),
    ]
    async with mcp_server_process() as server, serve_gated_mock(responses) as m:
        provider = OpenAIChatProvider(url=m.url, model="m", mcp=settings_for(server.url))

        async def kill_once_listed() -> None:
            await m.asked.wait()  # the model call is made: the tools were listed before it
            await server.kill()
            m.gate.set()  # now the model calls the tool

        killer = asyncio.create_task(kill_once_listed())
        events = await run(provider)
        await killer
    assert server.process.returncode is not None
    assert "tools__echo" in tool_names(m.requests[0])
    assert types_of(events, "tool.running", "tool.completed", "tool.failed", "run.") == [
        "run.started",
        "tool.running",
        "tool.failed",
        "run.completed",
    ]
    error = of_type(events, "tool.failed")[0]["payload"]["error"]
    assert error["code"] == "mcp_unavailable" and "tools" in error["message"]
    assert len(m.requests) == 2
    assert tool_result_texts(m.requests[1]) == [error["message"]]
    assert "unreachable" in error["message"]


async def test_tool_list_change_reaches_the_next_model_call() -> None:
    responses = [openai_frames(tool_calls=[("c1", "tools__grow", "{}")]), openai_frames(text="ok")]
    async with serve_mcp() as server, serve_mock(responses) as m:
        await run(OpenAIChatProvider(url=m.url, model="m", mcp=settings_for(server.url)))
    assert "tools__extra" not in tool_names(m.requests[0])
    assert "tools__extra" in tool_names(m.requests[1])


async def test_abort_during_slow_cancels_the_call_on_the_server() -> None:
    calls = [("c1", "tools__slow", '{"seconds":30}')]
    async with serve_mcp() as server, serve_mock([openai_frames(tool_calls=calls)]) as m:
        provider = OpenAIChatProvider(url=m.url, model="m", mcp=settings_for(server.url))
        options = make_options(wait_timeout_seconds=20)

        async def abort_once_the_server_runs_it() -> None:
            await server.server.slow_started.wait()
            options.signal.abort()

        aborter = asyncio.create_task(abort_once_the_server_runs_it())
        events = await run_collect(provider, {"prompt": "go"}, options=options)
        await aborter
        await asyncio.wait_for(server.server.cancel_seen.wait(), 5)
    assert types_of(events, "tool.cancelled", "run.") == [
        "run.started",
        "tool.cancelled",
        "run.cancelled",
    ]
    assert [name for name, _ in server.server.cancelled] == ["slow"]


@pytest.mark.parametrize("api", list(APIS))
async def test_approval_then_call_on_every_api(api: str) -> None:
    make, calls, text = APIS[api]

    def approve(events: list[AgentEvent]) -> Command:
        approval = of_type(events, "approval.requested")[-1]["payload"]
        return Command(
            "approval.resolve", {"approvalId": approval["approvalId"], "decision": "approved"}
        )

    async with serve_mcp() as server:
        responses = [calls([("call_1", "tools__echo", '{"text":"ok"}')]), text("done")]
        async with serve_mock(responses) as mock:
            settings = settings_for(server.url, approval="always")
            provider = make(url=mock.url, model="m", mcp=settings)
            events = await run(provider, commands=[approve])
    assert types_of(events, "approval.", "tool.running", "tool.completed") == [
        "approval.requested",
        "approval.resolved",
        "tool.running",
        "tool.completed",
    ]
    assert server.server.calls == [("echo", {"text": "ok", "times": 1})]
    assert tool_result_texts(mock.requests[1]) == ["ok"]
