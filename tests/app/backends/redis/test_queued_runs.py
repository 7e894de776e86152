"""Enqueued runs on Redis: a run's ticket is in the ``P:queues`` index before it exists, so an
instance killed right after its ticket landed (its ``202`` maybe never sent, a retry answered
from the stored answer) leaves the run where a live instance's adoption sweep finds it. The
cluster soak (``bench/soak.py --redis-cluster``) found a run answered ``202`` that never
started: its ticket was written, its index entry was not."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from app.backends.redis import RedisBackend
from app.backends.redis.keys import ConversationKeys, index_bucket, sweep_index_keys
from app.backends.redis.queue import RunQueue
from app.backends.types import ConversationRef, QueuedRun
from tests.app.support.redis_support import SHARED_REDIS_URL, gateway_redis_client, prefix, redis

__all__ = ["prefix", "redis"]  # fixtures

REF = ConversationRef("alice", "c1")


async def test_a_ticket_is_indexed_before_it_exists(
    redis: Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = RedisBackend(gateway_redis_client(SHARED_REDIS_URL), key_prefix=prefix)
    keys = ConversationKeys.for_conversation(REF.principal, REF.key, prefix=prefix)
    landed = asyncio.Event()
    real = RunQueue.enqueue

    async def enqueue_then_killed(self: RunQueue, *args: object, **kwargs: object) -> bool:
        """The ENQUEUE script lands, then the instance is gone: nothing after it runs."""
        await real(self, *args, **kwargs)  # type: ignore[arg-type]
        landed.set()
        raise asyncio.CancelledError

    monkeypatch.setattr(RunQueue, "enqueue", enqueue_then_killed)
    try:
        run = QueuedRun("r1", {"prompt": "x"}, "demo", emit_user_message=False)
        with pytest.raises(asyncio.CancelledError):
            await backend.enqueue_run(REF, run, limit=None)
        assert landed.is_set()
        assert await redis.zcard(keys.queue) == 1  # the ticket, with nobody to keep it
        (index,) = sweep_index_keys(prefix, "queues", 1)
        assert index_bucket(keys.tag, 1) == 0
        assert await redis.zscore(index, keys.tag) is not None  # a sweep will look at it
    finally:
        await backend.close()
