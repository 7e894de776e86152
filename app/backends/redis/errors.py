"""Failure mapping at the Redis boundary."""

from __future__ import annotations

import logging
from types import TracebackType

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.api.errors import ApiError

__all__ = ["RunFenced", "unavailable"]

log = logging.getLogger("app.backends.redis")


class RunFenced(Exception):
    """This instance lost the run it owned (another instance took it over, or it was deleted)."""


class _Unavailable:
    """The context manager of :func:`unavailable` (a class: it is entered on every read of
    every subscriber, and a generator-based one costs a generator per use)."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:  # the common case, on every read and append
            return
        if isinstance(exc, (RedisError, OSError)):
            if isinstance(exc, RedisError) and not isinstance(
                exc, (RedisConnectionError, RedisTimeoutError)
            ):
                log.warning("redis error: %s", exc)
            raise ApiError(503, "backend_unavailable", "The backend is unavailable.") from exc


_UNAVAILABLE = _Unavailable()


def unavailable() -> _Unavailable:
    """Map Redis (and socket) failures to the registry's 503 ``backend_unavailable``."""
    return _UNAVAILABLE
