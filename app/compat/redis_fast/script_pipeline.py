"""Calls of one Lua script by every run of an instance share round trips: one pipeline per flush.

Each call stays its own ``EVALSHA`` (its own keys, arguments and reply or error: a ``FENCED``
reply fails that call alone); only the round trip is shared. One pipeline is in flight at a
time and what is submitted meanwhile goes into the next one, so a lone call is sent at once
(no added wait) while under load the round trips stay about one per Redis latency instead of
one per call (at 100 answers x 50 deltas/s: ~5,000 appends/s in a few hundred pipelines).

The calls go over one connection the pipeline holds, taken from the client's pool (redis-py
connects it: TLS, AUTH, HELLO, SELECT) and handed back by :meth:`ScriptPipeline.aclose`. While
it works, the pipeline drives that connection's socket itself (:mod:`.wire`): a pipeline is
written from a loop callback, and each chunk read is parsed at once by a hiredis reader whose
replies settle the calls, so a round trip costs no task, no per-read stream layers and no
per-round-trip timer (one watchdog checks the deadline of the round trip in flight), which
took a clear share off the append path's CPU (BENCHMARKS.md, "Costs behind the code's shortcuts").

Anything unusual takes redis-py's path (:meth:`ScriptPipeline._slowly`): the first connect, a
connection lost or timed out with a pipeline in flight (sent again on a new connection under
the connection's own ``Retry``: the append script answers a batch sent twice without writing
it twice), and a Redis without the script (loaded, then the calls are sent again).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.append_calls import AppendCall, Args, Then, fail
from app.compat.redis_fast.append_packing import bulk, remember
from app.compat.redis_fast.packing import pack_plain_commands, plain_utf8
from app.compat.redis_fast.wire import (
    RoundTripWatch,
    Wire,
    attach,
    lost_error,
    take_replies,
)
from app.tasks import stop_task

__all__ = ["MAX_CALLS", "ScriptPipeline"]

#: Calls sent in one pipeline at most; the rest go in the next (bounds one reply's size).
MAX_CALLS = 256


#: A call's arguments as RESP bulk strings (joined: one ``bulk`` per argument).
PackArgs = Callable[[Args], list[bytes]]
#: Packed call heads kept at most (past it the cache starts over).
HEADS_LIMIT = 4096


class ScriptPipeline:
    def __init__(
        self,
        redis: Redis,
        script: AsyncScript,
        max_calls: int = MAX_CALLS,
        pack_args: PackArgs | None = None,
        *,
        fast: bool = True,
    ) -> None:
        self._redis = redis
        #: Drive the held connection's socket (:mod:`.wire`); False: redis-py's path only.
        self._fast = fast
        self._script = script
        self._max = max(1, max_calls)
        #: Packs a call's arguments (the script's own layout) faster than one by one; used
        #: where the connection's encoder is strict UTF-8, as hiredis's packing is.
        self._pack_args = pack_args
        #: ``EVALSHA sha numkeys keys...`` packed, per keys (the same for every append of a
        #: conversation; the script, and so its sha, is the pipeline's own).
        self._heads: dict[tuple[str | bytes, ...], bytes] = {}
        self._pending: list[AppendCall] = []
        self._flush_soon: asyncio.Handle | None = None
        #: The pipeline on the wire (its calls in order) and the replies read of it so far.
        self._batch: list[AppendCall] | None = None
        self._replies: list[Any] = []
        self._wire: Wire | None = None
        #: redis-py's path at work (connect, resend after a loss, load the script): the fast
        #: path waits for it.
        self._slow: asyncio.Task[None] | None = None
        self._conn: AbstractConnection | None = None
        #: The held connection's socket timeout, applied once per round trip (see _connection).
        self._timeout: float | None = None
        self._watch = RoundTripWatch(lambda: self._batch is not None, self._timed_out)
        #: Round trips made (pipelines sent), for tests and benchmarks.
        self.round_trips = 0

    def call(
        self,
        keys: Sequence[str | bytes],
        args: Args | Callable[[], Args],
        again: Callable[[Args], Args] | None = None,
    ) -> asyncio.Future[Any]:
        """The script's reply to ``keys``/``args`` (str, bytes or int only), to await; its
        error (``ResponseError``, a connection error of the whole pipeline) is raised to this
        caller only, and cancelling it withdraws a call not sent yet. ``args`` given as a
        function is called when the call is packed, the loop turn after this one at the
        earliest: what it reads can grow until then. ``again`` makes the arguments of any
        send through redis-py's path (a resend after a loss, whose first send may have run;
        the first connect, which redis-py may retry) from ``args``. A future, not a
        coroutine: one frame less for every append of every run to pass through, twice."""
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._submit(AppendCall(keys, args, done, again))
        return done

    def call_then(
        self,
        keys: Sequence[str | bytes],
        args: Args | Callable[[], Args],
        again: Callable[[Args], Args] | None,
        then: Then,
    ) -> None:
        """:meth:`call` for a caller that does not await: ``then(reply or error)`` is called
        once, from the reply's read (no future, no loop callback in between; the pipeline
        closed: ``CancelledError()``). At one call per delta of every slow answer, those were
        a future, its done-callback and a loop turn per delta."""
        self._submit(AppendCall(keys, args, None, again, then))

    def _submit(self, call: AppendCall) -> None:
        self._pending.append(call)
        if self._batch is None and self._slow is None and self._flush_soon is None:
            # After this loop turn: the calls made in it go together.
            self._flush_soon = asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_soon = None
        if self._batch is not None or self._slow is not None:
            return  # sent when the round trip in flight (or redis-py's path) ends
        batch = self._next_batch()
        if not batch:
            return
        wire = self._wire
        if wire is None or wire.transport.is_closing():
            self._wire = None
            self._slow = asyncio.get_running_loop().create_task(
                self._slowly(batch, None), name="redis-script-pipeline"
            )
            return
        loop = asyncio.get_running_loop()
        try:
            data = self._packed(batch, again=False)
        except Exception as exc:  # an argument hiredis cannot pack: these calls fail, not hang
            fail(batch, exc)
            if self._pending and self._flush_soon is None:
                self._flush_soon = loop.call_soon(self._flush)
            return
        self._batch, self._replies = batch, []
        self.round_trips += 1
        refused = wire.send(data)
        if refused is not None:
            self._abandon(refused)
            return
        self._watch.start(self._timeout)

    def _next_batch(self) -> list[AppendCall]:
        while self._pending:
            batch = self._pending[: self._max]
            del self._pending[: self._max]
            # A caller cancelled before its call was sent: nothing of it is written.
            live = [c for c in batch if c.live()]
            if live:
                return live
        return []

    def _packed(self, calls: list[AppendCall], again: bool) -> list[bytes]:
        sha = self._script.sha
        conn = self._conn
        assert conn is not None
        pack_args = self._pack_args
        if pack_args is not None and plain_utf8(conn):
            out: list[bytes] = []
            for c in calls:
                args = c.packed_args(again)
                out.append(b"*%d\r\n" % (3 + len(c.keys) + len(args)))
                keys = tuple(c.keys)
                head = self._heads.get(keys) or remember(
                    self._heads,
                    keys,
                    b"".join(map(bulk, ("EVALSHA", sha, len(keys), *keys))),
                    HEADS_LIMIT,
                )
                out.append(head)
                out += pack_args(args)
            return [b"".join(out)]
        commands = [("EVALSHA", sha, len(c.keys), *c.keys, *c.packed_args(again)) for c in calls]
        return pack_plain_commands(conn, commands)

    def _replies_in(self, wire: Wire) -> None:
        """``wire`` read something: settle the pipeline in flight once all its replies are in."""
        if wire is not self._wire:
            return
        batch, replies = self._batch, self._replies
        complete = take_replies(wire, replies, None if batch is None else len(batch))
        if isinstance(complete, Exception):
            self._abandon(complete)
            return
        if not complete or batch is None:
            return
        self._batch, self._replies = None, []
        self._settle(batch, replies)
        if self._pending and self._slow is None:
            self._flush()

    def _settle(self, calls: list[AppendCall], replies: list[Any]) -> None:
        missing: list[AppendCall] = []
        for c, reply in zip(calls, replies, strict=True):
            if isinstance(reply, NoScriptError):  # Redis restarted or flushed its scripts
                missing.append(c)
            else:
                c.answer(reply)
        if missing:
            self._slow = asyncio.get_running_loop().create_task(
                self._slowly(missing, None, load_script=True), name="redis-script-pipeline"
            )

    def _timed_out(self) -> None:
        size = len(self._batch or ())
        self._abandon(RedisTimeoutError(f"Timeout of a pipeline of {size}"))

    def _lost(self, wire: Wire, exc: Exception | None) -> None:
        if wire is self._wire:
            self._abandon(lost_error(exc))

    def _abandon(self, error: Exception) -> None:
        """The wire failed: the pipeline in flight (which may or may not have run) goes to
        redis-py's path, which reconnects and sends it again."""
        wire, self._wire = self._wire, None
        batch, self._batch = self._batch, None
        if wire is not None:
            wire.transport.abort()
        if batch is not None:
            self._slow = asyncio.get_running_loop().create_task(
                self._slowly(batch, error), name="redis-script-pipeline"
            )
        elif self._pending and self._slow is None:
            self._flush()

    async def _slowly(
        self, calls: list[AppendCall], failed: Exception | None, *, load_script: bool = False
    ) -> None:
        """Send ``calls`` through redis-py's connection (``failed``: their first attempt's
        error; ``load_script``: load it first), then hand the connection to the fast path and
        send what waited meanwhile."""
        self._detach()
        try:
            await self._send(calls, failed, load_script)
        finally:
            self._slow = None
        self._attach()
        if self._pending:
            self._flush()

    async def _send(
        self, calls: list[AppendCall], failed: Exception | None, load_script: bool
    ) -> None:
        try:
            if load_script:
                await self._redis.script_load(self._script.script)
            replies = await self._execute(calls, failed)
            missing = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
            if missing:  # Redis restarted or flushed its scripts: none of these ran
                await self._redis.script_load(self._script.script)
                again = await self._execute([calls[i] for i in missing], None)
                for i, reply in zip(missing, again, strict=True):
                    replies[i] = reply
        except asyncio.CancelledError:
            for c in calls:
                c.withdraw()
            raise
        except Exception as exc:
            fail(calls, exc)
            return
        for c, reply in zip(calls, replies, strict=True):
            c.answer(reply)

    async def _execute(self, calls: list[AppendCall], failed: Exception | None) -> list[Any]:
        conn = await self._connection()

        async def attempt() -> list[Any]:
            nonlocal failed
            if failed is not None:  # counted as the first attempt, as if it failed here
                error, failed = failed, None
                raise error
            self.round_trips += 1
            replies: list[Any] = []
            try:
                async with asyncio.timeout(self._timeout):
                    await conn.send_packed_command(self._packed(calls, again=True))
                    for _ in calls:
                        try:
                            replies.append(await conn.read_response())
                        except ResponseError as exc:  # this call's error (FENCED, NOSCRIPT)
                            replies.append(exc)
            except TimeoutError:  # the cancelled send or read dropped the connection
                raise RedisTimeoutError(f"Timeout of a pipeline of {len(calls)}") from None
            return replies

        async def dropped(_error: Exception) -> None:
            await conn.disconnect(nowait=True)  # the next attempt reconnects

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
            # and per reply read. Restored when handed back.
            self._timeout, conn.socket_timeout = conn.socket_timeout, None
        elif conn.is_connected:
            try:
                # can_read (redis-py 8) is can_read_destructive renamed
                check = getattr(conn, "can_read", None) or conn.can_read_destructive
                stale = bool(await check())
            except (RedisConnectionError, OSError):
                stale = True
            if stale:
                await conn.disconnect(nowait=True)
        return conn

    def _detach(self) -> None:
        """Give the held connection's socket back to redis-py's protocol (nothing in flight)."""
        wire, self._wire = self._wire, None
        if wire is not None:
            wire.detach()

    def _attach(self) -> None:
        """Drive the held connection's socket directly (if it is connected and clean)."""
        if self._conn is not None and self._fast:
            self._wire = attach(self._conn, self._replies_in, self._lost)

    async def aclose(self) -> None:
        """Stop the pipeline in flight (its callers' calls are cancelled) and hand the held
        connection back to the pool (a later call takes one again)."""
        if self._flush_soon is not None:
            self._flush_soon.cancel()
            self._flush_soon = None
        self._watch.cancel()
        await stop_task(self._slow)
        wire, self._wire = self._wire, None
        batch, self._batch = self._batch, None
        for c in [*(batch or ()), *self._pending]:
            c.withdraw()
        self._pending.clear()
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if wire is not None:
            if batch is None and not wire.reader.has_data() and not wire.transport.is_closing():
                wire.detach()  # redis-py reads it again
            else:  # replies nobody will read: not to be handed to the pool's next user
                await conn.disconnect(nowait=True)
        conn.socket_timeout = self._timeout
        await self._redis.connection_pool.release(conn)
