"""Run ownership across instances: claim (SET NX PX semantics), renew, take over, release.

One active run per conversation, cluster-wide: a claim succeeds only when no run record exists,
so two instances racing for the same conversation get exactly one winner. Each ownership change
increments the conversation's fence counter; the token ``"<n>|<instance>|<runId>"`` is checked by
every owner write (``scripts.APPEND``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Literal

from redis.asyncio import Redis

from app.backends.redis.keys import ConversationKeys
from app.backends.redis.scripts import CLAIM, RELEASE, RENEW, TAKEOVER
from app.backends.redis.tasks import stop_task

log = logging.getLogger(__name__)

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

    async def release(self, keys: ConversationKeys, token: Token) -> bool:
        res = await self._release(keys=[keys.run, keys.lease, keys.inflight], args=[token.raw])
        return bool(int(res))

    # --- the index of running runs: lets any instance find lost owners nobody looks at -------
    def index_key(self, prefix: str) -> str:
        return f"{prefix}:runs"

    async def mark(self, keys: ConversationKeys) -> None:
        """Record (or push back) the moment this conversation's lease would lapse."""
        deadline = time.time() * 1000 + self.lease_ttl_ms
        await self.redis.zadd(self.index_key(keys.prefix), {keys.tag: deadline})

    async def unmark(self, keys: ConversationKeys) -> None:
        await self.redis.zrem(self.index_key(keys.prefix), keys.tag)

    async def lapsed(self, prefix: str, limit: int = 100) -> list[str]:
        """Tags whose recorded lease deadline has passed (candidates: the lease decides)."""
        now = time.time() * 1000
        tags = await self.redis.zrangebyscore(
            self.index_key(prefix), "-inf", now, start=0, num=limit
        )
        return [_s(tag) for tag in tags]

    async def holder(self, keys: ConversationKeys) -> tuple[Token | None, bool]:
        """The active run's token (or None) and whether its lease is alive."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(keys.run)
            pipe.exists(keys.lease)
            run, alive = await pipe.execute()
        return (Token(_s(run)) if run else None), bool(alive)


class LeaseKeeper:
    """Renews a lease every ttl/3 until stopped; sets ``on_lost`` once if it is lost.

    The lease is valid at least until ``deadline()``: the moment the last successful grant
    (claim or renewal) was *sent*, plus the TTL, minus a small margin. While Redis is
    unreachable, renewals are retried quickly until that deadline; past it the owner gives the
    run up (``on_lost``) without renewing, so another instance may take it over.
    """

    def __init__(
        self,
        ownership: Ownership,
        keys: ConversationKeys,
        token: Token,
        on_lost: asyncio.Event,
        granted_at: float | None = None,
    ) -> None:
        self._own = ownership
        self._keys = keys
        self._token = token
        self._lost = on_lost
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        ttl = ownership.lease_ttl_ms / 1000.0
        self._valid_for = ttl - max(0.05, ttl * 0.05)
        self._deadline = (time.monotonic() if granted_at is None else granted_at) + self._valid_for

    def deadline(self) -> float:
        """``time.monotonic()`` until which the lease is surely still ours (if not fenced)."""
        return self._deadline

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=f"lease-{self._token.run_id}")

    async def _loop(self) -> None:
        interval = self._own.lease_ttl_ms / 3000.0
        retry = min(interval, 0.1)
        wait = interval
        while not self._stopping:
            await asyncio.sleep(min(wait, max(0.0, self._deadline - time.monotonic())))
            sent = time.monotonic()
            if sent >= self._deadline:
                log.warning("run %s: lease expired before it could be renewed", self._token.run_id)
                self._lost.set()
                return
            try:
                # A renewal hanging (Redis unreachable, no reset) is bounded by the deadline.
                renewal = self._own.renew(self._keys, self._token)
                if not await asyncio.wait_for(renewal, max(0.01, self._deadline - sent)):
                    log.warning("run %s lost its lease (fenced)", self._token.run_id)
                    self._lost.set()
                    return
            except Exception as exc:  # Redis down: retry until the lease's own deadline
                log.warning("lease renewal failed for run %s: %s", self._token.run_id, exc)
                wait = retry
                continue
            self._deadline = max(self._deadline, sent + self._valid_for)
            wait = interval
            try:
                await self._own.mark(self._keys)
            except Exception as exc:
                log.warning("lease index update failed for run %s: %s", self._token.run_id, exc)

    async def stop(self) -> None:
        self._stopping = True
        task, self._task = self._task, None
        await stop_task(task)
