"""Multitask policies: reject (409), interrupt (run.cancelled then the new run), enqueue (FIFO)."""

from __future__ import annotations

import pytest

from tests.app.support.gateway_server import RunningGateway, StartGateway, make_settings
from tests.app.support.helpers import collect_sse, events_of, start_run, wait_state
from tests.app.support.scripted_provider import ScriptedProvider

KEY = "mt"
RUNS = f"/v1/conversations/{KEY}/runs"


@pytest.fixture
def provider() -> ScriptedProvider:
    return ScriptedProvider()


@pytest.fixture
async def gw(start_gateway: StartGateway, provider: ScriptedProvider) -> RunningGateway:
    settings = make_settings(gateway={"enqueue_max": 1})
    return await start_gateway(settings, providers={"demo": provider})


async def test_reject_is_409_run_in_progress(gw: RunningGateway) -> None:
    async with gw.client() as client:
        await start_run(client, KEY, "sleep:30")
        response = await client.post(RUNS, json={"input": {"prompt": "x"}})
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "run_in_progress"
        explicit = await client.post(RUNS, json={"input": {"prompt": "x"}, "multitask": "reject"})
        assert explicit.status_code == 409


async def test_interrupt_cancels_the_active_run_then_starts(gw: RunningGateway) -> None:
    async with gw.client() as client:
        first = await start_run(client, KEY, "text:1 sleep:30")
        await wait_state(client, KEY, lambda s: s["isRequesting"])
        second = await start_run(client, KEY, "text:2", multitask="interrupt")
        assert second["status"] == "started"
        frames = await collect_sse(
            client,
            f"/v1/conversations/{KEY}/events",
            params={"since": second["cursor"], "untilIdle": "true"},
        )
    events = events_of(frames)
    terminals = [(e["runId"], e["type"]) for e in events if e["type"].startswith("run.")]
    assert terminals == [
        (first["runId"], "run.cancelled"),
        (second["runId"], "run.started"),
        (second["runId"], "run.completed"),
    ]
    cancelled = next(e for e in events if e["type"] == "run.cancelled")
    assert cancelled["payload"]["reason"] == "interrupted"


async def test_enqueue_runs_in_order_and_is_bounded(
    gw: RunningGateway, provider: ScriptedProvider
) -> None:
    async with gw.client() as client:
        first = await start_run(client, KEY, "text:1 gate:hold")  # runs until the gate opens
        second = await start_run(client, KEY, "text:1", multitask="enqueue")
        assert second["status"] == "queued"
        full = await client.post(RUNS, json={"input": {"prompt": "x"}, "multitask": "enqueue"})
        assert full.status_code == 429
        assert full.json()["error"]["code"] == "queue_full"
        assert full.headers["retry-after"]
        provider.gates["hold"].set()
        frames = await collect_sse(
            client,
            f"/v1/conversations/{KEY}/events",
            params={"since": first["cursor"], "untilIdle": "true"},
        )
    runs = [e["runId"] for e in events_of(frames) if e["type"] in ("run.started", "run.completed")]
    assert runs == [first["runId"], first["runId"], second["runId"], second["runId"]]


async def test_abort_of_a_queued_run_cancels_it(
    gw: RunningGateway, provider: ScriptedProvider
) -> None:
    async with gw.client() as client:
        await start_run(client, KEY, "gate:hold")  # runs until the gate opens
        queued = await start_run(client, KEY, "text:1", multitask="enqueue")
        response = await client.post(
            f"/v1/conversations/{KEY}/abort", json={"runId": queued["runId"]}
        )
        assert response.status_code == 202
        provider.gates["hold"].set()
        state = await wait_state(
            client, KEY, lambda s: not s["isRequesting"] and len(s["agentState"]["runs"]) == 2
        )
        run = state["agentState"]["runs"][queued["runId"]]
        assert run["status"] == "cancelled"


async def test_refused_requests_leave_no_bookkeeping(gw: RunningGateway) -> None:
    async with gw.client() as client:
        for key in ("r1", "r2", "r3"):
            response = await client.post(
                f"/v1/conversations/{key}/runs", json={"input": {"prompt": "x"}, "provider": "no"}
            )
            assert response.status_code == 404
            reload = await client.post(f"/v1/conversations/{key}/reload")
            assert reload.status_code == 404
    assert gw.gateway.runs.active_count() == 0
    assert gw.gateway.runs._slots == {}
