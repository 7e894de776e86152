"""A command on an idle pooled connection goes straight to it, past redis-py's per-command layers.

redis-py 8's asyncio ``execute_command`` wraps every command in observability recorders, a retry
closure, an event dispatch, and a pool checkout that probes the socket with a zero-timeout read
under a lock and a timeout: a large cost on top of sending the command and reading its reply, and a
run's start is dozens of commands (BENCHMARKS.md, "Costs behind the code's shortcuts"). When an idle
connected connection is at hand, :class:`LeanRedis` sends the command on it and parses the reply
with redis-py's own code (response callbacks, errors). A connection error hands the command to
redis-py's full path (reconnect, retries with backoff), which is what redis-py's retry would have
done with it; the connection was already closed by redis-py, as on its own path. A plain pipeline
(no ``MULTI``, ``WATCH`` or scripts to load) is sent the same way; everything else (transactions,
pub/sub, a pool with no idle connection) takes redis-py's path unchanged. A connection holding a
reply nobody read is never lent (the full checkout reconnects it).

Connections of the pool also send without ``asyncio.wait_for``, which wraps each write in a new
task (two more turns of the loop a command); the write's timeout is an ``asyncio.timeout``.
A command sent the lean way has no per-write or per-read timer at all: its connection's socket
timeout is checked by the pool's one watchdog (:class:`Deadlines`), which aborts the connection
of a command past it, so its read fails and the command takes redis-py's path, as after a read
timeout. An ``asyncio.timeout`` per send and per read (a timer scheduled and cancelled each) was
a visible share of a Redis gateway's CPU when many conversations start runs at once
(BENCHMARKS.md, "Costs behind the code's shortcuts").

Before any of that, a data command (or a plain pipeline of them) goes to the client's command
mux when it has one (:mod:`.command_mux`: every task's commands share round trips on one held
connection); its replies are finished here as ``parse_response`` would (:func:`finish_reply`).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, cast

from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.connection import AbstractConnection, Connection
from redis.client import EMPTY_RESPONSE, NEVER_DECODE
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.compat.redis_fast.command_mux import MUXED
from app.compat.redis_fast.wire import has_unread_data

if TYPE_CHECKING:
    from app.compat.redis_fast.command_mux import CommandMux

__all__ = [
    "Deadlines",
    "LeanPipeline",
    "LeanPool",
    "LeanRedis",
    "has_unread_data",
    "send_without_task",
]

# The types redis-py's untyped methods are cast to, built once: a ``Callable[...]`` written in
# a ``cast`` is built at every call, a few times per command.
_Step = Callable[[], Awaitable[None]]
_Check = Callable[[], bool]
_Command = Callable[..., Awaitable[Any]]
_Pipeline = Callable[..., Awaitable[list[Any]]]
#: Options of a command that its read takes, not its response callback (``parse_response``).
_READ_OPTIONS: Final = frozenset({EMPTY_RESPONSE, NEVER_DECODE, "keys"})


class _SendWithoutTask(AbstractConnection):
    async def send_packed_command(
        self, command: bytes | str | Iterable[bytes], check_health: bool = True
    ) -> None:
        if not self.is_connected or not self.socket_timeout:
            await super().send_packed_command(command, check_health)
            return
        if check_health:
            await cast(_Step, self.check_health)()  # untyped upstream
        # As redis-py's own, with its errors; only the timeout is kept without a task.
        try:
            if isinstance(command, str):
                command = command.encode()
            if isinstance(command, bytes):
                command = [command]
            writer = cast(asyncio.StreamWriter, self._writer)
            writer.writelines(command)
            async with asyncio.timeout(self.socket_timeout):
                await writer.drain()
        except TimeoutError:
            await self.disconnect(nowait=True)
            raise RedisTimeoutError("Timeout writing to socket") from None
        except OSError as e:
            await self.disconnect(nowait=True)
            err_no, errmsg = ("UNKNOWN", e.args[0]) if len(e.args) == 1 else e.args[:2]
            raise RedisConnectionError(f"Error {err_no} while writing to socket. {errmsg}.") from e
        except BaseException:
            await self.disconnect(nowait=True)
            raise


def send_without_task(pool: ConnectionPool) -> None:
    """Make the connections ``pool`` creates from now on send without a task per command."""
    base = pool.connection_class
    if issubclass(base, _SendWithoutTask):
        return
    name = f"TaskFree{base.__name__}"
    pool.connection_class = cast(type[AbstractConnection], type(name, (_SendWithoutTask, base), {}))


class Deadlines:
    """The socket timeouts of the commands in flight on lent connections, checked by one timer
    (armed at the earliest deadline, not one per command): a command past its deadline has its
    connection aborted, which fails its read."""

    def __init__(self) -> None:
        self._due: dict[AbstractConnection, float] = {}
        self._timer: asyncio.TimerHandle | None = None
        #: The loop the timer runs on: a pool used again on another loop (a test's next one)
        #: arms a timer of its own there.
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Connections aborted for a command past its deadline, for tests.
        self.expired = 0

    def watch(self, connection: AbstractConnection) -> float | None:
        """Take over ``connection``'s socket timeout until :meth:`done` (which restores it);
        returns it (None: the connection has none, nothing is watched)."""
        timeout = connection.socket_timeout
        if not timeout:
            return None
        connection.socket_timeout = None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        self._due[connection] = deadline
        if self._timer is None or self._loop is not loop:
            self._loop = loop
            self._timer = loop.call_at(deadline, self._check)
        return timeout

    def done(self, connection: AbstractConnection, timeout: float | None) -> None:
        if timeout is not None:
            self._due.pop(connection, None)
            connection.socket_timeout = timeout

    def _check(self) -> None:
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        for connection, deadline in list(self._due.items()):
            if deadline <= now:
                del self._due[connection]
                self.expired += 1
                transport = getattr(getattr(connection, "_writer", None), "transport", None)
                if transport is not None:
                    transport.abort()  # the read in flight ends: redis-py drops the connection
        if self._due:
            self._timer = loop.call_at(min(self._due.values()), self._check)


class LeanPool(BlockingConnectionPool):
    """A blocking pool that also lends an idle connection without awaiting anything."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deadlines = Deadlines()

    def take_idle(self) -> AbstractConnection | None:
        """The most recently used idle connection, if it is connected; else None (the caller
        takes the full path, which connects one)."""
        available = self._available_connections
        if not available or not available[-1].is_connected or has_unread_data(available[-1]):
            return None
        connection = available.pop()
        self._in_use_connections.add(connection)
        return connection

    def give_back(self, connection: AbstractConnection) -> bool:
        """Return a connection lent by :meth:`take_idle` at once; False when it must go through
        ``release`` instead (it is to reconnect, or callers may be waiting for a connection)."""
        reconnect = cast(_Check, connection.should_reconnect)()  # untyped upstream
        if reconnect or len(self._in_use_connections) >= self.max_connections:
            return False
        self._in_use_connections.discard(connection)
        self._available_connections.append(connection)
        return True


class LeanRedis(Redis):
    """``Redis`` whose commands take an idle connection of its :class:`LeanPool` directly, or
    share round trips through its :class:`.command_mux.CommandMux` when it has one."""

    #: Set by ``redis_client``: the data commands of every task share its round trips.
    mux: CommandMux | None = None

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        pool = self.connection_pool
        if not isinstance(pool, LeanPool) or self.connection is not None:
            return await self._full_path(*args, **options)
        mux = self.mux
        if mux is not None and args[0] in MUXED:
            sent = mux.submit((args,))
            if sent is not None:
                try:
                    (reply,) = await _mux_replies(sent)
                except (RedisConnectionError, RedisTimeoutError, ConnectionResetError):
                    return await self._full_path(*args, **options)  # as after a lost read
                return await finish_reply(self.response_callbacks, args[0], reply, options)
        connection = pool.take_idle()
        if connection is None:
            return await self._full_path(*args, **options)
        timeout = pool.deadlines.watch(connection)
        try:
            await connection.send_packed_command(connection.pack_command(*args))
            # redis-py's parse_response is typed for Connection; any pooled connection parses.
            response = await self.parse_response(cast(Connection, connection), args[0], **options)
        except (RedisConnectionError, RedisTimeoutError, ConnectionResetError):
            await _give_back(pool, connection, timeout)  # closed by redis-py: reconnected later
            return await self._full_path(*args, **options)
        except BaseException:
            await _give_back(pool, connection, timeout)
            raise
        await _give_back(pool, connection, timeout)
        return response

    async def _full_path(self, *args: Any, **options: Any) -> Any:
        full = cast(_Command, super().execute_command)  # untyped upstream
        return await full(*args, **options)

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Pipeline:
        pipe = LeanPipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)
        pipe.mux = self.mux
        return pipe

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        if self.mux is not None:
            await self.mux.aclose()  # its connection back to the pool before the pool closes
        await super().aclose(close_connection_pool)


async def _mux_replies(sent: Awaitable[list[Any]]) -> list[Any]:
    """The mux's raw replies; one that is a connection error (``LOADING``…) raised, as redis-py's
    read raises it (its caller then takes redis-py's path, which retries)."""
    replies = await sent
    for reply in replies:
        if isinstance(reply, RedisConnectionError):
            raise reply
    return replies


async def finish_reply(
    callbacks: Mapping[Any, Callable[..., Any]], name: Any, reply: Any, options: dict[str, Any]
) -> Any:
    """Redis's ``reply`` to command ``name`` as redis-py's ``parse_response`` answers it after
    its read: an error raised (or ``EMPTY_RESPONSE``), else through the command's callback."""
    if isinstance(reply, ResponseError):
        if EMPTY_RESPONSE in options:
            return options[EMPTY_RESPONSE]
        raise reply
    callback = callbacks.get(name)
    if callback is None:
        return reply
    options = {k: v for k, v in options.items() if k not in _READ_OPTIONS}
    value = callback(reply, **options)
    return await value if inspect.isawaitable(value) else value


class LeanPipeline(Pipeline):
    """A pipeline without ``MULTI``, ``WATCH`` or scripts to load runs on an idle connection
    directly too (redis-py's own pipeline code sends and parses it)."""

    mux: CommandMux | None = None

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        pool = self.connection_pool
        stack = self.command_stack
        plain = not (self.is_transaction or self.explicit_transaction or self.watching)
        if not stack or not plain or self.scripts or self.connection is not None:
            return await super().execute(raise_on_error)
        mux = self.mux
        if mux is not None and all(args[0] in MUXED for args, _ in stack):
            sent = mux.submit([args for args, _ in stack])
            if sent is not None:
                try:
                    replies = await _mux_replies(sent)
                except (RedisConnectionError, RedisTimeoutError, ConnectionResetError):
                    return await super().execute(raise_on_error)  # the stack is still queued
                try:
                    return await self._answers(stack, replies, raise_on_error)
                finally:
                    await cast(_Step, self.reset)()  # untyped upstream
        if not isinstance(pool, LeanPool) or (connection := pool.take_idle()) is None:
            return await super().execute(raise_on_error)
        reset = cast(_Step, self.reset)  # untyped upstream
        timeout = pool.deadlines.watch(connection)
        try:
            run = cast(_Pipeline, self._execute_pipeline)  # untyped upstream
            response = await run(connection, stack, raise_on_error)
        except (RedisConnectionError, RedisTimeoutError, ConnectionResetError):
            await _give_back(pool, connection, timeout)  # closed by redis-py: reconnected later
            return await super().execute(raise_on_error)  # the stack is still queued
        except BaseException:
            await _give_back(pool, connection, timeout)
            await reset()
            raise
        await _give_back(pool, connection, timeout)
        await reset()
        return response

    async def _answers(
        self, stack: list[Any], replies: list[Any], raise_on_error: bool
    ) -> list[Any]:
        """As redis-py's ``_execute_pipeline`` answers after its reads: an error in its place,
        the first one raised (annotated) when ``raise_on_error``."""
        out: list[Any] = []
        for (args, options), reply in zip(stack, replies, strict=True):
            try:
                out.append(await finish_reply(self.response_callbacks, args[0], reply, options))
            except ResponseError as exc:
                out.append(exc)
        if raise_on_error:
            raise_first = cast(Callable[[Any, list[Any]], None], self.raise_first_error)
            raise_first(stack, out)
        return out


async def _give_back(pool: LeanPool, connection: AbstractConnection, watched: float | None) -> None:
    pool.deadlines.done(connection, watched)  # its own timeout again, before anyone uses it
    if not pool.give_back(connection):
        await pool.release(connection)
