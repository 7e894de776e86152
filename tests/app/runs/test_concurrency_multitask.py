"""Multitask under concurrency: runs start in acceptance order, an interrupt cancels every run
accepted before it that has not started, and every 202 ends in exactly one terminal event."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.app.runs.concurrency_support import (
    TERMINALS,
    CountingProvider,
    Gateways,
    gateways,
    run_log,
    ws_requests,
)
from tests.app.support.helpers import collect_sse, events_of, start_run, wait_state

#: Also on the Redis Cluster backend (issue 52).
pytestmark = pytest.mark.on_redis_cluster

__all__ = ["gateways"]

TRIALS = 6
MAX_TRIALS = 24  # more trials while the interleaving under test has not happened yet


async def _log(client: httpx.AsyncClient, key: str, since: str = "0") -> list[dict[str, Any]]:
    frames = await collect_sse(
        client, f"/v1/conversations/{key}/events", params={"since": since, "untilIdle": "true"}
    )
    return events_of(frames)


def _cancelled_before_start(events: list[dict[str, Any]], run_id: str, reason: str) -> None:
    """run.started, the user message and run.cancelled (``reason``), nothing else."""
    own = [e for e in events if e["runId"] == run_id and not e["type"].startswith("session.")]
    kinds = [e["type"] for e in own]
    assert kinds[0] == "run.started" and kinds[-1] == "run.cancelled", kinds
    assert "message.completed" in kinds or "message.started" in kinds, kinds
    assert own[-1]["payload"]["reason"] == reason
    assert not [k for k in kinds if k.startswith(("tool.", "approval."))], kinds


def _one_terminal_each(events: list[dict[str, Any]], run_ids: list[str]) -> None:
    for run_id in run_ids:
        ends = [e for e in events if e["runId"] == run_id and e["type"] in TERMINALS]
        assert len(ends) == 1, (run_id, run_log(events))


def _hold_first_start(backend: Any, keys: set[str], go: asyncio.Event) -> None:
    """The append of the first ``run.started`` of each conversation in ``keys`` waits for
    ``go``: that run has not begun (its upstream not contacted) until then."""
    append_batch, append_event = backend.append_batch, backend.append_event
    held: set[str] = set()

    async def hold(ref: Any, events: list[dict[str, Any]]) -> None:
        if ref.key in keys and ref.key not in held:
            if any(e["type"] == "run.started" for e in events):
                held.add(ref.key)
                await asyncio.wait_for(go.wait(), 10)

    async def batch(ref: Any, items: Any) -> Any:
        await hold(ref, [item.event for item in items if item.event])
        return await append_batch(ref, items)

    async def event(ref: Any, item: dict[str, Any]) -> Any:
        await hold(ref, [item])
        return await append_event(ref, item)

    backend.append_batch, backend.append_event = batch, event
    backend.append_soon = lambda ref, items, done: False  # every write through append_batch


async def test_interrupt_right_after_an_accepted_run_cancels_it(gateways: Gateways) -> None:
    """Two back-to-back WebSocket requests, the second an interrupt: the first is cancelled
    and never runs after the second. When the interrupt arrives before the first started, the
    first logs its start and cancellation without reaching the upstream; when the server
    started it before reading the interrupt (a loaded machine), it reached the upstream first.
    Every other trial makes the first case happen: the first run's start is held until both
    requests are answered."""
    provider = CountingProvider()
    gw = await gateways(providers={"demo": provider})
    keys = [f"ws-int-{i}" for i in range(TRIALS)]
    forced = set(keys[1::2])
    go = asyncio.Event()
    _hold_first_start(gw.gateway.backend, forced, go)
    for key in keys:
        before = len(provider.reached)
        go.clear()
        first, second = await ws_requests(
            gw,
            key,
            [
                {"op": "request", "input": {"prompt": "slow text:1 sleep:30"}},
                {"op": "request", "input": {"prompt": "fast text:2"}, "multitask": "interrupt"},
            ],
        )
        go.set()  # both answered: the first run may begin
        async with gw.client() as client:
            events = await _log(client, key)
        assert run_log(events) == [
            (first, "run.started"),
            (first, "run.cancelled"),
            (second, "run.started"),
            (second, "run.completed"),
        ]
        reached = provider.reached[before:]
        assert reached in (["fast text:2"], ["slow text:1 sleep:30", "fast text:2"]), reached
        if key in forced:
            assert reached == ["fast text:2"], reached
        if reached == ["fast text:2"]:
            _cancelled_before_start(events, first, "interrupted")


async def test_concurrent_posts_with_interrupt_never_run_the_interrupted_one_after(
    gateways: Gateways,
) -> None:
    """Two POSTs at once, the second with ``interrupt``: whatever the interleaving, the one
    accepted first ends before the other starts, and each 202 ends in one terminal."""
    gw = await gateways(providers={"demo": CountingProvider()})
    interrupted = 0  # trials where B's interrupt cancelled A, the interleaving under test
    trial = 0
    async with gw.client() as client:
        while trial < TRIALS or (interrupted == 0 and trial < MAX_TRIALS):
            key = f"http-int-{trial}"
            trial += 1
            path = f"/v1/conversations/{key}/runs"
            a, b = await asyncio.gather(
                client.post(path, json={"input": {"prompt": "text:1 sleep:3"}}),
                client.post(path, json={"input": {"prompt": "text:2"}, "multitask": "interrupt"}),
            )
            assert b.status_code == 202, b.text
            assert a.status_code in (202, 409), a.text
            events = await _log(client, key)
            b_id = b.json()["runId"]
            if a.status_code == 409:  # B was first: A was refused, nothing of it logged
                assert run_log(events) == [(b_id, "run.started"), (b_id, "run.completed")]
                continue
            a_id = a.json()["runId"]
            log = run_log(events)
            if log[0][0] == b_id:  # B was accepted and ended before A arrived: A runs after it
                assert log == [
                    (b_id, "run.started"),
                    (b_id, "run.completed"),
                    (a_id, "run.started"),
                    (a_id, "run.completed"),
                ], log
                # A was accepted once B had ended, not before B and then run behind it: B's
                # start is not after A's acceptance cursor (its end may be, when it was logged
                # while A's acceptance read the cursor).
                after_a = run_log(await _log(client, key, since=a.json()["cursor"]))
                assert (b_id, "run.started") not in after_a, after_a
            else:
                assert log[:2] == [(a_id, "run.started"), (a_id, "run.cancelled")], log
                assert log[2:] == [(b_id, "run.started"), (b_id, "run.completed")], log
                interrupted += 1
            _one_terminal_each(events, [a_id, b_id])
    assert interrupted >= 1, f"B's interrupt never cancelled A in {trial} trials"


async def test_interrupt_cancels_every_queued_run_accepted_before_it(gateways: Gateways) -> None:
    provider = CountingProvider()
    gw = await gateways(providers={"demo": provider})
    key = "queued-int"
    async with gw.client() as client:
        active = await start_run(client, key, "active text:1 sleep:30")
        await wait_state(client, key, lambda s: s["isRequesting"])
        queued = [
            await start_run(client, key, f"queued{i} text:1", multitask="enqueue") for i in range(2)
        ]
        assert [q["status"] for q in queued] == ["queued", "queued"]
        last = await start_run(client, key, "last text:1", multitask="interrupt")
        events = await _log(client, key)
    ids = [active["runId"], *(q["runId"] for q in queued), last["runId"]]
    log = run_log(events)
    assert log == [
        (ids[0], "run.started"),
        (ids[0], "run.cancelled"),
        (ids[1], "run.started"),
        (ids[1], "run.cancelled"),
        (ids[2], "run.started"),
        (ids[2], "run.cancelled"),
        (ids[3], "run.started"),
        (ids[3], "run.completed"),
    ]
    for run_id in ids[1:3]:
        _cancelled_before_start(events, run_id, "interrupted")
    assert provider.reached == ["active text:1 sleep:30", "last text:1"]


async def test_abort_naming_a_queued_run_cancels_it_in_its_turn(gateways: Gateways) -> None:
    provider = CountingProvider()
    gw = await gateways(providers={"demo": provider})
    key = "queued-abort"
    async with gw.client() as client:
        active = await start_run(client, key, "text:1 gate:hold")  # runs until the gate opens
        queued = await start_run(client, key, "text:1", multitask="enqueue")
        response = await client.post(
            f"/v1/conversations/{key}/abort", json={"runId": queued["runId"]}
        )
        assert response.status_code == 202
        assert response.json() == {"runId": queued["runId"], "aborted": True}
        provider.gates["hold"].set()
        events = await _log(client, key)
    assert [t for _, t in run_log(events)] == [
        "run.started",
        "run.completed",
        "run.started",
        "run.cancelled",
    ]
    assert run_log(events)[0][0] == active["runId"]
    _cancelled_before_start(events, queued["runId"], "aborted")
