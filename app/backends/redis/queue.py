"""The cluster-wide FIFO of enqueued runs: one sorted set of tickets per conversation.

``multitask: "enqueue"`` (and ``interrupt``) on any instance puts a ticket (the run id) in
``P:{T}:queue`` (score = arrival order), its request (input, provider, ...) in ``P:{T}:qreq``,
the instance that keeps it in ``P:{T}:qowner`` and its liveness deadline in ``P:{T}:qlive``, in
one script: a ticket never exists without its input. The claim of the run slot is ordered by it
(:data:`CLAIM_ORDERED`, a superset of ``scripts.CLAIM``): a queued run takes the slot only when
its ticket is first, and a run without a ticket only when nobody waits. So runs start in arrival
order whichever instance accepted them, and the bound (``enqueue_max``) counts every instance's.

A run accepted under an ``Idempotency-Key`` has its answer stored by the script that accepts it
(:data:`ENQUEUE`, or :data:`CLAIM_ORDERED` for a run that starts at once) in the conversation's
``P:{T}:idem:S``: no accepted run exists without it, so a retry finds the run even when the
accepting instance died before it answered.

An ``interrupt`` marks, in the same script, every ticket already waiting as cancelled
(``P:{T}:qcancel``), as does an abort naming a queued run: such a run still takes the slot in
its turn and its claim answers the reason, so it logs its cancellation without reaching the
upstream (every accepted run ends in exactly one terminal event).

The owner keeps its tickets alive (:class:`.tickets.TicketKeeper`, every ttl/3). A ticket past
its deadline is never dropped: its owner died (or could not reach Redis), and :data:`ADOPT`
hands it, with its score, to a live instance (:mod:`.adoption`); a lapsed ticket whose owner is
alive is re-asserted by its next renewal or claim. Only a legacy ticket without a stored
request is pruned when it lapses. Time is Redis' own (``TIME``), so clocks do not matter.
``P:queues`` indexes the conversations with tickets by deadline (local time: a hint for the
adoption sweep, which the scripts decide).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Final, Literal

from redis.asyncio import Redis

from app.backends.redis.cluster import is_cluster
from app.backends.redis.keys import (
    CLUSTER_INDEX_BUCKETS,
    ConversationKeys,
    index_bucket,
    sweep_index_keys,
)

__all__ = ["ENQUEUE_UNBOUNDED", "Adopted", "OrderedClaim", "Remembered", "RunQueue"]

ENQUEUE_UNBOUNDED = -1
#: What a script that accepts a run also stores: (key, value, ttl ms).
Remembered = tuple[str, bytes, int]
ClaimAnswer = Literal["ok", "busy", "lost", "queued", "gone", "adopted"]

#: Every queue script takes KEYS queue, qlive, qcancel, qreq, qowner first (``queue_keys``).
_PRELUDE: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if tonumber(redis.call('HGET', KEYS[2], m) or '0') < now
      and redis.call('HEXISTS', KEYS[4], m) == 0 then
    redis.call('ZREM', KEYS[1], m)
    redis.call('HDEL', KEYS[2], m)
    redis.call('HDEL', KEYS[3], m)
    redis.call('HDEL', KEYS[5], m)
  end
end
local function lapsed()
  local n = 0
  for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    if tonumber(redis.call('HGET', KEYS[2], m) or '0') < now then n = n + 1 end
  end
  return n
end
"""

#: KEYS: (queue keys), [the accepted answer's key].  ARGV: run_id, limit (-1 = none), interrupt
#: (0/1), ttl_ms, instance, request JSON, [the answer, its ttl_ms].
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
redis.call('HSET', KEYS[4], ARGV[1], ARGV[6])
redis.call('HSET', KEYS[5], ARGV[1], ARGV[5])
if KEYS[6] then redis.call('SET', KEYS[6], ARGV[7], 'PX', ARGV[8]) end
return 1
"""
)

#: KEYS: (queue keys), run, lease, fence, [the accepted answer's key].  ARGV: instance, run_id,
#: ttl_ms, ticketed, [the answer, its ttl_ms] (stored when the claim is granted).
#: -> {"ok", token, reason} (reason "" unless it was cancelled while queued; also the token
#:    already granted to this run here, when a retried claim's first answer was lost) |
#:    {"busy"|"lost", holder} | {"queued", "", lapsed tickets} (not its turn) |
#:    {"gone", ""} (its ticket was removed: deleted) | {"adopted", owner} (another instance
#:    adopted it while this one could not renew it: that one starts it)
CLAIM_ORDERED: Final = (
    _PRELUDE
    + """
local function accepted()
  if KEYS[9] then redis.call('SET', KEYS[9], ARGV[5], 'PX', ARGV[6]) end
end
local mine = '|' .. ARGV[1] .. '|' .. ARGV[2]
local held = redis.call('GET', KEYS[6])
if held and string.sub(held, -#mine) == mine and redis.call('EXISTS', KEYS[7]) == 1 then
  redis.call('SET', KEYS[7], held, 'PX', ARGV[3])  -- granted already: the answer was lost
  accepted()
  return {'ok', held, ''}
end
if ARGV[4] == '1' then
  if not redis.call('ZSCORE', KEYS[1], ARGV[2]) then return {'gone', ''} end
  local owner = redis.call('HGET', KEYS[5], ARGV[2])
  if owner and owner ~= ARGV[1] then return {'adopted', owner} end
  redis.call('HSET', KEYS[2], ARGV[2], now + tonumber(ARGV[3]))
  if redis.call('ZRANGE', KEYS[1], 0, 0)[1] ~= ARGV[2] then return {'queued', '', lapsed()} end
elseif redis.call('ZCARD', KEYS[1]) > 0 then
  return {'queued', '', lapsed()}
end
local holder = redis.call('GET', KEYS[6])
if holder then
  if redis.call('EXISTS', KEYS[7]) == 1 then return {'busy', holder} end
  return {'lost', holder}
end
local n = redis.call('INCR', KEYS[8])
local token = n .. '|' .. ARGV[1] .. '|' .. ARGV[2]
redis.call('SET', KEYS[6], token)
redis.call('SET', KEYS[7], token, 'PX', ARGV[3])
redis.call('ZREM', KEYS[1], ARGV[2])
redis.call('HDEL', KEYS[2], ARGV[2])
redis.call('HDEL', KEYS[4], ARGV[2])
redis.call('HDEL', KEYS[5], ARGV[2])
local reason = redis.call('HGET', KEYS[3], ARGV[2]) or ''
redis.call('HDEL', KEYS[3], ARGV[2])
accepted()
return {'ok', token, reason}
"""
)

#: -> how many tickets wait (a lapsed one too: it will be adopted)
COUNT: Final = _PRELUDE + "return redis.call('ZCARD', KEYS[1])\n"

#: KEYS: queue, qlive, qreq, run, lease.  ARGV: run_id.  -> {1 if its ticket is live, else 0,
#: the slot's holder ("" if none), 1 if the holder's lease is live, else 0}.  A ticket with its
#: request stored is live even past its deadline (it will be adopted); a legacy one is not.
QUEUED: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = 0
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  if tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0') >= now
      or redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then
    live = 1
  end
end
return {live, redis.call('GET', KEYS[4]) or '', redis.call('EXISTS', KEYS[5])}
"""

#: ARGV: run_id.  -> 1 removed | 0 not queued
DROP: Final = """
for i = 2, 5 do redis.call('HDEL', KEYS[i], ARGV[1]) end
return redis.call('ZREM', KEYS[1], ARGV[1])
"""

#: KEYS: queue, qcancel.  ARGV: run_id, reason.  -> 1 marked cancelled | 0 not queued
CANCEL: Final = """
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
"""

#: KEYS: queue, qlive, qowner.  ARGV: ttl_ms, instance, run ids.  Push back the deadlines of
#: tickets still queued and still ours (a lapsed one too: its owner is alive after all).
RENEW: Final = """
local t = redis.call('TIME')
local deadline = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
for i = 3, #ARGV do
  local owner = redis.call('HGET', KEYS[3], ARGV[i])
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) and (not owner or owner == ARGV[2]) then
    redis.call('HSET', KEYS[2], ARGV[i], deadline)
  end
end
return 1
"""

#: ARGV: instance, ttl_ms.  Take every lapsed ticket (its owner died), keeping its score.
#: -> {queue order (run ids, first to last), {{run id, request JSON, cancel reason}, ...}}
ADOPT: Final = (
    _PRELUDE
    + """
local order, adopted = {}, {}
for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  order[#order + 1] = m
  if tonumber(redis.call('HGET', KEYS[2], m) or '0') < now then
    redis.call('HSET', KEYS[5], m, ARGV[1])
    redis.call('HSET', KEYS[2], m, now + tonumber(ARGV[2]))
    local request = redis.call('HGET', KEYS[4], m) or ''
    adopted[#adopted + 1] = {m, request, redis.call('HGET', KEYS[3], m) or ''}
  end
end
return {order, adopted}
"""
)

#: KEYS: queue, qlive, qowner.  ARGV: instance, run ids.  Our tickets lapse now, so a live
#: instance adopts them at once (this one is shutting down, or declined them).
DISOWN: Final = """
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) and redis.call('HGET', KEYS[3], ARGV[i]) == ARGV[1] then
    redis.call('HSET', KEYS[2], ARGV[i], 0)
  end
end
return 1
"""

#: KEYS: the ``P:queues`` index.  ARGV: tag, ms.  Unindex a tag not re-marked since ``ms``.
UNINDEX: Final = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) <= tonumber(ARGV[2]) then redis.call('ZREM', KEYS[1], ARGV[1]) end
return 1
"""


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _remembered(remember: Remembered | None) -> tuple[list[str], list[bytes | int]]:
    """The trailing KEYS and ARGV of a script that also stores ``remember`` (none: nothing)."""
    if remember is None:
        return [], []
    key, value, ttl_ms = remember
    return [key], [value, max(1, ttl_ms)]


def _b(value: Any) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


class OrderedClaim:
    __slots__ = ("cancelled", "holder", "lapsed", "status")

    def __init__(self, status: ClaimAnswer, holder: str, cancelled: str = "", lapsed: int = 0):
        self.status = status
        self.holder = holder
        #: ``ok`` of a run cancelled while it was queued: the reason ("" when it was not).
        self.cancelled = cancelled
        #: ``queued``: how many tickets wait past their deadline (to adopt).
        self.lapsed = lapsed


@dataclass(frozen=True, slots=True)
class Adopted:
    """What :meth:`RunQueue.adopt` took: the queue's order and the (run id, request, cancel
    reason) of each ticket adopted."""

    order: list[str]
    runs: list[tuple[str, bytes, str]]


class RunQueue:
    """Script calls for the tickets of every conversation (one per Redis client)."""

    def __init__(self, redis: Redis, instance_id: str, ttl_ms: int, prefix: str = "") -> None:
        self.redis = redis
        self.instance_id = instance_id
        self.ttl_ms = ttl_ms
        #: Buckets of ``P:queues``: one on a standalone Redis, several on a cluster (keys.py).
        self.buckets = CLUSTER_INDEX_BUCKETS if is_cluster(redis) else 1
        self.indexes = sweep_index_keys(prefix, "queues", self.buckets)
        self._enqueue = redis.register_script(ENQUEUE)
        self._claim = redis.register_script(CLAIM_ORDERED)
        self._drop = redis.register_script(DROP)
        self._cancel = redis.register_script(CANCEL)
        self._count = redis.register_script(COUNT)
        self._renew = redis.register_script(RENEW)
        self._queued = redis.register_script(QUEUED)
        self._adopt = redis.register_script(ADOPT)
        self._disown = redis.register_script(DISOWN)
        self._unindex = redis.register_script(UNINDEX)

    async def enqueue(
        self,
        keys: ConversationKeys,
        run_id: str,
        request: bytes,
        limit: int | None,
        interrupt: bool,
        remember: Remembered | None = None,
    ) -> bool:
        extra_keys, extra_args = _remembered(remember)
        res = await self._enqueue(
            keys=[*keys.queue_keys, *extra_keys],
            args=[
                run_id,
                ENQUEUE_UNBOUNDED if limit is None else limit,
                int(interrupt),
                self.ttl_ms,
                self.instance_id,
                request,
                *extra_args,
            ],
        )
        return bool(int(res))

    async def claim(
        self,
        keys: ConversationKeys,
        run_id: str,
        ticketed: bool,
        remember: Remembered | None = None,
    ) -> OrderedClaim:
        extra_keys, extra_args = _remembered(remember)
        res = await self._claim(
            keys=[*keys.queue_keys, keys.run, keys.lease, keys.fence, *extra_keys],
            args=[self.instance_id, run_id, self.ttl_ms, int(ticketed), *extra_args],
        )
        status = _s(res[0])
        if status not in ("ok", "busy", "lost", "queued", "gone", "adopted"):
            raise RuntimeError(f"unexpected claim answer {status!r}")
        if status == "queued":
            return OrderedClaim("queued", "", lapsed=int(res[2]))
        cancelled = _s(res[2]) if len(res) > 2 else ""
        return OrderedClaim(status, _s(res[1]), cancelled)  # type: ignore[arg-type]

    async def count(self, keys: ConversationKeys) -> int:
        return int(await self._count(keys=keys.queue_keys))

    async def queued(self, keys: ConversationKeys, run_id: str) -> tuple[bool, str, bool]:
        """(its ticket is live, the slot's holder or "", the holder's lease is live)."""
        res = await self._queued(
            keys=[keys.queue, keys.qlive, keys.qreq, keys.run, keys.lease], args=[run_id]
        )
        return bool(int(res[0])), _s(res[1]), bool(int(res[2]))

    async def drop(self, keys: ConversationKeys, run_id: str) -> bool:
        return bool(int(await self._drop(keys=keys.queue_keys, args=[run_id])))

    async def cancel(self, keys: ConversationKeys, run_id: str, reason: str) -> bool:
        """Mark a queued run cancelled (it logs its cancellation in its turn); False if not
        queued."""
        return bool(int(await self._cancel(keys=[keys.queue, keys.qcancel], args=[run_id, reason])))

    async def renew(self, keys: ConversationKeys, run_ids: list[str]) -> None:
        await self._renew(
            keys=[keys.queue, keys.qlive, keys.qowner],
            args=[self.ttl_ms, self.instance_id, *run_ids],
        )
        await self.mark(keys)

    async def adopt(self, keys: ConversationKeys) -> Adopted:
        """Take the lapsed tickets of the conversation (ours too: they are re-asserted)."""
        order, runs = await self._adopt(keys=keys.queue_keys, args=[self.instance_id, self.ttl_ms])
        adopted = [(_s(run_id), _b(request), _s(reason)) for run_id, request, reason in runs]
        return Adopted([_s(run_id) for run_id in order], adopted)

    async def disown(self, keys: ConversationKeys, run_ids: list[str]) -> None:
        if run_ids:
            await self._disown(
                keys=[keys.queue, keys.qlive, keys.qowner], args=[self.instance_id, *run_ids]
            )

    # --- the index of conversations with tickets: lets a live instance find a dead one's ----
    async def mark(self, keys: ConversationKeys) -> None:
        """Record (or push back) the moment this conversation's tickets would lapse."""
        await self.redis.zadd(self.index(keys), {keys.tag: time.time() * 1000 + self.ttl_ms})

    def index(self, keys: ConversationKeys) -> str:
        """The ``P:queues`` bucket of the conversation."""
        return self.indexes[index_bucket(keys.tag, self.buckets)]

    async def lapsed(self, limit: int = 100) -> tuple[float, list[str]]:
        """(now, the tags whose recorded deadline has passed: candidates, the scripts decide),
        from every bucket in one round trip."""
        now = time.time() * 1000
        async with self.redis.pipeline(transaction=False) as pipe:
            for index in self.indexes:
                pipe.zrangebyscore(index, "-inf", now, start=0, num=limit)
            replies = await pipe.execute()
        return now, [_s(tag) for tags in replies for tag in tags][:limit]

    async def unindex(self, keys: ConversationKeys, since: float) -> None:
        """Forget a conversation with no ticket left, unless it was marked after ``since``."""
        await self._unindex(keys=[self.index(keys)], args=[keys.tag, since])
