"""The Redis backend (``backend = "redis"``): streams, snapshots, fenced leases, control.

Public surface: :class:`RedisBackend`, :func:`create_redis_backend` (used by
``app.backends.create_backend``), :func:`redis_client` and the key layout helpers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.backends.redis.backend import RedisBackend, RunFenced
from app.backends.redis.keys import DEFAULT_PREFIX, ConversationKeys, conversation_tag

if TYPE_CHECKING:
    from app.config import Settings

__all__ = [
    "DEFAULT_PREFIX",
    "ConversationKeys",
    "RedisBackend",
    "RunFenced",
    "conversation_tag",
    "create_redis_backend",
    "redis_client",
]


def redis_client(url: str) -> Redis:
    """A client that fails fast (503 instead of hanging) and reconnects on its own."""
    return Redis.from_url(
        url,
        socket_connect_timeout=1.0,
        socket_timeout=5.0,
        retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), 2),
        retry_on_error=[RedisConnectionError, RedisTimeoutError, ConnectionResetError],
        health_check_interval=15,
    )


def create_redis_backend(settings: Settings) -> RedisBackend:
    gateway = settings.gateway
    return RedisBackend(
        redis_client(gateway.redis_url),
        event_log_max_len=gateway.event_log_max_len,
        snapshot_every=gateway.snapshot_every,
        lease_ttl_seconds=gateway.lease_ttl_seconds,
        key_prefix=getattr(gateway, "redis_key_prefix", DEFAULT_PREFIX),
        conversation_ttl_seconds=gateway.conversation_ttl_seconds,
    )
