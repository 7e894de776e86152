"""Appends of different conversations share one pipelined round trip, each with its own reply."""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

import orjson
import pytest
from redis.asyncio import BlockingConnectionPool, Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.backends.redis import redis_client
from app.backends.redis.claims import Ownership
from app.backends.redis.eventlog import (
    KIND_EVENT,
    KIND_EXTENSION,
    EventLog,
    Fenced,
    FencedWriter,
    Pending,
)
from app.backends.redis.keys import ConversationKeys
from app.compat.redis_fast.script_pipeline import ScriptPipeline
from tests.app.support.redis_support import (
    SHARED_REDIS_URL,
    MuteRedis,
    prefix,
    private_redis,
    redis,
    unique_prefix,
)
from tests.support import eventually_async

__all__ = ["prefix", "redis"]  # fixtures


def ev(n: int) -> Pending:
    return Pending(KIND_EVENT, orjson.dumps({"n": n}))


def keys_for(prefix: str, key: str) -> ConversationKeys:
    return ConversationKeys.for_conversation("alice", key, prefix=prefix)


async def _logged(log: EventLog, keys: ConversationKeys) -> list[int]:
    entries = await log.read_after(keys, "0-0")
    assert entries is not None
    return [orjson.loads(e.data)["n"] for e in entries]


async def test_appends_of_three_conversations_share_one_round_trip_a_fenced_one_fails_alone(
    redis: Redis, prefix: str
) -> None:
    own = Ownership(redis, "inst-a", lease_ttl_ms=5000)
    log = EventLog(redis, max_len=1000)
    a, b, c = (keys_for(prefix, k) for k in ("a", "b", "c"))
    tokens = {k.tag: (await own.claim(k, f"run_{i}")).token.raw for i, k in enumerate((a, b, c))}
    # Loaded beforehand: on a Redis that never ran it, the first call's NOSCRIPT costs a trip.
    await redis.script_load(log._append._script.script)
    before = log._append.round_trips
    results = await asyncio.gather(
        log.append(a, tokens[a.tag], [ev(0), ev(1)]),
        log.append(b, "1|someone-else|run_x", [ev(10)]),  # not b's owner: FENCED
        log.append(c, tokens[c.tag], [ev(20)]),
        return_exceptions=True,
    )
    assert log._append.round_trips - before == 1
    ids_a, fenced_b, ids_c = results
    assert isinstance(fenced_b, Fenced)
    assert isinstance(ids_a, list) and len(ids_a) == 2
    assert isinstance(ids_c, list) and len(ids_c) == 1
    assert await _logged(log, a) == [0, 1]
    assert await _logged(log, b) == []
    assert await _logged(log, c) == [20]
    # Each call keeps its own ids: they are its conversation's log positions.
    assert ids_a == [e.id for e in (await log.read_after(a, "0-0") or [])]


async def test_writers_of_many_runs_batch_across_conversations_in_order(
    redis: Redis, prefix: str
) -> None:
    """20 runs appending one event at a time each: far fewer round trips than appends, and
    every conversation's log holds its own events, in order, once."""
    own = Ownership(redis, "inst-a", lease_ttl_ms=5000)
    log = EventLog(redis, max_len=1000)
    convs = [keys_for(prefix, f"k{i}") for i in range(20)]
    writers = [
        FencedWriter(log, k, (await own.claim(k, f"run_{i}")).token.raw)
        for i, k in enumerate(convs)
    ]
    before = log._append.round_trips

    async def run(writer: FencedWriter) -> None:
        for n in range(10):
            await writer.append([ev(n)])

    await asyncio.gather(*(run(w) for w in writers))
    assert log._append.round_trips - before <= 10 * 2  # not 200
    for k in convs:
        assert await _logged(log, k) == list(range(10))


async def test_a_redis_without_the_script_gets_it_loaded_and_every_call_answered() -> None:
    """After a restart (scripts gone), the NOSCRIPT calls are sent again: none lost, none twice."""
    with private_redis() as server:
        client = Redis.from_url(server.url)
        try:
            prefix = unique_prefix()
            log = EventLog(client, max_len=1000)
            convs = [keys_for(prefix, f"k{i}") for i in range(3)]
            await log.append(convs[0], "", [ev(0)])
            await client.script_flush()
            await asyncio.gather(*(log.append(k, "", [ev(1)]) for k in convs))
            assert await _logged(log, convs[0]) == [0, 1]
            assert await _logged(log, convs[1]) == [1]
            assert await _logged(log, convs[2]) == [1]
        finally:
            await client.aclose()


async def test_appends_hold_one_connection_and_survive_its_loss_without_writing_twice(
    redis: Redis, prefix: str
) -> None:
    """The pipeline's own connection, killed by the server between two appends: the next
    append reconnects (redis-py's retry, as configured by the gateway) and lands once; close
    hands the connection back, usable by redis-py again."""
    client = redis_client(SHARED_REDIS_URL)
    try:
        await _held_connection_survives_its_loss(client, redis, prefix)
    finally:
        await client.aclose()


def _address(pipeline: ScriptPipeline) -> str:
    """The held connection's address as Redis lists it (``CLIENT KILL ADDR``)."""
    assert pipeline._wire is not None  # driven directly once connected
    host, port = pipeline._wire.transport.get_extra_info("sockname")[:2]
    return f"{host}:{port}"


async def _held_connection_survives_its_loss(client: Redis, redis: Redis, prefix: str) -> None:
    log = EventLog(client, max_len=1000)
    assert isinstance(log._append, ScriptPipeline)  # standalone: not a cluster's
    keys = keys_for(prefix, "held")
    await log.append(keys, "", [ev(0)])
    conn = log._append._conn
    assert conn is not None
    address = _address(log._append)
    await log.append(keys, "", [ev(1)])
    assert log._append._conn is conn and _address(log._append) == address  # one connection
    killed = await redis.execute_command(  # type: ignore[no-untyped-call]
        "CLIENT", "KILL", "ADDR", address
    )
    assert killed == 1
    ids = await log.append(keys, "", [ev(2)])
    assert await _logged(log, keys) == [0, 1, 2]
    assert ids == [(await log.read_after(keys, "0-0") or [])[-1].id]
    assert _address(log._append) != address  # a new connection, driven directly again
    in_use = client.connection_pool._in_use_connections
    assert conn in in_use
    await log.aclose()
    assert conn not in in_use and log._append._conn is None
    await conn.send_command("PING")  # redis-py reads it again
    assert await conn.read_response() in (b"PONG", "PONG")


async def test_a_reply_no_call_waits_for_drops_the_connection_and_the_call_is_sent_again(
    redis: Redis, prefix: str
) -> None:
    """Bytes the pipeline did not ask for (here: a reply to a command written behind its
    back) mean the connection cannot be trusted: it is dropped, and the calls in flight are
    sent again on a new one, each landing once."""
    client = redis_client(SHARED_REDIS_URL)
    try:
        log = EventLog(client, max_len=1000)
        assert isinstance(log._append, ScriptPipeline)  # standalone: not a cluster's
        keys = keys_for(prefix, "stray")
        await log.append(keys, "", [ev(0)])
        address = _address(log._append)
        wire = log._append._wire
        assert wire is not None
        wire.transport.write(b"*1\r\n$4\r\nPING\r\n")  # its +PONG comes unasked for
        pipeline = log._append
        await eventually_async(lambda: _dropped(pipeline, wire), within=5, what="dropped")
        await asyncio.gather(*(log.append(keys, "", [ev(n)]) for n in (1, 2)))
        assert sorted(await _logged(log, keys)) == [0, 1, 2]
        assert _address(log._append) != address
        await log.aclose()
    finally:
        await client.aclose()


async def _dropped(pipeline: ScriptPipeline, wire: object) -> bool:
    return pipeline._wire is not wire


async def test_a_round_trip_without_a_reply_times_out_after_the_socket_timeout() -> None:
    """The held connection's timeout is applied per round trip: a silent server fails the call
    with redis-py's TimeoutError (retried as configured), never a hang."""
    mute = MuteRedis()
    await mute.start()
    pool = mute.pool(BlockingConnectionPool, RedisTimeoutError)
    client = Redis.from_pool(pool)
    try:
        pipeline = ScriptPipeline(client, client.register_script("return 1"))
        assert await pipeline.call(["k"], ["a", 1]) == b"OK"
        mute.mute = True
        sent = mute.commands
        started = time.monotonic()
        with pytest.raises(RedisTimeoutError):
            await asyncio.wait_for(pipeline.call(["k"], ["b", 2]), 5)
        elapsed = time.monotonic() - started
        assert 0.6 <= elapsed < 3  # two attempts (one retry) of 0.3 s each
        assert mute.commands >= sent + 2  # sent again on a new connection
        await pipeline.aclose()
        # Handed back with the pool's own timeout.
        assert all(c.socket_timeout == 0.3 for c in pool._available_connections)
    finally:
        await client.aclose()
        assert mute.server is not None
        mute.server.close()


async def test_a_call_that_cannot_be_packed_fails_alone_and_the_next_is_answered(
    prefix: str,
) -> None:
    """An argument hiredis cannot pack fails its call (not the pipeline, never a hang)."""
    client = redis_client(SHARED_REDIS_URL)
    try:
        pipeline = ScriptPipeline(client, client.register_script("return ARGV[1]"))
        assert await pipeline.call([f"{prefix}:k"], ["a"]) == b"a"  # connected, driven directly
        assert pipeline._wire is not None
        with pytest.raises(TypeError):
            not_an_argument: Any = object()
            await asyncio.wait_for(pipeline.call([f"{prefix}:k"], [not_an_argument]), 5)
        assert await pipeline.call([f"{prefix}:k"], ["b"]) == b"b"
        await pipeline.aclose()
    finally:
        await client.aclose()


async def test_a_lone_append_is_on_the_wire_two_loop_turns_after_it_is_made(
    redis: Redis, prefix: str
) -> None:
    """No loop turn of its own before the write (a delta of a slow stream waited one more
    loop iteration for it): one turn for the appending task to run, one for the pipeline's
    flush, and the round trip is under way."""
    own = Ownership(redis, "inst-a", lease_ttl_ms=5000)
    log = EventLog(redis, max_len=1000)
    keys = keys_for(prefix, "lone")
    writer = FencedWriter(log, keys, (await own.claim(keys, "run_1")).token.raw)
    await writer.append([ev(0)])  # connected, the script loaded
    before = log._append.round_trips
    task = asyncio.create_task(writer.append([ev(1)]))
    await asyncio.sleep(0)  # the task runs: its batch opens, the call is queued
    await asyncio.sleep(0)  # the pipeline's flush writes it
    assert log._append.round_trips == before + 1
    assert len(await task) == 1
    assert await _logged(log, keys) == [0, 1]


async def test_arguments_given_as_a_function_are_built_when_the_call_is_packed(
    redis: Redis,
) -> None:
    """What the function reads can still grow after the call is made, until the flush packs
    it (a writer's batch takes joiners until then); it is built once."""
    pipeline = ScriptPipeline(redis, redis.register_script("return ARGV"))
    items = [b"a"]
    built = 0

    def args() -> list[bytes]:
        nonlocal built
        built += 1
        return list(items)

    call = asyncio.ensure_future(pipeline.call(["k"], args))
    await asyncio.sleep(0)  # the call is queued, not packed
    items.append(b"b")
    assert await call == [b"a", b"b"]
    assert built == 1
    await pipeline.aclose()


async def test_a_first_send_whose_reply_is_lost_is_sent_again_looking_for_itself(
    redis: Redis, prefix: str
) -> None:
    """The first send of a batch does not look for its nonce in the log (nothing of it can be
    there yet); the resend after its reply was lost (the script ran) does, so the batch is
    written once and its caller gets the ids of that one write."""
    client = redis_client(SHARED_REDIS_URL)
    try:
        log = EventLog(client, max_len=1000)
        assert isinstance(log._append, ScriptPipeline)  # standalone: not a cluster's
        keys = keys_for(prefix, "lost-reply")
        await log.append(keys, "", [ev(0)])
        pipeline = log._append
        replies_in = pipeline._replies_in
        lost: list[int] = []

        def lose_the_first_reply(wire: Any) -> None:
            if not lost:  # the script ran; its reply is dropped with the connection
                lost.append(1)
                pipeline._abandon(RedisConnectionError("reply lost"))
                return
            replies_in(wire)

        pipeline._replies_in = lose_the_first_reply  # type: ignore[method-assign]
        pipeline._detach()  # the wire hands what it reads to the handler it was attached with
        pipeline._attach()
        ids = await asyncio.wait_for(log.append(keys, "", [ev(1)]), 10)
        assert lost == [1]
        assert await _logged(log, keys) == [0, 1]
        assert ids == [(await log.read_after(keys, "0-0") or [])[-1].id]
        await log.aclose()
    finally:
        await client.aclose()


async def test_one_event_appends_do_not_look_for_their_batch_in_the_log() -> None:
    """A slow stream appends one event per script call: none of those first sends reads the
    log's newest entry (the look a resend makes), and no event's entry stores its kind."""
    with private_redis() as server:
        client = redis_client(server.url)
        plain = Redis.from_url(server.url)
        try:
            own = Ownership(plain, "inst", lease_ttl_ms=5000)
            log = EventLog(client, max_len=1000)
            keys = keys_for("costs", "slow")
            writer = FencedWriter(log, keys, (await own.claim(keys, "run_1")).token.raw)
            await writer.append([ev(0)])  # connects (redis-py's path, which does look)
            await plain.config_resetstat()
            for n in range(1, 21):
                await writer.append([ev(n)])
            stats = await plain.info("commandstats")
            assert stats["cmdstat_xadd"]["calls"] == 20
            assert "cmdstat_xrevrange" not in stats
            assert await _logged(log, keys) == list(range(21))
            raw = cast(list[tuple[bytes, dict[bytes, bytes]]], await plain.xrange(keys.log))
            assert all(b"k" not in fields for _, fields in raw)
            await writer.append([Pending(KIND_EXTENSION, b'{"key":"k","value":1}')])
            read = await log.read_after(keys, "0-0")
            assert read is not None
            assert [e.kind for e in read] == [KIND_EVENT] * 21 + [KIND_EXTENSION]
            await log.aclose()
        finally:
            await client.aclose()
            await plain.aclose()


async def test_a_call_not_awaited_hands_its_raw_reply_to_its_callback_from_the_read(
    prefix: str,
) -> None:
    """``call_then``: each call's reply (or error object) reaches its callback once, in the
    order sent, while the pipeline settles the round trip (no loop turn in between); a
    callback that raises does not keep the others from theirs; a call made in a callback
    goes out at once; calls pending when the pipeline closes are told ``CancelledError``."""
    client = redis_client(SHARED_REDIS_URL)
    errors: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    try:
        script = client.register_script(
            "if ARGV[1] == 'bad' then return redis.error_reply('FENCED') end return ARGV[1]"
        )
        pipeline = ScriptPipeline(client, script)
        assert await pipeline.call([f"{prefix}:k"], ["warm"]) == b"warm"  # connected, loaded
        told: list[Any] = []
        settled = asyncio.Event()

        def boom(reply: Any) -> None:
            told.append(reply)
            raise RuntimeError("a failing callback")

        def again(reply: Any) -> None:
            told.append(reply)
            pipeline.call_then([f"{prefix}:k"], ["next"], None, last)

        def last(reply: Any) -> None:
            told.append(reply)
            settled.set()

        before = pipeline.round_trips
        pipeline.call_then([f"{prefix}:k"], ["a"], None, told.append)
        pipeline.call_then([f"{prefix}:k"], ["bad"], None, told.append)
        pipeline.call_then([f"{prefix}:k"], ["b"], None, boom)
        pipeline.call_then([f"{prefix}:k"], ["c"], None, again)
        await asyncio.wait_for(settled.wait(), 5)
        assert told[0] == b"a"
        assert isinstance(told[1], Exception) and "FENCED" in str(told[1])
        assert told[2:] == [b"b", b"c", b"next"]
        assert pipeline.round_trips - before == 2  # the four together, then the callback's
        assert [str(e.get("exception")) for e in errors] == ["a failing callback"]
        pending: list[Any] = []
        pipeline.call_then([f"{prefix}:k"], ["never sent"], None, pending.append)
        await pipeline.aclose()
        assert len(pending) == 1 and isinstance(pending[0], asyncio.CancelledError)
    finally:
        loop.set_exception_handler(None)
        await client.aclose()
