"""A queued run waits for its turn on a notification (the slot was freed), not by polling the
run slot: while the run before it waits on an approval it hardly touches the backend, and it
starts as soon as that run ends — also when another instance ran it (Redis)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.app.runs.concurrency_support import CountingProvider, Gateways, gateways
from tests.app.support.gateway_server import RunningGateway
from tests.app.support.helpers import collect_sse, events_of, start_run, wait_state

#: Also on the Redis Cluster backend (issue 52).
pytestmark = pytest.mark.on_redis_cluster

__all__ = ["gateways"]

KEY = "turn"
#: How long the claims of the waiting run are counted (a rate is measured over a window).
WINDOW_SECONDS = 1.0


def _count_claims(gw: RunningGateway) -> list[str]:
    """Record the run id of every claim of the run slot this gateway makes."""
    backend: Any = gw.gateway.backend
    claim = backend.claim_run
    claims: list[str] = []

    async def counting(ref: Any, control: Any, *rest: Any) -> bool:
        claims.append(control.run_id)
        return bool(await claim(ref, control, *rest))

    backend.claim_run = counting
    return claims


async def test_a_queued_run_waits_on_a_notification_not_a_poll(gateways: Gateways) -> None:
    first_gw = await gateways(providers={"demo": CountingProvider()})
    second_gw = (
        await gateways(providers={"demo": CountingProvider()}) if gateways.shared else first_gw
    )
    claims = _count_claims(second_gw)
    async with first_gw.client() as a, second_gw.client() as b:
        first = await start_run(a, KEY, "approval:a1 text:1")
        await wait_state(
            a,
            KEY,
            lambda s: any(x["status"] == "waiting" for x in s["agentState"]["approvals"].values()),
        )
        queued = await start_run(b, KEY, "text:1", multitask="enqueue")
        assert queued["status"] == "queued"
        await asyncio.sleep(WINDOW_SECONDS)  # the measurement window, not a wait for a condition
        waiting_claims = claims.count(queued["runId"])
        assert waiting_claims <= 2, waiting_claims  # polling every 50 ms made ~20
        approved = await a.post(
            f"/v1/conversations/{KEY}/approvals/a1", json={"decision": "approved"}
        )
        assert approved.status_code == 202
        frames = await collect_sse(
            b, f"/v1/conversations/{KEY}/events", params={"since": "0", "untilIdle": "true"}
        )
    events = {(e["runId"], e["type"]): e for e in events_of(frames)}
    ended = events[(first["runId"], "run.completed")]["timestamp"]
    started = events[(queued["runId"], "run.started")]["timestamp"]
    assert started - ended < 1000, started - ended  # woken, not the 2 s fallback
