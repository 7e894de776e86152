"""Stopping a background task: cancel it until it is done.

A task reading a reply through redis-py can swallow a cancellation that lands meanwhile (it
surfaces as a read timeout), so a single ``task.cancel()`` may not end it. The Redis backend
(``app/backends/redis/``) and its client's fast paths (``app/compat/redis_fast/``) stop their
tasks with :func:`stop_task`; it lives here, outside both, so neither imports the other for it.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["stop_task"]


async def stop_task(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` until it is done; its exception, if it ended with one, is retrieved
    (never "exception was never retrieved"). Nothing for None or a task already done."""
    while task is not None and not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=0.5)
    if task is not None and task.done() and not task.cancelled():
        task.exception()
