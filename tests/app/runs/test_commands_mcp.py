"""Commands on server tools (MCP) through the gateway's HTTP routes, on every backend: the
approval of a server tool is checked against the call it was given for (version, the tool's
input schema), the app cannot submit a server tool's result, and on Redis an approval sent to
the instance that does not own the run still reaches the owner, which runs the call once."""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.backends import ConversationRef
from app.config import Settings
from app.observability.logs import configure_logging
from tests.app.support.gateway_server import RunningGateway, StartGateway, make_settings
from tests.app.support.helpers import collect_sse, start_run, terminal, wait_state
from tests.mcp_server import ServedMcp, serve_mcp_in_task
from tests.providers.support.mock_upstreams import MockUpstream, openai_frames, serve_mock

KEY = "mcp-cmd"
BASE = f"/v1/conversations/{KEY}"
TOKEN = "tok-9f3e-never-logged"
REF = ConversationRef("anonymous", KEY)


@pytest.fixture
async def mcp_server() -> AsyncIterator[ServedMcp]:
    async with serve_mcp_in_task(TOKEN) as served:
        yield served


@pytest.fixture
async def upstream() -> AsyncIterator[MockUpstream]:
    calls = [("call_1", "tools__echo", '{"text":"hi"}')]
    async with serve_mock([openai_frames(tool_calls=calls), openai_frames(text="done")]) as mock:
        yield mock


def settings_for(mcp: ServedMcp, upstream: MockUpstream, **server: Any) -> Settings:
    server = {"approval": "always", "editable": True, **server}
    return make_settings(
        gateway={"default_provider": "chat", "heartbeat_seconds": 1},
        providers={
            "chat": {
                "kind": "openai-chat",
                "url": upstream.url,
                "model": "m",
                "mcp_servers": ["tools"],
            }
        },
        mcp={
            "servers": {
                "tools": {
                    "url": mcp.url,
                    "headers": {"Authorization": f"Bearer {TOKEN}"},
                    **server,
                }
            }
        },
    )


def waiting(state: dict[str, Any]) -> dict[str, Any] | None:
    approvals = state["agentState"]["approvals"].values()
    return next((a for a in approvals if a["status"] == "waiting"), None)


def run_ended(state: dict[str, Any]) -> bool:
    runs = state["agentState"]["runs"].values()
    return any(r["status"] in ("completed", "failed", "cancelled") for r in runs)


async def test_server_tool_approval_refusals_then_modified_runs_the_edit(
    start_gateway: StartGateway, mcp_server: ServedMcp, upstream: MockUpstream
) -> None:
    gw = await start_gateway(settings_for(mcp_server, upstream))
    async with gw.client() as client:
        await start_run(client, KEY, "go")
        state = await wait_state(client, KEY, lambda s: waiting(s) is not None)
        approval = waiting(state)
        assert approval is not None and approval["data"] == {"text": "hi"}
        assert approval["meta"]["server"] == "tools" and approval["toolCallId"] == "call_1"
        route = f"{BASE}/approvals/{approval['id']}"
        version = approval["version"]

        invalid = await client.post(
            route, json={"decision": "modified", "data": {"times": "x"}, "expectedVersion": version}
        )
        assert invalid.status_code == 422, invalid.text
        error = invalid.json()["error"]
        assert error["code"] == "approval_data_invalid"
        assert {item["path"] for item in error["details"]["errors"]} == {"", "times"}

        stale = await client.post(route, json={"decision": "approved", "expectedVersion": "v0"})
        assert stale.status_code == 409 and stale.json()["error"]["code"] == "version_mismatch"

        submit = await client.post(f"{BASE}/tools/call_1/result", json={"result": "forged"})
        assert submit.status_code == 409
        assert submit.json()["error"]["code"] == "tool_not_awaiting_result"

        state = await wait_state(client, KEY, lambda s: waiting(s) is not None)  # still waits
        edited = {"text": "edited", "times": 2}
        accepted = await client.post(
            route, json={"decision": "modified", "data": edited, "expectedVersion": version}
        )
        assert accepted.status_code == 202, accepted.text
        state = await wait_state(client, KEY, run_ended)
    assert mcp_server.server.calls == [("echo", edited)]
    tool = next(iter(state["agentState"]["toolCalls"].values()))
    assert tool["status"] == "completed" and tool["result"] == "edited edited"
    assert tool["meta"]["executor"] == "gateway"
    assert [r["status"] for r in state["agentState"]["runs"].values()] == ["completed"]
    assert upstream.requests[1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "edited edited",
    }


async def test_rejected_over_http_and_no_header_value_in_any_log(
    start_gateway: StartGateway,
    mcp_server: ServedMcp,
    upstream: MockUpstream,
) -> None:
    logs = io.StringIO()
    handler = configure_logging("json", level=logging.DEBUG, stream=logs)
    try:
        state, events = await _rejected_run(start_gateway, mcp_server, upstream)
    finally:
        logging.getLogger().removeHandler(handler)
    tool = next(iter(state["agentState"]["toolCalls"].values()))
    assert tool["status"] == "failed" and tool["error"]["code"] == "tool_rejected"
    assert mcp_server.server.calls == []
    assert mcp_server.server.authorizations == []  # listed, never called
    assert "agent_gateway" in logs.getvalue(), "the run logged nothing at all"
    everything = logs.getvalue() + events + str(state)
    assert TOKEN not in everything


async def _rejected_run(
    start_gateway: StartGateway, mcp_server: ServedMcp, upstream: MockUpstream
) -> tuple[dict[str, Any], str]:
    gw = await start_gateway(settings_for(mcp_server, upstream, editable=False))
    async with gw.client() as client:
        await start_run(client, KEY, "go")
        state = await wait_state(client, KEY, lambda s: waiting(s) is not None)
        approval = waiting(state)
        assert approval is not None and approval["editable"] is False
        route = f"{BASE}/approvals/{approval['id']}"
        not_editable = await client.post(route, json={"decision": "modified", "data": {}})
        assert not_editable.json()["error"]["code"] == "approval_not_editable"
        assert (await client.post(route, json={"decision": "rejected"})).status_code == 202
        state = await wait_state(client, KEY, run_ended)
        frames = await collect_sse(client, f"{BASE}/events", params={"since": "0"}, stop=terminal)
        events = "".join(frame.data for frame in frames)
    return state, events


@pytest.mark.only_backend("redis", reason="two instances share a run only on Redis")
async def test_approval_sent_to_the_instance_that_does_not_own_the_run(
    start_gateway: StartGateway, mcp_server: ServedMcp, upstream: MockUpstream
) -> None:
    settings = settings_for(mcp_server, upstream)
    owner: RunningGateway = await start_gateway(settings)
    other: RunningGateway = await start_gateway(settings)
    async with owner.client() as a, other.client() as b:
        await start_run(a, KEY, "go")
        state = await wait_state(b, KEY, lambda s: waiting(s) is not None)
        approval = waiting(state)
        assert approval is not None
        assert owner.gateway.runs.active(REF) is not None
        assert other.gateway.runs.active(REF) is None
        route = f"{BASE}/approvals/{approval['id']}"
        invalid = await b.post(route, json={"decision": "modified", "data": {"text": 5}})
        assert invalid.json()["error"]["code"] == "approval_data_invalid"
        body = {"decision": "approved", "expectedVersion": approval["version"]}
        assert (await b.post(route, json=body)).status_code == 202
        state = await wait_state(b, KEY, run_ended)
    assert [r["status"] for r in state["agentState"]["runs"].values()] == ["completed"]
    assert mcp_server.server.calls == [("echo", {"text": "hi", "times": 1})]


async def test_abort_cancels_the_call_on_the_mcp_server(
    start_gateway: StartGateway, mcp_server: ServedMcp
) -> None:
    calls = [("call_1", "tools__slow", '{"seconds": 60}')]
    async with serve_mock([openai_frames(tool_calls=calls)]) as upstream:
        gw = await start_gateway(settings_for(mcp_server, upstream, approval="never"))
        async with gw.client() as client:
            await start_run(client, KEY, "go")
            await asyncio.wait_for(mcp_server.server.slow_started.wait(), 10)
            aborted = await client.post(f"{BASE}/abort")
            assert aborted.status_code == 202, aborted.text
            await asyncio.wait_for(mcp_server.server.cancel_seen.wait(), 5)
            state = await wait_state(client, KEY, run_ended)
    assert [name for name, _ in mcp_server.server.cancelled] == ["slow"]
    tool = next(iter(state["agentState"]["toolCalls"].values()))
    assert tool["status"] == "cancelled"
    assert [r["status"] for r in state["agentState"]["runs"].values()] == ["cancelled"]
