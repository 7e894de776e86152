"""The command mux: data commands of every task share round trips on one held connection, and
each caller still gets redis-py's own reply or error; a lost or mute connection costs a fallback
to redis-py's path, never a wrong reply or a hang; blocking commands never wait behind it."""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.backends.redis import redis_client
from app.compat.redis_fast.command_mux import CommandMux, _packed, _Submission
from app.compat.redis_fast.lean import LeanPool, LeanRedis
from tests.app.support.redis_support import (
    SHARED_REDIS_URL,
    MuteRedis,
    clients,
    prefix,
    private_redis,
)
from tests.support import eventually, eventually_async

__all__ = ["clients", "prefix"]  # fixtures


def mux_of(client: Redis) -> CommandMux:
    assert isinstance(client, LeanRedis) and client.mux is not None
    return client.mux


async def attached(client: Redis) -> CommandMux:
    """The client's mux once it holds its connection (a first command starts taking one)."""
    mux = mux_of(client)
    await client.exists("warm-up")
    await eventually(lambda: mux.held is not None, what="the mux holds a connection")
    return mux


async def test_concurrent_commands_share_round_trips_and_answer_as_redis_py(
    clients: tuple[Redis, Redis, str],
) -> None:
    lean, stock, prefix = clients
    h, s, z = f"{prefix}:h", f"{prefix}:s", f"{prefix}:z"
    await stock.hset(h, mapping={"a": "1", "b": b"\x00\xff"})
    await stock.xadd(s, {"k": "v"}, id="1-1")
    await stock.zadd(z, {"m": 2.5})
    mux = await attached(lean)
    calls: list[Any] = [
        lambda c: c.hgetall(h),
        lambda c: c.hget(h, "missing"),
        lambda c: c.hmget(h, ["a", "b", "c"]),
        lambda c: c.xrange(s),
        lambda c: c.xrevrange(s, count=1),
        lambda c: c.zrange(z, 0, -1, withscores=True),
        lambda c: c.zscore(z, "m"),
        lambda c: c.exists(h, s, f"{prefix}:none"),
        lambda c: c.hexists(h, "a"),
        lambda c: c.hlen(h),
        lambda c: c.xlen(s),
    ] * 10
    before = mux.round_trips
    got = await asyncio.gather(*(call(lean) for call in calls))
    trips = mux.round_trips - before
    want = [await call(stock) for call in calls]
    assert got == want
    assert 1 <= trips <= 3, trips  # 110 commands, one loop turn: one write (and its reply)
    seconds, micros = await lean.time()  # TIME's response callback ran: two ints
    assert isinstance(seconds, int) and isinstance(micros, int)


async def test_each_caller_gets_its_own_error_and_the_others_their_replies(
    clients: tuple[Redis, Redis, str],
) -> None:
    lean, stock, prefix = clients
    h = f"{prefix}:h"
    await stock.hset(h, "a", "1")
    mux = await attached(lean)
    before = mux.round_trips
    results = await asyncio.gather(
        lean.get(h),  # WRONGTYPE
        lean.hget(h, "a"),
        lean.evalsha("0" * 40, 0),  # NOSCRIPT
        lean.hget(h, "a"),
        return_exceptions=True,
    )
    assert mux.round_trips - before == 1
    assert isinstance(results[0], ResponseError) and "WRONGTYPE" in str(results[0])
    assert isinstance(results[2], NoScriptError)
    assert results[1] == results[3] == b"1"
    script = lean.register_script("return ARGV[1]")  # NOSCRIPT first: loaded, then run
    assert await script(args=["x"]) == b"x"


async def test_a_plain_pipeline_is_one_submission_and_answers_as_redis_pys(
    clients: tuple[Redis, Redis, str],
) -> None:
    lean, stock, prefix = clients
    key = f"{prefix}:p"
    mux = await attached(lean)
    results = []
    for client in (lean, stock):
        await stock.delete(key)
        async with client.pipeline(transaction=False) as pipe:
            pipe.set(key, "1")
            pipe.incr(key)
            pipe.hget(key, "x")  # WRONGTYPE: in place with raise_on_error=False
            pipe.get(key)
            before = mux.round_trips
            results.append(await pipe.execute(raise_on_error=False))
            if client is lean:
                assert mux.round_trips - before == 1
    (l_set, l_incr, l_err, l_get), (s_set, s_incr, s_err, s_get) = results
    assert (l_set, l_incr, l_get) == (s_set, s_incr, s_get) == (True, 2, b"2")
    assert type(l_err) is type(s_err) and str(l_err) == str(s_err)
    errors = []
    for client in (lean, stock):
        async with client.pipeline(transaction=False) as pipe:
            pipe.get(key)
            pipe.hget(key, "x")
            with pytest.raises(ResponseError) as raised:
                await pipe.execute()
            errors.append(str(raised.value))
    assert errors[0] == errors[1]  # annotated alike: "Command # 2 (HGET …) of pipeline …"
    assert "Command # 2" in errors[0]


async def test_a_cancelled_caller_leaves_its_reply_behind_not_to_the_next(
    clients: tuple[Redis, Redis, str],
) -> None:
    lean, stock, prefix = clients
    await stock.set(f"{prefix}:a", "A")
    await stock.set(f"{prefix}:b", "B")
    await attached(lean)
    first = asyncio.ensure_future(lean.get(f"{prefix}:a"))
    await asyncio.sleep(0)  # submitted, then given up before its reply
    first.cancel()
    assert await lean.get(f"{prefix}:b") == b"B"
    results = await asyncio.gather(*(lean.get(f"{prefix}:{k}") for k in "ab" * 20))
    assert results == [b"A", b"B"] * 20


async def test_blocking_commands_do_not_wait_behind_the_mux(
    clients: tuple[Redis, Redis, str],
) -> None:
    lean, stock, prefix = clients
    await attached(lean)
    await lean.ping()  # one idle connection besides the mux's: the blocking read takes it
    own = await lean.client_id()  # that connection's
    blocked = asyncio.ensure_future(lean.xread({f"{prefix}:s": "$"}, block=60_000))

    async def blocking() -> bool:
        """The read's own connection blocks in Redis (the shared Redis has others')."""
        listed = await stock.client_list()
        return any(int(c["id"]) == own and "b" in c["flags"] for c in listed)

    await eventually_async(blocking, what="the XREAD blocks in Redis")
    started = time.monotonic()
    for _ in range(5):
        assert await lean.hget(f"{prefix}:h", "x") is None
    assert time.monotonic() - started < 10  # not behind the 60 s XREAD
    assert not blocked.done()
    blocked.cancel()


async def test_commands_after_the_connection_is_killed_are_answered_and_the_mux_takes_another() -> (
    None
):
    """The server kills the mux's connection: the commands that come next are still answered
    (by redis-py's path while the mux takes a new connection), then go through the mux again.
    A round trip in flight when its connection fails is the mute-server test's."""
    with private_redis() as server:
        client = redis_client(server.url)
        admin = Redis.from_url(server.url, protocol=2)
        try:
            await client.set("k", "v")
            mux = await attached(client)
            # Every connection but the admin's, the mux's included, closed by the server.
            await admin.execute_command(  # type: ignore[no-untyped-call]
                "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"
            )
            results = await asyncio.gather(*(client.get("k") for _ in range(20)))
            assert results == [b"v"] * 20
            await eventually(lambda: mux.held is not None, what="the mux holds one again")
            before = mux.round_trips
            assert await asyncio.gather(*(client.get("k") for _ in range(5))) == [b"v"] * 5
            assert mux.round_trips > before  # through the mux again
        finally:
            await client.aclose()
            await admin.aclose()


async def test_a_round_trip_in_flight_when_its_connection_is_lost_is_answered_by_redis_pys_path(
    clients: tuple[Redis, Redis, str],
) -> None:
    lean, stock, prefix = clients
    await stock.set(f"{prefix}:k", "v")
    mux = await attached(lean)
    held = mux.held
    assert held is not None
    calls = [asyncio.ensure_future(lean.get(f"{prefix}:k")) for _ in range(20)]
    await asyncio.sleep(0)  # the callers submit (the write is due in the next loop turn)
    await asyncio.sleep(0)  # written; the replies are read in a later turn
    assert mux._batch is not None  # in flight
    held._writer.transport.abort()  # type: ignore[union-attr]  # lost before its replies
    assert await asyncio.wait_for(asyncio.gather(*calls), 10) == [b"v"] * 20
    assert mux.held is not held


async def test_a_mute_server_times_the_mux_out_into_redis_pys_path_never_a_hang() -> None:
    mute = MuteRedis()
    await mute.start()
    pool = mute.pool(LeanPool, RedisTimeoutError, RedisConnectionError)
    client = cast(LeanRedis, LeanRedis.from_pool(pool))
    client.mux = mux = CommandMux(client)
    try:
        assert await client.execute_command("GET", "k") == b"OK"
        await eventually(lambda: mux.held is not None, what="the mux holds a connection")
        before = mux.round_trips
        assert await client.execute_command("GET", "k") == b"OK"
        assert mux.round_trips == before + 1
        mute.mute = True
        started = time.monotonic()
        with pytest.raises((RedisTimeoutError, RedisConnectionError)):
            await asyncio.wait_for(client.execute_command("GET", "k"), 5)
        elapsed = time.monotonic() - started
        assert 0.3 <= elapsed < 4  # the mux's 0.3 s, then redis-py's attempts
        assert mux.held is None  # abandoned: its connection went back, closed
        mute.mute = False
        assert await client.execute_command("GET", "k") == b"OK"
    finally:
        await client.aclose()
        assert mute.server is not None
        mute.server.close()


async def test_closing_the_client_hands_the_held_connection_back_clean(
    clients: tuple[Redis, Redis, str],
) -> None:
    lean, _, _ = clients
    mux = await attached(lean)
    held = mux.held
    await mux.aclose()
    pool = lean.connection_pool
    assert mux.held is None
    assert held not in pool._in_use_connections
    assert held in pool._available_connections
    assert await lean.get("agw-test-mux:none") is None  # redis-py reads it again, in step


arguments = st.one_of(
    st.text(max_size=8),  # any code point but lone surrogates (strict UTF-8)
    st.binary(max_size=8),
    st.integers(),
    st.floats(allow_nan=False),
)


@settings(deadline=None, max_examples=150)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["GET", "ZADD", "XINFO STREAM"]), st.lists(arguments, max_size=5)
        ),
        min_size=1,
        max_size=5,
    )
)
def test_commands_are_packed_as_the_connection_packs_them(
    commands: list[tuple[str, list[Any]]],
) -> None:
    """hiredis at once for plain arguments, the connection's packing for the rest: the same
    bytes as the connection's own packing of each command."""
    client = redis_client(SHARED_REDIS_URL)
    conn = client.connection_pool.make_connection()  # type: ignore[no-untyped-call]
    batch = [_Submission([(name, *args)], cast(Any, None)) for name, args in commands]
    want = b"".join(chunk for name, args in commands for chunk in conn.pack_command(name, *args))
    assert b"".join(_packed(conn, batch)) == want
