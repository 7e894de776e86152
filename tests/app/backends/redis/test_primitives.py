"""The Redis building blocks against a real Redis: keys, ownership + fencing, the stream log,
abort/commands, and the per-instance log reader fan-out."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from app.backends.redis import redis_client
from app.backends.redis.claims import Ownership
from app.backends.redis.control import Control, ControlBus, OwnerInbox
from app.backends.redis.eventlog import (
    KIND_EVENT,
    Entry,
    EventLog,
    Fenced,
    FencedWriter,
    Pending,
    SnapshotWrite,
    new_nonce,
    parse_id,
)
from app.backends.redis.fanout import GAP, ReaderHub
from app.backends.redis.keys import ConversationKeys, conversation_tag
from tests.app.support.redis_support import SHARED_REDIS_URL, prefix, redis
from tests.support import eventually, eventually_async

__all__ = ["prefix", "redis"]  # fixtures


def ev(n: int) -> Pending:
    return Pending(KIND_EVENT, orjson.dumps({"n": n}))


def lent(client: Redis) -> set[Any]:
    """The connections of ``client``'s pool in use, less the one its command mux holds."""
    in_use: set[Any] = client.connection_pool._in_use_connections
    mux = getattr(client, "mux", None)
    return in_use - {None if mux is None else mux.held}


def keys_for(prefix: str, key: str = "c1", principal: str | None = "alice") -> ConversationKeys:
    return ConversationKeys.for_conversation(principal, key, prefix=prefix)


# --- keys -----------------------------------------------------------------------------------


def test_tag_is_a_hash_of_the_pair_never_the_raw_key() -> None:
    assert conversation_tag("a:b", "c") != conversation_tag("a", "b:c")
    assert conversation_tag(None, "k") == conversation_tag("", "k")
    assert conversation_tag("alice", "k") != conversation_tag("bob", "k")
    keys = ConversationKeys.for_conversation("alice", "secret-key", prefix="agw")
    names = [*keys.all_keys(), keys.ctl]
    assert len(set(names)) == len(names)
    for name in names:
        assert "alice" not in name and "secret-key" not in name
        assert name.startswith(f"agw:{{{keys.tag}}}:")  # one hash tag: one cluster slot
    assert len(keys.tag) == 32 and int(keys.tag, 16) >= 0


# --- ownership and fencing ------------------------------------------------------------------


async def test_concurrent_claims_have_exactly_one_winner(redis: Redis, prefix: str) -> None:
    own = Ownership(redis, "inst-a", lease_ttl_ms=5000)
    keys = keys_for(prefix)
    claims = await asyncio.gather(*(own.claim(keys, f"run_{i}") for i in range(50)))
    winners = [c for c in claims if c.status == "ok"]
    assert len(winners) == 1
    losers = [c for c in claims if c.status != "ok"]
    assert all(c.status == "busy" and c.token == winners[0].token for c in losers)
    holder, alive = await own.holder(keys)
    assert holder == winners[0].token and alive


def _lapsed(own: Ownership, keys: ConversationKeys) -> Callable[[], Awaitable[bool]]:
    async def lapsed() -> bool:
        return not (await own.holder(keys))[1]

    return lapsed


def _subscribed(redis: Redis, channel: str) -> Callable[[], Awaitable[bool]]:
    async def subscribed() -> bool:
        counts: Any = await redis.pubsub_numsub(channel)
        return bool(counts) and int(counts[0][1]) >= 1

    return subscribed


async def test_a_fenced_owner_cannot_append_after_takeover(redis: Redis, prefix: str) -> None:
    a = Ownership(redis, "inst-a", lease_ttl_ms=150)
    b = Ownership(redis, "inst-b", lease_ttl_ms=5000)
    log = EventLog(redis, max_len=1000)
    keys = keys_for(prefix)
    claim = await a.claim(keys, "run_1")
    assert claim.status == "ok" and claim.token.number == 1
    await log.append(keys, claim.token.raw, [ev(0), ev(1)])
    # While A's lease lives, nobody can take over.
    assert await b.takeover(keys, claim.token) is None
    await eventually_async(_lapsed(a, keys), what="A stops renewing (killed): its lease expires")
    assert (await b.claim(keys, "run_2")).status == "lost"
    new = await b.takeover(keys, claim.token)
    assert new is not None and new.number == 2 and new.instance == "inst-b"
    assert new.run_id == "run_1"
    with pytest.raises(Fenced):
        await log.append(keys, claim.token.raw, [ev(99)])
    assert not await a.renew(keys, claim.token)
    assert not await a.release(keys, claim.token)
    await log.append(
        keys, new.raw, [ev(2)], release=True, snapshot=SnapshotWrite(b'{"s":1}', b"{}")
    )
    entries = await log.read_after(keys, "0-0")
    assert entries is not None
    assert [orjson.loads(e.data)["n"] for e in entries] == [0, 1, 2]  # nothing from A after
    holder, _ = await b.holder(keys)
    assert holder is None
    snap = await redis.hgetall(keys.snap)
    assert snap[b"state"] == b'{"s":1}' and snap[b"cursor"] == entries[-1].id.encode()
    # A new run can be claimed now; the fence keeps counting up.
    again = await a.claim(keys, "run_3")
    assert again.status == "ok" and again.token.number == 3


async def test_a_batch_sent_again_is_not_written_twice(redis: Redis, prefix: str) -> None:
    # redis-py retries a command whose reply was lost: the script then runs twice.
    own = Ownership(redis, "inst-a", lease_ttl_ms=5000)
    log = EventLog(redis, max_len=1000)
    keys = keys_for(prefix)
    claim = await own.claim(keys, "run_1")
    first = await log.append(keys, claim.token.raw, [ev(0), ev(1)], nonce="batch-1")
    again = await log.append(keys, claim.token.raw, [ev(0), ev(1)], nonce="batch-1")
    assert again == first
    # Even when the batch that landed released the run (the lease is gone, so the retry would
    # otherwise be refused as fenced), the retry answers the same ids.
    last = await log.append(keys, claim.token.raw, [ev(2)], release=True, nonce="batch-2")
    assert await log.append(keys, claim.token.raw, [ev(2)], release=True, nonce="batch-2") == last
    # A different batch from the released token is still fenced.
    with pytest.raises(Fenced):
        await log.append(keys, claim.token.raw, [ev(3)], nonce="batch-3")
    entries = await log.read_after(keys, "0-0")
    assert entries is not None
    assert [orjson.loads(e.data)["n"] for e in entries] == [0, 1, 2]
    assert [e.id for e in entries] == [*first, *last]


async def test_renewal_keeps_an_alive_owner(redis: Redis, prefix: str) -> None:
    own = Ownership(redis, "inst-a", lease_ttl_ms=200)
    keys = keys_for(prefix)
    claim = await own.claim(keys, "run_1")
    for _ in range(5):
        await asyncio.sleep(0.1)
        assert await own.renew(keys, claim.token)
    assert (await own.holder(keys))[1]
    # A lease that lapsed while nobody took over is renewed by its still-valid token.
    await eventually_async(_lapsed(own, keys), what="the lease lapses")
    assert await own.renew(keys, claim.token)
    assert await own.release(keys, claim.token)


async def test_writer_coalesces_concurrent_appends_in_order(redis: Redis, prefix: str) -> None:
    own = Ownership(redis, "inst-a", lease_ttl_ms=5000)
    log = EventLog(redis, max_len=10_000)
    keys = keys_for(prefix)
    claim = await own.claim(keys, "run_1")
    writer = FencedWriter(log, keys, claim.token.raw)
    calls = 0
    real_append = log.append_when_packed

    async def counting_append(*args: Any, **kwargs: Any) -> list[str]:
        nonlocal calls
        calls += 1  # one script call = one round trip
        return await real_append(*args, **kwargs)

    log.append_when_packed = counting_append  # type: ignore[method-assign]
    ids = await asyncio.gather(*(writer.append([ev(i)]) for i in range(200)))
    flat = [i[0] for i in ids]
    assert [parse_id(x) for x in flat] == sorted(parse_id(x) for x in flat)
    entries = await log.read_after(keys, "0-0")
    assert entries is not None
    assert [orjson.loads(e.data)["n"] for e in entries] == list(range(200))
    assert [e.id for e in entries] == flat
    assert calls <= 3, f"200 concurrent appends took {calls} round trips"
    # Sequential appends: one round trip each, never more.
    calls = 0
    for i in range(5):
        await writer.append([ev(200 + i)])
    assert calls == 5


async def test_read_after_reports_trimmed_cursors(redis: Redis, prefix: str) -> None:
    log = EventLog(redis, max_len=10)
    keys = keys_for(prefix)
    assert await log.read_after(keys, "0-0") == []  # no stream at all
    ids: list[str] = []
    for i in range(300):
        ids += await log.append(keys, "", [ev(i)])
    assert await log.read_after(keys, ids[0]) is None
    assert await log.read_after(keys, "0-0") is None
    tail = await log.read_after(keys, ids[-4])
    assert tail is not None and [e.id for e in tail] == ids[-3:]
    assert await log.last_id(keys) == ids[-1]


async def test_conversation_level_append_refused_while_a_run_is_active(
    redis: Redis, prefix: str
) -> None:
    own = Ownership(redis, "inst-a", lease_ttl_ms=5000)
    log = EventLog(redis, max_len=100)
    keys = keys_for(prefix)
    await own.claim(keys, "run_1")
    with pytest.raises(Fenced):
        await log.append(keys, "", [ev(0)])


# --- abort and commands ---------------------------------------------------------------------


async def test_abort_and_commands_reach_the_owner(redis: Redis, prefix: str) -> None:
    own = Ownership(redis, "inst-a", lease_ttl_ms=5000)
    control = Control(redis)
    keys = keys_for(prefix)
    assert await control.abort(keys, None, "aborted") is None  # nothing running
    await own.claim(keys, "run_1")
    assert await control.command(keys, "run_other", b"{}") == 0
    bus = ControlBus(redis, poll_interval=60.0)  # what reaches the owner: the wake-ups
    await bus.start()
    aborted = asyncio.get_running_loop().create_future()
    commands: list[bytes] = []

    async def on_command(raw: bytes) -> None:
        commands.append(raw)

    inbox = OwnerInbox(
        redis, bus, keys, "run_1", on_abort=aborted.set_result, on_command=on_command,
        poll_interval=60.0,
    )  # fmt: skip
    inbox.start()
    try:
        await eventually_async(_subscribed(redis, keys.ctl), what="the inbox is subscribed")
        for i in range(3):
            assert await control.command(keys, "run_1", orjson.dumps({"i": i}), f"t{i}") == 1
        assert await control.command(keys, "run_1", b"{}", "t0") == 2  # t0 is in flight
        assert await control.abort(keys, "run_other", "aborted") is None
        assert await control.abort(keys, None, "aborted") == "run_1"
        # Pub/sub wake-up: far sooner than the 60 s poll interval.
        assert await asyncio.wait_for(aborted, 10) == "aborted"
        await eventually(lambda: len(commands) == 3, what="the three commands are handled")
        assert [orjson.loads(c)["i"] for c in commands] == [0, 1, 2]
    finally:
        await inbox.stop()
        await bus.stop()


async def test_abort_without_pubsub_is_found_by_polling(redis: Redis, prefix: str) -> None:
    own = Ownership(redis, "inst-a", lease_ttl_ms=5000)
    control = Control(redis)
    keys = keys_for(prefix)
    await own.claim(keys, "run_1")
    aborted = asyncio.get_running_loop().create_future()

    async def on_command(raw: bytes) -> None:
        raise AssertionError("no command expected")

    inbox = OwnerInbox(
        redis, None, keys, "run_1", on_abort=aborted.set_result, on_command=on_command,
        poll_interval=0.1,
    )  # fmt: skip
    inbox.start()
    try:
        assert await control.abort(keys, "run_1", "interrupted") == "run_1"
        assert await asyncio.wait_for(aborted, 10) == "interrupted"  # found by the 0.1 s poll
    finally:
        await inbox.stop()


# --- fan-out --------------------------------------------------------------------------------


async def _collect(it: AsyncIterator[object], n: int) -> list[object]:
    out: list[object] = []
    async for batch in it:
        if batch is GAP:
            out.append(GAP)
            return out
        out.extend(batch)  # type: ignore[arg-type]
        if len(out) >= n:
            return out
    return out


async def test_one_reader_fans_out_to_many_subscribers(redis: Redis, prefix: str) -> None:
    log = EventLog(redis, max_len=10_000)
    keys = keys_for(prefix)
    early = await log.append(keys, "", [ev(i) for i in range(5)])
    hub = ReaderHub(redis, log, linger_seconds=0.1)
    try:
        subs = [
            asyncio.create_task(_collect(hub.subscribe(keys, after), n))
            for after, n in (("0-0", 25), (early[2], 22), (early[-1], 20), (early[-1], 20))
        ]
        await eventually(lambda: sum(r.refs for r in hub.readers.values()) == 4)
        assert len(hub.readers) == 1  # one reader for four subscribers
        for i in range(5, 25):
            await log.append(keys, "", [ev(i)])
        results = await asyncio.wait_for(asyncio.gather(*subs), 5.0)
        expected = list(range(25))
        for got, skip in zip(results, (0, 3, 5, 5), strict=True):
            assert [orjson.loads(e.data)["n"] for e in got] == expected[skip:]  # type: ignore[attr-defined]
        # Stopped after the last subscriber left (and its linger passed).
        await eventually(lambda: hub.readers == {}, what="the reader stops")
    finally:
        await hub.close()


async def test_a_trimmed_cursor_yields_a_gap(redis: Redis, prefix: str) -> None:
    log = EventLog(redis, max_len=10)
    keys = keys_for(prefix)
    first = await log.append(keys, "", [ev(0)])
    for i in range(1, 300):
        await log.append(keys, "", [ev(i)])
    hub = ReaderHub(redis, log, linger_seconds=0.1)
    try:
        got = await asyncio.wait_for(_collect(hub.subscribe(keys, first[0]), 1000), 5.0)
        assert got == [GAP]
    finally:
        await hub.close()


async def test_reads_of_the_window_share_what_was_made_of_each_entry(
    redis: Redis, prefix: str
) -> None:
    log = EventLog(redis, max_len=10_000)
    keys = keys_for(prefix)
    hub = ReaderHub(redis, log, linger_seconds=0.1)
    try:
        reader = await hub.acquire(keys)
        start = reader.last_id
        ids = await log.append(keys, "", [ev(i) for i in range(10)])
        await eventually(lambda: reader.last_id == ids[-1], what="the reader read them")
        made: list[str] = []

        def make(entry: Entry) -> tuple[str]:
            made.append(entry.id)
            return (entry.id,)

        first = reader.window_view(parse_id(start), 4, "inc1", make)
        every = reader.window_view(parse_id(start), 100, "inc1", make)
        tail = reader.window_view(parse_id(ids[5]), 100, "inc1", make)
        assert first is not None and every is not None and tail is not None
        assert [m[0] for m in every] == ids and [m[0] for m in tail] == ids[6:]
        assert made == ids  # once per entry, whatever the reads
        assert all(a is b for a, b in zip(first, every[:4], strict=True))
        assert all(a is b for a, b in zip(tail, every[6:], strict=True))
        again = reader.window_view(parse_id(start), 100, "inc2", make)  # another incarnation
        assert again is not None and made == ids + ids
        hub.release(reader)
    finally:
        await hub.close()


async def test_subscribers_behind_the_window_share_one_catch_up_read(
    redis: Redis, prefix: str
) -> None:
    log = EventLog(redis, max_len=10_000)
    keys = keys_for(prefix)
    ids = await log.append(keys, "", [ev(i) for i in range(50)])
    hub = ReaderHub(redis, log, window=8, linger_seconds=0.1)
    try:
        reader = await hub.acquire(keys)  # its window starts at the end: all 50 are older
        calls: list[str] = []
        read_after = log.read_after

        async def counted(
            keys: ConversationKeys, after: str, count: int = 1000
        ) -> list[Entry] | None:
            calls.append(after)
            return await read_after(keys, after, count)

        log.read_after = counted  # type: ignore[method-assign]
        cursors = ids[:40:4]
        assert reader.window_view(parse_id(cursors[0]), 5, "inc", lambda e: e) is None
        got = await asyncio.gather(*(reader.older(cursor, 5) for cursor in cursors))
        assert calls == [cursors[0]]  # one XRANGE for ten subscribers at ten cursors
        for cursor, entries in zip(cursors, got, strict=True):
            at = ids.index(cursor)
            assert entries is not None
            assert [e.id for e in entries] == ids[at + 1 : at + 6]
        # A subscriber arriving later, further on: served from that read too.
        rest = await reader.older(ids[-2], 5)
        assert rest is not None and [e.id for e in rest] == ids[-1:]
        assert len(calls) == 1
        hub.release(reader)
    finally:
        await hub.close()


async def test_a_catch_up_read_of_a_trimmed_cursor_says_so(redis: Redis, prefix: str) -> None:
    log = EventLog(redis, max_len=10)
    keys = keys_for(prefix)
    first = await log.append(keys, "", [ev(0)])
    await log.append(keys, "", [ev(i) for i in range(1, 300)])
    hub = ReaderHub(redis, log, window=8, linger_seconds=0.1)
    try:
        reader = await hub.acquire(keys)
        assert await reader.older(first[0], 5) is None
        hub.release(reader)
    finally:
        await hub.close()


async def test_a_running_reader_is_taken_without_the_hub_lock_and_kept_alive(
    redis: Redis, prefix: str
) -> None:
    log = EventLog(redis, max_len=10_000)
    keys = keys_for(prefix)
    hub = ReaderHub(redis, log, linger_seconds=0.2)
    try:
        assert hub.acquire_nowait(keys) is None  # none yet: acquire() starts it
        reader = await hub.acquire(keys)
        hub.release(reader)  # its stop is scheduled after the linger...
        assert keys.tag in hub._stoppers
        async with hub._lock:  # ...and the hub's lock is busy: the fast path needs neither
            again = hub.acquire_nowait(keys)
        assert again is reader and reader.refs == 1
        # The pending stop is left to fire (no timer per read): it finds the reader in use.
        await eventually(lambda: keys.tag not in hub._stoppers, what="the linger timer fired")
        ids = await log.append(keys, "", [ev(1)])
        await eventually(lambda: reader.last_id == ids[-1], what="still reading")
        assert hub.readers == {keys.tag: reader}
        hub.release(reader)
        await eventually(lambda: hub.readers == {}, what="stopped after the last release")
    finally:
        await hub.close()


async def test_a_reader_used_again_within_its_linger_stops_a_linger_after_its_last_release(
    redis: Redis, prefix: str
) -> None:
    """One stop timer per idle period: a release while one is pending arms none, and the timer
    that fires early (the reader was used since) waits out the rest of the linger."""
    log = EventLog(redis, max_len=10_000)
    keys = keys_for(prefix)
    hub = ReaderHub(redis, log, linger_seconds=0.3)
    loop = asyncio.get_running_loop()
    fires: list[tuple[float, bool]] = []  # (when, the reader was still running)
    linger_over = hub._linger_over

    def spy(reader: Any) -> None:
        fires.append((loop.time(), keys.tag in hub.readers))
        linger_over(reader)

    hub._linger_over = spy  # type: ignore[method-assign]
    try:
        reader = await hub.acquire(keys)
        hub.release(reader)
        first = hub._stoppers[keys.tag]
        assert hub.acquire_nowait(keys) is reader
        for i in range(20):  # in use a while: it reads what is appended
            (last,) = await log.append(keys, "", [ev(i)])
            await eventually(lambda: reader.last_id == last, what="the reader read it")  # noqa: B023
        hub.release(reader)  # a timer is pending: no second one
        last_release = loop.time()
        assert hub._stoppers[keys.tag] is first
        await eventually(lambda: hub.readers == {}, what="the reader stops")
        await eventually(lambda: reader._task is None, what="stopped, not just forgotten")
        # The first timer found it idle for less than the linger and was armed again; the
        # stop came a linger after the last release (timers may fire up to 1 ms early).
        assert len(fires) >= 2 and all(running for _, running in fires)
        assert fires[-1][0] >= last_release + 0.3 - 0.002
    finally:
        await hub.close()


async def test_a_reader_that_lingers_out_lets_its_blocking_read_end_and_keeps_the_connection(
    prefix: str,
) -> None:
    """Its blocking ``XREAD`` is let end by itself (within ``block_ms``), not cancelled:
    redis-py drops a connection whose reply it stopped reading, and the next command would
    connect again (one connection per conversation whose reader lingered out)."""
    client = redis_client(SHARED_REDIS_URL)
    hub = ReaderHub(client, EventLog(client, max_len=1000), linger_seconds=0.05)
    try:
        pool = client.connection_pool
        reader = await hub.acquire(keys_for(prefix, "linger-out"))
        await eventually(lambda: len(lent(client)) == 1, what="its XREAD blocks")
        hub.release(reader)
        await eventually(lambda: reader._task is None, what="the reader stopped")
        assert not lent(client)
        idle = pool._available_connections
        assert idle and all(connection.is_connected for connection in idle)
    finally:
        await hub.close()
        await client.aclose()


async def test_a_reader_nobody_reads_from_holds_no_connection_and_reads_on_when_read_again(
    redis: Redis, prefix: str
) -> None:
    """Lingering with no subscriber, a reader waits without ``XREAD`` (no pool connection);
    the next read kicks it at once, and it reads on from where it stopped: what another
    writer appended meanwhile is delivered, in order, nothing twice."""
    client = redis_client(SHARED_REDIS_URL)  # the hub's own pool: only the reader uses it
    hub = ReaderHub(client, EventLog(client, max_len=1000), linger_seconds=60)
    writer = EventLog(redis, max_len=1000)
    keys = keys_for(prefix, "idle-reader")
    try:
        first = await writer.append(keys, "", [ev(0)])
        reader = await hub.acquire(keys)
        await eventually(lambda: len(lent(client)) == 1, what="its XREAD blocks")
        hub.release(reader)
        reader.block_ms = 60_000  # a pause ends by a kick, not by its time, from now on
        await writer.append(keys, "", [ev(1)])  # ends the blocking read at once
        await eventually(
            lambda: reader.idle_paused and not lent(client),
            what="paused, its connection back in the pool",
        )
        assert hub.readers == {keys.tag: reader}  # still lingering, window kept
        later = await writer.append(keys, "", [ev(2), ev(3)])
        got = await asyncio.wait_for(_collect(hub.subscribe(keys, first[0]), 3), 5.0)
        assert [orjson.loads(e.data)["n"] for e in got] == [1, 2, 3]  # type: ignore[attr-defined]
        assert reader.last_id == later[-1]
    finally:
        await hub.close()
        await client.aclose()


def test_batch_nonces_are_unique_and_a_forked_process_draws_its_own() -> None:
    """The append script drops a batch whose nonce is the newest entry's: nonces never repeat,
    not across forked workers either."""
    nonces = {new_nonce() for _ in range(10_000)}
    assert len(nonces) == 10_000
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, new_nonce().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 100).decode()
    os.close(read)
    mine = new_nonce()
    assert child and child != mine
    assert child[:16] != mine[:16]  # another prefix, not only another count
