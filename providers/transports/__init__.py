"""Transports: one module each, all with ``kind``, ``open(request, signal)`` and ``aclose()``."""

from providers.transports.iterable import ChunkSource, IterableTransport
from providers.transports.replay import ReplayTransport, abortable_sleep
from providers.transports.request import DEFAULT_MAX_EVENT_BYTES, UpstreamRequest
from providers.transports.sse import DEFAULT_MAX_CONNECTIONS, SSEParser, SSETransport
from providers.transports.websocket import ChannelTurn, WebSocketChannel, WebSocketTransport

__all__ = [
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_EVENT_BYTES",
    "ChannelTurn",
    "ChunkSource",
    "IterableTransport",
    "ReplayTransport",
    "SSEParser",
    "SSETransport",
    "UpstreamRequest",
    "WebSocketChannel",
    "WebSocketTransport",
    "abortable_sleep",
]
