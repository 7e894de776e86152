"""What runs and followers cost Redis, counted by a private ``redis-server`` of the test's own
(``INFO commandstats`` sees every command, the scripts' own included): a run's events go in
batched script calls with no other Redis command per event, on the owner and on a following
instance alike, and one instance follows more conversations at once than a fixed pool of 100
connections allowed (the pool is sized from ``redis_max_connections``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from app.backends import ConversationRef
from app.backends.redis import create_redis_backend
from app.backends.redis.eventlog import CloseBatch, EventLog, Pending, SnapshotWrite
from app.config import Settings
from tests.app.support.backend_contract import event, meta
from tests.app.support.gateway_server import RunningGateway, launch, make_settings
from tests.app.support.helpers import collect_sse, start_run
from tests.app.support.redis_support import PrivateRedis, private_redis
from tests.app.support.scripted_provider import ScriptedProvider
from tests.support import eventually_async

pytestmark = pytest.mark.slow  # a redis-server of its own

#: Deltas of the measured run.
EVENTS = 4000
#: Events per append script call at least, on average (they come as fast as the loop turns:
#: about 10 per call measured on an idle machine, 3.5 on a loaded one). Unbatched would be 1.
MIN_BATCH = 2
#: Calls of any command beyond one per append batch: what a few seconds of polls, the 202's
#: and the stream's own reads cost, whatever the number of events.
SLACK = 50


def settings_for(server: PrivateRedis, **gateway: Any) -> Settings:
    return make_settings(
        gateway={
            "backend": "redis",
            "redis_url": server.url,
            "lease_ttl_seconds": 30,  # no lease renewal during the measured run
            "snapshot_every": 200,
            **gateway,
        }
    )


async def command_calls(redis: Redis) -> dict[str, int]:
    """Calls per command since the last ``CONFIG RESETSTAT`` (``evalsha``, ``xadd``, …)."""
    stats: dict[str, Any] = await redis.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


@asynccontextmanager
async def two_gateways(settings: Settings) -> AsyncIterator[tuple[RunningGateway, RunningGateway]]:
    """Instances A and B of one Redis (each its own backend), stopped afterwards."""
    running: list[RunningGateway] = []
    try:
        for _ in range(2):
            running.append(
                await launch(
                    settings,
                    providers={"demo": ScriptedProvider()},
                    backend=create_redis_backend(settings),
                )
            )
        yield running[0], running[1]
    finally:
        for gateway in running:
            await gateway.stop()


@pytest.mark.only_backend("redis", reason="counts the commands a run costs a private Redis")
async def test_a_runs_events_cost_batched_script_calls_and_no_other_command_per_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A runs EVENTS deltas at full speed while B streams them: the events go in batched
    append script calls, and every other command (the scripts' own included: fencing, the
    snapshot, meta, polls, B's XREADs) is called at most once per batch plus a constant, never
    once per event; only the XADDs inside the append script are one per event. The state is
    snapshotted with an append at most once per ``snapshot_every`` events (and at the end)."""
    snapshots: list[float] = []
    append = EventLog.append_when_packed

    async def counting(
        self: EventLog, keys: Any, token: str, close: CloseBatch, nonce: str, **kw: Any
    ) -> list[str]:
        def counted() -> tuple[Sequence[Pending], bool, SnapshotWrite | None]:
            items, release, snapshot = close()
            if snapshot is not None:
                snapshots.append(time.monotonic())
            return items, release, snapshot

        return await append(self, keys, token, counted, nonce, **kw)

    monkeypatch.setattr(EventLog, "append_when_packed", counting)
    with private_redis() as server:
        settings = settings_for(server)
        redis = Redis.from_url(server.url)
        try:
            async with (
                two_gateways(settings) as (a, b),
                a.client(timeout=30) as ca,
                b.client(timeout=30) as cb,
            ):
                first = await start_run(ca, "cost", "text:1")  # the conversation exists
                await ca.get(f"/v1/conversations/cost/runs/{first['runId']}/wait")
                connected = asyncio.Event()

                def ended(frames: list[Any]) -> bool:
                    return any(f.event == "message" and '"run.completed"' in f.data for f in frames)

                follow = asyncio.ensure_future(
                    collect_sse(
                        cb,
                        "/v1/conversations/cost/events",  # a snapshot, then the log
                        stop=ended,
                        first_frame=connected,
                    )
                )
                await asyncio.wait_for(connected.wait(), 20)
                await redis.config_resetstat()
                snapshots.clear()
                run = await start_run(ca, "cost", f"text:{EVENTS}")
                frames = await asyncio.wait_for(follow, 120)
                await ca.get(f"/v1/conversations/cost/runs/{run['runId']}/wait")  # released
                calls = await command_calls(redis)
        finally:
            await redis.aclose()
    events = [orjson.loads(f.data) for f in frames if f.event == "message"]
    ours = [e for e in events if e["runId"] == run["runId"]]
    assert [e["sequence"] for e in ours] == list(range(len(ours)))  # none lost, none repeated
    assert sum(e["type"] == "message.delta" for e in ours) == EVENTS
    assert calls.get("xadd", 0) >= EVENTS  # what was counted is this run
    batches = calls.get("evalsha", 0)
    assert 0 < batches <= EVENTS // MIN_BATCH, calls  # appends went in batches
    per_event = {name: n for name, n in calls.items() if name != "xadd" and n > batches + SLACK}
    assert per_event == {}, calls  # B's XREADs included: at most one per batch
    # One with the release; during the run, one per snapshot_every events at most.
    assert 1 <= len(snapshots) <= EVENTS // 200 + 1, snapshots


async def test_one_instance_follows_more_conversations_at_once_than_a_pool_of_100() -> None:
    """B follows 150 conversations at once (150 blocking XREADs held together, each on its own
    connection: more than the 100 a fixed pool allowed); an append to each reaches B."""
    count = 150
    with private_redis() as server:
        settings = settings_for(server, redis_max_connections=count + 50)
        a, b = create_redis_backend(settings), create_redis_backend(settings)
        assert b.redis.connection_pool.max_connections == count + 50  # from the config
        redis = Redis.from_url(server.url)
        refs = [ConversationRef("p", f"c{n}") for n in range(count)]
        try:
            await a.start()
            await b.start()
            for ref in refs:
                await a.create_conversation(ref, meta())
            heads = [await b.head_cursor(ref) for ref in refs]
            reads = [
                asyncio.ensure_future(b.read(ref, head, limit=10, wait=60))
                for ref, head in zip(refs, heads, strict=True)
            ]

            async def all_blocked() -> bool:
                clients: dict[str, Any] = await redis.info("clients")
                return int(clients["blocked_clients"]) >= count

            await eventually_async(all_blocked, within=30, what=f"{count} blocking XREADs")
            for ref in refs:
                await a.append_event(ref, event("r1", 0, "run.started"))
            results = await asyncio.wait_for(asyncio.gather(*reads), 30)
        finally:
            await a.close()
            await b.close()
            await redis.aclose()
    assert all(r.status == "ok" for r in results)
    assert [[e.event_type for e in r.entries] for r in results] == [["run.started"]] * count


async def test_a_new_conversation_costs_the_same_reads_whatever_the_principal_has() -> None:
    """Reserving a principal's new conversation is a few commands however many conversations
    it already has (not one read per listed conversation); the index is pruned of expired
    conversations only when it reads full, and then an expired one no longer counts."""
    have = 300
    with private_redis() as server:
        backend = create_redis_backend(settings_for(server))
        redis = Redis.from_url(server.url)
        try:
            await backend.start()
            refs = [ConversationRef("many", f"c{n}") for n in range(have)]
            for ref in refs:
                await backend.create_conversation(ref, meta())
            await redis.config_resetstat()
            assert await backend.reserve_conversation(ConversationRef("many", "new"), have + 10)
            calls = await command_calls(redis)
            assert sum(calls.values()) < 10, calls  # no HGET of the 300 listed metas

            # Full at the cap; a conversation that expired (its meta gone, still listed) makes
            # room again: the full answer prunes the index before it stands.
            cap = have + 1  # "new" is reserved: the index lists have + 1
            assert not await backend.reserve_conversation(ConversationRef("many", "x"), cap)
            await redis.delete(backend.keys(refs[0]).meta)  # as conversation_ttl_seconds does
            assert await backend.reserve_conversation(ConversationRef("many", "x"), cap)
        finally:
            await backend.close()
            await redis.aclose()
