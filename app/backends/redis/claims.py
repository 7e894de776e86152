"""Run ownership across instances: claim (SET NX PX semantics), renew, take over, release.

One active run per conversation, cluster-wide: a claim succeeds only when no run record exists,
so two instances racing for the same conversation get exactly one winner. Each ownership change
increments the conversation's fence counter; the token ``"<n>|<instance>|<runId>"`` is checked by
every owner write (``scripts.APPEND``). The owner keeps its lease alive with
:class:`app.backends.redis.lease.LeaseKeeper`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from app.backends.redis.cluster import is_cluster
from app.backends.redis.keys import (
    CLUSTER_INDEX_BUCKETS,
    ConversationKeys,
    index_bucket,
    sweep_index_key,
    sweep_index_keys,
)
from app.backends.redis.scripts import CLAIM, RELEASE, RENEW, TAKEOVER

ClaimStatus = Literal["ok", "busy", "lost"]


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True, slots=True)
class Token:
    """A fencing token: the fence number, the owning instance and the run it owns."""

    raw: str

    @property
    def number(self) -> int:
        return int(self.raw.split("|", 2)[0])

    @property
    def instance(self) -> str:
        return self.raw.split("|", 2)[1]

    @property
    def run_id(self) -> str:
        return self.raw.split("|", 2)[2]


@dataclass(frozen=True, slots=True)
class Claim:
    status: ClaimStatus
    #: ``ok``: our token; ``busy``/``lost``: the current holder's token.
    token: Token


class Ownership:
    """Script calls for one Redis client; stateless apart from the registered scripts."""

    def __init__(self, redis: Redis, instance_id: str, lease_ttl_ms: int) -> None:
        self.redis = redis
        self.instance_id = instance_id
        self.lease_ttl_ms = lease_ttl_ms
        self._claim = redis.register_script(CLAIM)
        self._renew = redis.register_script(RENEW)
        self._takeover = redis.register_script(TAKEOVER)
        self._release = redis.register_script(RELEASE)
        #: Buckets of ``P:runs``: one on a standalone Redis, several on a cluster (keys.py).
        self.buckets = CLUSTER_INDEX_BUCKETS if is_cluster(redis) else 1

    async def claim(self, keys: ConversationKeys, run_id: str) -> Claim:
        res = await self._claim(
            keys=[keys.run, keys.lease, keys.fence],
            args=[self.instance_id, run_id, self.lease_ttl_ms],
        )
        status = _s(res[0])
        if status not in ("ok", "busy", "lost"):
            raise RuntimeError(f"unexpected claim answer {status!r}")
        return Claim(status, Token(_s(res[1])))  # type: ignore[arg-type]

    async def renew(self, keys: ConversationKeys, token: Token) -> bool:
        res = await self._renew(keys=[keys.run, keys.lease], args=[token.raw, self.lease_ttl_ms])
        return bool(int(res))

    async def takeover(self, keys: ConversationKeys, holder: Token) -> Token | None:
        """Fence out ``holder`` (its lease expired) and own its run under a new token."""
        res = await self._takeover(
            keys=[keys.run, keys.lease, keys.fence],
            args=[self.instance_id, holder.raw, self.lease_ttl_ms, holder.run_id],
        )
        return Token(_s(res)) if res else None

    async def release(self, keys: ConversationKeys, token: Token, *also: str) -> bool:
        """Give the run up; ``also``: keys deleted with it (only when it was still ours)."""
        res = await self._release(
            keys=[keys.run, keys.lease, keys.inflight, *also], args=[token.raw]
        )
        return bool(int(res))

    # --- the index of running runs: lets any instance find lost owners nobody looks at -------
    def index_key(self, keys: ConversationKeys) -> str:
        """The ``P:runs`` bucket of the conversation (:func:`.keys.sweep_index_key`)."""
        bucket = index_bucket(keys.tag, self.buckets)
        return sweep_index_key(keys.prefix, "runs", bucket, self.buckets)

    async def mark(self, keys: ConversationKeys) -> None:
        """Record (or push back) the moment this conversation's lease would lapse."""
        await self.redis.zadd(self.index_key(keys), self._lapses_at(keys))

    def mark_in(self, pipe: Pipeline, keys: ConversationKeys) -> None:
        """:meth:`mark` as one command of ``pipe``."""
        pipe.zadd(self.index_key(keys), self._lapses_at(keys))

    def _lapses_at(self, keys: ConversationKeys) -> dict[str, float]:
        return {keys.tag: time.time() * 1000 + self.lease_ttl_ms}

    def unmark_in(self, pipe: Pipeline, keys: ConversationKeys) -> None:
        """:meth:`unmark` as one command of ``pipe``."""
        pipe.zrem(self.index_key(keys), keys.tag)

    async def unmark(self, keys: ConversationKeys) -> None:
        await self.redis.zrem(self.index_key(keys), keys.tag)

    async def lapsed(self, prefix: str, limit: int = 100) -> list[str]:
        """Tags whose recorded lease deadline has passed (candidates: the lease decides), from
        every bucket (one round trip: a cluster reads its shards in parallel)."""
        now = time.time() * 1000
        async with self.redis.pipeline(transaction=False) as pipe:
            for index in sweep_index_keys(prefix, "runs", self.buckets):
                pipe.zrangebyscore(index, "-inf", now, start=0, num=limit)
            replies = await pipe.execute()
        return [_s(tag) for tags in replies for tag in tags][:limit]

    async def holder(self, keys: ConversationKeys) -> tuple[Token | None, bool]:
        """The active run's token (or None) and whether its lease is alive."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(keys.run)
            pipe.exists(keys.lease)
            run, alive = await pipe.execute()
        return (Token(_s(run)) if run else None), bool(alive)
