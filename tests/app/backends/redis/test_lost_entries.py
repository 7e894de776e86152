"""A cursor of an entry the log no longer holds reads as gone (a snapshot), never as a position.

A Redis restarted from an AOF that missed its last writes loses the newest entries of a log,
and the entries appended after the restart follow the lost ones' ids. Here the entries are
taken out with ``XDEL`` (the same hole in the log, on the shared Redis, no restart): a reader
of another instance resuming from a taken-out entry's cursor gets ``trimmed`` (its caller sends
a snapshot), from its window's catch-up reads as from Redis; a kept cursor reads on as usual.
The whole crash, with the gateway's own windows and its run owner: ``test_crash.py``.

When the log's ids run ahead of the clock (a master whose clock was ahead), the owner's next
entries after the loss take the lost ones' ids: the append gives the conversation a new epoch
(in every cursor), so a lost cursor reads as unknown, on the standalone Redis and the cluster.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster

from app.backends import ConversationRef, LogEntry
from app.backends.redis import RedisBackend, redis_client
from app.backends.types import LogItem
from tests.app.backends.redis.cluster_support import make_cluster_backend, shared_cluster
from tests.app.support.backend_contract import Control, event, meta
from tests.app.support.redis_support import (
    SHARED_REDIS_URL,
    prefix,
    redis,
    shared_redis,
    unique_prefix,
)
from tests.support import eventually_async

__all__ = ["prefix", "redis"]

REF = ConversationRef("alice", "c1")


@pytest.fixture
async def instances(prefix: str) -> AsyncIterator[tuple[RedisBackend, RedisBackend]]:
    """Two instances of the backend on the shared Redis under the test's prefix."""
    backends = [
        RedisBackend(redis_client(SHARED_REDIS_URL), key_prefix=prefix, instance_id=name)
        for name in ("a", "b")
    ]
    async with shared_redis(prefix):
        for backend in backends:
            await backend.start()
        try:
            yield backends[0], backends[1]
        finally:
            for backend in backends:
                await backend.close()


async def _logged_with_hole(writer: RedisBackend) -> tuple[list[LogEntry], list[LogEntry]]:
    """Seven events logged, the 4th and 5th taken out again: (all seven, the two taken out)."""
    await writer.create_conversation(REF, meta())
    logged = [await writer.append_event(REF, event("r1", 0, "run.started"))]
    for seq in range(1, 7):
        logged.append(
            await writer.append_event(REF, event("r1", seq, "custom", {"name": "n", "value": seq}))
        )
    gone = logged[3:5]
    log_key = writer.keys(REF).log
    removed = await writer.redis.xdel(log_key, *[e.cursor.rpartition(".")[2] for e in gone])
    assert removed == 2
    return logged, gone


async def test_a_taken_out_cursor_reads_as_trimmed_on_another_instance(
    instances: tuple[RedisBackend, RedisBackend],
) -> None:
    a, b = instances
    logged, gone = await _logged_with_hole(a)
    for entry in gone:
        result = await b.read(REF, entry.cursor, limit=100, wait=0)
        assert result.status == "trimmed", [e.cursor for e in result.entries]
    kept = await b.read(REF, logged[2].cursor, limit=100, wait=0)
    assert kept.status == "ok"
    assert [e.cursor for e in kept.entries] == [e.cursor for e in logged[5:]]


async def test_a_taken_out_cursor_reads_as_trimmed_from_a_catch_up_read(
    instances: tuple[RedisBackend, RedisBackend],
) -> None:
    """A read from the first entry first (its entries are kept for the readers behind the
    window): a taken-out cursor inside what it read is not served from it."""
    a, b = instances
    logged, gone = await _logged_with_hole(a)
    behind = await b.read(REF, logged[0].cursor, limit=100, wait=0)
    assert behind.status == "ok"
    assert [e.cursor for e in behind.entries] == [e.cursor for e in logged[1:] if e not in gone]
    for entry in gone:
        result = await b.read(REF, entry.cursor, limit=100, wait=0)
        assert result.status == "trimmed", [e.cursor for e in result.entries]
    kept = await b.read(REF, logged[1].cursor, limit=100, wait=0)
    assert [e.cursor for e in kept.entries] == [logged[2].cursor] + [e.cursor for e in logged[5:]]


@pytest.fixture(params=["redis", "redis-cluster"])
async def owner_and_reader(
    request: pytest.FixtureRequest,
) -> AsyncIterator[tuple[RedisBackend, RedisBackend, Any]]:
    """Two instances (``a`` runs, ``b`` reads) on the shared Redis or the shared Redis Cluster,
    with a plain client of that Redis."""
    key_prefix = unique_prefix()
    cluster = request.param == "redis-cluster"
    stack = shared_cluster(key_prefix) if cluster else shared_redis(key_prefix)
    async with stack as raw:
        backends = [
            make_cluster_backend(key_prefix, instance_id=name)
            if cluster
            else RedisBackend(
                redis_client(SHARED_REDIS_URL), key_prefix=key_prefix, instance_id=name
            )
            for name in ("a", "b")
        ]
        for backend in backends:
            await backend.start()
        try:
            yield backends[0], backends[1], raw
        finally:
            for backend in backends:
                await backend.close()


def _sid(entry: LogEntry) -> str:
    return entry.cursor.rpartition(".")[2]


async def _keep_only_upto(raw: Any, log_key: str, last_kept: str) -> None:
    """The log as a promoted replica holds it when the master's newest writes never reached
    it: the entries up to ``last_kept``, and its last generated id there (rebuilt: ``XDEL``
    would leave the stream's last id where it was)."""
    kept = await raw.xrange(log_key, max=last_kept)
    await raw.delete(log_key)
    for sid, fields in kept:
        await raw.xadd(log_key, fields, id=sid)


async def _append(backend: RedisBackend, ref: ConversationRef, seq: int, soon: bool) -> LogEntry:
    """One event appended by the run's owner: waited for, or ``append_soon`` (not waited for:
    its reply's callback does what ``append_batch`` does after the round trip)."""
    item = LogItem.of_event(event("r1", seq, "custom", _value(seq)))
    if not soon:
        return (await backend.append_batch(ref, [item]))[0]
    outcome: asyncio.Future[list[LogEntry]] = asyncio.get_running_loop().create_future()

    def done(entries: list[LogEntry] | None, error: Exception | None) -> None:
        if error is not None:
            outcome.set_exception(error)
        else:
            assert entries is not None
            outcome.set_result(entries)

    assert backend.append_soon(ref, [item], done)
    return (await outcome)[0]


@pytest.mark.parametrize("soon", [False, True], ids=["append_batch", "append_soon"])
async def test_a_cursor_of_an_entry_whose_id_the_log_reused_gets_a_snapshot(
    owner_and_reader: tuple[RedisBackend, RedisBackend, Any], soon: bool
) -> None:
    """A failover lost the newest two entries, and the run's owner goes on appending on the
    new master: when the new entries' ids are those of the lost ones (stream ids are
    ``<ms>-<seq>`` of the master's clock: here the log's ids run ahead of the clock, as
    after a master whose clock was ahead), a cursor of a lost entry names a different entry
    of the log. It reads as unknown (a snapshot), on the owner's instance, on one whose window
    held the lost entries, and on one that never read the log; the new cursors read on."""
    a, b, raw = owner_and_reader
    ref = ConversationRef("alice", "reused")
    assert await a.create_conversation(ref, meta())
    assert await a.claim_run(ref, Control("r1"))
    await a.append_batch(ref, [LogItem(event("r1", 0, "run.started"), checked=True)])
    log_key = a.keys(ref).log
    ahead = int(time.time() * 1000) + 3_600_000  # an hour ahead: every new id reuses its ms
    await raw.execute_command("XSETID", log_key, f"{ahead}-0")
    logged = [
        (await a.append_batch(ref, [LogItem.of_event(event("r1", seq, "custom", _value(seq)))]))[0]
        for seq in range(1, 6)
    ]
    seen = await b.read(ref, logged[0].cursor, limit=100, wait=0)  # b's window holds them all
    assert [e.cursor for e in seen.entries] == [e.cursor for e in logged[1:]]
    lost = logged[3:]
    await _keep_only_upto(raw, log_key, _sid(logged[2]))

    # The first append after the loss is the one that finds it (``append_soon``: in its reply's
    # callback); the owner then rebuilds its state, and declines ``append_soon`` until it has.
    after = [await _append(a, ref, seq, soon and seq == 6) for seq in range(6, 9)]
    assert [_sid(e) for e in after[:2]] == [_sid(e) for e in lost]  # the ids were reused

    c = (
        make_cluster_backend(a.prefix, instance_id="c")
        if isinstance(raw, RedisCluster)
        else RedisBackend(redis_client(SHARED_REDIS_URL), key_prefix=a.prefix, instance_id="c")
    )
    await c.start()

    async def lost_read_as_unknown(reader: RedisBackend) -> bool:
        for entry in lost:
            result = await reader.read(ref, entry.cursor, limit=100, wait=0)
            if result.status not in ("unknown", "trimmed"):
                return False
        return True

    try:
        # ``b`` learns the new epoch at its readers' next tick: until then its window serves
        # what it held, as a follower reading it just before the failover was served; every
        # cursor it handed out then carries the old epoch (a snapshot on the next read).
        await eventually_async(lambda: lost_read_as_unknown(b), what="b learns the epoch")
        for reader in (a, b, c):
            assert await lost_read_as_unknown(reader), reader.instance_id
            resumed = await reader.read(ref, after[0].cursor, limit=100, wait=0)
            assert resumed.status == "ok"
            assert [e.cursor for e in resumed.entries] == [e.cursor for e in after[1:]]
            snapshot = await reader.snapshot(ref)
            assert snapshot is not None
            assert snapshot.cursor == after[-1].cursor
    finally:
        await c.close()


def _value(seq: int) -> dict[str, Any]:
    return {"name": "n", "value": seq}
