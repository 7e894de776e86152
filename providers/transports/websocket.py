"""WebSocket transport (``websockets`` asyncio client).

``open(UpstreamRequest, signal)``: connect with the configured headers, send ``request.json`` as
the first frame, yield every text/binary frame until the upstream closes (``timeout_seconds``
bounds the connect and handshake, ``idle_timeout_seconds`` the silence between two frames; a
socket that waits on the app has no whole-request deadline). On abort the socket is
closed with code 1000 at once (the close is started from the signal callback, so a blocked
``recv`` wakes up).

Runs that continue on the same socket (native AgentEvent upstream, protocol.md §10) use a
:class:`WebSocketChannel`: ``await transport.connect(request, signal)`` opens it and sends the
first frame; ``open(ChannelTurn(channel, send=..., until=...), signal)`` sends an optional frame
and yields frames until ``until()`` is true (the socket stays open) or the upstream closes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, ConnectionClosedOK

from providers.errors import UpstreamEventTooLarge, UpstreamIdleTimeout, map_transport_errors
from providers.signal import AbortSignal
from providers.transports._abort import Stopper, race_stop
from providers.transports.request import UpstreamRequest

__all__ = ["ChannelTurn", "WebSocketChannel", "WebSocketTransport"]

_MESSAGE_TOO_BIG = 1009


class WebSocketChannel:
    """One open upstream socket, shared by the turns of a run."""

    def __init__(
        self,
        connection: ClientConnection,
        idle_timeout_seconds: float | None,
        max_event_bytes: int = 0,
    ) -> None:
        self.connection = connection
        self.max_event_bytes = max_event_bytes
        self.idle_timeout_seconds = idle_timeout_seconds
        self.closed = False

    async def send(self, data: Any) -> None:
        payload = data if isinstance(data, str | bytes) else orjson.dumps(data).decode()
        with map_transport_errors():
            await self.connection.send(payload)

    def close_now(self) -> None:
        """Start the close handshake (code 1000) without waiting for it."""
        if not self.closed:
            self.closed = True
            asyncio.ensure_future(self.connection.close(1000))  # noqa: RUF006

    async def aclose(self) -> None:
        self.closed = True
        await self.connection.close(1000)

    async def frames(
        self, signal: AbortSignal, until: Callable[[], bool] | None = None
    ) -> AsyncIterator[str | bytes]:
        stopper = Stopper(signal)
        stopper.on_stop(self.close_now)
        try:
            with map_transport_errors(signal):
                while True:
                    try:
                        async with asyncio.timeout(self.idle_timeout_seconds):
                            frame = await self.connection.recv()
                    except TimeoutError:
                        stopper.check()
                        raise UpstreamIdleTimeout() from None
                    except ConnectionClosedOK:
                        self.closed = True
                        stopper.check()
                        return
                    except ConnectionClosed as exc:
                        stopper.check()
                        if (exc.rcvd is not None and exc.rcvd.code == _MESSAGE_TOO_BIG) or (
                            exc.sent is not None and exc.sent.code == _MESSAGE_TOO_BIG
                        ):
                            raise UpstreamEventTooLarge(self.max_event_bytes) from None
                        raise
                    stopper.check()
                    yield frame
                    if until is not None and until():
                        return
        finally:
            stopper.close()


@dataclass(frozen=True, slots=True)
class ChannelTurn:
    """A turn on an open channel: send ``send`` (if not None), then read until ``until()``."""

    channel: WebSocketChannel
    send: Any = None
    until: Callable[[], bool] | None = None


class WebSocketTransport:
    kind = "websocket"

    def __init__(
        self,
        *,
        timeout_seconds: float | None = 60.0,
        idle_timeout_seconds: float | None = 60.0,
    ) -> None:
        self.timeout_seconds = timeout_seconds
        self.idle_timeout_seconds = idle_timeout_seconds

    async def aclose(self) -> None:
        return None

    async def connect(self, request: UpstreamRequest, signal: AbortSignal) -> WebSocketChannel:
        stopper = Stopper(signal, self.timeout_seconds)
        try:
            with map_transport_errors(signal):
                connection = await race_stop(self._connect(request), stopper)
        finally:
            stopper.close()
        channel = WebSocketChannel(connection, self.idle_timeout_seconds, request.max_event_bytes)
        if request.json is not None:
            await channel.send(request.json)
        return channel

    async def _connect(self, request: UpstreamRequest) -> ClientConnection:
        return await connect(
            request.url,
            additional_headers=dict(request.headers),
            open_timeout=self.timeout_seconds,
            max_size=request.max_event_bytes,
            proxy=None,
        )

    async def open(
        self, request: UpstreamRequest | ChannelTurn, signal: AbortSignal
    ) -> AsyncIterator[str | bytes]:
        if isinstance(request, ChannelTurn):
            if request.send is not None:
                await request.channel.send(request.send)
            async for frame in request.channel.frames(signal, request.until):
                yield frame
            return
        channel = await self.connect(request, signal)
        try:
            async for frame in channel.frames(signal):
                yield frame
        finally:
            if signal.aborted:
                channel.close_now()
            else:
                await channel.aclose()
