"""``POST /v1/ag-ui/{provider}`` over a real gateway on loopback, in front of a scripted AG-UI
agent: every event kind parsed back with ``ag-ui-protocol``, a tool round trip and an interrupt
resumed within one gateway run, no echo, ids unique per thread, disconnect = abort before the
request's end and nothing after it, multitask, the request errors, and the auth, limits and
metrics of ``POST …/runs``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from ag_ui.core import (
    CustomEvent,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateSnapshotEvent,
    TextMessageContentEvent,
    TextMessageStartEvent,
    ToolCallStartEvent,
)

from tests.app.support.agui_client import WEATHER_TOOL, kinds, run_input, stream_agui, user
from tests.app.support.agui_upstream import AguiAgent, agui_settings, serve_agui_agent
from tests.app.support.gateway_server import RunningGateway, StartGateway
from tests.app.support.helpers import metric_sample, wait_state
from tests.support import eventually, eventually_async


@pytest.fixture
async def agent() -> AsyncIterator[AguiAgent]:
    async with serve_agui_agent() as served:
        yield served


@pytest.fixture
async def gateway(agent: AguiAgent, start_gateway: StartGateway) -> RunningGateway:
    return await start_gateway(agui_settings(agent))


def _text(events: list[Any]) -> str:
    return "".join(e.delta for e in events if isinstance(e, TextMessageContentEvent))


def _runs(state: dict[str, Any]) -> dict[str, Any]:
    runs: dict[str, Any] = state["agentState"]["runs"]
    return runs


async def test_every_event_kind_parses_back_and_an_interrupt_resumes_the_same_run(
    gateway: RunningGateway, agent: AguiAgent
) -> None:
    async with gateway.client() as client:
        first = await stream_agui(client, run_input("t-all", "c1", [user("everything")]))
        seen = set(kinds(first))
        assert kinds(first)[0] == "RUN_STARTED" and kinds(first)[-1] == "RUN_FINISHED"
        for kind in (
            "REASONING_START",
            "REASONING_MESSAGE_START",
            "REASONING_MESSAGE_CONTENT",
            "REASONING_MESSAGE_END",
            "REASONING_END",
            "STEP_STARTED",
            "STEP_FINISHED",
            "STATE_SNAPSHOT",
            "ACTIVITY_SNAPSHOT",
            "CUSTOM",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "TOOL_CALL_RESULT",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
        ):
            assert kind in seen, kind
        started = first[0]
        assert isinstance(started, RunStartedEvent)
        assert started.thread_id == "t-all" and started.run_id == "c1"
        snapshots = [e.snapshot for e in first if isinstance(e, StateSnapshotEvent)]
        assert snapshots[-1] == {"count": 2}
        assert any(isinstance(e, CustomEvent) and e.name == "progress" for e in first)
        finished = first[-1]
        assert isinstance(finished, RunFinishedEvent) and finished.outcome is not None
        assert finished.outcome.type == "interrupt"
        (interrupt,) = finished.outcome.interrupts
        assert interrupt.message == "Go ahead?" and interrupt.reason == "confirm"
        assert not any(isinstance(e, TextMessageStartEvent) and e.role == "user" for e in first)
        state = await wait_state(client, "t-all", lambda s: s["isRequesting"])
        (run_id,) = _runs(state)

        resume = [
            {"interruptId": interrupt.id, "status": "resolved", "payload": {"decision": "approved"}}
        ]
        second = await stream_agui(
            client, run_input("t-all", "c2", [user("everything")], resume=resume)
        )
        assert kinds(second)[0] == "RUN_STARTED"
        assert isinstance(second[0], RunStartedEvent) and second[0].run_id == "c2"
        assert isinstance(second[-1], RunFinishedEvent) and second[-1].outcome is None
        assert _text(second) == "Decision: approved."
        assert not any(
            isinstance(e, CustomEvent) and e.name == "approval.resolved" for e in second
        ), "the client's own decision is echoed"
        state = await wait_state(client, "t-all", lambda s: not s["isRequesting"])
        assert list(_runs(state)) == [run_id] and _runs(state)[run_id]["status"] == "completed"
    assert agent.requests[1]["resume"][0]["payload"] == {"decision": "approved"}

    async with gateway.client() as client:  # a failed run: RUN_ERROR with the error code
        failed = await stream_agui(client, run_input("t-fail", "c1", [user("fail")]))
    assert isinstance(failed[-1], RunErrorEvent) and failed[-1].code == "upstream_error"


@pytest.mark.parametrize(
    ("answer", "decision"),
    [
        ({"status": "resolved"}, "approved"),  # no decision = approved
        ({"status": "resolved", "payload": {"decision": "rejected"}}, "rejected"),
        ({"status": "cancelled"}, "rejected"),
    ],
)
async def test_resume_is_read_as_the_ag_ui_provider_reads_it(
    gateway: RunningGateway, agent: AguiAgent, answer: dict[str, Any], decision: str
) -> None:
    thread = f"t-resume-{decision}-{answer['status']}"
    async with gateway.client() as client:
        first = await stream_agui(client, run_input(thread, "c1", [user("approve it")]))
        finished = first[-1]
        assert isinstance(finished, RunFinishedEvent)
        assert isinstance(finished.outcome, RunFinishedInterruptOutcome)
        (interrupt,) = finished.outcome.interrupts
        resume = [{"interruptId": interrupt.id, **answer}]
        second = await stream_agui(client, run_input(thread, "c2", [], resume=resume))
        assert _text(second) == f"Decision: {decision}."
        state = await wait_state(client, thread, lambda s: not s["isRequesting"])
    (approval,) = state["agentState"]["approvals"].values()
    assert approval["status"] == "completed" and approval["decision"] == decision
    assert [r["status"] for r in _runs(state).values()] == ["completed"]
    assert agent.requests[-1]["resume"][0]["payload"]["decision"] == decision


async def test_frontend_tool_round_trip_in_two_requests_is_one_gateway_run(
    gateway: RunningGateway, agent: AguiAgent
) -> None:
    async with gateway.client() as client:
        body = run_input("t-tool", "c1", [user("weather in Paris?")], tools=[WEATHER_TOOL])
        first = await stream_agui(client, body)
        assert kinds(first)[-4:] == [
            "TOOL_CALL_ARGS",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "RUN_FINISHED",
        ]
        start = next(e for e in first if isinstance(e, ToolCallStartEvent))
        assert start.tool_call_name == "get_weather"
        finished = first[-1]
        assert isinstance(finished, RunFinishedEvent)
        assert isinstance(finished.outcome, RunFinishedSuccessOutcome)
        assert finished.outcome.pending_tool_call_ids == [start.tool_call_id]
        call = {
            "id": start.tool_call_id,
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
        messages = [
            user("weather in Paris?"),
            {"id": "a1", "role": "assistant", "toolCalls": [call]},
            {"id": "t1", "role": "tool", "toolCallId": start.tool_call_id, "content": "sunny"},
        ]
        second = await stream_agui(
            client, run_input("t-tool", "c2", messages, tools=[WEATHER_TOOL])
        )
        assert _text(second) == "It is sunny in Paris."
        assert "TOOL_CALL_RESULT" not in kinds(second), "the client's result is echoed"
        assert isinstance(second[-1], RunFinishedEvent)
        state = await wait_state(client, "t-tool", lambda s: not s["isRequesting"])
        (run,) = _runs(state).values()
        assert run["status"] == "completed"
        (tool,) = state["agentState"]["toolCalls"].values()
        assert tool["status"] == "completed" and tool["result"] == "sunny"
        # the same thread, a new turn: other message ids than the first turn's
        third = await stream_agui(client, run_input("t-tool", "c3", [*messages, user("hi", "u2")]))
        ids_before = {e.message_id for e in second if isinstance(e, TextMessageStartEvent)}
        ids_after = {e.message_id for e in third if isinstance(e, TextMessageStartEvent)}
        assert ids_after and ids_before.isdisjoint(ids_after)
        # Of the client's messages only the last user message is new: the gateway's history
        # is not rewritten by what the client sends again.
        state = await wait_state(client, "t-tool", lambda s: not s["isRequesting"])
        users = [m["message"] for m in state["messages"] if m["message"]["role"] == "user"]
        assert [m["content"] for m in users] == ["weather in Paris?", "hi"]
    assert [m["role"] for m in agent.requests[1]["messages"]][-1] == "tool"
    assert agent.requests[1]["messages"][-1]["content"] == "sunny"
    # The upstream of the new turn gets the gateway's history of the thread, then the new turn.
    sent = agent.requests[2]["messages"]
    assert [m["content"] for m in sent if m["role"] == "user"] == ["weather in Paris?", "hi"]
    assert [m["role"] for m in sent].count("tool") == 1


async def test_disconnect_before_the_end_aborts_the_run_and_closes_the_upstream(
    gateway: RunningGateway, agent: AguiAgent
) -> None:
    async with gateway.client() as client:
        body = run_input("t-abort", "c1", [user("slow")])
        events = await stream_agui(
            client, body, stop=lambda seen: "TEXT_MESSAGE_CONTENT" in kinds(seen)
        )
        assert kinds(events)[0] == "RUN_STARTED"
        state = await wait_state(
            client, "t-abort", lambda s: any(r["status"] == "cancelled" for r in _runs(s).values())
        )
        assert not state["isRequesting"]
    await asyncio.wait_for(agent.disconnected.wait(), 10)


async def test_disconnect_after_run_finished_waiting_on_the_client_aborts_nothing(
    gateway: RunningGateway,
) -> None:
    async with gateway.client() as client:
        body = run_input("t-wait", "c1", [user("weather?")], tools=[WEATHER_TOOL])
        events = await stream_agui(client, body)
        assert isinstance(events[-1], RunFinishedEvent)
    streams = gateway.gateway.runs.limits.open_streams
    # The response has run its end (and its abort check) once its stream slot is freed.
    await eventually(lambda: not streams, within=10, what="the stream's slot is freed")
    async with gateway.client() as client:
        state = await wait_state(client, "t-wait", lambda s: True)
        assert state["isRequesting"]
        assert [r["status"] for r in _runs(state).values()] == ["running"]


async def test_cancel_from_elsewhere_ends_the_stream_with_run_error_cancelled(
    gateway: RunningGateway,
) -> None:
    async with gateway.client() as client:
        reader = asyncio.create_task(
            stream_agui(client, run_input("t-cancel", "c1", [user("slow")]))
        )
        await wait_state(client, "t-cancel", lambda s: s["isRequesting"])
        aborted = await client.post("/v1/conversations/t-cancel/abort", json={})
        assert aborted.status_code == 202
        events = await asyncio.wait_for(reader, 10)
    assert isinstance(events[-1], RunErrorEvent) and events[-1].code == "cancelled"
    assert kinds(events).count("TEXT_MESSAGE_START") == kinds(events).count("TEXT_MESSAGE_END")


async def test_a_new_message_while_the_run_waits_follows_multitask(
    gateway: RunningGateway,
) -> None:
    async with gateway.client() as client:
        body = run_input("t-multi", "c1", [user("weather?")], tools=[WEATHER_TOOL])
        await stream_agui(client, body)
        refused = await client.post(
            "/v1/ag-ui/agent", json=run_input("t-multi", "c2", [user("hello")])
        )
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "run_in_progress"
        interrupting = run_input(
            "t-multi", "c3", [user("hello")], forwardedProps={"multitask": "interrupt"}
        )
        events = await stream_agui(client, interrupting)
        assert _text(events) == "Hello from the gateway!"
        state = await wait_state(client, "t-multi", lambda s: not s["isRequesting"])
        assert sorted(r["status"] for r in _runs(state).values()) == ["cancelled", "completed"]


@pytest.mark.parametrize(
    ("body", "provider", "status", "code"),
    [
        (run_input("bad key!", "c1", [user("hello")]), "agent", 422, "invalid_request"),
        (run_input("t-err", "c1", [user("hello")]), "nope", 404, "unknown_provider"),
        (
            run_input("t-err", "c1", [{"id": "a", "role": "assistant", "content": "x"}]),
            "agent",
            422,
            "invalid_request",
        ),
        ({"threadId": "t-err", "messages": []}, "agent", 422, "invalid_request"),
        (
            run_input(
                "t-err",
                "c1",
                [user("x")],
                resume=[{"interruptId": "approval-1", "status": "resolved"}],
            ),
            "agent",
            422,
            "invalid_request",
        ),
    ],
)
async def test_bad_requests_get_a_clear_error(
    gateway: RunningGateway, body: dict[str, Any], provider: str, status: int, code: str
) -> None:
    async with gateway.client() as client:
        response = await client.post(f"/v1/ag-ui/{provider}", json=body)
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code


async def test_auth_is_that_of_the_runs_route(
    agent: AguiAgent, start_gateway: StartGateway
) -> None:
    settings = agui_settings(agent)
    settings.auth.mode = "bearer"
    settings.auth.tokens = {"tok-a": "alice"}
    running = await start_gateway(settings)
    body = run_input("t-auth", "c1", [user("hello")])
    async with running.client() as client:
        refused = await client.post("/v1/ag-ui/agent", json=body)
        assert refused.status_code == 401
        client.headers["Authorization"] = "Bearer tok-a"
        events = await stream_agui(client, body)
        assert _text(events) == "Hello from the gateway!"
        assert (await client.get("/v1/conversations/t-auth/state")).status_code == 200


async def test_limits_and_metrics_are_those_of_the_runs_route(
    agent: AguiAgent, start_gateway: StartGateway
) -> None:
    settings = agui_settings(agent)
    settings.limits.max_input_bytes = 2048
    settings.limits.max_subscribers_per_conversation = 1
    settings.limits.runs_per_minute_per_principal = 2
    running = await start_gateway(settings)
    async with running.client() as client:
        too_big = await client.post(
            "/v1/ag-ui/agent", json=run_input("t-lim", "c0", [user("x" * 4096)])
        )
        assert too_big.status_code == 413, too_big.text
        assert too_big.json()["error"]["code"] == "payload_too_large"

        reader = asyncio.create_task(stream_agui(client, run_input("t-lim", "c1", [user("slow")])))
        await wait_state(client, "t-lim", lambda s: s["isRequesting"])
        # The open AG-UI stream holds the conversation's one subscriber slot, for the native
        # routes too (on Redis that count is cluster-wide).
        async with client.stream("GET", "/v1/conversations/t-lim/events") as refused:
            assert refused.status_code == 429
            assert orjson.loads(await refused.aread())["error"]["code"] == "too_many_subscribers"
        second = await client.post("/v1/ag-ui/agent", json=run_input("t-lim", "c2", [user("hi")]))
        assert second.status_code == 429
        assert second.json()["error"]["code"] == "too_many_subscribers"

        async def following() -> bool:
            return await metric_sample(client, "agent_gateway_subscribers", transport="sse") == 1

        await eventually_async(following, what="the AG-UI stream counted as an SSE subscriber")
        assert (
            await metric_sample(client, "agent_gateway_runs_started_total", provider="agent") == 1
        )
        assert (await client.post("/v1/conversations/t-lim/abort", json={})).status_code == 202
        cancelled = await asyncio.wait_for(reader, 10)
        assert isinstance(cancelled[-1], RunErrorEvent) and cancelled[-1].code == "cancelled"

        answered = await stream_agui(client, run_input("t-lim-2", "c1", [user("hello")]))
        assert _text(answered) == "Hello from the gateway!"
        limited = await client.post(
            "/v1/ag-ui/agent", json=run_input("t-lim-3", "c1", [user("hello")])
        )
        assert limited.status_code == 429
        assert limited.json()["error"]["code"] == "rate_limited"

        async def ended(outcome: str) -> float:
            name = "agent_gateway_runs_ended_total"
            return await metric_sample(client, name, provider="agent", outcome=outcome)

        async def both_ended() -> bool:
            return await ended("completed") == 1 and await ended("cancelled") == 1

        await eventually_async(both_ended, what="the completed and the cancelled run counted")
        assert (
            await metric_sample(client, "agent_gateway_runs_started_total", provider="agent") == 2
        )
        await eventually(lambda: not running.gateway.runs.limits.open_streams, within=10)
        assert await metric_sample(client, "agent_gateway_subscribers", transport="sse") == 0


@pytest.mark.only_backend("redis", reason="two instances share a conversation only on Redis")
async def test_tool_round_trip_across_two_instances(
    agent: AguiAgent, start_gateway: StartGateway
) -> None:
    first_instance = await start_gateway(agui_settings(agent))
    second_instance = await start_gateway(agui_settings(agent))
    async with first_instance.client() as client:
        body = run_input("t-two", "c1", [user("weather?")], tools=[WEATHER_TOOL])
        first = await stream_agui(client, body)
    start = next(e for e in first if isinstance(e, ToolCallStartEvent))
    assert isinstance(first[-1], RunFinishedEvent)
    call = {
        "id": start.tool_call_id,
        "type": "function",
        "function": {"name": "get_weather", "arguments": "{}"},
    }
    messages = [
        user("weather?"),
        {"id": "a1", "role": "assistant", "toolCalls": [call]},
        {"id": "t1", "role": "tool", "toolCallId": start.tool_call_id, "content": "sunny"},
    ]
    async with second_instance.client() as client:
        second = await stream_agui(client, run_input("t-two", "c2", messages))
        text = "".join(e.delta for e in second if isinstance(e, TextMessageContentEvent))
        assert text == "It is sunny in Paris."
        assert isinstance(second[-1], RunFinishedEvent)
        state = await wait_state(client, "t-two", lambda s: not s["isRequesting"])
    assert [r["status"] for r in state["agentState"]["runs"].values()] == ["completed"]
