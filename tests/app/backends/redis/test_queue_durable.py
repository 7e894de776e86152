"""Queued runs are durable on Redis: they outlive the instance that accepted them (kill -9: a
live instance adopts and starts them, in order), and a Redis outage on a live instance never
drops one (its claims are retried until Redis is back; a ticket that lapsed meanwhile is still
its own). Real gateway processes, a real Redis (a private one for the outage). The kill -9 runs
on the shared Redis Cluster too (the queue's keys sharded by conversation, the sweep over every
bucket); the outage stops a whole Redis, which on a cluster is a failover of one shard's master
(``test_cluster_failover.py``; its queued runs are the same keys of that shard)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import orjson
import pytest

from tests.app.support.cluster_support import (
    LEASE_TTL,
    STEADY_LEASE_TTL,
    Subscriber,
    cluster,
    is_terminal,
)
from tests.app.support.helpers import collect_sse, start_run
from tests.app.support.redis_support import GatewayProcess, private_redis, unique_prefix
from tests.support import eventually

pytestmark = pytest.mark.only_backend(
    "redis", reason="queued runs stored in the backend and adopted across instances: Redis only"
)

KEY = "durable"
EVENTS = f"/v1/conversations/{KEY}/events"


def _ends(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(runId, type) of every run.started and terminal event, in log order."""
    kinds = ("run.started", "run.completed", "run.failed", "run.cancelled")
    return [(e["runId"], e["type"]) for e in events if e["type"] in kinds]


@pytest.mark.parametrize("store", ["redis", "redis-cluster"])
async def test_kill_9_the_queued_runs_of_the_dead_instance_start_on_another_in_order(
    store: str,
) -> None:
    async with cluster(lease_ttl=LEASE_TTL, store=store) as (a, b):
        queued: list[str] = []
        sub = Subscriber(b.url, KEY, lambda e: is_terminal(e) and e["runId"] == queued[-1])
        await sub.started()
        async with httpx.AsyncClient(base_url=a.url, timeout=10) as ca:
            running = await start_run(ca, KEY, "text:1 sleep:60")
            for word in ("first", "second"):
                answer = await start_run(ca, KEY, f"text:2 say:{word}", multitask="enqueue")
                assert answer["status"] == "queued"
                queued.append(answer["runId"])
        await eventually(lambda: any(e["type"] == "message.delta" for e in sub.events))
        a.kill()
        events = await sub.done(LEASE_TTL * 3 + 15)
    first, second = queued
    assert _ends(events) == [
        (running["runId"], "run.started"),
        (running["runId"], "run.failed"),
        (first, "run.started"),
        (first, "run.completed"),
        (second, "run.started"),
        (second, "run.completed"),
    ]
    failed = next(e for e in events if e["type"] == "run.failed")
    assert failed["payload"]["error"]["code"] == "gateway_instance_lost"
    inputs = {e["runId"]: e["payload"]["input"] for e in events if e["type"] == "run.started"}
    assert inputs[first] == {"prompt": "text:2 say:first"}  # the input stored with the ticket
    assert inputs[second] == {"prompt": "text:2 say:second"}
    assert len(set(sub.ids)) == len(sub.ids)


@pytest.mark.slow  # stops and restarts a redis-server of its own
@pytest.mark.parametrize(("lease", "outage"), [(STEADY_LEASE_TTL, 1.0), (LEASE_TTL, 2.0)])
async def test_a_redis_outage_on_a_live_instance_drops_no_queued_run(
    lease: float, outage: float
) -> None:
    """Redis is down (1 s within a 3 s lease and ticket TTL; 2 s past a 1 s one) while the
    active run ends: every queued run still starts once Redis is back, each with one terminal
    event (the active run's may be ``run.failed``: it ended while Redis was unreachable)."""
    with private_redis() as server:
        gw = GatewayProcess("A", server.url, unique_prefix(), lease_ttl=lease)
        gw.start()
        try:
            await gw.wait_ready()
            async with httpx.AsyncClient(base_url=gw.url, timeout=20) as client:
                active = await start_run(client, KEY, "text:1 sleep:0.3 text:1")
                queued = [
                    (await start_run(client, KEY, f"text:1 say:{n}", multitask="enqueue"))["runId"]
                    for n in range(3)
                ]
                server.stop()  # the active run ends while Redis is down
                await asyncio.sleep(outage)
                server.start()
                deadline = time.monotonic() + 15
                while (await client.get("/readyz")).status_code != 200:
                    assert time.monotonic() < deadline, "readiness did not recover"
                    await asyncio.sleep(0.1)
                for run_id in queued:
                    answer = await client.get(
                        f"/v1/conversations/{KEY}/runs/{run_id}/wait", params={"timeout": 20}
                    )
                    assert answer.status_code == 200, answer.text
                    assert answer.json()["status"] == "completed", (answer.json(), gw.output())
                frames = await collect_sse(
                    client, EVENTS, params={"since": "0", "untilIdle": "true"}
                )
        finally:
            gw.close()
    events = [orjson.loads(f.data) for f in frames if f.event == "message"]
    ends = _ends(events)
    runs = [active["runId"], *queued]
    assert [run_id for run_id, kind in ends if kind == "run.started"] == runs
    terminals = [(run_id, kind) for run_id, kind in ends if kind != "run.started"]
    assert [run_id for run_id, _ in terminals] == runs  # one terminal each, in order
    assert terminals[1:] == [(run_id, "run.completed") for run_id in queued]
