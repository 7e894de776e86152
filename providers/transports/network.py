"""httpcore's network backend on the running loop's own streams, timed by one loop timer.

httpcore's default backend on asyncio is anyio's: every read enters ``fail_after`` (a cancel scope:
a context manager, a timer, task bookkeeping) and ``map_exceptions``, all in Python. An upstream
streaming one delta per TCP read does one read per delta, and in a capacity run those reads were a
large share of the gateway's CPU (BENCHMARKS.md, "Costs behind the code's shortcuts").
:class:`AsyncioBackend` reads ``asyncio`` streams and bounds a wait that suspends with a plain
``call_later`` that cancels the waiting task (a read: one timer per stream that each read only
moves, :class:`ReadWatchdog`); timeouts, errors and TLS map as httpcore's own backends map them
(``ReadTimeout``, ``ReadError``, ``ConnectError``…).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Awaitable, Iterable
from typing import Any, TypeVar

import httpcore
from httpcore import AsyncNetworkBackend, AsyncNetworkStream

from providers.compat.asyncio_fast import buffered

__all__ = ["AsyncioBackend", "AsyncioStream", "ReadWatchdog", "wait_within"]

T = TypeVar("T")
SocketOption = (
    tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]
)


async def wait_within(
    waiting: Awaitable[T], seconds: float | None, timed_out: type[Exception]
) -> T:
    """``await waiting``, raising ``timed_out`` when it takes longer than ``seconds``.

    One ``call_later`` that cancels the task, not a cancel scope: this runs once per upstream
    read and once per subscriber send. A cancellation that the timer did not cause (the run
    was aborted, the subscriber left) passes through unchanged.
    """
    if seconds is None:
        return await waiting
    task = asyncio.current_task()
    assert task is not None
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        task.cancel()

    timer = asyncio.get_running_loop().call_later(seconds, expire)
    try:
        return await waiting
    except asyncio.CancelledError:
        if expired and task.uncancel() == 0:
            raise timed_out() from None
        raise
    finally:
        timer.cancel()


class ReadWatchdog:
    """Bounds a stream's reads with one loop timer that outlives them: a read only moves the
    deadline, and the timer, when it fires early, sets itself again for the deadline.

    ``wait_within`` arms and cancels a timer per wait; an upstream
    streaming one delta per read does that once per delta. Here a read costs a clock read
    and three stores. The timer cancels the reading task only when a read is in progress
    and its deadline has passed; ``expired`` then tells that cancellation from any other.
    """

    __slots__ = ("_deadline", "_handle", "_loop", "_task", "expired")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._handle: asyncio.TimerHandle | None = None
        self._deadline = 0.0
        self._task: asyncio.Task[Any] | None = None
        self.expired = False

    def arm(self, task: asyncio.Task[Any], seconds: float) -> None:
        """A read by ``task`` starts: it may last ``seconds``."""
        self._deadline = deadline = self._loop.time() + seconds
        self._task = task
        self.expired = False
        handle = self._handle
        if handle is None:
            self._handle = self._loop.call_at(deadline, self._fire)
        elif handle.when() > deadline:  # a shorter timeout than the read before: sooner
            handle.cancel()
            self._handle = self._loop.call_at(deadline, self._fire)

    def disarm(self) -> None:
        """The read ended (the timer, if set, finds nothing to do and lapses)."""
        self._task = None

    def close(self) -> None:
        self._task = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        self._handle = None
        task = self._task
        if task is None:
            return  # no read in progress: the next one sets the timer again
        if self._loop.time() < self._deadline:
            self._handle = self._loop.call_at(self._deadline, self._fire)
            return
        self.expired = True
        task.cancel()


class AsyncioStream(AsyncNetworkStream):
    """One connection: an ``asyncio`` stream reader and writer."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._watchdog: ReadWatchdog | None = None

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        if timeout is None:
            try:
                return await self._reader.read(max_bytes)
            except OSError as exc:
                raise httpcore.ReadError(exc) from exc
        task = asyncio.current_task()
        assert task is not None
        watchdog = self._watchdog
        if watchdog is None:
            watchdog = self._watchdog = ReadWatchdog(asyncio.get_running_loop())
        watchdog.arm(task, timeout)
        try:
            return await self._reader.read(max_bytes)
        except asyncio.CancelledError:
            if watchdog.expired and task.uncancel() == 0:
                raise httpcore.ReadTimeout() from None
            raise
        except OSError as exc:
            raise httpcore.ReadError(exc) from exc
        finally:
            watchdog.disarm()

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        if not buffer:
            return
        writer = self._writer
        try:
            if writer.transport.is_closing():
                raise httpcore.WriteError("the connection is closed")
            writer.write(buffer)
            await wait_within(writer.drain(), timeout, httpcore.WriteTimeout)
        except OSError as exc:
            raise httpcore.WriteError(exc) from exc

    async def aclose(self) -> None:
        if self._watchdog is not None:
            self._watchdog.close()
        self._writer.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
    ) -> AsyncNetworkStream:
        try:
            await wait_within(
                self._writer.start_tls(ssl_context, server_hostname=server_hostname),
                timeout,
                httpcore.ConnectTimeout,
            )
        except (OSError, ssl.SSLError) as exc:
            self._writer.transport.abort()
            raise httpcore.ConnectError(exc) from exc
        except BaseException:
            self._writer.transport.abort()
            raise
        return self

    def get_extra_info(self, info: str) -> Any:
        writer = self._writer
        if info == "ssl_object":
            return writer.get_extra_info("ssl_object")
        if info == "client_addr":
            return writer.get_extra_info("sockname")
        if info == "server_addr":
            return writer.get_extra_info("peername")
        if info == "socket":
            return writer.get_extra_info("socket")
        if info == "is_readable":
            # The loop reads the socket as data comes: an idle connection the server closed
            # (or wrote to) shows here, not in the socket.
            reader = self._reader
            return (
                reader.at_eof()
                or reader.exception() is not None
                or writer.transport.is_closing()
                or buffered(reader)
            )
        return None


def _apply(writer: asyncio.StreamWriter, options: Iterable[SocketOption] | None) -> None:
    sock: socket.socket | None = writer.get_extra_info("socket")
    if sock is None:
        return
    for option in options or ():
        sock.setsockopt(*option)


class AsyncioBackend(AsyncNetworkBackend):
    """Connections as ``asyncio`` streams (see the module docstring)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> AsyncNetworkStream:
        local = None if local_address is None else (local_address, 0)
        try:
            reader, writer = await wait_within(
                asyncio.open_connection(host, port, local_addr=local),
                timeout,
                httpcore.ConnectTimeout,
            )
        except OSError as exc:
            raise httpcore.ConnectError(exc) from exc
        _apply(writer, socket_options)
        return AsyncioStream(reader, writer)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        socket_options: Iterable[SocketOption] | None = None,
    ) -> AsyncNetworkStream:
        try:
            reader, writer = await wait_within(
                asyncio.open_unix_connection(path), timeout, httpcore.ConnectTimeout
            )
        except OSError as exc:
            raise httpcore.ConnectError(exc) from exc
        _apply(writer, socket_options)
        return AsyncioStream(reader, writer)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
