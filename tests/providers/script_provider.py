"""A provider driven by its chunks: each chunk names a RunContext call (for ProviderBase tests)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from providers.base import ProviderBase
from providers.context import RunContext
from providers.transports import IterableTransport

__all__ = ["ScriptProvider"]


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
