"""The cluster-wide FIFO of enqueued runs: one sorted set of tickets per conversation.

``multitask: "enqueue"`` (and ``interrupt``) on any instance puts a ticket (the run id) in
``P:{T}:queue`` (score = arrival order) and records its liveness deadline in ``P:{T}:qlive``.
The claim of the run slot is ordered by it (:data:`CLAIM_ORDERED`, a superset of
``scripts.CLAIM``): a queued run takes the slot only when its ticket is first, and a run without
a ticket only when nobody waits. So runs start in arrival order whichever instance accepted
them, and the bound (``enqueue_max``) counts the tickets of every instance.

An ``interrupt`` marks, in the same script, every ticket already waiting as cancelled
(``P:{T}:qcancel``), as does an abort naming a queued run: such a run still takes the slot in
its turn and its claim answers the reason, so it logs its cancellation without reaching the
upstream (every accepted run ends in exactly one terminal event).

The instance holding the run's input keeps its tickets alive (:class:`TicketKeeper`, every
ttl/3); tickets of a dead instance lapse after the lease TTL and are pruned by the next script.
Time is Redis' own (``TIME``), so instances' clocks do not matter.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Final, Literal

from redis.asyncio import Redis

from app.backends.redis.keys import ConversationKeys
from app.backends.redis.tasks import stop_task

__all__ = ["ENQUEUE_UNBOUNDED", "OrderedClaim", "RunQueue", "TicketKeeper"]

log = logging.getLogger(__name__)
ENQUEUE_UNBOUNDED = -1
ClaimAnswer = Literal["ok", "busy", "lost", "queued", "gone"]

_PRELUDE: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if tonumber(redis.call('HGET', KEYS[2], m) or '0') < now then
    redis.call('ZREM', KEYS[1], m)
    redis.call('HDEL', KEYS[2], m)
    redis.call('HDEL', KEYS[3], m)
  end
end
"""

#: KEYS: queue, qlive, qcancel.  ARGV: run_id, limit (-1 = none), interrupt (0/1), ttl_ms.
#: -> 1 queued | 0 full.  With interrupt, every ticket already waiting is marked "interrupted".
ENQUEUE: Final = (
    _PRELUDE
    + """
local limit = tonumber(ARGV[2])
if limit >= 0 and redis.call('ZCARD', KEYS[1]) >= limit then return 0 end
local score = now * 1000
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] then score = math.max(score, tonumber(last[2]) + 1) end
if ARGV[3] == '1' then
  for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    redis.call('HSET', KEYS[3], m, 'interrupted')
  end
end
redis.call('ZADD', KEYS[1], score, ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], now + tonumber(ARGV[4]))
return 1
"""
)

#: KEYS: queue, qlive, qcancel, run, lease, fence.  ARGV: instance, run_id, ttl_ms, ticketed.
#: -> {"ok", token, reason} (reason "" unless it was cancelled while queued) |
#:    {"busy"|"lost", holder} | {"queued", ""} (not its turn) |
#:    {"gone", ""} (its ticket was removed: deleted, or lapsed)
CLAIM_ORDERED: Final = (
    _PRELUDE
    + """
if ARGV[4] == '1' then
  if not redis.call('ZSCORE', KEYS[1], ARGV[2]) then return {'gone', ''} end
  redis.call('HSET', KEYS[2], ARGV[2], now + tonumber(ARGV[3]))
  if redis.call('ZRANGE', KEYS[1], 0, 0)[1] ~= ARGV[2] then return {'queued', ''} end
elseif redis.call('ZCARD', KEYS[1]) > 0 then
  return {'queued', ''}
end
local holder = redis.call('GET', KEYS[4])
if holder then
  if redis.call('EXISTS', KEYS[5]) == 1 then return {'busy', holder} end
  return {'lost', holder}
end
local n = redis.call('INCR', KEYS[6])
local token = n .. '|' .. ARGV[1] .. '|' .. ARGV[2]
redis.call('SET', KEYS[4], token)
redis.call('SET', KEYS[5], token, 'PX', ARGV[3])
redis.call('ZREM', KEYS[1], ARGV[2])
redis.call('HDEL', KEYS[2], ARGV[2])
local reason = redis.call('HGET', KEYS[3], ARGV[2]) or ''
redis.call('HDEL', KEYS[3], ARGV[2])
return {'ok', token, reason}
"""
)

#: KEYS: queue, qlive, qcancel.  -> how many live tickets wait (lapsed ones are pruned first)
COUNT: Final = _PRELUDE + "return redis.call('ZCARD', KEYS[1])\n"

#: KEYS: queue, qlive, run, lease.  ARGV: run_id.  -> {1 if its ticket is live, else 0,
#: the slot's holder ("" if none), 1 if the holder's lease is live, else 0}.  A ticket past its
#: deadline (its instance died) is not live, whether or not a script has pruned it yet.
QUEUED: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = 0
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  if tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0') >= now then live = 1 end
end
return {live, redis.call('GET', KEYS[3]) or '', redis.call('EXISTS', KEYS[4])}
"""

#: KEYS: queue, qlive, qcancel.  ARGV: run_id.  -> 1 removed | 0 not queued
DROP: Final = """
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return redis.call('ZREM', KEYS[1], ARGV[1])
"""

#: KEYS: queue, qcancel.  ARGV: run_id, reason.  -> 1 marked cancelled | 0 not queued
CANCEL: Final = """
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
"""

#: KEYS: queue, qlive.  ARGV: ttl_ms, run ids.  Push back the deadlines of tickets still queued.
RENEW: Final = """
local t = redis.call('TIME')
local deadline = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then redis.call('HSET', KEYS[2], ARGV[i], deadline) end
end
return 1
"""


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class OrderedClaim:
    __slots__ = ("cancelled", "holder", "status")

    def __init__(self, status: ClaimAnswer, holder: str, cancelled: str = "") -> None:
        self.status = status
        self.holder = holder
        #: ``ok`` of a run cancelled while it was queued: the reason ("" when it was not).
        self.cancelled = cancelled


class RunQueue:
    """Script calls for the tickets of every conversation (one per Redis client)."""

    def __init__(self, redis: Redis, instance_id: str, ttl_ms: int) -> None:
        self.redis = redis
        self.instance_id = instance_id
        self.ttl_ms = ttl_ms
        self._enqueue = redis.register_script(ENQUEUE)
        self._claim = redis.register_script(CLAIM_ORDERED)
        self._drop = redis.register_script(DROP)
        self._cancel = redis.register_script(CANCEL)
        self._count = redis.register_script(COUNT)
        self._renew = redis.register_script(RENEW)
        self._queued = redis.register_script(QUEUED)

    async def enqueue(
        self, keys: ConversationKeys, run_id: str, limit: int | None, interrupt: bool
    ) -> bool:
        res = await self._enqueue(
            keys=[keys.queue, keys.qlive, keys.qcancel],
            args=[
                run_id,
                ENQUEUE_UNBOUNDED if limit is None else limit,
                int(interrupt),
                self.ttl_ms,
            ],
        )
        return bool(int(res))

    async def claim(self, keys: ConversationKeys, run_id: str, ticketed: bool) -> OrderedClaim:
        res = await self._claim(
            keys=[keys.queue, keys.qlive, keys.qcancel, keys.run, keys.lease, keys.fence],
            args=[self.instance_id, run_id, self.ttl_ms, int(ticketed)],
        )
        status = _s(res[0])
        if status not in ("ok", "busy", "lost", "queued", "gone"):
            raise RuntimeError(f"unexpected claim answer {status!r}")
        cancelled = _s(res[2]) if len(res) > 2 else ""
        return OrderedClaim(status, _s(res[1]), cancelled)  # type: ignore[arg-type]

    async def count(self, keys: ConversationKeys) -> int:
        return int(await self._count(keys=[keys.queue, keys.qlive, keys.qcancel]))

    async def queued(self, keys: ConversationKeys, run_id: str) -> tuple[bool, str, bool]:
        """(its ticket is live, the slot's holder or "", the holder's lease is live)."""
        res = await self._queued(keys=[keys.queue, keys.qlive, keys.run, keys.lease], args=[run_id])
        return bool(int(res[0])), _s(res[1]), bool(int(res[2]))

    async def drop(self, keys: ConversationKeys, run_id: str) -> bool:
        res = await self._drop(keys=[keys.queue, keys.qlive, keys.qcancel], args=[run_id])
        return bool(int(res))

    async def cancel(self, keys: ConversationKeys, run_id: str, reason: str) -> bool:
        """Mark a queued run cancelled (it logs its cancellation in its turn); False if not
        queued."""
        return bool(int(await self._cancel(keys=[keys.queue, keys.qcancel], args=[run_id, reason])))

    async def renew(self, keys: ConversationKeys, run_ids: list[str]) -> None:
        await self._renew(keys=[keys.queue, keys.qlive], args=[self.ttl_ms, *run_ids])


class TicketKeeper:
    """Keeps this instance's tickets alive: every ttl/3, one RENEW per conversation."""

    def __init__(self, queue: RunQueue) -> None:
        self.queue = queue
        #: Tickets of this instance, by conversation: (keys, run ids).
        self.tickets: dict[str, tuple[ConversationKeys, set[str]]] = {}
        self._task: asyncio.Task[None] | None = None

    def add(self, keys: ConversationKeys, run_id: str) -> None:
        self.tickets.setdefault(keys.tag, (keys, set()))[1].add(run_id)

    def has(self, keys: ConversationKeys, run_id: str) -> bool:
        entry = self.tickets.get(keys.tag)
        return entry is not None and run_id in entry[1]

    def discard(self, keys: ConversationKeys, run_id: str) -> None:
        entry = self.tickets.get(keys.tag)
        if entry is not None:
            entry[1].discard(run_id)
            if not entry[1]:
                del self.tickets[keys.tag]

    def forget(self, keys: ConversationKeys) -> None:
        self.tickets.pop(keys.tag, None)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="redis-queue-tickets")

    async def stop(self) -> None:
        """Stop renewing and drop our tickets (best effort: otherwise they lapse)."""
        task, self._task = self._task, None
        await stop_task(task)
        for keys, run_ids in list(self.tickets.values()):
            for run_id in list(run_ids):
                with contextlib.suppress(Exception):
                    await self.queue.drop(keys, run_id)
        self.tickets.clear()

    async def _loop(self) -> None:
        interval = self.queue.ttl_ms / 3000.0
        while True:
            await asyncio.sleep(interval)
            for keys, run_ids in list(self.tickets.values()):
                if not run_ids:
                    continue
                try:
                    await self.queue.renew(keys, sorted(run_ids))
                except Exception as exc:  # Redis down: keep trying; tickets may lapse
                    log.warning("queue ticket renewal failed for %s: %s", keys.tag, exc)
