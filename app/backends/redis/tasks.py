"""Stopping background tasks that talk to Redis.

redis-py can swallow a cancellation that lands while it reads a reply (it surfaces as a read
timeout), so a single ``task.cancel()`` may not end a loop. :func:`stop_task` cancels until the
task is done; loops also check their own stop flag.
"""

from __future__ import annotations

import asyncio
from typing import Any


async def stop_task(task: asyncio.Task[Any] | None) -> None:
    while task is not None and not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=0.5)
    if task is not None and task.done() and not task.cancelled():
        task.exception()  # retrieved: never "exception was never retrieved"
