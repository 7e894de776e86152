"""A run's own backend calls ride out a backend outage instead of failing the run.

An accepted run must end in exactly one terminal event. When Redis restarts (1–2 s in the
soak), a call that fails with ``backend_unavailable`` is retried with a bounded backoff; past
the budget the error goes up as before. 30 s is three default lease TTLs: by then the run's
lease has lapsed and another instance has ended it ``gateway_instance_lost``, so retrying
longer only delays what the caller does with the failure.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from app.errors import GatewayError

__all__ = ["BUDGET_SECONDS", "until_available"]

logger = logging.getLogger(__name__)
T = TypeVar("T")
BUDGET_SECONDS = 30.0
_FIRST_DELAY = 0.1
_MAX_DELAY = 2.0


async def until_available(
    call: Callable[[], Awaitable[T]], what: str, *, budget: float | None = None
) -> T:
    """``await call()``, again while the backend answers ``backend_unavailable``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + (BUDGET_SECONDS if budget is None else budget)
    delay = _FIRST_DELAY
    while True:
        try:
            return await call()
        except GatewayError as exc:
            if exc.code != "backend_unavailable" or loop.time() + delay > deadline:
                raise
            logger.warning("%s: the backend is unavailable; again in %.1f s", what, delay)
        await asyncio.sleep(delay)
        delay = min(delay * 2, _MAX_DELAY)
