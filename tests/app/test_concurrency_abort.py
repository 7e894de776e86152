"""Abort racing the run's end, from the owning instance and (Redis) from another one: an abort
answered ``202 {"aborted": true}`` always ends the run ``run.cancelled``; once the run's end is
decided the answer is ``200 {"aborted": false}`` — never 202 followed by ``run.completed``."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
from httpx_sse import aconnect_sse

from tests.app.concurrency_support import TERMINALS, CountingProvider, Gateways, gateways
from tests.app.helpers import start_run, wait_state

__all__ = ["gateways"]

TRIALS = 8
DELTAS = 3


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


def _check(answers: list[httpx.Response], run: dict[str, Any]) -> None:
    accepted = [a for a in answers if a.status_code == 202]
    for answer in answers:
        assert answer.status_code in (200, 202), answer.text
        if answer.status_code == 200:
            assert answer.json() == {"aborted": False}
        else:
            assert answer.json()["aborted"] is True
    if accepted:
        assert run["status"] == "cancelled", (run["status"], [a.json() for a in answers])


async def test_an_accepted_abort_always_ends_the_run_cancelled(gateways: Gateways) -> None:
    owner = await gateways(providers={"demo": CountingProvider()})
    other = await gateways(providers={"demo": CountingProvider()}) if gateways.shared else owner
    async with owner.client() as a, other.client() as b, other.client() as watcher:
        for trial in range(TRIALS):
            key = f"race-{trial}"
            started = await start_run(a, key, " ".join(["text:1"] * DELTAS))
            trigger = "delta" if trial % 2 else "terminal"
            answers = await _abort_when(watcher, [a, b, b], key, started["cursor"], trigger)
            state = await wait_state(b, key, lambda s: not s["isRequesting"])
            run = state["agentState"]["runs"][started["runId"]]
            assert run["status"] in ("completed", "cancelled")
            _check(answers, run)
            if trigger == "terminal":  # its end was logged before the aborts: too late
                assert run["status"] == "completed"
                assert {a.status_code for a in answers} == {200}
