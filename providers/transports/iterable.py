"""Async-iterable transport: in-process runtimes, and the test double of every provider.

``source`` is either an (async) iterable of chunks, replayed on every ``open``, or a callable
``source(request, signal)`` returning one. A read blocked in the source is cancelled the moment
the signal aborts, and :class:`AbortError` is raised.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from typing import Any

from providers.errors import AbortError
from providers.signal import AbortSignal

__all__ = ["ChunkSource", "IterableTransport"]

ChunkSource = (
    AsyncIterable[Any]
    | Iterable[Any]
    | Callable[[Any, AbortSignal], AsyncIterable[Any] | Iterable[Any]]
)


class IterableTransport:
    def __init__(self, source: ChunkSource, *, kind: str = "async-iterable") -> None:
        self.kind = kind
        self._source = source

    async def aclose(self) -> None:
        return None

    async def open(self, request: Any, signal: AbortSignal) -> AsyncIterator[Any]:
        if signal.aborted:
            raise AbortError.from_signal(signal)
        source: Any = self._source
        if callable(source) and not isinstance(source, AsyncIterable | Iterable):
            source = source(request, signal)
        if not isinstance(source, AsyncIterable):
            for chunk in source:
                if signal.aborted:
                    raise AbortError.from_signal(signal)
                yield chunk
                await asyncio.sleep(0)
            return
        iterator = aiter(source)
        try:
            while True:
                if signal.aborted:
                    raise AbortError.from_signal(signal)
                step: asyncio.Future[Any] = asyncio.ensure_future(anext(iterator))

                def cancel_step(_reason: object, step: asyncio.Future[Any] = step) -> None:
                    step.cancel()

                remove = signal.add_callback(cancel_step)
                try:
                    chunk = await step
                except StopAsyncIteration:
                    return
                except asyncio.CancelledError:
                    current = asyncio.current_task()
                    if signal.aborted and (current is None or current.cancelling() == 0):
                        raise AbortError.from_signal(signal) from None
                    raise
                finally:
                    remove()
                    if not step.done():
                        step.cancel()
                yield chunk
        finally:
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                try:
                    await aclose()
                except (RuntimeError, asyncio.CancelledError):
                    pass
