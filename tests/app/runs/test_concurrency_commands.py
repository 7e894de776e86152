"""Commands under concurrency and across runs: a target id reused by a later run gets its own
command (the derived idempotency key covers the target's run), concurrent retries of one command
have one effect, and a command's refusal follows its target (the route's 409 once it ended)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.app.runs.concurrency_support import CountingProvider, Gateways, gateways
from tests.app.support.helpers import start_run, wait_state

#: Also on the Redis Cluster backend (issue 52).
pytestmark = pytest.mark.on_redis_cluster

__all__ = ["gateways"]

KEY = "cc"
BASE = f"/v1/conversations/{KEY}"
RETRIES = 8


def _status_of(state: dict[str, Any], run_id: str) -> str:
    return str(state["agentState"]["runs"].get(run_id, {}).get("status"))


def _run_is(run_id: str, check: Callable[[str], bool]) -> Callable[[dict[str, Any]], bool]:
    return lambda state: check(_status_of(state, run_id))


def _waiting(table: str, run_id: str, status: str = "waiting") -> Callable[[dict[str, Any]], bool]:
    def check(state: dict[str, Any]) -> bool:
        return any(
            entity["runId"] == run_id and entity["status"] == status
            for entity in state["agentState"][table].values()
        )

    return check


async def _concurrent(client: httpx.AsyncClient, path: str, body: Any) -> list[httpx.Response]:
    return list(await asyncio.gather(*(client.post(path, json=body) for _ in range(RETRIES))))


async def test_a_later_run_reusing_an_approval_id_gets_its_command(gateways: Gateways) -> None:
    provider = CountingProvider()
    gw = await gateways(providers={"demo": provider})
    path = f"{BASE}/approvals/approval-1"
    body = {"decision": "approved"}
    async with gw.client() as client:
        for turn in range(3):  # every run asks approval-1; the same body approves it each time
            run = await start_run(client, KEY, "approval:approval-1 text:1")
            await wait_state(client, KEY, _waiting("approvals", run["runId"]))
            answers = await _concurrent(client, path, body)
            assert {a.status_code for a in answers} == {202}, [a.text for a in answers]
            assert {a.json()["runId"] for a in answers} == {run["runId"]}, turn
            state = await wait_state(
                client, KEY, _run_is(run["runId"], lambda status: status != "running")
            )
            assert _status_of(state, run["runId"]) == "completed"
    resolves = [c for c in provider.commands if c.type == "approval.resolve"]
    assert len(resolves) == 3  # one effect per run, whatever the retries


async def test_a_later_run_reusing_a_tool_id_gets_its_result(gateways: Gateways) -> None:
    gw = await gateways(providers={"demo": CountingProvider()})
    path = f"{BASE}/tools/call-weather/result"
    async with gw.client() as client:
        for _ in range(2):
            run = await start_run(client, KEY, "apptool:call-weather")
            await wait_state(client, KEY, _waiting("toolCalls", run["runId"], "running"))
            answers = await _concurrent(client, path, {"result": {"t": 20}})
            assert {a.status_code for a in answers} == {202}, [a.text for a in answers]
            assert {a.json()["runId"] for a in answers} == {run["runId"]}
            await wait_state(client, KEY, _run_is(run["runId"], lambda status: status != "running"))


async def test_command_refusals_follow_the_target_once_its_run_ended(gateways: Gateways) -> None:
    gw = await gateways(providers={"demo": CountingProvider()})
    async with gw.client() as client:
        run = await start_run(client, KEY, "apptool:t1 approval:a1")
        await wait_state(client, KEY, _waiting("toolCalls", run["runId"], "running"))
        abort = client.post(f"{BASE}/abort", json={"runId": run["runId"]})
        results = [
            client.post(f"{BASE}/tools/t1/result", json={"result": i}) for i in range(RETRIES)
        ]
        answers = await asyncio.gather(abort, *results)
        assert answers[0].status_code == 202
        await wait_state(client, KEY, lambda s: _status_of(s, run["runId"]) == "cancelled")
        codes = {
            (a.status_code, a.json().get("error", {}).get("code")) for a in answers[1:]
        }  # each raced the abort: accepted, or refused as the tool no longer awaits
        assert codes <= {(202, None), (409, "tool_not_awaiting_result")}, codes
        after = await client.post(f"{BASE}/tools/t1/result", json={"result": "late"})
        assert (after.status_code, after.json()["error"]["code"]) == (
            409,
            "tool_not_awaiting_result",
        )
        retry = await client.post(f"{BASE}/tools/t1/retry")
        assert (retry.status_code, retry.json()["error"]["code"]) == (409, "tool_not_retryable")
        unknown = await client.post(f"{BASE}/tools/nope/result", json={"result": 1})
        assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "tool_not_found")


async def test_a_command_addresses_the_latest_run_that_has_its_target(gateways: Gateways) -> None:
    """With no run running, a target id that several runs used names the latest run's entity:
    its state decides the answer, not an earlier run's entity of the same id."""
    gw = await gateways(providers={"demo": CountingProvider()})

    def code(answer: httpx.Response) -> tuple[int, str]:
        return answer.status_code, answer.json()["error"]["code"]

    async with gw.client() as client:
        for prompt in ("failtool:t", "oktool:t", "oktool:u", "failtool:u"):
            run = await start_run(client, KEY, prompt)
            await wait_state(
                client, KEY, _run_is(run["runId"], lambda status: status == "completed")
            )
        # t: failed and retryable in the first run, completed in the latest: not retryable.
        assert code(await client.post(f"{BASE}/tools/t/retry")) == (409, "tool_not_retryable")
        # u: completed first, failed and retryable in the latest, whose run has ended.
        assert code(await client.post(f"{BASE}/tools/u/retry")) == (409, "run_not_running")
