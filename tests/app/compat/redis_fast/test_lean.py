"""The gateway's Redis client sends a command straight on an idle connection: same replies and
errors as redis-py's own path, a connection lost to a restart is replaced and the command still
answered, a cancelled command leaves no stray reply for the next one, and callers waiting for a
connection of a full pool are woken."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.backends.redis import redis_client
from app.compat.redis_fast.lean import Deadlines, LeanPipeline, LeanPool, LeanRedis
from tests.app.support.redis_support import (
    SHARED_REDIS_URL,
    MuteRedis,
    clients,
    prefix,
    private_redis,
)
from tests.support import eventually, eventually_async

__all__ = ["clients", "prefix"]  # fixtures


async def test_the_gateways_client_is_the_lean_one(clients: tuple[Redis, Redis, str]) -> None:
    lean, _, _ = clients
    assert isinstance(lean, LeanRedis)
    assert isinstance(lean.connection_pool, LeanPool)
    assert isinstance(lean.pipeline(transaction=False), LeanPipeline)


async def test_the_gateways_client_speaks_resp2_whatever_redis_pys_default(
    clients: tuple[Redis, Redis, str],
) -> None:
    """redis-py 8.2 made RESP3 its default; the lean paths read RESP2 replies themselves."""
    lean, _, _ = clients
    info = await lean.client_info()
    assert str(info["resp"]) == "2"
    sep = "&" if "?" in SHARED_REDIS_URL else "?"
    resp3 = redis_client(f"{SHARED_REDIS_URL}{sep}protocol=3")
    try:  # a URL that names RESP3 still gets it
        assert str((await resp3.client_info())["resp"]) == "3"
    finally:
        await resp3.aclose()


async def test_replies_and_errors_are_redis_pys_own(clients: tuple[Redis, Redis, str]) -> None:
    lean, stock, prefix = clients
    h, s, z = f"{prefix}:h", f"{prefix}:s", f"{prefix}:z"
    await stock.hset(h, mapping={"a": "1", "b": b"\x00\xff"})
    await stock.xadd(s, {"k": "v"}, id="1-1")
    await stock.zadd(z, {"m": 2.5})

    async def both(call: Any) -> tuple[Any, Any]:
        return await call(lean), await call(stock)

    for call in (
        lambda c: c.hgetall(h),
        lambda c: c.hget(h, "missing"),
        lambda c: c.xrange(s),
        lambda c: c.xread({s: "0-0"}, count=10),
        lambda c: c.zrange(z, 0, -1, withscores=True),
        lambda c: c.exists(h, s, f"{prefix}:none"),
    ):
        got, want = await both(call)
        assert got == want
    seconds, micros = await lean.time()  # the response callback ran: a tuple of ints
    assert isinstance(seconds, int) and isinstance(micros, int)
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        await lean.get(h)
    with pytest.raises(NoScriptError):
        await lean.evalsha("0" * 40, 0)
    script = lean.register_script("return ARGV[1]")  # NOSCRIPT first: loaded, then run
    assert await script(args=["x"]) == b"x"
    assert await lean.get(f"{prefix}:none") is None  # the connection is still in step


async def test_a_plain_pipeline_answers_as_redis_pys(clients: tuple[Redis, Redis, str]) -> None:
    lean, stock, prefix = clients
    key = f"{prefix}:p"
    results = []
    for client in (lean, stock):
        async with client.pipeline(transaction=False) as pipe:
            pipe.set(key, "1")
            pipe.incr(key)
            pipe.hget(key, "x")  # WRONGTYPE: kept in place with raise_on_error=False
            pipe.get(key)
            results.append(await pipe.execute(raise_on_error=False))
    (lean_set, lean_incr, lean_err, lean_get), (stock_set, stock_incr, stock_err, stock_get) = (
        results
    )
    assert (lean_set, lean_incr, lean_get) == (stock_set, stock_incr, stock_get) == (True, 2, b"2")
    assert isinstance(lean_err, ResponseError) and isinstance(stock_err, ResponseError)
    async with lean.pipeline(transaction=True) as pipe:  # MULTI/EXEC: redis-py's own path
        pipe.incr(key)
        pipe.get(key)
        assert await pipe.execute() == [3, b"3"]


async def test_a_command_after_a_restart_is_answered_on_a_new_connection() -> None:
    with private_redis() as server:
        client = redis_client(server.url)
        try:
            await client.set("k", "v")
            async with client.pipeline(transaction=False) as pipe:
                pipe.get("k")
                assert await pipe.execute() == [b"v"]
            server.stop()
            server.start()  # the idle connection is now closed by the server
            assert await client.get("k") == b"v"  # saved on shutdown, read on a new connection
            server.stop()
            server.start()
            async with client.pipeline(transaction=False) as pipe:
                pipe.get("k")
                pipe.exists("k")
                assert await pipe.execute() == [b"v", 1]
        finally:
            await client.aclose()


async def test_a_cancelled_command_leaves_no_reply_for_the_next(
    clients: tuple[Redis, Redis, str],
) -> None:
    lean, stock, prefix = clients
    stream = f"{prefix}:blocked"
    pool = lean.connection_pool
    await lean.ping()  # one idle connection: the blocking read takes it
    own = await lean.client_id()  # that connection's
    read = asyncio.ensure_future(lean.xread({stream: "$"}, block=10_000))

    async def blocked() -> bool:
        """The read's own connection blocks on the server (the shared Redis has others')."""
        listed = await stock.client_list()
        return any(int(c["id"]) == own and "b" in c["flags"] for c in listed)

    await eventually_async(blocked, what="the XREAD blocks on the server")
    read.cancel()
    with pytest.raises(asyncio.CancelledError):
        await read
    await stock.xadd(stream, {"late": "entry"})  # would have been the cancelled read's reply
    for _ in range(5):
        assert await lean.get(f"{prefix}:none") is None
        assert await lean.echo("in step") == b"in step"
    # Every lent connection came back (the command mux holds one of its own).
    assert isinstance(lean, LeanRedis) and lean.mux is not None
    assert pool._in_use_connections <= {lean.mux.held}


async def test_callers_waiting_for_a_connection_of_a_full_pool_are_served() -> None:
    client = redis_client(SHARED_REDIS_URL, max_connections=1)
    try:
        await client.ping()
        replies = await asyncio.wait_for(
            asyncio.gather(*(client.echo(f"m{n}") for n in range(20))), 10
        )
        assert replies == [f"m{n}".encode() for n in range(20)]
        assert len(client.connection_pool._available_connections) == 1
    finally:
        await client.aclose()


async def test_a_connection_holding_a_stray_reply_is_not_lent(
    clients: tuple[Redis, Redis, str],
) -> None:
    """A connection given back with a reply nobody read (sent, never awaited) would answer the
    next command with it: the lean path leaves it to the full checkout, which reconnects it."""
    lean, _, prefix = clients
    key = f"{prefix}:k"
    await lean.set(key, "value")
    pool = lean.connection_pool
    assert isinstance(pool, LeanPool)
    connection = await pool.get_connection()  # type: ignore[no-untyped-call]
    await connection.send_command("ECHO", "stray")  # its reply is never read
    reader: Any = connection._reader
    await eventually(lambda: bool(reader._buffer), what="the stray reply sits in the buffer")
    await pool.release(connection)
    assert len(pool._available_connections) >= 1
    assert await lean.get(key) == b"value"  # not b"stray"
    async with lean.pipeline(transaction=False) as pipe:
        pipe.get(key)
        assert await pipe.execute() == [b"value"]


async def test_new_connections_do_not_read_the_package_metadata_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every connection still names the library and its version (``CLIENT SETINFO``), from
    one lookup per process, not one per connection."""
    import redis.utils

    real: str = redis.utils.get_lib_version()
    lookups = 0

    def counting() -> str:
        nonlocal lookups
        lookups += 1
        return real

    monkeypatch.setattr(redis.utils, "get_lib_version", counting)
    client = redis_client(SHARED_REDIS_URL)
    try:
        # Held at once, so the pool opens three connections.
        conns = [await client.connection_pool.get_connection() for _ in range(3)]  # type: ignore[no-untyped-call]
        try:
            for conn in conns:
                await conn.connect()
                assert conn.driver_info is not None
                assert conn.driver_info.lib_version == real
        finally:
            for conn in conns:
                await client.connection_pool.release(conn)
    finally:
        await client.aclose()
    assert lookups <= 1  # 1 when no client was made before in this process


async def test_a_command_without_a_reply_times_out_by_the_pools_one_watchdog() -> None:
    """A command sent the lean way has no timer of its own: the pool's watchdog aborts its
    connection at the socket timeout, and the command takes redis-py's path (retried as
    configured), which times out too: an error within the timeouts, never a hang."""
    mute = MuteRedis()
    await mute.start()
    pool = mute.pool(LeanPool, RedisTimeoutError, RedisConnectionError)
    client = LeanRedis.from_pool(pool)
    try:
        # Connects: one idle connection after.
        assert await client.execute_command("GET", "k") == b"OK"  # type: ignore[no-untyped-call]
        mute.mute = True
        sent, opened = mute.commands, mute.connections
        started = time.monotonic()
        with pytest.raises(RedisTimeoutError):
            await asyncio.wait_for(client.execute_command("GET", "k"), 5)  # type: ignore[no-untyped-call]
        elapsed = time.monotonic() - started
        assert pool.deadlines.expired == 1  # the lean attempt, aborted by the watchdog
        assert 0.9 <= elapsed < 4  # 0.3 s lean, then redis-py's two attempts of 0.3 s
        # The lean GET went on the idle connection; redis-py's two attempts each opened a new
        # one (whose handshake is what times out: how many commands it sends is redis-py's).
        assert mute.commands > sent + 1
        assert mute.connections == opened + 2
        mute.mute = False
        assert await client.execute_command("GET", "k") == b"OK"  # type: ignore[no-untyped-call]
        assert all(c.socket_timeout == 0.3 for c in pool._available_connections)
    finally:
        await client.aclose()
        assert mute.server is not None
        mute.server.close()


def test_the_watchdog_arms_a_timer_on_each_loop_it_is_used_on() -> None:
    """A pool used again on another event loop (its first loop closed with a timer pending)
    still times its commands out: the watchdog arms a timer on the loop it is used on."""
    deadlines = Deadlines()
    aborted: list[str] = []

    class Connection:  # what the watchdog uses of one: hashable, like redis-py's
        def __init__(self, name: str) -> None:
            self.socket_timeout: float | None = 0.05
            self._writer = SimpleNamespace(
                transport=SimpleNamespace(abort=lambda: aborted.append(name))
            )

    def connection(name: str) -> Any:
        return Connection(name)

    async def first() -> None:
        deadlines.watch(connection("first"))  # its timer is still pending when the loop closes

    async def second() -> None:
        deadlines.watch(connection("second"))
        await asyncio.sleep(0.3)

    asyncio.run(first())
    asyncio.run(second())
    assert "second" in aborted
