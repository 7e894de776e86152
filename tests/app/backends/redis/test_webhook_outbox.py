"""The durable webhook outbox on Redis: what one instance accepted is delivered by another when it
dies (same delivery id), a run ended ``gateway_instance_lost`` sends its webhook once, and a
closing instance hands what it holds back at once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from redis.asyncio import Redis

from app.backends.redis.webhook_outbox import GROUP, RedisWebhookOutbox, outbox_key
from app.backends.webhook_outbox import OutboxEntry
from app.observability.webhooks import DELIVERY_HEADER, verify_signature
from tests.app.support.helpers import start_run, wait_state
from tests.app.support.redis_support import (
    SHARED_REDIS_URL,
    GatewayProcess,
    shared_redis,
    unique_prefix,
)
from tests.app.support.webhook_support import Receiver, serve_receiver
from tests.support import eventually, eventually_async


@asynccontextmanager
async def two_gateways(
    receiver: Receiver, lease_ttl: float
) -> AsyncIterator[tuple[GatewayProcess, GatewayProcess, Redis, str]]:
    """Gateways A and B (not started) on one prefix, both sending webhooks to ``receiver``."""
    prefix = unique_prefix()
    async with shared_redis(prefix) as redis:
        a = GatewayProcess("A", SHARED_REDIS_URL, prefix, lease_ttl=lease_ttl)
        b = GatewayProcess("B", SHARED_REDIS_URL, prefix, lease_ttl=lease_ttl)
        for process in (a, b):
            process.args += ["--webhook-url", receiver.url]
        try:
            yield a, b, redis, outbox_key(prefix)
        finally:
            a.close()
            b.close()


async def outbox_empty(redis: Redis, key: str) -> None:
    """Every entry was done (acknowledged and deleted): nothing more will be delivered."""

    async def empty() -> bool:
        return int(await redis.xlen(key)) == 0

    await eventually_async(empty, within=20, what="the outbox is empty")


def delivery_ids(receiver: Receiver) -> set[str]:
    return {headers[DELIVERY_HEADER.lower()] for headers, _ in receiver.attempts}


@pytest.mark.only_backend("redis", reason="the outbox of gateway processes on one Redis")
@pytest.mark.slow  # gateway processes, one killed
async def test_a_survivor_delivers_what_a_killed_instance_held_with_the_same_id() -> None:
    async with (
        serve_receiver(Receiver(fail_first=10**6)) as receiver,
        two_gateways(receiver, lease_ttl=2.0) as (a, b, redis, key),
    ):
        a.start()
        await a.wait_ready()
        async with httpx.AsyncClient(base_url=a.url, timeout=20) as ca:
            run = await start_run(ca, "k1", "text:2")
        # Only A runs: it holds the entry and its attempts fail.
        await eventually(lambda: len(receiver.attempts) >= 2, what="A's failed attempts")
        b.start()  # B gets the entry only by taking it over from A
        await b.wait_ready()
        a.kill()
        failed = len(receiver.attempts)
        receiver.fail_first = 0  # answers 2xx from now on
        await receiver.wait_acknowledged(1, within=30)
        await outbox_empty(redis, key)  # acknowledged in Redis by B, the only live instance
    assert len(receiver.attempts) > failed
    assert len(delivery_ids(receiver)) == 1  # A's failed attempts and B's delivery alike
    hook = receiver.acknowledged[0]
    assert hook["id"] in delivery_ids(receiver)
    assert (hook["type"], hook["run"]["runId"]) == ("run.completed", run["runId"])
    assert all(verify_signature("whsec-test", h["x-gateway-signature"], body)
               for h, body in receiver.attempts)  # fmt: skip


@pytest.mark.only_backend("redis", reason="the outbox of gateway processes on one Redis")
@pytest.mark.slow  # gateway processes, one killed
async def test_a_run_ended_gateway_instance_lost_sends_one_webhook() -> None:
    async with (
        serve_receiver(Receiver()) as receiver,
        two_gateways(receiver, lease_ttl=1.0) as (a, b, redis, key),
    ):
        a.start()
        b.start()
        await asyncio.gather(a.wait_ready(), b.wait_ready())
        async with (
            httpx.AsyncClient(base_url=a.url, timeout=20) as ca,
            httpx.AsyncClient(base_url=b.url, timeout=20) as cb,
        ):
            run = await start_run(ca, "k1", "sleep:60")  # A owns it
            await wait_state(cb, "k1", lambda s: s["isRequesting"])
            a.kill()
            await receiver.wait_acknowledged(1, within=30)
            state = await wait_state(cb, "k1", lambda s: not s["isRequesting"], within=20)
        await outbox_empty(redis, key)
    assert state["agentState"]["runs"][run["runId"]]["status"] == "failed"
    assert len(receiver.attempts) == 1, [body for _, body in receiver.attempts]
    hook = receiver.acknowledged[0]
    assert (hook["type"], hook["run"]["runId"]) == ("run.failed", run["runId"])
    assert hook["run"]["error"]["code"] == "gateway_instance_lost"
    assert (hook["principal"], hook["conversationKey"]) == ("anonymous", "k1")


def entry(n: int) -> OutboxEntry:
    return OutboxEntry(f"whd_{n}", "run.completed", f"run_{n}", b'{"n":%d}' % n, time.time())


async def test_a_closing_instance_hands_its_entries_back_at_once() -> None:
    """A held entry is claimable by the others right after a graceful close (its idle time is
    set to ``claim_idle``); the stream keeps only what is not done."""
    prefix = unique_prefix()
    key = outbox_key(prefix)
    async with shared_redis(prefix) as redis:
        first = RedisWebhookOutbox(redis, prefix, "first", claim_idle_seconds=3)
        second = RedisWebhookOutbox(redis, prefix, "second", claim_idle_seconds=3)
        try:
            await first.start()
            await first.put(entry(1))
            await first.put(entry(2))
            taken = [await asyncio.wait_for(first.take(), 10) for _ in range(2)]
            await first.done(taken[0])
            assert await first.pending() == 1  # done: deleted from the stream
            await first.close()  # still holds the second one
            (held,) = await redis.xpending_range(key, GROUP, min="-", max="+", count=10)
            since = held["time_since_delivered"]
            assert held["consumer"] == b"first" and isinstance(since, int) and since >= 3000
            await second.start()
            again = await asyncio.wait_for(second.take(), 10)  # the keeper's first pass
            assert (again.delivery_id, again.body) == (taken[1].delivery_id, taken[1].body)
            await second.done(again)
            assert await second.pending() == 0
            assert (await redis.xpending(key, GROUP))["pending"] == 0
        finally:
            await first.close()
            await second.close()
