"""``append_soon`` on Redis: a run owner's append not waited for, handed on from its reply.

What its caller did after the round trip (the stream id, the local subscribers' feed) is done
by the reply's callback: the entries reach a waiting follower, the log and the state exactly as
``append_batch``'s would; an owner that lost its run is told ``RunFenced``; and when the write
cannot start at once (no run of ours, a write open) it declines, doing nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.backends import ConversationRef, LogEntry
from app.backends.redis import RedisBackend, redis_client
from app.backends.redis.errors import RunFenced
from app.backends.types import LogItem
from tests.app.support.backend_contract import Control, event, meta
from tests.app.support.redis_support import SHARED_REDIS_URL, shared_redis, unique_prefix

Outcome = tuple[list[LogEntry] | None, Exception | None]


@pytest.fixture
async def pair() -> AsyncIterator[tuple[RedisBackend, RedisBackend, Any]]:
    prefix = unique_prefix()
    async with shared_redis(prefix) as raw:
        a = RedisBackend(redis_client(SHARED_REDIS_URL), key_prefix=prefix, instance_id="A")
        b = RedisBackend(redis_client(SHARED_REDIS_URL), key_prefix=prefix, instance_id="B")
        await a.start()
        await b.start()
        yield a, b, raw
        await a.close()
        await b.close()


async def _started(backend: RedisBackend, ref: ConversationRef) -> str:
    """A conversation with run r1 claimed by ``backend`` and its start logged; its head."""
    assert await backend.create_conversation(ref, meta())
    assert await backend.claim_run(ref, Control("r1"))
    await backend.append_batch(ref, [LogItem(event("r1", 0, "run.started"), checked=True)])
    return await backend.head_cursor(ref)


def _soon(backend: RedisBackend, ref: ConversationRef, items: list[LogItem]) -> Any:
    """``append_soon``'s answer and a future of its outcome (None when it declined)."""
    outcome: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
    started = backend.append_soon(ref, items, lambda e, x: outcome.set_result((e, x)))
    return started, outcome


def _delta(seq: int) -> LogItem:
    payload = {"messageId": "m", "delta": f"d{seq} "}
    return LogItem(event("r1", seq, "message.delta", payload), checked=True)


async def test_an_append_not_waited_for_reaches_a_follower_the_log_and_the_state(
    pair: tuple[RedisBackend, RedisBackend, Any],
) -> None:
    a, b, _ = pair
    ref = ConversationRef("p", "soon")
    head = await _started(a, ref)
    opened = await a.append_batch(
        ref,
        [
            LogItem(
                event("r1", 1, "message.started", {"messageId": "m", "role": "assistant"}),
                checked=True,
            )
        ],
    )
    follower = asyncio.ensure_future(a.read(ref, opened[-1].cursor, limit=10, wait=10))
    await asyncio.sleep(0)  # the follower waits at the head
    started, outcome = _soon(a, ref, [_delta(2), _delta(3)])
    assert started
    entries, error = await asyncio.wait_for(outcome, 10)
    assert error is None and entries is not None
    assert [e.decoded()["eventId"] for e in entries] == ["r1:2:message.delta", "r1:3:message.delta"]
    assert entries[-1].cursor == await a.head_cursor(ref)
    followed = await asyncio.wait_for(follower, 10)
    assert [e.cursor for e in followed.entries] == [e.cursor for e in entries]
    # Another instance reads the same entries from Redis; the owner's state holds them.
    logged = await b.read(ref, head, limit=10, wait=0)
    assert [e.decoded() for e in logged.entries][-2:] == [e.decoded() for e in entries]
    snapshot = await a.snapshot(ref)
    assert snapshot is not None and snapshot.cursor == entries[-1].cursor
    (message,) = snapshot.state["messages"].values()
    assert message["content"] == "d2 d3 "


async def test_it_declines_without_a_run_of_ours_or_while_a_write_is_open(
    pair: tuple[RedisBackend, RedisBackend, Any],
) -> None:
    a, b, _ = pair
    ref = ConversationRef("p", "declines")
    await _started(a, ref)
    head = await a.head_cursor(ref)
    started, _ = _soon(b, ref, [_delta(1)])  # B does not own the run
    assert not started
    pending = asyncio.ensure_future(a.append_batch(ref, [_delta(1)]))
    await asyncio.sleep(0)  # its batch is open (packed a loop turn later)
    started, _ = _soon(a, ref, [_delta(2)])
    assert not started
    await pending
    assert [
        e.decoded()["sequence"] for e in (await a.read(ref, head, limit=10, wait=0)).entries
    ] == [1]


async def test_an_owner_that_lost_its_run_is_told_fenced(
    pair: tuple[RedisBackend, RedisBackend, Any],
) -> None:
    """The run record no longer holds the owner's token (another instance took the run over):
    the write is refused by Redis, the callback gets ``RunFenced``, and nothing is logged."""
    a, _, raw = pair
    ref = ConversationRef("p", "fenced")
    head = await _started(a, ref)
    await raw.set(a.instance.keys(ref).run, "9|B|r1")
    started, outcome = _soon(a, ref, [_delta(1)])
    assert started
    entries, error = await asyncio.wait_for(outcome, 10)
    assert entries is None and isinstance(error, RunFenced)
    assert (await a.read(ref, head, limit=10, wait=0)).entries == []
    with pytest.raises(RunFenced):
        await a.append_batch(ref, [_delta(2)])
