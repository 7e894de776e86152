"""Command routes: approvals, tool results, tool retry — refusals and idempotency."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.app.support.gateway_server import RunningGateway, StartGateway, make_settings
from tests.app.support.helpers import start_run, wait_state
from tests.app.support.scripted_provider import ScriptedProvider
from tests.support import eventually

KEY = "cmd"
BASE = f"/v1/conversations/{KEY}"


@pytest.fixture
def provider() -> ScriptedProvider:
    return ScriptedProvider()


@pytest.fixture
async def gw(start_gateway: StartGateway, provider: ScriptedProvider) -> RunningGateway:
    return await start_gateway(make_settings(), providers={"demo": provider})


def code(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


async def waiting_approval(client: httpx.AsyncClient, prompt: str) -> dict[str, Any]:
    run = await start_run(client, KEY, prompt)
    await wait_state(
        client,
        KEY,
        lambda s: any(a["status"] == "waiting" for a in s["agentState"]["approvals"].values()),
    )
    return run


async def test_approval_flow_and_refusals(gw: RunningGateway) -> None:
    async with gw.client() as client:
        missing = await client.post(f"{BASE}/approvals/a1", json={"decision": "approved"})
        assert code(missing) == (404, "conversation_not_found")
        run = await waiting_approval(client, "approval:a1")
        assert code(await client.post(f"{BASE}/approvals/zz", json={"decision": "approved"})) == (
            404,
            "approval_not_found",
        )
        bad = await client.post(f"{BASE}/approvals/a1", json={"decision": "maybe"})
        assert code(bad) == (422, "invalid_request")
        assert code(await client.post(f"{BASE}/approvals/a1", json={"decision": "modified"})) == (
            422,
            "approval_not_editable",
        )
        assert code(
            await client.post(
                f"{BASE}/approvals/a1", json={"decision": "approved", "expectedVersion": 7}
            )
        ) == (409, "version_mismatch")
        ok = await client.post(
            f"{BASE}/approvals/a1",
            json={"decision": "approved", "expectedVersion": 1},
            headers={"Idempotency-Key": "k1"},
        )
        assert ok.status_code == 202
        assert ok.json() == {
            "conversationKey": KEY,
            "runId": run["runId"],
            "command": "approval.resolve",
            "targetId": "a1",
        }
        again = await client.post(
            f"{BASE}/approvals/a1",
            json={"decision": "approved", "expectedVersion": 1},
            headers={"Idempotency-Key": "k1"},
        )
        assert (again.status_code, again.json()) == (202, ok.json())
        reused = await client.post(
            f"{BASE}/approvals/a1",
            json={"decision": "rejected"},
            headers={"Idempotency-Key": "k1"},
        )
        assert code(reused) == (409, "idempotency_key_reused")
        state = await wait_state(client, KEY, lambda s: not s["isRequesting"])
        approval = next(iter(state["agentState"]["approvals"].values()))
        assert (approval["status"], approval["decision"]) == ("completed", "approved")
        late = await client.post(f"{BASE}/approvals/a1", json={"decision": "rejected"})
        assert code(late) == (409, "approval_already_resolved")  # the target's code, run ended


async def test_second_resolution_is_already_resolved(gw: RunningGateway) -> None:
    async with gw.client() as client:
        await waiting_approval(client, "approval:a1 approval:a2")
        first = await client.post(f"{BASE}/approvals/a1", json={"decision": "approved"})
        assert first.status_code == 202
        await wait_state(
            client,
            KEY,
            lambda s: any(
                a["id"] == "a1" and a["status"] == "completed"
                for a in s["agentState"]["approvals"].values()
            ),
        )
        second = await client.post(f"{BASE}/approvals/a1", json={"decision": "rejected"})
        assert code(second) == (409, "approval_already_resolved")
        same = await client.post(f"{BASE}/approvals/a1", json={"decision": "approved"})
        assert same.status_code == 202 and same.json() == first.json()  # derived key: replay


async def test_modified_on_an_editable_approval(gw: RunningGateway) -> None:
    async with gw.client() as client:
        await waiting_approval(client, "approval:a1:editable")
        response = await client.post(
            f"{BASE}/approvals/a1", json={"decision": "modified", "data": {"x": 1}}
        )
        assert response.status_code == 202
        state = await wait_state(client, KEY, lambda s: not s["isRequesting"])
        approval = next(iter(state["agentState"]["approvals"].values()))
        assert approval["decision"] == "modified" and approval["data"] == {"x": 1}


async def test_an_approval_that_expired_after_it_was_requested_is_410(
    gw: RunningGateway, provider: ScriptedProvider
) -> None:
    """Requested live (``expiresAt`` ahead), it expires while still waiting: the run's stream
    is held upstream (gate), so only the gateway's own check can tell it expired."""
    async with gw.client() as client:
        await start_run(client, KEY, "approval:a1:ttl=2 gate:hold")
        state = await wait_state(client, KEY, lambda s: len(s["agentState"]["approvals"]) == 1)
        approval = next(iter(state["agentState"]["approvals"].values()))
        assert approval["status"] == "waiting"
        expires_at = approval["expiresAt"]
        # Live when requested: checked past the expiry, refused on its version.
        early = await client.post(
            f"{BASE}/approvals/a1", json={"decision": "approved", "expectedVersion": 7}
        )
        assert code(early) == (409, "version_mismatch")
        await eventually(lambda: time.time() * 1000 >= expires_at, what="expiresAt passed")
        response = await client.post(f"{BASE}/approvals/a1", json={"decision": "approved"})
        assert code(response) == (410, "approval_expired")
        state = (await client.get(f"{BASE}/state")).json()
        approval = next(iter(state["agentState"]["approvals"].values()))
        assert approval["status"] == "waiting"  # the 410 came before the runner's expiry
        assert provider.commands == []  # nothing reached the provider
        provider.gates["hold"].set()  # the stream ends: the runner expires it
        state = await wait_state(client, KEY, lambda s: not s["isRequesting"])
        approval = next(iter(state["agentState"]["approvals"].values()))
        assert approval["decision"] == "expired"
        late = await client.post(f"{BASE}/approvals/a1", json={"decision": "approved"})
        assert code(late) == (409, "approval_already_resolved")


async def test_an_approval_the_runner_expired_is_already_resolved(gw: RunningGateway) -> None:
    """Already past its ``expiresAt`` when requested, the runner expires it once the stream
    ends: then it is resolved, 409."""
    async with gw.client() as client:
        await start_run(client, KEY, "approval:a1:expired")
        state = await wait_state(
            client,
            KEY,
            lambda s: any(a["status"] != "waiting" for a in s["agentState"]["approvals"].values()),
        )
        approval = next(iter(state["agentState"]["approvals"].values()))
        assert approval["decision"] == "expired"
        response = await client.post(f"{BASE}/approvals/a1", json={"decision": "approved"})
        assert code(response) == (409, "approval_already_resolved")


async def test_tool_result_flow(gw: RunningGateway) -> None:
    async with gw.client() as client:
        missing = await client.post(f"{BASE}/tools/t1/result", json={"result": 1})
        assert code(missing) == (404, "conversation_not_found")
        run = await start_run(client, KEY, "apptool:t1")
        await wait_state(
            client,
            KEY,
            lambda s: any(t["status"] == "running" for t in s["agentState"]["toolCalls"].values()),
        )
        assert code(await client.post(f"{BASE}/tools/zz/result", json={"result": 1})) == (
            404,
            "tool_not_found",
        )
        assert code(await client.post(f"{BASE}/tools/t1/result", json={})) == (
            422,
            "invalid_request",
        )
        retry = await client.post(f"{BASE}/tools/t1/retry")
        assert code(retry) == (409, "tool_not_retryable")
        ok = await client.post(f"{BASE}/tools/t1/result", json={"result": {"answer": 42}})
        assert ok.status_code == 202
        assert ok.json() == {
            "conversationKey": KEY,
            "runId": run["runId"],
            "command": "tool.submit_result",
            "targetId": "t1",
        }
        state = await wait_state(client, KEY, lambda s: not s["isRequesting"])
        tool = next(iter(state["agentState"]["toolCalls"].values()))
        assert (tool["status"], tool["result"]) == ("completed", {"answer": 42})
        other = await client.post(f"{BASE}/tools/t1/result", json={"result": 2})
        assert code(other) == (409, "tool_not_awaiting_result")  # the target's code, run ended


async def test_tool_not_awaiting_result_while_run_is_running(gw: RunningGateway) -> None:
    async with gw.client() as client:
        await start_run(client, KEY, "apptool:t1 approval:a1")
        await wait_state(client, KEY, lambda s: len(s["agentState"]["approvals"]) == 1)
        first = await client.post(f"{BASE}/tools/t1/result", json={"result": 1})
        assert first.status_code == 202
        await wait_state(
            client,
            KEY,
            lambda s: any(
                t["status"] == "completed" for t in s["agentState"]["toolCalls"].values()
            ),
        )
        again = await client.post(f"{BASE}/tools/t1/result", json={"result": 2})
        assert code(again) == (409, "tool_not_awaiting_result")
