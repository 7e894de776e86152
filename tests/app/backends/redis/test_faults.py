"""Redis stopped mid-run (a ``redis-server`` of the test's own, restarted from its AOF).

While Redis is down the gateway answers fast (503 ``backend_unavailable``, /healthz stays up),
the run keeps going upstream, and once Redis is back: the run ends with exactly one terminal,
every event a subscriber received is in the log in the same order, and other conversations run.

On a Redis Cluster "Redis stopped" is one node: the short outage with two instances runs there
too, with the conversation's master paused (a cluster of the test's own). The outage beyond the
lease TTL is a failover on a cluster (a master down past ``cluster-node-timeout`` is replaced by
its replica): ``test_cluster_failover.py`` kills one while runs stream on it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import httpx
import orjson
import pytest
from httpx_sse import aconnect_sse
from redis.crc import key_slot

from app.backends import EMPTY_CURSOR
from app.backends.redis.keys import ConversationKeys
from core.kinds import ENTITY_MAPS, TERMINAL_STATUSES
from tests.app.backends.redis.cluster_support import private_cluster
from tests.app.support.cluster_support import Subscriber, cluster, is_terminal, post_run
from tests.app.support.gateway_server import StartGateway, make_settings
from tests.app.support.helpers import collect_sse, events_of, start_run, wait_state
from tests.app.support.redis_support import (
    GatewayProcess,
    PrivateRedis,
    SlowUpstream,
    private_redis,
    serve_slow_upstream,
)
from tests.support import eventually

pytestmark = pytest.mark.slow  # stops and restarts a redis-server of its own

TERMINALS = ("run.completed", "run.failed", "run.cancelled")
LEASE_TTL = 3
PRIVATE_REDIS = "runs on a redis-server of its own, which it stops mid-run"


async def _subscriber(
    client: httpx.AsyncClient,
    key: str,
    got: list[dict[str, Any]],
    done: asyncio.Event,
    following: asyncio.Event,
) -> None:
    """An EventSource: reconnects with Last-Event-ID after any failure, until a terminal.
    ``following`` is set once its first snapshot arrived (it follows the log from then on)."""
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
                        following.set()
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


@pytest.mark.only_backend("redis", reason=PRIVATE_REDIS)
async def test_redis_stopped_mid_run(start_gateway: StartGateway) -> None:
    """A short outage (well within the lease TTL): the run goes on and completes."""
    with private_redis() as redis:
        async with serve_slow_upstream(chunks=80, interval=0.04) as upstream:
            await _scenario(start_gateway, redis, upstream.url)


@pytest.mark.only_backend("redis", reason=PRIVATE_REDIS)
async def test_redis_outage_beyond_lease_ttl(start_gateway: StartGateway) -> None:
    """An outage longer than the lease TTL: the owner gives the run up at its lease deadline and
    the run ends ``run.failed`` ``gateway_instance_lost`` exactly once, every entity closed,
    nothing of the old owner appended after the fence."""
    with private_redis() as redis:
        async with serve_slow_upstream(chunks=400, interval=0.04) as upstream:
            await _long_outage(start_gateway, redis, upstream)


def _settings(redis: PrivateRedis, url: str) -> Any:
    return make_settings(
        gateway={
            "backend": "redis",
            "redis_url": redis.url,
            "default_provider": "slow",
            "lease_ttl_seconds": LEASE_TTL,
            "heartbeat_seconds": 0.5,
        },
        providers={"slow": {"kind": "openai-chat", "url": url, "model": "m"}},
    )


async def _through_outage(
    client: httpx.AsyncClient, redis: PrivateRedis, outage: float
) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """Start a run, stop Redis for ``outage`` seconds mid-run, wait for the run's end.

    -> (the 202 body, the run's state, the whole log, what a reconnecting subscriber got)."""
    got: list[dict[str, Any]] = []
    done, following = asyncio.Event(), asyncio.Event()
    subscriber = asyncio.create_task(_subscriber(client, "c1", got, done, following))
    await asyncio.wait_for(following.wait(), 10)
    accepted = await start_run(client, "c1", "tell me")
    await eventually(lambda: sum(e["type"] == "message.delta" for e in got) >= 10, 10)

    redis.stop()  # SIGTERM: Redis flushes its AOF (a kill -9: test_redis_crash.py)
    down_at = time.monotonic()
    refused = await client.post("/v1/conversations/c2/runs", json={"input": {"prompt": "x"}})
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["code"] == "backend_unavailable"
    assert (await client.get("/healthz")).status_code == 200
    assert (await client.get("/readyz")).status_code == 503
    assert time.monotonic() - down_at < 3  # fast answers, not hangs
    await asyncio.sleep(max(0.0, outage - (time.monotonic() - down_at)))
    redis.start()

    await asyncio.wait_for(done.wait(), 30)
    await subscriber
    state = await wait_state(client, "c1", lambda s: s["activeRunId"] is None, within=20)
    run = state["agentState"]["runs"][accepted["runId"]]
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
    # Nothing was appended twice (a retried append whose first attempt landed) or out of order.
    sequences = [e["sequence"] for e in log if e["runId"] == accepted["runId"]]
    assert sequences == list(range(sequences[0], sequences[0] + len(sequences)))
    assert len(logged_ids) == len(set(logged_ids))
    return accepted, run, log, got


async def _other_conversation_runs(client: httpx.AsyncClient) -> None:
    other = await start_run(client, "c2", "again")
    final = await wait_state(client, "c2", lambda s: s["activeRunId"] is None, within=20)
    assert final["agentState"]["runs"][other["runId"]]["status"] == "completed"


async def _scenario(start_gateway: StartGateway, redis: PrivateRedis, url: str) -> None:
    gw = await start_gateway(_settings(redis, url))
    async with gw.client(timeout=5.0) as client:
        _, run, log, _ = await _through_outage(client, redis, outage=1.0)
        assert run["status"] == "completed", run
        assert log[-1]["type"] == "run.completed"
        # The whole answer made it (appends during the outage were retried, none dropped).
        text = "".join(e["payload"].get("delta", "") for e in log if e["type"] == "message.delta")
        assert text == "".join(f"w{i} " for i in range(80))
        await _other_conversation_runs(client)


async def _long_outage(
    start_gateway: StartGateway, redis: PrivateRedis, upstream: SlowUpstream
) -> None:
    gw = await start_gateway(_settings(redis, upstream.url))
    async with gw.client(timeout=5.0) as client:
        accepted, run, log, _ = await _through_outage(client, redis, outage=LEASE_TTL + 1.5)
        assert run["status"] == "failed", run
        assert run["error"]["code"] == "gateway_instance_lost"
        failed = log[-1]
        assert failed["type"] == "run.failed"
        assert failed["payload"]["error"]["code"] == "gateway_instance_lost"
        # The owner stopped writing at the fence: after the first closure event (written by the
        # instance that took over) there are only closures, then run.failed, and nothing else.
        lost = [
            i
            for i, e in enumerate(log)
            if e["payload"].get("error", {}).get("code") == "gateway_instance_lost"
            or e["payload"].get("decision") == "expired"
        ]
        assert lost == list(range(lost[0], len(log))), [e["type"] for e in log[lost[0] :]]
        assert all(e["runId"] == accepted["runId"] for e in log[lost[0] :])
        # Every entity of the run is closed.
        state = (await client.get("/v1/conversations/c1/state")).json()["agentState"]
        entities = [e for name in ENTITY_MAPS.values() for e in state.get(name, {}).values()]
        assert entities, "the run had opened a message"
        assert all(e["status"] in TERMINAL_STATUSES for e in entities), entities
        assert upstream.disconnected.is_set()  # the owner closed its upstream when it gave up
        assert upstream.finished == 0
        await _other_conversation_runs(client)


async def completed_once_on_its_owner(
    sub: Subscriber, run_id: str, upstream: SlowUpstream, a: GatewayProcess, b: GatewayProcess
) -> None:
    """The run of the two-instance outage tests completed on A with the whole answer, each
    event once and in order, and neither instance thought its owner lost."""
    events = await sub.done(30)
    assert events[-1]["type"] == "run.completed", events[-1]
    assert upstream.finished == 1
    assert len(set(sub.ids)) == len(sub.ids)
    seqs = [e["sequence"] for e in events if e["runId"] == run_id]
    assert seqs == list(range(len(seqs)))
    text = "".join(e["payload"].get("delta", "") for e in events if e["type"] == "message.delta")
    assert text == "".join(f"w{i} " for i in range(80))
    assert "lost its owner" not in a.output() + b.output()


@pytest.mark.only_backend("redis", reason="two gateway processes on a Redis of the test's own")
async def test_short_outage_two_instances_no_takeover() -> None:
    """A run on A, a subscriber on B: Redis stops ~1 s mid-run. B (whose sweep and reader ticks
    look for lost owners) never takes the run over while A's lease is valid: the run completes
    on A with the whole answer, each event once, in order."""
    with private_redis() as redis:
        async with (
            serve_slow_upstream(chunks=80, interval=0.04) as upstream,
            cluster(upstream.url, redis_url=redis.url, lease_ttl=LEASE_TTL) as (a, b),
        ):
            sub = Subscriber(b.url, "c1", is_terminal)
            await sub.started()
            res = await post_run(a.url, "c1", {"input": {"prompt": "hi"}, "provider": "slow"})
            assert res.status_code == 202, res.text
            await eventually(
                lambda: sum(e["type"] == "message.delta" for e in sub.events) >= 10, 10
            )
            redis.stop()
            await asyncio.sleep(1.0)
            redis.start()
            await completed_once_on_its_owner(sub, res.json()["runId"], upstream, a, b)


@pytest.mark.only_backend(
    "redis-cluster", reason="two gateway processes on a Redis Cluster of the test's own"
)
async def test_short_outage_of_the_conversations_master_two_instances_no_takeover() -> None:
    """The test above on a Redis Cluster: the master serving the conversation's slot is paused
    (SIGSTOP, shorter than ``cluster-node-timeout``: no failover) mid-run, then resumed. The
    run completes on A with the whole answer, each event once, in order; B never takes it over.
    (A master killed, with its replica promoted: ``test_cluster_failover.py``.)"""
    with private_cluster() as nodes:
        async with (
            serve_slow_upstream(chunks=80, interval=0.04) as upstream,
            cluster(
                upstream.url, redis_url=nodes.url, lease_ttl=LEASE_TTL, store="redis-cluster"
            ) as (a, b),
        ):
            keys = ConversationKeys.for_conversation("anonymous", "c1", a.prefix)
            master = nodes.pid(nodes.master_of(key_slot(keys.meta.encode())))
            sub = Subscriber(b.url, "c1", is_terminal)
            await sub.started()
            res = await post_run(a.url, "c1", {"input": {"prompt": "hi"}, "provider": "slow"})
            assert res.status_code == 202, res.text
            await eventually(
                lambda: sum(e["type"] == "message.delta" for e in sub.events) >= 10, 10
            )
            os.kill(master, signal.SIGSTOP)
            try:
                await asyncio.sleep(1.0)
            finally:
                os.kill(master, signal.SIGCONT)
            await completed_once_on_its_owner(sub, res.json()["runId"], upstream, a, b)


@pytest.mark.only_backend("redis", reason="two gateway processes on a Redis of the test's own")
async def test_outage_beyond_lease_ttl_two_instances_one_ending() -> None:
    """A run on A, a subscriber on B, Redis down longer than the lease TTL: exactly one instance
    ends the run ``gateway_instance_lost`` (once), and A appends nothing after the fence."""
    with private_redis() as redis:
        async with (
            serve_slow_upstream(chunks=400, interval=0.04) as upstream,
            cluster(upstream.url, redis_url=redis.url, lease_ttl=LEASE_TTL) as (a, b),
        ):
            sub = Subscriber(b.url, "c1", is_terminal)
            await sub.started()
            res = await post_run(a.url, "c1", {"input": {"prompt": "hi"}, "provider": "slow"})
            assert res.status_code == 202, res.text
            run_id = res.json()["runId"]
            await eventually(
                lambda: sum(e["type"] == "message.delta" for e in sub.events) >= 10, 10
            )
            redis.stop()
            await asyncio.sleep(LEASE_TTL + 1.5)
            redis.start()
            events = await sub.done(30)
            assert upstream.disconnected.is_set() and upstream.finished == 0
            await asyncio.to_thread(a.stop)  # once A has exited, no stale append of A can land
            async with httpx.AsyncClient(base_url=b.url, timeout=10.0) as client:
                log = events_of(
                    await collect_sse(
                        client,
                        f"/v1/conversations/c1/events?untilIdle=true&since={EMPTY_CURSOR}",
                    )
                )
                state = (await client.get("/v1/conversations/c1/state")).json()["agentState"]
            ends = [e for e in log if e["type"] in TERMINALS]
            assert len(ends) == 1 and log[-1] is ends[0] and events[-1] == ends[0]
            assert ends[0]["type"] == "run.failed"
            assert ends[0]["payload"]["error"]["code"] == "gateway_instance_lost"
            seqs = [e["sequence"] for e in log if e["runId"] == run_id]
            assert seqs == list(range(len(seqs)))
            assert state["runs"][run_id]["status"] == "failed"
            entities = [e for name in ENTITY_MAPS.values() for e in state.get(name, {}).values()]
            assert entities and all(e["status"] in TERMINAL_STATUSES for e in entities)
            assert (a.output() + b.output()).count(f"run {run_id} lost its owner") == 1
