"""Redis stopped mid-run (a ``redis-server`` of the test's own, restarted from its RDB).

While Redis is down the gateway answers fast (503 ``backend_unavailable``, /healthz stays up),
the run keeps going upstream, and once Redis is back: the run ends with exactly one terminal,
every event a subscriber received is in the log in the same order, and other conversations run.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import orjson
from httpx_sse import aconnect_sse

from app.backends import EMPTY_CURSOR
from tests.app.conftest import StartGateway
from tests.app.gateway_server import make_settings
from tests.app.helpers import collect_sse, events_of, start_run, wait_state
from tests.app.redis_support import PrivateRedis, private_redis, serve_slow_upstream

TERMINALS = ("run.completed", "run.failed", "run.cancelled")


async def _subscriber(
    client: httpx.AsyncClient, key: str, got: list[dict[str, Any]], done: asyncio.Event
) -> None:
    """An EventSource: reconnects with Last-Event-ID after any failure, until a terminal."""
    last: str | None = None
    while not done.is_set():
        headers = {"Last-Event-ID": last} if last else {}
        try:
            async with aconnect_sse(
                client, "GET", f"/v1/conversations/{key}/events", headers=headers
            ) as source:
                if source.response.status_code != 200:
                    await asyncio.sleep(0.1)
                    continue
                async for sse in source.aiter_sse():
                    if sse.event == "snapshot":
                        last = sse.id or last
                        continue
                    if sse.event != "message" or not sse.data:
                        continue
                    last = sse.id
                    event = orjson.loads(sse.data)
                    got.append(event)
                    if event["type"] in TERMINALS:
                        done.set()
                        return
        except (httpx.HTTPError, RuntimeError):
            pass
        await asyncio.sleep(0.1)


async def _until(predicate: Any, within: float) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


async def test_redis_stopped_mid_run(start_gateway: StartGateway) -> None:
    with private_redis() as redis:
        async with serve_slow_upstream(chunks=80, interval=0.04) as upstream:
            await _scenario(start_gateway, redis, upstream.url)


async def _scenario(start_gateway: StartGateway, redis: PrivateRedis, url: str) -> None:
    settings = make_settings(
        gateway={
            "backend": "redis",
            "redis_url": redis.url,
            "default_provider": "slow",
            "lease_ttl_seconds": 3,
            "heartbeat_seconds": 0.5,
        },
        providers={"slow": {"kind": "openai-chat", "url": url, "model": "m"}},
    )
    gw = await start_gateway(settings)
    async with gw.client(timeout=5.0) as client:
        got: list[dict[str, Any]] = []
        done = asyncio.Event()
        subscriber = asyncio.create_task(_subscriber(client, "c1", got, done))
        await asyncio.sleep(0.2)
        accepted = await start_run(client, "c1", "tell me")
        await _until(lambda: sum(e["type"] == "message.delta" for e in got) >= 10, 10)

        redis.stop()  # SIGTERM: Redis saves its RDB, like a restart with persistence
        down_at = time.monotonic()
        refused = await client.post("/v1/conversations/c2/runs", json={"input": {"prompt": "x"}})
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "backend_unavailable"
        assert (await client.get("/healthz")).status_code == 200
        assert (await client.get("/readyz")).status_code == 503
        assert time.monotonic() - down_at < 3  # fast answers, not hangs
        await asyncio.sleep(1.0)
        redis.start()

        await asyncio.wait_for(done.wait(), 30)
        await subscriber
        state = await wait_state(client, "c1", lambda s: s["activeRunId"] is None, within=20)
        run = state["agentState"]["runs"][accepted["runId"]]
        assert run["status"] in ("completed", "failed")
        log = events_of(
            await collect_sse(
                client, f"/v1/conversations/c1/events?untilIdle=true&since={EMPTY_CURSOR}"
            )
        )
        ends = [e for e in log if e["type"] in TERMINALS]
        assert len(ends) == 1 and ends[0]["runId"] == accepted["runId"]
        assert log[-1] is ends[0]
        # Nothing acknowledged is lost: what the subscriber got is in the log, in order.
        logged_ids = [e["eventId"] for e in log]
        got_ids = [e["eventId"] for e in got]
        assert len(got_ids) == len(set(got_ids)), "an event was delivered twice"
        positions = [logged_ids.index(i) for i in got_ids]
        assert positions == sorted(positions)
        # And the gateway serves other conversations again.
        other = await start_run(client, "c2", "again")
        final = await wait_state(client, "c2", lambda s: s["activeRunId"] is None, within=20)
        assert final["agentState"]["runs"][other["runId"]]["status"] == "completed"
