"""The base of each role of the Redis backend: the instance's one :class:`.instance.RedisInstance`.

:class:`.backend.RedisBackend` inherits every role, so an operation of the interface is the
role's own method, reached without a forward; a role that sets up more (its scripts) calls
``super().__init__(instance)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.backends.redis.instance import RedisInstance

__all__ = ["RedisRole"]


class RedisRole:
    """One role of the Redis backend, acting on the instance's one :class:`RedisInstance`."""

    def __init__(self, instance: RedisInstance) -> None:
        self._i = instance
