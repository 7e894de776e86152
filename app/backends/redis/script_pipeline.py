"""Calls of one Lua script by every run of an instance share round trips: one pipeline per flush.

Each call stays its own ``EVALSHA`` (its own keys, arguments and reply or error: a ``FENCED``
reply fails that call alone); only the round trip is shared. One pipeline is in flight at a
time and what is submitted meanwhile goes into the next one, so a lone call is sent at once
(no added wait) while under load the round trips stay about one per Redis latency instead of
one per call (at 100 answers x 50 deltas/s: ~5,000 appends/s in a few hundred pipelines).

The calls go over one connection the pipeline holds (taken from the client's pool at first use,
handed back by :meth:`ScriptPipeline.aclose`), written and read directly: a command through the
client costs ~60 µs of CPU more (pool get and release, observability hooks), which was ~10 % of
a streaming gateway's CPU. Errors and retries stay redis-py's: the connection's own ``Retry``
(the pool's) retries a connection failure after dropping the connection, which reconnects.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.backends.redis.packing import pack_plain_commands
from app.backends.redis.tasks import stop_task

__all__ = ["MAX_CALLS", "ScriptPipeline"]

#: Calls sent in one pipeline at most; the rest go in the next (bounds one reply's size).
MAX_CALLS = 256


@dataclass(slots=True)
class _Call:
    keys: Sequence[str | bytes]
    args: Sequence[str | bytes | int]
    done: asyncio.Future[Any]


class ScriptPipeline:
    def __init__(self, redis: Redis, script: AsyncScript, max_calls: int = MAX_CALLS) -> None:
        self._redis = redis
        self._script = script
        self._max = max(1, max_calls)
        self._pending: list[_Call] = []
        self._task: asyncio.Task[None] | None = None
        self._conn: AbstractConnection | None = None
        #: The held connection's socket timeout, applied once per round trip (see _connection).
        self._timeout: float | None = None
        #: Round trips made (pipelines sent), for tests and benchmarks.
        self.round_trips = 0

    async def call(self, keys: Sequence[str | bytes], args: Sequence[str | bytes | int]) -> Any:
        """The script's reply to ``keys``/``args`` (str, bytes or int only); its error
        (``ResponseError``, a connection error of the whole pipeline) is raised to this
        caller only."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()
        self._pending.append(_Call(keys, args, done))
        if self._task is None:
            self._task = loop.create_task(self._run(), name="redis-script-pipeline")
        return await done

    async def _run(self) -> None:
        try:
            while self._pending:
                batch = self._pending[: self._max]
                del self._pending[: self._max]
                # A caller cancelled before its call was sent: nothing of it is written.
                live = [c for c in batch if not c.done.done()]
                if live:
                    await self._send(live)
        finally:
            self._task = None
            if self._pending:  # cancelled mid-flight (shutdown): later callers fail, not hang
                for c in self._pending:
                    c.done.cancel()
                self._pending.clear()

    async def _send(self, calls: list[_Call]) -> None:
        try:
            replies = await self._execute(calls)
            missing = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
            if missing:  # Redis restarted or flushed its scripts: none of these ran
                await self._redis.script_load(self._script.script)
                again = await self._execute([calls[i] for i in missing])
                for i, reply in zip(missing, again, strict=True):
                    replies[i] = reply
        except asyncio.CancelledError:
            for c in calls:
                c.done.cancel()
            raise
        except Exception as exc:
            for c in calls:
                if not c.done.done():
                    c.done.set_exception(exc)
            return
        for c, reply in zip(calls, replies, strict=True):
            if c.done.done():
                continue
            if isinstance(reply, Exception):
                c.done.set_exception(reply)
            else:
                c.done.set_result(reply)

    async def _execute(self, calls: list[_Call]) -> list[Any]:
        self.round_trips += 1
        sha = self._script.sha
        commands = [("EVALSHA", sha, len(c.keys), *c.keys, *c.args) for c in calls]
        conn = await self._connection()

        async def attempt() -> list[Any]:
            replies: list[Any] = []
            try:
                async with asyncio.timeout(self._timeout):
                    await conn.send_packed_command(pack_plain_commands(conn, commands))
                    for _ in commands:
                        try:
                            replies.append(await conn.read_response())
                        except ResponseError as exc:  # this call's error (FENCED, NOSCRIPT)
                            replies.append(exc)
            except TimeoutError:  # the cancelled send or read dropped the connection
                raise RedisTimeoutError(f"Timeout of a pipeline of {len(commands)}") from None
            return replies

        async def dropped(_error: Exception) -> None:
            await conn.disconnect()  # the next attempt reconnects

        return await conn.retry.call_with_retry(attempt, dropped)

    async def _connection(self) -> AbstractConnection:
        """The held connection, checked as the pool checks one it hands out: closed by the
        server meanwhile, or with unread data, it is dropped (the send reconnects)."""
        conn = self._conn
        if conn is None:
            get = cast(
                Callable[[], Awaitable[AbstractConnection]],
                self._redis.connection_pool.get_connection,  # untyped in redis-py
            )
            conn = self._conn = await get()
            # One timeout per round trip instead of redis-py's per send (a task in wait_for)
            # and per reply read: ~30 µs less per round trip. Restored when handed back.
            self._timeout, conn.socket_timeout = conn.socket_timeout, None
        elif conn.is_connected:
            try:
                # can_read (redis-py 8) is can_read_destructive renamed
                check = getattr(conn, "can_read", None) or conn.can_read_destructive
                stale = bool(await check())
            except (RedisConnectionError, OSError):
                stale = True
            if stale:
                await conn.disconnect()
        return conn

    async def aclose(self) -> None:
        """Stop the pipeline in flight (its callers' calls are cancelled) and hand the held
        connection back to the pool (a later call takes one again)."""
        await stop_task(self._task)
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.socket_timeout = self._timeout
            await self._redis.connection_pool.release(conn)
