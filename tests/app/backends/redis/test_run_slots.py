"""The run slot on Redis: a claimed run is in the ``P:runs`` index as soon as its claim has
landed, so an instance killed right after its claim leaves a run the reaper's sweep finds (the
index entry used to follow the claim one round trip later)."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from app.backends.redis import RedisBackend
from app.backends.redis.keys import ConversationKeys, sweep_index_keys
from app.backends.redis.queue import OrderedClaim, RunQueue
from app.backends.types import ConversationRef
from tests.app.support.backend_contract import Control, meta
from tests.app.support.redis_support import SHARED_REDIS_URL, gateway_redis_client, prefix, redis
from tests.support import eventually_async

__all__ = ["prefix", "redis"]  # fixtures

REF = ConversationRef("alice", "c1")


async def test_a_claimed_run_is_indexed_when_its_claim_lands(
    redis: Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = RedisBackend(gateway_redis_client(SHARED_REDIS_URL), key_prefix=prefix)
    keys = ConversationKeys.for_conversation(REF.principal, REF.key, prefix=prefix)
    (index,) = sweep_index_keys(prefix, "runs", 1)
    real = RunQueue.claim
    claims: list[OrderedClaim] = []

    async def claim_then_killed(self: RunQueue, *args: object, **kwargs: object) -> OrderedClaim:
        """The claim lands, then the instance is gone: nothing after it runs."""
        claims.append(await real(self, *args, **kwargs))  # type: ignore[arg-type]
        raise asyncio.CancelledError

    try:
        assert await backend.create_conversation(REF, meta())
        monkeypatch.setattr(RunQueue, "claim", claim_then_killed)
        with pytest.raises(asyncio.CancelledError):
            await backend.claim_run(REF, Control("r1"))
        assert [claim.status for claim in claims] == ["ok"]
        assert await redis.exists(keys.lease)  # a run claimed, with nobody to keep it
        assert await redis.zscore(index, keys.tag) is not None  # a sweep will look at it
    finally:
        await backend.close()


async def test_an_index_entry_without_a_claimed_run_is_dropped_by_the_sweep(
    redis: Redis, prefix: str
) -> None:
    """The entry goes ahead of the claim: when the claim finds no room, the sweep drops it."""
    backend = RedisBackend(gateway_redis_client(SHARED_REDIS_URL), key_prefix=prefix)
    keys = ConversationKeys.for_conversation(REF.principal, REF.key, prefix=prefix)
    (index,) = sweep_index_keys(prefix, "runs", 1)
    try:
        await redis.zadd(index, {keys.tag: 1})  # lapsed long ago, and no run holds the slot
        await backend.start()

        async def dropped() -> bool:
            return await redis.zscore(index, keys.tag) is None

        await eventually_async(dropped, within=30, what="the entry dropped by the sweep")
    finally:
        await backend.close()
