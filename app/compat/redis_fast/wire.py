"""A held connection's socket driven directly: one write per round trip, each chunk read parsed
at once by a hiredis reader, no task and no stream layers per reply.

What ``ScriptPipeline`` (the append script) and ``CommandMux`` (plain commands) share. While
its owner drives it, a :class:`Wire` is the protocol of the connection's transport; redis-py's
own protocol (``original``) still hears of the connection's end, so its view of the connection
stays true, and gets the transport back when the owner hands the connection back clean.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

import hiredis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse

__all__ = [
    "RoundTripWatch",
    "Wire",
    "attach",
    "has_unread_data",
    "lost_error",
    "take_replies",
]


def has_unread_data(connection: AbstractConnection) -> bool:
    """Bytes received and not read (a reply nobody waited for): the full path's checkout
    reconnects such a connection."""
    stream = getattr(connection, "_reader", None)
    if stream is not None and getattr(stream, "_buffer", None):
        return True
    reader = getattr(getattr(connection, "_parser", None), "_reader", None)
    return bool(reader is not None and reader.has_data())


class Wire(asyncio.Protocol):
    def __init__(
        self,
        transport: asyncio.Transport,
        original: asyncio.BaseProtocol,
        reader: hiredis.Reader,
        on_data: Callable[[Wire], None],
        on_lost: Callable[[Wire, Exception | None], None],
    ) -> None:
        self.transport = transport
        self.original = original
        self.reader = reader
        self._on_data = on_data
        self._on_lost = on_lost

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        self._on_data(self)

    def pause_writing(self) -> None:
        self.original.pause_writing()  # redis-py's drain waits while the socket is full

    def resume_writing(self) -> None:
        self.original.resume_writing()

    def eof_received(self) -> bool | None:
        return None  # the server closed: the transport closes, connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.original.connection_lost(exc)
        self._on_lost(self, exc)

    def send(self, data: list[bytes]) -> Exception | None:
        """Write one round trip; the error when the transport refused it (closed meanwhile)."""
        try:
            self.transport.writelines(data)
        except Exception as exc:
            return RedisConnectionError(f"Error while writing: {exc}")
        return None

    def detach(self) -> None:
        """Give the socket back to redis-py's protocol (nothing in flight, nothing unread)."""
        if not self.transport.is_closing():
            self.transport.set_protocol(self.original)


def attach(
    conn: AbstractConnection,
    on_data: Callable[[Wire], None],
    on_lost: Callable[[Wire, Exception | None], None],
) -> Wire | None:
    """Drive ``conn``'s socket if it is connected and clean (else None: the caller keeps
    redis-py's path). Replies are parsed as redis-py's hiredis parser does (its error classes:
    ``NoScriptError``, ``BusyLoadingError``…, its decoding)."""
    # uvloop's transports are not asyncio.Transport subclasses: what is used is checked.
    transport = cast(asyncio.Transport, getattr(getattr(conn, "_writer", None), "transport", None))
    if (
        not conn.is_connected
        or not all(hasattr(transport, m) for m in ("set_protocol", "get_protocol", "writelines"))
        or transport.is_closing()
        or has_unread_data(conn)
    ):
        return None
    reader_args: dict[str, Any] = {
        "protocolError": InvalidResponse,
        "replyError": conn._parser.parse_error,  # redis-py's error classes
    }
    if conn.encoder.decode_responses:
        reader_args["encoding"] = conn.encoder.encoding
        reader_args["errors"] = conn.encoder.encoding_errors
    wire = Wire(
        transport, transport.get_protocol(), hiredis.Reader(**reader_args), on_data, on_lost
    )
    transport.set_protocol(wire)
    return wire


def take_replies(wire: Wire, into: list[Any], expected: int | None) -> bool | Exception:
    """Append every complete reply ``wire`` has read to ``into``, for a round trip in flight
    that takes ``expected`` replies (None: none in flight): True once all are in, False while
    some are missing, or the error that makes the connection untrustworthy (what it read is
    not RESP, or is a reply nobody waits for)."""
    try:
        while (reply := wire.reader.gets()) is not False:
            into.append(reply)
    except Exception as exc:
        return RedisConnectionError(f"Protocol error: {exc}")
    if expected is None or len(into) > expected:
        return RedisConnectionError("A reply nobody was waiting for") if into else False
    return len(into) == expected


def lost_error(exc: Exception | None) -> RedisConnectionError:
    reason = f": {exc}" if exc is not None else ""
    return RedisConnectionError(f"Connection lost{reason}")


class RoundTripWatch:
    """The socket timeout of the round trip in flight, by one timer (armed once, moved on to
    the deadline of the round trip in flight when it fires early): ``expired`` is called when
    a round trip is still ``busy()`` at its deadline."""

    def __init__(self, busy: Callable[[], bool], expired: Callable[[], None]) -> None:
        self._busy = busy
        self._expired = expired
        self._deadline = 0.0
        self._timer: asyncio.TimerHandle | None = None

    def start(self, timeout: float | None) -> None:
        """A round trip was sent (``timeout``: its connection's socket timeout, None: none)."""
        if timeout is None:
            return
        loop = asyncio.get_running_loop()
        self._deadline = loop.time() + timeout
        if self._timer is None:
            self._timer = loop.call_at(self._deadline, self._fire)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self) -> None:
        self._timer = None
        if not self._busy():
            return
        loop = asyncio.get_running_loop()
        if loop.time() >= self._deadline:
            self._expired()
        else:
            self._timer = loop.call_at(self._deadline, self._fire)
