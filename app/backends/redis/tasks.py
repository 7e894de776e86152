"""Background tasks that talk to Redis: stopping them, and periodic sweeps.

redis-py can swallow a cancellation that lands while it reads a reply (it surfaces as a read
timeout), so a single ``task.cancel()`` may not end a loop. :func:`stop_task` cancels until the
task is done; loops also check their own stop flag.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from redis.exceptions import RedisError

log = logging.getLogger("app.backends.redis")


async def every(interval: float, sweep: Callable[[], Awaitable[None]], what: str) -> None:
    """``sweep()`` every ``interval`` s until cancelled; a pass that fails is skipped (Redis
    away: the next pass retries), never the loop."""
    while True:
        await asyncio.sleep(interval)
        try:
            await sweep()
        except (RedisError, OSError) as exc:
            log.debug("%s skipped: %s", what, exc)
        except Exception:
            log.exception("%s failed", what)


async def stop_task(task: asyncio.Task[Any] | None) -> None:
    while task is not None and not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=0.5)
    if task is not None and task.done() and not task.cancelled():
        task.exception()  # retrieved: never "exception was never retrieved"
