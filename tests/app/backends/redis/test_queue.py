"""The queue's scripts against a real Redis: tickets stored with their request, adoption of a
dead instance's tickets (one winner, order kept), an owner re-asserting a ticket that lapsed
while Redis was unreachable, and a claim whose answer was lost."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from app.backends.redis.adoption import decode_request, encode_request
from app.backends.redis.keys import ConversationKeys
from app.backends.redis.queue import RunQueue
from app.backends.types import ConversationRef, QueuedRun
from tests.app.support.redis_support import prefix, redis

REF = ConversationRef("alice", "c1")
TTL_MS = 300  # tickets lapse fast; a test waits past it with LAPSE
LAPSE = 0.5

__all__ = ["prefix", "redis"]  # fixtures


def _keys(prefix: str) -> ConversationKeys:
    return ConversationKeys.for_conversation(REF.principal, REF.key, prefix=prefix)


async def _enqueue(queue: RunQueue, keys: ConversationKeys, run_id: str) -> None:
    run = QueuedRun(run_id, {"prompt": run_id}, "demo", emit_user_message=False)
    assert await queue.enqueue(keys, run_id, encode_request(REF, run), None, False)


async def test_lapsed_tickets_are_adopted_by_exactly_one_instance_in_order(
    redis: Redis, prefix: str
) -> None:
    keys = _keys(prefix)
    dead = RunQueue(redis, "dead", TTL_MS, prefix)
    for run_id in ("r1", "r2", "r3"):
        await _enqueue(dead, keys, run_id)
    assert await dead.cancel(keys, "r2", "aborted")
    nothing = await RunQueue(redis, "b", TTL_MS, prefix).adopt(keys)
    assert nothing.runs == []  # the tickets are live: nothing to adopt yet
    await asyncio.sleep(LAPSE)
    assert await dead.count(keys) == 3  # lapsed, not dropped: the input is stored
    b, c = RunQueue(redis, "b", TTL_MS, prefix), RunQueue(redis, "c", TTL_MS, prefix)
    got = await asyncio.gather(b.adopt(keys), c.adopt(keys))
    winners = [taken for taken in got if taken.runs]
    assert len(winners) == 1
    assert winners[0].order == ["r1", "r2", "r3"]
    decoded = [decode_request(raw, reason) for _, raw, reason in winners[0].runs]
    assert [run.run_id for _, run in decoded] == ["r1", "r2", "r3"]
    assert decoded[1] == (REF, QueuedRun("r2", {"prompt": "r2"}, "demo", False, "aborted"))
    # The dead instance's claim (were it alive after all) answers that the run went elsewhere.
    assert (await dead.claim(keys, "r1", ticketed=True)).status == "adopted"


async def test_an_owner_reasserts_a_ticket_that_lapsed_while_redis_was_unreachable(
    redis: Redis, prefix: str
) -> None:
    keys = _keys(prefix)
    a = RunQueue(redis, "a", TTL_MS, prefix)
    await _enqueue(a, keys, "r1")
    await _enqueue(a, keys, "r2")
    await asyncio.sleep(LAPSE)  # no renewal reached Redis
    await a.renew(keys, ["r2"])  # the keeper, once Redis is back
    first = await a.claim(keys, "r1", ticketed=True)  # the claim re-asserts its own ticket too
    assert first.status == "ok"
    taken = await RunQueue(redis, "b", TTL_MS, prefix).adopt(keys)
    assert taken.runs == [] and taken.order == ["r2"]


async def test_a_claim_retried_after_its_answer_was_lost_gets_the_same_grant(
    redis: Redis, prefix: str
) -> None:
    keys = _keys(prefix)
    a = RunQueue(redis, "a", 5000, prefix)
    await _enqueue(a, keys, "r1")
    granted = await a.claim(keys, "r1", ticketed=True)
    assert granted.status == "ok"
    again = await a.claim(keys, "r1", ticketed=True)  # the ticket is spent, the grant is not
    assert (again.status, again.holder) == ("ok", granted.holder)
    other = await RunQueue(redis, "b", 5000, prefix).claim(keys, "r9", ticketed=False)
    assert (other.status, other.holder) == ("busy", granted.holder)


async def test_disowned_tickets_lapse_at_once(redis: Redis, prefix: str) -> None:
    keys = _keys(prefix)
    a = RunQueue(redis, "a", 60_000, prefix)
    await _enqueue(a, keys, "r1")
    b = RunQueue(redis, "b", 60_000, prefix)
    await b.disown(keys, ["r1"])  # not b's: nothing changes
    assert (await b.adopt(keys)).runs == []
    await a.disown(keys, ["r1"])  # a shuts down
    assert [run_id for run_id, _, _ in (await b.adopt(keys)).runs] == ["r1"]
