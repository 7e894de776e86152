"""AG-UI continuations (§9): one gateway run spans the upstream requests of a tool round trip
or an interrupt → resume, whose RUN_STARTED / RUN_FINISHED are never mapped twice."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from websockets.asyncio.server import ServerConnection, serve

from providers.ag_ui import AguiProvider
from providers.contract import AgentEvent, Command
from providers.testing import make_options, run_collect
from providers.transports import IterableTransport, WebSocketTransport
from providers.validator import validate_agent_provider_events
from tests.providers.support.replay_helpers import assistant_texts, terminal, tool_calls


def upstream_run(run_id: str, *events: dict[str, Any], outcome: Any = None) -> list[dict[str, Any]]:
    finished: dict[str, Any] = {"type": "RUN_FINISHED", "threadId": "t", "runId": run_id}
    if outcome is not None:
        finished["outcome"] = outcome
    return [{"type": "RUN_STARTED", "threadId": "t", "runId": run_id}, *events, finished]


def text(message_id: str, content: str) -> list[dict[str, Any]]:
    return [
        {"type": "TEXT_MESSAGE_START", "messageId": message_id, "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": content},
        {"type": "TEXT_MESSAGE_END", "messageId": message_id},
    ]


def tool(call_id: str, name: str, args: str) -> list[dict[str, Any]]:
    return [
        {"type": "TOOL_CALL_START", "toolCallId": call_id, "toolCallName": name},
        {"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": args},
        {"type": "TOOL_CALL_END", "toolCallId": call_id},
    ]


def interrupt(
    *ids: str, tool_call_id: str | None = None, expires_at: str | None = None
) -> dict[str, Any]:
    items = []
    for ident in ids:
        item: dict[str, Any] = {"id": ident, "reason": "approval_required"}
        if tool_call_id:
            item["toolCallId"] = tool_call_id
        if expires_at:
            item["expiresAt"] = expires_at
        items.append(item)
    return {"type": "interrupt", "interrupts": items}


async def run(
    turns: list[list[dict[str, Any]]],
    *,
    commands: list[Any] = (),  # type: ignore[assignment]
    tools: list[dict[str, Any]] = (),  # type: ignore[assignment]
    abort_when: Any = None,
    wait_timeout: float = 5,
) -> tuple[list[AgentEvent], list[Any]]:
    provider = AguiProvider()
    requests: list[Any] = []
    remaining = list(turns)

    def source(request: Any, _signal: Any) -> list[Any]:
        requests.append(request.json)
        return remaining.pop(0) if remaining else []

    provider.transport = IterableTransport(source, kind="sse")
    options = make_options(wait_timeout_seconds=wait_timeout)
    events = await run_collect(
        provider,
        {"prompt": "go", "tools": list(tools)},
        options=options,
        commands=commands,
        abort_when=abort_when,
    )
    assert validate_agent_provider_events(provider.capabilities, events) == []
    return events, requests


def count(events: list[AgentEvent], kind: str) -> int:
    return sum(e["type"] == kind for e in events)


async def test_rejected_interrupt_resumes_with_the_decision_and_fails_its_tool() -> None:
    turns = [
        upstream_run(
            "u1",
            *tool("call_1", "delete", '{"n":3}'),
            outcome=interrupt("int_1", tool_call_id="call_1"),
        ),
        upstream_run("u2", *text("m2", "Cancelled, nothing deleted.")),
    ]
    reject = Command("approval.resolve", {"approvalId": "int_1", "decision": "rejected"})
    events, requests = await run(turns, commands=[reject])
    assert count(events, "run.started") == 1 and count(events, "run.completed") == 1
    assert tool_calls(events) == [("delete", {"n": 3}, "failed")]
    failed = next(e for e in events if e["type"] == "tool.failed")
    assert failed["payload"]["error"]["code"] == "approval_rejected"
    assert requests[1]["resume"] == [
        {"interruptId": "int_1", "status": "resolved", "payload": {"decision": "rejected"}}
    ]
    assert requests[1]["parentRunId"] == "u1"  # the upstream run it continues
    assert requests[1]["runId"] == "run_test.2"


async def test_two_interrupts_continue_only_when_both_are_decided() -> None:
    turns = [upstream_run("u1", outcome=interrupt("a", "b")), upstream_run("u2", *text("m", "ok"))]
    commands = [
        Command("approval.resolve", {"approvalId": "a", "decision": "approved"}),
        Command("approval.resolve", {"approvalId": "b", "decision": "modified", "data": {"x": 1}}),
    ]
    events, requests = await run(turns, commands=commands)
    assert len(requests) == 2
    assert [r["interruptId"] for r in requests[1]["resume"]] == ["a", "b"]
    assert requests[1]["resume"][1]["payload"] == {"decision": "modified", "data": {"x": 1}}
    assert terminal(events)["type"] == "run.completed"


async def test_parallel_frontend_tools_continue_after_every_result() -> None:
    tools = [{"name": "pick", "description": "d"}, {"name": "show", "description": "d"}]
    turns = [
        upstream_run("u1", *tool("c1", "pick", "{}"), *tool("c2", "show", '{"v":1}')),
        upstream_run("u2", *text("m", "Both done.")),
    ]
    commands = [
        Command("tool.submit_result", {"toolCallId": "c2", "result": "shown"}),
        Command("tool.submit_result", {"toolCallId": "c1", "result": "picked"}),
    ]
    events, requests = await run(turns, commands=commands, tools=tools)
    assert len(requests) == 2
    tool_messages = [m for m in requests[1]["messages"] if m["role"] == "tool"]
    assert {m["toolCallId"]: m["content"] for m in tool_messages} == {
        "c1": "picked",
        "c2": "shown",
    }
    assert assistant_texts(events) == ["Both done."]
    assert count(events, "run.started") == 1


async def test_expired_interrupt_resumes_cancelled() -> None:
    turns = [
        upstream_run("u1", outcome=interrupt("int_1", expires_at="1970-01-01T00:00:00Z")),
        upstream_run("u2", *text("m", "Expired, skipped.")),
    ]
    events, requests = await run(turns)
    resolved = next(e for e in events if e["type"] == "approval.resolved")
    assert resolved["payload"]["decision"] == "expired"
    assert requests[1]["resume"] == [{"interruptId": "int_1", "status": "cancelled"}]
    assert terminal(events)["type"] == "run.completed"


async def test_abort_while_waiting_expires_the_approval_and_cancels() -> None:
    turns = [upstream_run("u1", outcome=interrupt("int_1"))]
    events, requests = await run(
        turns, abort_when=lambda evs: evs[-1]["type"] == "approval.requested"
    )
    assert [e["type"] for e in events][-2:] == ["approval.resolved", "run.cancelled"]
    assert len(requests) == 1


async def test_wait_timeout_fails_the_frontend_tool() -> None:
    turns = [upstream_run("u1", *tool("c1", "pick", "{}"))]
    events, _ = await run(turns, tools=[{"name": "pick", "description": "d"}], wait_timeout=0.05)
    failed = next(e for e in events if e["type"] == "tool.failed")
    assert failed["payload"]["error"]["code"] == "tool_result_timeout"
    assert terminal(events)["payload"]["error"]["code"] == "wait_timeout"


async def test_upstream_cancelled_outcome_cancels_the_run() -> None:
    events, _ = await run(
        [upstream_run("u1", *text("m", "partial"), outcome={"type": "cancelled"})]
    )
    assert terminal(events)["type"] == "run.cancelled"


async def test_agui_over_websocket_with_a_resume_on_a_new_socket() -> None:
    bodies: list[Any] = []

    async def handler(socket: ServerConnection) -> None:
        body = orjson.loads(await socket.recv())
        bodies.append(body)
        if len(bodies) == 1:
            frames = upstream_run(
                body["runId"], *text("m1", "Approve?"), outcome=interrupt("int_ws")
            )
        else:
            frames = upstream_run(body["runId"], *text("m2", "Done over WS."))
        for frame in frames:
            await socket.send(orjson.dumps(frame).decode())
        await socket.close()

    async with serve(handler, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        provider = AguiProvider(url=f"ws://127.0.0.1:{port}/agent", transport=WebSocketTransport())
        approve = Command("approval.resolve", {"approvalId": "int_ws", "decision": "approved"})
        options = make_options(wait_timeout_seconds=5)
        events = await asyncio.wait_for(
            run_collect(provider, {"prompt": "go"}, options=options, commands=[approve]), 20
        )
    assert validate_agent_provider_events(provider.capabilities, events) == []
    assert assistant_texts(events) == ["Approve?", "Done over WS."]
    assert bodies[1]["resume"][0]["interruptId"] == "int_ws"
    assert provider.capabilities.transports == ("websocket",)
