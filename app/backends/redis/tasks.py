"""Periodic sweeps of the Redis backend: a pass that fails is skipped, never the loop.

They are stopped with :func:`app.tasks.stop_task` (redis-py can swallow a cancellation that
lands while it reads a reply, so it cancels until the task is done); loops also check their
own stop flag.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

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
