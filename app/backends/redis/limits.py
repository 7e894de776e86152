"""The ``[limits]`` counters in Redis (a ``LimitStore``): cluster-wide and checked atomically,
one script per counter.

- runs per minute: ``P:rate:{H}``, a sorted set of accepted-run tokens scored by Redis time;
  the script drops what left the 60 s window, refuses when it is full, else adds the token.
- subscribers: ``P:subs:{H}`` (per principal) and ``P:{T}:subs`` (per conversation), sorted sets
  of slot tokens scored by their expiry. The instance holding a stream renews its slots every
  ttl/3 (:class:`SlotKeeper`); the slots of a dead instance lapse after the lease TTL and are
  pruned by the next script. A stream takes its principal slot and its conversation slot in
  one round trip (each atomic; one is given back when the other is refused), so no counter
  ever exceeds its limit.

Time is Redis' own (``TIME``), so instances' clocks do not matter.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from typing import Final

from redis.asyncio import Redis

from app.backends.limit_store import SubscriberRefusal
from app.backends.redis.errors import unavailable
from app.backends.redis.keys import conversation_tag
from app.backends.redis.script_batch import call_together
from app.backends.types import ConversationRef
from app.ids import new_token
from app.tasks import stop_task

__all__ = ["RedisLimits"]

log = logging.getLogger(__name__)
WINDOW_MS = 60_000

_NOW: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

#: KEYS: window.  ARGV: limit, window_ms, token.  -> -1 recorded | ms until one leaves it
TAKE_RUN: Final = (
    _NOW
    + """
local window = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return math.max(1, tonumber(first[2]) + window - now)
end
redis.call('ZADD', KEYS[1], now, ARGV[3])
redis.call('PEXPIRE', KEYS[1], window)
return -1
"""
)

#: KEYS: slots.  ARGV: limit, ttl_ms, token ('' = only count).  -> 1 taken (or room) | 0 full
TAKE_SLOT: Final = (
    _NOW
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
if ARGV[3] ~= '' then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
  redis.call('PEXPIRE', KEYS[1], 2 * tonumber(ARGV[2]))
end
return 1
"""
)

#: A reservation in the principal index, before its conversation exists: ``r<unix ms>``.
RESERVED_PREFIX: Final = "r"
#: How long a reservation counts without its conversation (then it is pruned as stale).
RESERVATION_GRACE_MS: Final = 30_000

#: KEYS: principal index.  ARGV: conversation key, limit, reservation value.
#: -> 1 listed (or already) | 0 full
RESERVE_CONVERSATION: Final = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 1 end
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
"""


def reservation_fresh(value: str, now_ms: float) -> bool:
    """An index value that is a reservation still within its grace period."""
    if not value.startswith(RESERVED_PREFIX):
        return False
    try:
        return now_ms - float(value[len(RESERVED_PREFIX) :]) < RESERVATION_GRACE_MS
    except ValueError:
        return False


#: KEYS: slots.  ARGV: ttl_ms, tokens.  Push back the expiry of the slots still held.
RENEW_SLOTS: Final = (
    _NOW
    + """
local expiry = now + tonumber(ARGV[1])
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], 'XX', expiry, ARGV[i]) end
redis.call('PEXPIRE', KEYS[1], 2 * tonumber(ARGV[1]))
return 1
"""
)


class RedisLimits:
    """The limit counters of one instance's Redis client (and the renewal of its slots)."""

    def __init__(self, redis: Redis, prefix: str, slot_ttl_ms: int) -> None:
        self.redis = redis
        self.prefix = prefix
        self.slot_ttl_ms = slot_ttl_ms
        self._take_run = redis.register_script(TAKE_RUN)
        self._take_slot = redis.register_script(TAKE_SLOT)
        self._renew = redis.register_script(RENEW_SLOTS)
        #: Slots held by this instance's streams: token -> the sorted sets it is in.
        self._held: dict[str, tuple[str, ...]] = {}
        self._task: asyncio.Task[None] | None = None

    def _principal_key(self, kind: str, principal: str) -> str:
        return f"{self.prefix}:{kind}:{{{conversation_tag(principal, '')}}}"

    def _conversation_key(self, ref: ConversationRef) -> str:
        return f"{self.prefix}:{{{conversation_tag(ref.principal, ref.key)}}}:subs"

    # --- runs per minute -----------------------------------------------------------------
    async def take_run(self, principal: str, per_minute: int) -> tuple[str | None, float]:
        token = new_token(8)
        with unavailable():
            res = int(
                await self._take_run(
                    keys=[self._principal_key("rate", principal)],
                    args=[per_minute, WINDOW_MS, token],
                )
            )
        return (token, 0.0) if res < 0 else (None, math.ceil(res / 1000))

    async def refund_run(self, principal: str, token: str) -> None:
        with unavailable():
            await self.redis.zrem(self._principal_key("rate", principal), token)

    # --- subscribers ---------------------------------------------------------------------
    async def take_subscriber(
        self, ref: ConversationRef, per_conversation: int, per_principal: int
    ) -> tuple[str | None, SubscriberRefusal | None]:
        with unavailable():
            return await self._take_subscriber(ref, per_conversation, per_principal)

    async def _take_subscriber(
        self, ref: ConversationRef, per_conversation: int, per_principal: int
    ) -> tuple[str | None, SubscriberRefusal | None]:
        token = new_token(8)
        mine = self._principal_key("subs", ref.principal)
        conv = self._conversation_key(ref)
        ttl = self.slot_ttl_ms
        try:
            took_mine, took_conv = await call_together(
                self.redis,
                [
                    (self._take_slot, [mine], [per_principal, ttl, token]),
                    (self._take_slot, [conv], [per_conversation, ttl, token]),
                ],
            )
        except BaseException:
            with contextlib.suppress(Exception):  # whatever was taken: given back, else lapses
                await self._free(token, (mine, conv))
            raise
        held = tuple(key for key, took in ((mine, took_mine), (conv, took_conv)) if int(took))
        if len(held) == 2:
            self._held[token] = held  # renewed (and freed) from now on
            return token, None
        if held:
            await self._free(token, held)
        return None, "principal" if not int(took_mine) else "conversation"

    async def free_subscriber(self, token: str) -> None:
        keys = self._held.pop(token, ())  # not renewed from now on: it lapses if Redis is down
        with unavailable():
            await self._free(token, keys)

    async def _free(self, token: str, keys: tuple[str, ...]) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.zrem(key, token)
            await pipe.execute()

    async def subscribers_full(
        self, ref: ConversationRef, per_conversation: int, per_principal: int
    ) -> SubscriberRefusal | None:
        ttl = self.slot_ttl_ms
        mine = self._principal_key("subs", ref.principal)
        conv = self._conversation_key(ref)
        with unavailable():
            room_conv, room_mine = await call_together(
                self.redis,
                [
                    (self._take_slot, [conv], [per_conversation, ttl, ""]),
                    (self._take_slot, [mine], [per_principal, ttl, ""]),
                ],
            )
        if not int(room_conv):
            return "conversation"
        return None if int(room_mine) else "principal"

    # --- renewal -------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="redis-limit-slots")

    async def stop(self) -> None:
        """Stop renewing and free our slots (best effort: otherwise they lapse)."""
        task, self._task = self._task, None
        await stop_task(task)
        for token in list(self._held):
            with contextlib.suppress(Exception):
                await self.free_subscriber(token)

    async def _loop(self) -> None:
        interval = self.slot_ttl_ms / 3000.0
        while True:
            await asyncio.sleep(interval)
            by_key: dict[str, list[str]] = {}
            for token, keys in list(self._held.items()):
                for key in keys:
                    by_key.setdefault(key, []).append(token)
            for key, tokens in by_key.items():
                try:
                    await self._renew(keys=[key], args=[self.slot_ttl_ms, *tokens])
                except Exception as exc:  # Redis down: keep trying; slots may lapse
                    log.warning("subscriber slot renewal failed: %s", exc)
