"""The abort signal shared by user abort, shutdown and multitask interrupt."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from core.runs import AbortReason

__all__ = ["AbortReason", "AbortSignal"]


class AbortSignal:
    """A one-shot cancellation flag with a reason, awaitable and observable.

    ``abort()`` is idempotent: the first reason wins. Callbacks run synchronously inside
    ``abort()`` so a transport can close its upstream connection at once.
    """

    __slots__ = ("_callbacks", "_event", "_reason")

    def __init__(self) -> None:
        self._reason: AbortReason | None = None
        self._event: asyncio.Event | None = None
        self._callbacks: list[Callable[[AbortReason], None]] = []

    @property
    def aborted(self) -> bool:
        return self._reason is not None

    @property
    def reason(self) -> AbortReason | None:
        return self._reason

    def abort(self, reason: AbortReason = "aborted") -> bool:
        """Request cancellation. Returns False when it was already aborted."""
        if self._reason is not None:
            return False
        self._reason = reason
        if self._event is not None:
            self._event.set()
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(reason)
        return True

    def add_callback(self, callback: Callable[[AbortReason], None]) -> Callable[[], None]:
        """Call ``callback(reason)`` on abort (at once if already aborted); returns a remover."""
        if self._reason is not None:
            callback(self._reason)
            return lambda: None
        self._callbacks.append(callback)

        def remove() -> None:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

        return remove

    async def wait(self) -> AbortReason:
        """Return once aborted, with the reason."""
        if self._reason is None:
            if self._event is None:
                self._event = asyncio.Event()
            await self._event.wait()
        assert self._reason is not None
        return self._reason
