"""Abort racing the run's end, from the owning instance and (Redis) from another one: an abort
answered ``202 {"aborted": true}`` always ends the run ``run.cancelled``; once the run's end is
decided the answer is ``200 {"aborted": false}`` — never 202 followed by ``run.completed``. The
race test requires that some abort was accepted (else it checked nothing of the first)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest
from httpx_sse import aconnect_sse

from tests.app.runs.concurrency_support import TERMINALS, CountingProvider, Gateways, gateways
from tests.app.support.helpers import start_run, wait_state

#: Also on the Redis Cluster backend (issue 52).
pytestmark = pytest.mark.on_redis_cluster

__all__ = ["gateways"]

TRIALS = 8
MAX_TRIALS = 32  # more trials while no abort at the last delta was accepted yet
DELTAS = 3
#: How long the upstream waits after its last delta before it ends, one per trial that aborts
#: at that delta: from none (the abort almost always comes too late) to long enough for an
#: abort to be accepted; in between, the abort and the run's end race.
PAUSES = ("0", "0.005", "0.02", "0.1")


async def _abort_when(
    watcher: httpx.AsyncClient,
    clients: list[httpx.AsyncClient],
    key: str,
    cursor: str,
    trigger: str,
) -> list[httpx.Response]:
    """Follow the conversation from ``cursor``; at the first ``trigger`` event (the last text
    delta, or the terminal) fire one abort through every client at once."""
    seen_deltas = 0
    async with aconnect_sse(
        watcher, "GET", f"/v1/conversations/{key}/events", params={"since": cursor}
    ) as source:
        async for sse in source.aiter_sse():
            if sse.event != "message" or not sse.data:
                continue
            kind = orjson.loads(sse.data)["type"]
            seen_deltas += kind == "message.delta"
            hit = seen_deltas == DELTAS if trigger == "delta" else kind in TERMINALS
            if hit:
                path = f"/v1/conversations/{key}/abort"
                return list(await asyncio.gather(*(c.post(path) for c in clients)))
    raise AssertionError("the stream ended before the trigger")


def _check(answers: list[httpx.Response], run: dict[str, Any]) -> int:
    """Each answer is a 200 or 202 of the right body; a 202 means the run ended cancelled.
    The number of 202s."""
    accepted = [a for a in answers if a.status_code == 202]
    for answer in answers:
        assert answer.status_code in (200, 202), answer.text
        if answer.status_code == 200:
            assert answer.json() == {"aborted": False}
        else:
            assert answer.json()["aborted"] is True
    if accepted:
        assert run["status"] == "cancelled", (run["status"], [a.json() for a in answers])
    return len(accepted)


async def test_an_accepted_abort_always_ends_the_run_cancelled(gateways: Gateways) -> None:
    owner = await gateways(providers={"demo": CountingProvider()})
    other = await gateways(providers={"demo": CountingProvider()}) if gateways.shared else owner
    accepted = 0  # aborts fired at the last delta and answered 202: the race under test
    trial = 0
    async with owner.client() as a, other.client() as b, other.client() as watcher:
        while trial < TRIALS or (accepted == 0 and trial < MAX_TRIALS):
            key = f"race-{trial}"
            pause = PAUSES[trial // 2 % len(PAUSES)]
            started = await start_run(a, key, " ".join(["text:1"] * DELTAS) + f" sleep:{pause}")
            trigger = "delta" if trial % 2 else "terminal"
            trial += 1
            answers = await _abort_when(watcher, [a, b, b], key, started["cursor"], trigger)
            state = await wait_state(b, key, lambda s: not s["isRequesting"])
            run = state["agentState"]["runs"][started["runId"]]
            assert run["status"] in ("completed", "cancelled")
            if trigger == "terminal":  # its end was logged before the aborts: too late
                _check(answers, run)
                assert run["status"] == "completed"
                assert {a.status_code for a in answers} == {200}
            else:
                accepted += _check(answers, run)
    assert accepted >= 1, f"no abort at the last delta was accepted in {trial} trials"


async def test_an_abort_accepted_while_the_owner_decides_the_end_wins(
    gateways: Gateways,
) -> None:
    """The window the racing test above rarely reaches: the provider has ended the run and
    its owner is deciding the end (held here in ``end_run``) when aborts arrive. The owner's
    own answer is ``200`` (its end is being decided); on Redis another instance's abort is
    recorded before the decision, answered ``202``, and the run ends ``run.cancelled``."""
    owner = await gateways(providers={"demo": CountingProvider()})
    other = await gateways(providers={"demo": CountingProvider()}) if gateways.shared else owner
    backend: Any = owner.gateway.backend
    end_run = backend.end_run
    deciding, answered = asyncio.Event(), asyncio.Event()

    async def held_end_run(ref: Any, run_id: str) -> Any:
        deciding.set()
        await asyncio.wait_for(answered.wait(), 10)
        return await end_run(ref, run_id)

    backend.end_run = held_end_run
    async with owner.client() as a, other.client() as b:
        key = "deciding"
        started = await start_run(a, key, " ".join(["text:1"] * DELTAS))
        await asyncio.wait_for(deciding.wait(), 10)
        path = f"/v1/conversations/{key}/abort"
        answers = await asyncio.gather(*(c.post(path) for c in (a, b, b)))
        answered.set()
        state = await wait_state(b, key, lambda s: not s["isRequesting"])
    run = state["agentState"]["runs"][started["runId"]]
    accepted = _check(answers, run)
    assert (answers[0].status_code, answers[0].json()) == (200, {"aborted": False})
    if gateways.shared:
        assert accepted >= 1 and run["status"] == "cancelled", [r.json() for r in answers]
    else:
        assert accepted == 0 and run["status"] == "completed"


async def test_an_abort_while_the_ended_run_still_holds_its_slot_answers_false(
    gateways: Gateways,
) -> None:
    """The run's terminal is logged but its owner has not released the slot yet (held here by
    the test): aborts from the owner and (Redis) another instance all answer ``200 {"aborted":
    false}`` and the run stays completed. The old ABORT accepted any run holding the slot."""
    owner = await gateways(providers={"demo": CountingProvider()})
    other = await gateways(providers={"demo": CountingProvider()}) if gateways.shared else owner
    backend: Any = owner.gateway.backend
    release = backend.release_run
    releasing, go_on = asyncio.Event(), asyncio.Event()

    async def held_release(ref: Any, run_id: str) -> None:
        releasing.set()
        await go_on.wait()
        await release(ref, run_id)

    backend.release_run = held_release
    async with owner.client() as a, other.client() as b:
        key = "ended-holding"
        started = await start_run(a, key, " ".join(["text:1"] * DELTAS))
        await asyncio.wait_for(releasing.wait(), 10)
        path = f"/v1/conversations/{key}/abort"
        answers = await asyncio.gather(*(c.post(path) for c in (a, b, b)))
        go_on.set()
        assert [(r.status_code, r.json()) for r in answers] == [(200, {"aborted": False})] * 3
        state = await wait_state(b, key, lambda s: not s["isRequesting"])
    assert state["agentState"]["runs"][started["runId"]]["status"] == "completed"


async def test_an_abort_while_the_terminal_is_being_appended_answers_false(
    gateways: Gateways,
) -> None:
    """Aborts fired (owner and, on Redis, another instance) when the owner hands the run's
    ``run.completed`` to the backend, before it is logged: its end is decided, so each answers
    ``200 {"aborted": false}`` and the run ends completed, never 202 then ``run.completed``."""
    owner = await gateways(providers={"demo": CountingProvider()})
    other = await gateways(providers={"demo": CountingProvider()}) if gateways.shared else owner
    key = "ending"
    backend: Any = owner.gateway.backend
    append_batch, append_event = backend.append_batch, backend.append_event
    answers: list[httpx.Response] = []
    async with owner.client() as a, other.client() as b:

        async def abort_at_the_terminal(events: list[dict[str, Any]]) -> None:
            if not answers and any(e["type"] == "run.completed" for e in events):
                path = f"/v1/conversations/{key}/abort"
                answers.extend(await asyncio.gather(*(c.post(path) for c in (a, b, b))))

        async def batch(ref: Any, items: Any) -> Any:
            await abort_at_the_terminal([item.event for item in items if item.event])
            return await append_batch(ref, items)

        async def event(ref: Any, item: dict[str, Any]) -> Any:
            await abort_at_the_terminal([item])
            return await append_event(ref, item)

        backend.append_batch, backend.append_event = batch, event
        # Every write through the patched ``append_batch``: one not waited for (Redis's
        # ``append_soon``) would hand the terminal over with no point to fire the aborts at.
        backend.append_soon = lambda ref, items, done: False
        started = await start_run(a, key, " ".join(["text:1"] * DELTAS))
        state = await wait_state(b, key, lambda s: not s["isRequesting"])
    assert [(r.status_code, r.json()) for r in answers] == [(200, {"aborted": False})] * 3
    assert state["agentState"]["runs"][started["runId"]]["status"] == "completed"
