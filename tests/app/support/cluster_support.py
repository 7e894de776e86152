"""Two gateway processes (A and B) on one Redis key prefix, and an SSE subscriber to watch them.

``cluster()`` gives each use its own key prefix on the shared Redis (or on a private one, or,
``store="redis-cluster"``, on the shared Redis Cluster: both with ``redis_cluster = true``) and
a lease TTL; ``Subscriber`` follows a conversation in the background.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
from httpx_sse import aconnect_sse

from tests.app.backends.redis.cluster_support import SHARED_CLUSTER_URL, shared_cluster
from tests.app.support.redis_support import (
    SHARED_REDIS_URL,
    GatewayProcess,
    shared_redis,
    unique_prefix,
)

#: Short for the lost-owner test; the other tests use a longer one so that a loaded machine
#: (a stalled event loop) never looks like a lost owner.
LEASE_TTL = 1.0
STEADY_LEASE_TTL = 3.0
TERMINALS = {"run.completed", "run.failed", "run.cancelled"}


@asynccontextmanager
async def cluster(
    upstream_url: str = "",
    redis_url: str = SHARED_REDIS_URL,
    lease_ttl: float = STEADY_LEASE_TTL,
    store: str = "redis",
    **kwargs: Any,
) -> AsyncIterator[tuple[GatewayProcess, GatewayProcess]]:
    kwargs["lease_ttl"] = lease_ttl
    prefix = unique_prefix()
    if store == "redis-cluster":
        redis_url = SHARED_CLUSTER_URL if redis_url == SHARED_REDIS_URL else redis_url
        keys: Any = shared_cluster(prefix, redis_url)
        kwargs["redis_cluster"] = True
    else:
        assert store == "redis", store
        keys = shared_redis(prefix)
    async with keys:
        a = GatewayProcess("A", redis_url, prefix, upstream_url=upstream_url, **kwargs)
        b = GatewayProcess("B", redis_url, prefix, upstream_url=upstream_url, **kwargs)
        try:
            a.start()
            b.start()
            await asyncio.gather(a.wait_ready(), b.wait_ready())
            yield a, b
        finally:
            a.close()
            b.close()


class Subscriber:
    """An SSE subscriber in the background: records (id, event) frames until ``until`` holds."""

    def __init__(
        self, base: str, key: str, until: Callable[[dict[str, Any]], bool], since: str | None = None
    ) -> None:
        self.base, self.key, self.until, self.since = base, key, until, since
        self.events: list[dict[str, Any]] = []
        self.ids: list[str] = []
        self.snapshots: list[dict[str, Any]] = []
        self.ready = asyncio.Event()
        self.snapshot_seen = asyncio.Event()
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        headers = {"Last-Event-ID": self.since} if self.since else {}
        async with (
            httpx.AsyncClient(base_url=self.base, timeout=httpx.Timeout(30.0)) as client,
            aconnect_sse(
                client, "GET", f"/v1/conversations/{self.key}/events", headers=headers
            ) as source,
        ):
            self.ready.set()
            async for sse in source.aiter_sse():
                if sse.event == "snapshot":
                    self.snapshots.append(orjson.loads(sse.data))
                    self.snapshot_seen.set()
                    continue
                if sse.event != "message" or not sse.data:
                    continue  # heartbeats, retry hints
                event = orjson.loads(sse.data)
                self.events.append(event)
                self.ids.append(sse.id)
                if self.until(event):
                    return

    async def done(self, within: float) -> list[dict[str, Any]]:
        await asyncio.wait_for(self.task, within)
        return self.events

    async def started(self) -> None:
        """The stream is following the log from a known cursor: its snapshot frame arrived (or,
        resuming, its answer did), so it gets every event appended from now on."""
        await asyncio.wait_for(self.ready.wait(), 10)
        if self.since is None:
            await asyncio.wait_for(self.snapshot_seen.wait(), 10)


def is_terminal(event: dict[str, Any]) -> bool:
    return event["type"] in TERMINALS


async def post_run(base: str, key: str, body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(base_url=base, timeout=10.0) as client:
        return await client.post(f"/v1/conversations/{key}/runs", json=body)


async def get_state(base: str, key: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=base, timeout=10.0) as client:
        res = await client.get(f"/v1/conversations/{key}/state")
        assert res.status_code == 200, res.text
        data: dict[str, Any] = res.json()
        return data


def assert_closed(state: dict[str, Any], run_id: str) -> None:
    agent = state["agentState"]
    for name in ("messages", "reasoning", "toolCalls", "approvals", "tasks", "artifacts"):
        for entity in agent[name].values():
            if entity["runId"] == run_id:
                assert entity["status"] in ("completed", "failed", "cancelled"), entity
