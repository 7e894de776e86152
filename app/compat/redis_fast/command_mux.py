"""Plain commands of every task share round trips: one held connection, one write per loop turn.

A run with a subscriber makes over a dozen round trips of its own (limits, meta, claim, saves,
release, the subscriber's reads), and each one on a connection of its own cost the gateway the
same CPU however many others were in flight (a write, a wake-up, a read, redis-py's reply path,
the pool). Here the commands that tasks submit in one loop turn (and while a round trip is in
flight) go out in one write on one connection, and each chunk read is parsed at once by a
hiredis reader whose replies settle the callers' futures in order, as ``ScriptPipeline`` does
for the append script. This cuts the CPU of a call, and of a run start under
load (BENCHMARKS.md, "Costs behind the code's shortcuts").

Only commands named in :data:`MUXED` come here, each with its caller's own reply or error: data
commands that neither block (no ``XREAD``, ``BLPOP``) nor change the connection's state (no
``SELECT``, ``MULTI``, ``SUBSCRIBE``). A plain pipeline is one submission: its commands go out
together, in order. The caller applies redis-py's response callbacks (``LeanRedis``).

When the held connection is lost, times out (its socket timeout, one watchdog per round trip)
or sends what is not RESP, every submission in flight and waiting fails with a connection error
and its caller sends it again through redis-py's path, as after any connection error there: a
command that ran before its reply was lost may run twice, as under redis-py's own retry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, cast

import hiredis
from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.compat.redis_fast.packing import plain_utf8
from app.compat.redis_fast.wire import (
    RoundTripWatch,
    Wire,
    attach,
    lost_error,
    take_replies,
)
from app.tasks import stop_task

__all__ = ["MAX_COMMANDS", "MUXED", "CommandMux"]

#: The commands that may share the held connection: the data commands the gateway sends.
MUXED: Final = frozenset(
    {
        "DEL",
        "EVALSHA",
        "EXISTS",
        "EXPIRE",
        "GET",
        "HDEL",
        "HEXISTS",
        "HGET",
        "HGETALL",
        "HLEN",
        "HMGET",
        "HSET",
        "INCR",
        "INCRBY",
        "LLEN",
        "LRANGE",
        "PEXPIRE",
        "PUBLISH",
        "SET",
        "TIME",
        "XINFO",
        "XINFO STREAM",
        "XLEN",
        "XRANGE",
        "XREVRANGE",
        "ZADD",
        "ZCARD",
        "ZRANGE",
        "ZRANGEBYSCORE",
        "ZREM",
        "ZREMRANGEBYSCORE",
        "ZSCORE",
    }
)

#: Commands sent in one round trip at most; the rest go in the next (bounds one reply's size).
MAX_COMMANDS = 512

Command = tuple[Any, ...]


class _Submission:
    __slots__ = ("commands", "done")

    def __init__(self, commands: Sequence[Command], done: asyncio.Future[list[Any]]) -> None:
        self.commands = commands
        self.done = done


#: hiredis's stub types the argument as a 1-tuple and leaves the result untyped.
_pack_command = cast(Callable[[Command], bytes], hiredis.pack_command)
#: Argument types hiredis packs as the connection's encoder does (strict UTF-8: ``_plain``).
_PLAIN: Final = frozenset({str, bytes, int})


def _packed(conn: AbstractConnection, batch: list[_Submission]) -> list[bytes]:
    """The batch's commands as RESP: by hiredis at once when every argument is a str, bytes or int
    and the name is one word (a command's arguments packed one by one through the encoder were a
    large part of what a call costs here), else by the connection (floats, ``XINFO STREAM``)."""
    pack = cast(Callable[..., list[bytes]], conn.pack_command)  # untyped upstream
    out: list[bytes] = []
    for submission in batch:
        for command in submission.commands:
            head = command[0]
            if type(head) is str and " " not in head and _PLAIN.issuperset(map(type, command)):
                out.append(_pack_command(command))
            else:
                out += pack(*command)
    return out


class CommandMux:
    def __init__(self, redis: Redis, max_commands: int = MAX_COMMANDS) -> None:
        self._redis = redis
        self._max = max(1, max_commands)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: list[_Submission] = []
        self._flush_soon: asyncio.Handle | None = None
        #: The submissions on the wire, the number of replies they take, and those read.
        self._batch: list[_Submission] | None = None
        self._expected = 0
        self._replies: list[Any] = []
        self._wire: Wire | None = None
        self._conn: AbstractConnection | None = None
        self._attaching: asyncio.Task[None] | None = None
        self._timeout: float | None = None
        self._watch = RoundTripWatch(lambda: self._batch is not None, self._timed_out)
        self._closed = False
        #: Round trips made (writes sent), for tests and benchmarks.
        self.round_trips = 0

    @property
    def held(self) -> AbstractConnection | None:
        """The pool's connection this mux holds (in use for as long as it is attached)."""
        return self._conn

    def submit(self, commands: Sequence[Command]) -> asyncio.Future[list[Any]] | None:
        """The raw replies of ``commands`` (sent together, in order), to await: each a reply
        or the error Redis answered (an exception object, not raised); a connection error of
        the whole round trip is raised. None when the mux cannot take them now (no connection
        held yet: one is being taken): the caller sends them its own way."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._move_to(loop)
        wire = self._wire
        if wire is not None and wire.transport.is_closing():  # lost, not told yet
            self._abandon(RedisConnectionError("The command mux's connection is closed"))
            wire = None
        if wire is None:
            if self._attaching is None and not self._closed:
                self._attaching = loop.create_task(self._attach(), name="redis-command-mux")
            return None
        done: asyncio.Future[list[Any]] = loop.create_future()
        self._pending.append(_Submission(commands, done))
        if self._batch is None and self._flush_soon is None:
            # After this loop turn: what is submitted in it goes together.
            self._flush_soon = loop.call_soon(self._flush)
        return done

    def _move_to(self, loop: asyncio.AbstractEventLoop) -> None:
        """First use, or use on another loop (a test's next one): what was held belongs to the
        old loop and is let go (its connection is the pool's to drop)."""
        self._loop = loop
        self._wire = self._conn = self._attaching = None
        self._batch, self._pending = None, []
        self._flush_soon = None
        self._watch = RoundTripWatch(lambda: self._batch is not None, self._timed_out)

    def _flush(self) -> None:
        self._flush_soon = None
        wire = self._wire
        if self._batch is not None or not self._pending:
            return
        if wire is None or wire.transport.is_closing():
            self._abandon(RedisConnectionError("The command mux's connection is closed"))
            return
        conn = self._conn
        assert conn is not None
        batch: list[_Submission] = []
        count = taken = 0
        pending = self._pending
        for submission in pending:
            size = len(submission.commands)
            if batch and count + size > self._max:
                break
            taken += 1
            if not submission.done.done():  # else its caller gave up before it was sent
                batch.append(submission)
                count += size
        del pending[:taken]
        if not batch:
            return
        try:
            data = [b"".join(_packed(conn, batch))]
        except Exception as exc:  # an argument that cannot be packed: these fail, not hang
            for submission in batch:
                if not submission.done.done():
                    submission.done.set_exception(exc)
            if self._pending and self._flush_soon is None:
                self._flush_soon = asyncio.get_running_loop().call_soon(self._flush)
            return
        self._batch, self._expected, self._replies = batch, count, []
        self.round_trips += 1
        refused = wire.send(data)
        if refused is not None:
            self._abandon(refused)
            return
        self._watch.start(self._timeout)

    def _replies_in(self, wire: Wire) -> None:
        if wire is not self._wire:
            return
        batch, replies = self._batch, self._replies
        complete = take_replies(wire, replies, None if batch is None else self._expected)
        if isinstance(complete, Exception):
            self._abandon(complete)
            return
        if not complete or batch is None:
            return
        self._batch, self._replies = None, []
        start = 0
        for submission in batch:
            end = start + len(submission.commands)
            if not submission.done.done():
                submission.done.set_result(replies[start:end])
            start = end
        if self._pending and self._flush_soon is None:
            self._flush()

    def _timed_out(self) -> None:
        self._abandon(RedisTimeoutError(f"Timeout of {self._expected} commands"))

    def _lost(self, wire: Wire, exc: Exception | None) -> None:
        if wire is self._wire:
            self._abandon(lost_error(exc))

    def _abandon(self, error: Exception) -> None:
        """The wire failed: every submission in flight or waiting fails with ``error`` (its
        caller sends it again its own way); the connection goes back to the pool, and the next
        submission takes one again."""
        wire, self._wire = self._wire, None
        conn, self._conn = self._conn, None
        batch, self._batch = self._batch, None
        pending, self._pending = self._pending, []
        if self._flush_soon is not None:
            self._flush_soon.cancel()
            self._flush_soon = None
        if wire is not None:
            wire.transport.abort()  # redis-py's protocol hears of it: the connection is closed
        for submission in [*(batch or ()), *pending]:
            if not submission.done.done():
                submission.done.set_exception(error)
                submission.done.exception()  # retrieved: a caller may have given up
        if conn is not None and self._loop is not None:
            self._loop.create_task(self._drop(conn), name="redis-command-mux-drop")

    async def _drop(self, conn: AbstractConnection) -> None:
        """Hand an abandoned connection back closed (the pool reconnects it when lent)."""
        await conn.disconnect(nowait=True)
        await self._release(conn)

    async def _release(self, conn: AbstractConnection) -> None:
        conn.socket_timeout = self._timeout
        await self._redis.connection_pool.release(conn)

    async def _attach(self) -> None:
        """Take a connection of the pool and drive its socket (if it is plain RESP2 bytes,
        as the gateway's client is); else nothing is held and callers keep their own way."""
        try:
            get = cast(
                Callable[[], Awaitable[AbstractConnection]],
                self._redis.connection_pool.get_connection,  # untyped in redis-py
            )
            conn = await get()
        except Exception:
            self._attaching = None
            return
        wire = None
        if not self._closed and self._plain(conn):
            wire = attach(conn, self._replies_in, self._lost)
        self._attaching = None
        if wire is None:
            await self._redis.connection_pool.release(conn)
            return
        self._timeout = conn.socket_timeout
        self._conn, self._wire = conn, wire

    @staticmethod
    def _plain(conn: AbstractConnection) -> bool:
        """RESP2 replies as bytes, str written as strict UTF-8: what the callers finish and
        :func:`_packed` packs (the gateway's client)."""
        return (
            not conn.encoder.decode_responses
            and plain_utf8(conn)
            and str(getattr(conn, "protocol", 2)) == "2"
            and not getattr(conn, "_resp2_fallback", False)
        )

    async def aclose(self) -> None:
        """Fail what waits or is in flight (its callers take their own way) and hand the held
        connection back to the pool; from now on every caller takes its own way."""
        self._closed = True
        if self._loop is not asyncio.get_running_loop():
            return  # nothing held on this loop
        self._watch.cancel()
        await stop_task(self._attaching)
        self._attaching = None
        wire, conn = self._wire, self._conn
        if wire is not None and conn is not None:
            if self._batch is None and not wire.reader.has_data():  # clean: back as it is
                wire.detach()  # redis-py reads it again
                self._wire = self._conn = None
                await self._release(conn)
                conn = None
            else:
                self._conn = None  # dropped here (below), before the pool closes
        self._abandon(RedisConnectionError("The client is closing"))  # fails what waits
        if conn is not None:
            await self._drop(conn)
