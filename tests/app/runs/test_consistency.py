"""Read-your-writes on both backends: once ``POST …/runs`` answered 202, every instance shows it.

On memory there is one gateway; on Redis two gateways share one key prefix (a cluster), and the
state is read on the instance that accepted the run and on the other one.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from tests.app.support.gateway_server import RunningGateway, StartGateway, make_settings
from tests.app.support.helpers import collect_sse, start_run, terminal, wait_state
from tests.app.support.scripted_provider import ScriptedProvider
from tests.support import eventually

ROUNDS = 8


@pytest.fixture
async def instances(backend_kind: str, start_gateway: StartGateway) -> list[RunningGateway]:
    """One memory gateway, or two gateways on one Redis key prefix."""
    settings = make_settings(gateway={"heartbeat_seconds": 1})
    providers = {"demo": ScriptedProvider()}
    count = 1 if backend_kind == "memory" else 2
    return [await start_gateway(settings, providers=providers) for _ in range(count)]


async def test_state_right_after_the_202_shows_the_run_on_every_instance(
    instances: list[RunningGateway],
) -> None:
    clients = [gw.client() for gw in instances]  # connections kept open: no connect delay
    try:
        for i in range(ROUNDS):
            key = f"ryw-{i}"
            answer = await start_run(clients[0], key, "text:1 sleep:5")
            assert answer["status"] == "started"
            path = f"/v1/conversations/{key}/state"
            for response in await asyncio.gather(*(c.get(path) for c in clients)):
                state = response.json()
                assert state["activeRunId"] == answer["runId"], state
                assert state["isRequesting"] is True
            await clients[0].post(f"/v1/conversations/{key}/abort", json={})
    finally:
        for client in clients:
            await client.aclose()


async def test_the_202_cursor_still_misses_nothing_of_the_run(
    instances: list[RunningGateway],
) -> None:
    """The 202 now waits for run.started; its cursor is still the position before the run."""
    key = "cursor"
    async with instances[0].client() as client:
        first = await start_run(client, key, "text:2")
        await collect_sse(  # until the first run ended (the second is not refused)
            client, f"/v1/conversations/{key}/events", params={"since": first["cursor"]},
            stop=terminal,
        )  # fmt: skip
        second = await start_run(client, key, "text:3 sleep:0.2")
    async with instances[-1].client() as other:
        frames = await collect_sse(
            other, f"/v1/conversations/{key}/events", params={"since": second["cursor"]},
            stop=terminal,
        )  # fmt: skip
    events = [orjson.loads(f.data) for f in frames]
    assert all(f.event == "message" for f in frames)
    assert [e["runId"] for e in events] == [second["runId"]] * len(events)
    assert events[0]["type"] == "run.started"
    assert events[-1]["type"] == "run.completed"
    deltas = [e["payload"]["delta"] for e in events if e["type"] == "message.delta"]
    assert "".join(deltas) == "w0 w1 w2 "


def _assistant_text(state: dict[str, Any]) -> str:
    texts = [
        m["message"]["content"] for m in state["messages"] if m["message"]["role"] == "assistant"
    ]
    return str(texts[-1]) if texts else ""


async def test_a_snapshot_never_contains_events_after_its_cursor(
    instances: list[RunningGateway],
) -> None:
    """Polled during a fast stream on the run's owner: each snapshot plus exactly the events
    after its cursor is the final answer (nothing missing, no delta applied twice)."""
    key = "snap-cursor"
    async with instances[0].client() as client:
        await start_run(client, key, "text:300")
        states: list[dict[str, Any]] = []
        while not states or states[-1]["isRequesting"]:
            states.append((await client.get(f"/v1/conversations/{key}/state")).json())
        frames = await collect_sse(
            client, f"/v1/conversations/{key}/events", params={"since": "0"}, stop=terminal
        )
    ids = [frame.id for frame in frames]
    deltas = []
    for frame in frames:
        event = orjson.loads(frame.data)
        deltas.append(event["payload"]["delta"] if event["type"] == "message.delta" else "")
    final = "".join(deltas)
    assert final == "".join(f"w{i} " for i in range(300))
    assert len(states) > 1
    for state in states:
        after = ids.index(state["cursor"]) + 1 if state["cursor"] != "0" else 0
        assert _assistant_text(state) + "".join(deltas[after:]) == final, state["cursor"]


async def test_a_run_whose_terminal_is_logged_is_not_aborted(
    instances: list[RunningGateway],
) -> None:
    """Between its terminal and the release of the slot, a run is over: abort answers 200."""
    gw = instances[0]
    inner = gw.gateway.backend.inner  # type: ignore[attr-defined]
    original, hold = inner.release_run, asyncio.Event()

    async def held_release(*args: Any, **kwargs: Any) -> None:
        await hold.wait()
        await original(*args, **kwargs)

    inner.release_run = held_release
    key = "ended"
    async with gw.client() as client:
        run = await start_run(client, key, "text:1")
        await wait_state(client, key, lambda s: not s["isRequesting"])
        assert gw.gateway.runs.active_count() == 1  # still finishing: the slot is held
        for body in ({}, {"runId": run["runId"]}):
            answer = await client.post(f"/v1/conversations/{key}/abort", json=body)
            assert (answer.status_code, answer.json()) == (200, {"aborted": False})
        hold.set()
        state = await wait_state(client, key, lambda s: not s["isRequesting"])
        assert state["agentState"]["runs"][run["runId"]]["status"] == "completed"


@pytest.mark.only_backend("redis", reason="two instances share one conversation only on Redis")
async def test_the_previous_owner_serves_the_next_run_while_it_releases(
    start_gateway: StartGateway,
) -> None:
    """A released the slot in Redis but is still finishing its release; B starts the next run:
    a GET …/state on A shows B's run (not A's stale live state)."""
    a, b = [await start_gateway(providers={"demo": ScriptedProvider()}) for _ in "AB"]
    instance = a.gateway.backend.inner.instance  # type: ignore[attr-defined]
    original, entered, hold = instance.tidy_released, asyncio.Event(), asyncio.Event()

    async def held_tidy(*args: Any, **kwargs: Any) -> None:  # right after the release write
        entered.set()
        await hold.wait()
        await original(*args, **kwargs)

    instance.tidy_released = held_tidy
    key = "handover"
    async with a.client() as ca, b.client() as cb:
        await start_run(ca, key, "text:1")
        await asyncio.wait_for(entered.wait(), 10)
        second = await start_run(cb, key, "text:1 sleep:5", multitask="reject")
        state = (await ca.get(f"/v1/conversations/{key}/state")).json()
        hold.set()
        assert state["activeRunId"] == second["runId"]
        await cb.post(f"/v1/conversations/{key}/abort", json={})


def _hold_release(gw: RunningGateway) -> asyncio.Event:
    """Hold the gateway's next release_run (a run finishing up) until the event is set."""
    inner = gw.gateway.backend.inner  # type: ignore[attr-defined]
    original, hold = inner.release_run, asyncio.Event()

    async def held_release(*args: Any, **kwargs: Any) -> None:
        await hold.wait()
        await original(*args, **kwargs)

    inner.release_run = held_release
    return hold


async def test_until_idle_while_the_last_run_finishes_up_closes_at_once(
    instances: list[RunningGateway],
) -> None:
    hold = _hold_release(instances[0])
    key = "idle-window"
    async with instances[0].client() as client:
        await start_run(client, key, "text:1")
        await wait_state(client, key, lambda s: not s["isRequesting"])
        for gw in instances:
            async with gw.client() as other:
                frames = await asyncio.wait_for(
                    collect_sse(
                        other, f"/v1/conversations/{key}/events", params={"untilIdle": "true"}
                    ),
                    5,
                )  # not open until some later run ended
            assert [f.event for f in frames] == ["snapshot"]
        hold.set()


async def test_a_new_run_while_the_last_one_finishes_up_is_accepted(
    instances: list[RunningGateway],
) -> None:
    """The state shows the run ended; a run posted then (on any instance) starts after it."""
    hold = _hold_release(instances[0])
    key = "next-run"
    async with instances[0].client() as client, instances[-1].client() as other:
        first = await start_run(client, key, "text:1")
        await wait_state(client, key, lambda s: not s["isRequesting"])
        posting = asyncio.create_task(
            other.post(f"/v1/conversations/{key}/runs", json={"input": {"prompt": "text:2"}})
        )
        requests = instances[-1].server.server_state.tasks
        await eventually(lambda: len(requests) == 1, what="the POST is being served")
        hold.set()
        answer = await posting
        assert answer.status_code == 202, answer.text  # not 409 run_in_progress
        assert answer.json()["status"] == "started"
        state = await wait_state(client, key, lambda s: not s["isRequesting"])
        runs = state["agentState"]["runs"]
        assert runs[first["runId"]]["status"] == runs[answer.json()["runId"]]["status"]
        assert runs[first["runId"]]["status"] == "completed"
