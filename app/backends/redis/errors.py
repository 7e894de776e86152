"""Failure mapping at the Redis boundary."""

from __future__ import annotations

import logging
from types import TracebackType

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.errors import BackendUnavailable

__all__ = ["RunFenced", "unavailable", "unavailable_error"]

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
        if isinstance(exc, Exception):
            mapped = unavailable_error(exc)
            if mapped is not exc:
                raise mapped from exc


_UNAVAILABLE = _Unavailable()


def unavailable_error(exc: Exception) -> Exception:
    """What :func:`unavailable` raises for ``exc`` (``exc`` itself when it maps nothing), for
    an error handed to a callback instead of raised."""
    if isinstance(exc, (RedisError, OSError)):
        if isinstance(exc, RedisError) and not isinstance(
            exc, (RedisConnectionError, RedisTimeoutError)
        ):
            log.warning("redis error: %s", exc)
        mapped = BackendUnavailable("The backend is unavailable.")
        mapped.__cause__ = exc
        return mapped
    return exc


def unavailable() -> _Unavailable:
    """Map Redis (and socket) failures to the registry's 503 ``backend_unavailable``."""
    return _UNAVAILABLE
