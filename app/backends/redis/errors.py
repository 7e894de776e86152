"""Failure mapping at the Redis boundary."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.api.errors import ApiError

__all__ = ["RunFenced", "unavailable"]

log = logging.getLogger("app.backends.redis")


class RunFenced(Exception):
    """This instance lost the run it owned (another instance took it over, or it was deleted)."""


@contextlib.contextmanager
def unavailable() -> Iterator[None]:
    """Map Redis (and socket) failures to the registry's 503 ``backend_unavailable``."""
    try:
        yield
    except (RedisError, OSError) as exc:
        if isinstance(exc, RedisError) and not isinstance(
            exc, (RedisConnectionError, RedisTimeoutError)
        ):
            log.warning("redis error: %s", exc)
        raise ApiError(503, "backend_unavailable", "The backend is unavailable.") from exc
