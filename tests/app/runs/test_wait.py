"""``GET …/runs/{runId}`` and ``…/wait?timeout=``: the run's record; the long-poll returns as
soon as the run ends, and at the timeout with the run still running (also across instances)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from tests.app.support.cluster_support import cluster
from tests.app.support.gateway_server import RunningGateway, StartGateway, make_settings
from tests.app.support.helpers import start_run, wait_state
from tests.app.support.scripted_provider import ScriptedProvider
from tests.support import eventually

KEY = "wait-1"
BASE = f"/v1/conversations/{KEY}"


def code(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


@pytest.fixture
def provider() -> ScriptedProvider:
    return ScriptedProvider()


@pytest.fixture
async def gw(start_gateway: StartGateway, provider: ScriptedProvider) -> RunningGateway:
    return await start_gateway(make_settings(), providers={"demo": provider})


async def timed_wait(
    client: httpx.AsyncClient, run_id: str, seconds: float, base: str = BASE
) -> tuple[float, dict[str, Any]]:
    """``GET …/wait?timeout=seconds``: (elapsed, record)."""
    began = time.monotonic()
    response = await client.get(f"{base}/runs/{run_id}/wait", params={"timeout": seconds})
    assert response.status_code == 200, response.text
    return time.monotonic() - began, response.json()


#: A bound on an answer that should come at once (the run's end, an abort), far below the
#: long-poll's ``LONG`` timeout it would otherwise wait for: generous on a loaded machine.
#: Measured latencies belong in the benches.
SOON = 10.0
LONG = 60.0  # under the 120 s per-test timeout: a long-poll that waits it out fails here


async def _serving_one_request(gw: RunningGateway) -> None:
    requests = gw.server.server_state.tasks
    await eventually(lambda: len(requests) == 1, what="the wait request is being served")


async def test_wait_returns_as_soon_as_the_run_ends(
    gw: RunningGateway, provider: ScriptedProvider
) -> None:
    async with gw.client(timeout=LONG + 30) as client:
        run = await start_run(client, KEY, "gate:end text:2")
        waiter = asyncio.create_task(timed_wait(client, run["runId"], LONG))
        await _serving_one_request(gw)
        assert not waiter.done()  # the run is still running: the long-poll waits
        provider.gates["end"].set()
        _, record = await asyncio.wait_for(waiter, SOON)  # the run's end, not the timeout
        assert record["status"] == "completed"
        assert record["runId"] == run["runId"] and record["sessionId"] == run["sessionId"]
        assert {"createdAt", "updatedAt"} <= set(record)


async def test_wait_answers_at_the_timeout_with_the_run_still_running(gw: RunningGateway) -> None:
    async with gw.client() as client:
        run = await start_run(client, KEY, "gate:never")
        elapsed, record = await timed_wait(client, run["runId"], 1)
        assert record["status"] == "running"
        assert 0.95 <= elapsed < 1 + SOON, elapsed
        await client.post(f"{BASE}/abort", json={})


async def test_wait_returns_on_an_abort_from_elsewhere(gw: RunningGateway) -> None:
    async with gw.client(timeout=LONG + 30) as client:
        run = await start_run(client, KEY, "gate:never")
        waiter = asyncio.create_task(timed_wait(client, run["runId"], LONG))
        await _serving_one_request(gw)
        assert not waiter.done()
        assert (await client.post(f"{BASE}/abort", json={})).status_code == 202
        _, record = await asyncio.wait_for(waiter, SOON)  # the abort, not the timeout
        assert (record["status"], record["reason"]) == ("cancelled", "aborted")


async def test_wait_on_an_ended_run_answers_at_once_and_record_matches(
    gw: RunningGateway,
) -> None:
    async with gw.client(timeout=LONG + 30) as client:
        run = await start_run(client, KEY, "boom")
        await wait_state(client, KEY, lambda s: not s["isRequesting"])
        elapsed, record = await timed_wait(client, run["runId"], LONG)
        assert elapsed < SOON and record["status"] == "failed"
        assert isinstance(record["error"], dict) and record["error"]["code"]
        plain = await client.get(f"{BASE}/runs/{run['runId']}")
        assert plain.status_code == 200 and plain.json() == record


async def test_wait_follows_a_queued_run_to_its_end(
    gw: RunningGateway, provider: ScriptedProvider
) -> None:
    async with gw.client() as client:
        await start_run(client, KEY, "gate:hold")  # runs until the gate opens
        queued = await start_run(client, KEY, "text:1", multitask="enqueue")
        assert queued["status"] == "queued"
        record = (await client.get(f"{BASE}/runs/{queued['runId']}")).json()
        assert record["status"] == "queued"
        provider.gates["hold"].set()
        _, record = await timed_wait(client, queued["runId"], 20)
        assert record["status"] == "completed"


async def test_unknown_run_conversation_and_bad_timeout(gw: RunningGateway) -> None:
    async with gw.client() as client:
        missing = await client.get("/v1/conversations/nope/runs/run_x/wait")
        assert code(missing) == (404, "conversation_not_found")
        await start_run(client, KEY, "text:1")
        assert code(await client.get(f"{BASE}/runs/run_x")) == (404, "run_not_found")
        assert code(await client.get(f"{BASE}/runs/run_x/wait")) == (404, "run_not_found")
        for bad in ("0", "-1", "301", "soon"):
            response = await client.get(f"{BASE}/runs/run_x/wait", params={"timeout": bad})
            assert code(response) == (422, "invalid_request"), bad


@pytest.mark.only_backend("redis", reason="two instances share a run through Redis")
async def test_wait_on_another_instance_returns_when_the_run_ends() -> None:
    async with cluster() as (a, b):
        async with (
            httpx.AsyncClient(base_url=a.url, timeout=LONG + 30) as ca,
            httpx.AsyncClient(base_url=b.url, timeout=LONG + 30) as cb,
        ):
            run = await start_run(ca, KEY, "sleep:1 text:1")
            elapsed, record = await timed_wait(cb, run["runId"], LONG)
            assert record["status"] == "completed" and elapsed < 1 + SOON, elapsed
            busy = await start_run(ca, KEY, "sleep:300")
            elapsed, record = await timed_wait(cb, busy["runId"], 1)
            assert record["status"] == "running" and 0.95 <= elapsed < 1 + SOON, elapsed
            assert (await cb.post(f"{BASE}/abort", json={})).status_code == 202
            _, record = await timed_wait(cb, busy["runId"], 10)
            assert record["status"] == "cancelled"


@pytest.mark.only_backend("redis", reason="adoption of a queued run needs the shared Redis queue")
async def test_a_queued_run_of_a_killed_instance_is_adopted_and_its_wait_returns() -> None:
    """A accepts a running and a queued run, then dies (kill -9): the queued run still reads
    ``queued`` on B until B adopts and runs it, and the long-poll on B returns its end."""
    async with cluster() as (a, b):  # lease TTL 3 s: the ticket lapses 3 s after A's last renewal
        async with (
            httpx.AsyncClient(base_url=a.url, timeout=30) as ca,
            httpx.AsyncClient(base_url=b.url, timeout=30) as cb,
        ):
            await start_run(ca, KEY, "sleep:60")
            queued = await start_run(ca, KEY, "text:1", multitask="enqueue")
            assert queued["status"] == "queued"
            run = f"{BASE}/runs/{queued['runId']}"
            before = await cb.get(run)
            assert before.status_code == 200 and before.json()["status"] == "queued", before.text
            waiting = asyncio.ensure_future(cb.get(f"{run}/wait", params={"timeout": 25}))
            await asyncio.sleep(0)  # the long-poll is sent before the kill
            a.kill()
            killed = time.monotonic()
            answer = await waiting
            elapsed = time.monotonic() - killed
            assert answer.status_code == 200, answer.text
            assert answer.json()["status"] == "completed", answer.text
            assert elapsed < 12, elapsed  # the lease TTL and a sweep, not the 25 s timeout
