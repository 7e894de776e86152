"""Test helpers for the provider tests that are not about replaying recordings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from httpx_sse import ServerSentEvent
from httpx_sse._decoders import SSEDecoder, SSELineDecoder

from providers.base import ProviderBase
from providers.context import RunContext
from providers.transports import IterableTransport

__all__ = ["OracleSSEParser", "ScriptProvider"]

_SSE_FIELDS = frozenset({"data", "event", "id", "retry"})


class OracleSSEParser:
    """The reference for ``providers.transports.sse.SSEParser``: httpx-sse's own line and event
    decoders, one call per line, with the same size bound and strict-field rule."""

    def __init__(self, max_event_bytes: int, *, strict_fields: bool = False) -> None:
        self._lines = SSELineDecoder()
        self._decoder = SSEDecoder()
        self._max = max_event_bytes
        self._size = 0
        self._strict = strict_fields

    def feed(self, text: str) -> list[ServerSentEvent]:
        out: list[ServerSentEvent] = []
        for line in self._lines.decode(text):
            self._line(line, out)
        if sum(len(part) for part in self._lines.buffer) > self._max:
            raise OverflowError
        return out

    def close(self) -> list[ServerSentEvent]:
        out: list[ServerSentEvent] = []
        for line in self._lines.flush():
            self._line(line, out)
        self._line("", out)
        return out

    def _line(self, line: str, out: list[ServerSentEvent]) -> None:
        self._size = 0 if not line else self._size + len(line)
        if self._size > self._max:
            raise OverflowError
        if self._strict and line and not line.startswith(":"):
            if line.partition(":")[0] not in _SSE_FIELDS:
                raise ValueError
        sse = self._decoder.decode(line)
        if sse is not None:
            out.append(sse)


class ScriptProvider(ProviderBase):
    """Chunks are ``(method, *args)`` tuples applied to the context; ``"raise"`` raises."""

    def __init__(self, continuation: list[Any] | None = None) -> None:
        super().__init__("script", IterableTransport([]))
        self.continuation = continuation

    async def prepare_request(self, input: Mapping[str, Any], ctx: RunContext) -> Any:
        return dict(input)

    def handle_chunk(self, chunk: Any, ctx: RunContext) -> None:
        name, *args = chunk
        if name == "raise":
            raise args[0]
        if name == "kw":
            getattr(ctx, args[0])(*args[1], **args[2])
            return
        getattr(ctx, name)(*args)

    async def prepare_continuation(self, ctx: RunContext) -> Any:
        if self.continuation is None:
            return None
        return {"continue": True}
