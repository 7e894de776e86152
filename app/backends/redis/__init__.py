"""The Redis backend (``backend = "redis"``): streams, snapshots, fenced leases, control.

Public surface: :class:`RedisBackend`, :func:`create_redis_backend` (used by
``app.backends.create_backend``), :func:`redis_client` (standalone), :func:`cluster_client`
(``[gateway] redis_cluster``, :mod:`.cluster`) and the key layout helpers.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.driver_info import DriverInfo
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.maint_notifications import MaintNotificationsConfig

from app.backends.redis.backend import RedisBackend, RunFenced
from app.backends.redis.cluster import cluster_client, is_cluster
from app.backends.redis.keys import DEFAULT_PREFIX, ConversationKeys, conversation_tag
from app.compat.redis_fast import fast_client, public_client

if TYPE_CHECKING:
    from app.config import Settings

__all__ = [
    "DEFAULT_PREFIX",
    "ConversationKeys",
    "RedisBackend",
    "RunFenced",
    "cluster_client",
    "conversation_tag",
    "create_redis_backend",
    "is_cluster",
    "redis_client",
]


#: Connections per instance unless configured (``redis_max_connections``). Each conversation
#: followed on an instance that does not own its run holds one (its blocking ``XREAD``), so
#: the pool bounds how many such conversations stream here. A burst of callers beyond it waits
#: for a free connection (up to ``POOL_WAIT_SECONDS``) instead of failing.
MAX_CONNECTIONS = 2000
POOL_WAIT_SECONDS = 5.0


@functools.cache
def _driver_info() -> DriverInfo:
    """What every connection sends with ``CLIENT SETINFO``, resolved once: left to redis-py,
    each new connection reads the package's metadata again, and a capacity-bench round opens
    more connections than it runs answers, as conversations' log readers come and go
    (BENCHMARKS.md, "Costs behind the code's shortcuts")."""
    return DriverInfo()


def redis_client(
    url: str, max_connections: int = MAX_CONNECTIONS, *, fast_paths: bool = True
) -> Redis:
    """A client that fails fast (503 instead of hanging) and reconnects on its own.

    ``fast_paths`` (``[gateway] fast_paths``): the client of :mod:`app.compat.redis_fast`
    where its start-up check passes; False: redis-py's stock client, public API only."""
    options: dict[str, Any] = {
        "max_connections": max_connections,
        "timeout": POOL_WAIT_SECONDS,
        "socket_connect_timeout": 1.0,
        "socket_timeout": 5.0,
        "retry": Retry(ExponentialBackoff(cap=0.2, base=0.02), 2),
        "retry_on_error": [RedisConnectionError, RedisTimeoutError, ConnectionResetError],
        "health_check_interval": 15,
        # Off: a plain Redis sends none, and while on ("auto") redis-py's checkout skips its
        # check for a connection holding an unread reply and hands that reply to the next caller.
        "maint_notifications_config": MaintNotificationsConfig(enabled=False),
        "driver_info": _driver_info(),
        # RESP2, named: redis-py 8.2 made RESP3 its default. The fast paths read replies
        # themselves and were written and measured on RESP2, and RESP2 skips a HELLO round
        # trip per new connection. A URL's ``?protocol=3`` still wins.
        "protocol": 2,
    }
    if fast_paths:
        client = fast_client(url, options)
        if client is not None:
            return client
    return public_client(url, options)


def create_redis_backend(settings: Settings) -> RedisBackend:
    gateway = settings.gateway
    if gateway.redis_cluster:  # redis-py's public cluster client (no fast path drives it)
        client = cluster_client(
            gateway.redis_url,
            gateway.redis_cluster_nodes,
            gateway.redis_max_connections,
            maint_notifications_config=MaintNotificationsConfig(enabled=False),
            driver_info=_driver_info(),
        )
    else:
        client = redis_client(
            gateway.redis_url, gateway.redis_max_connections, fast_paths=gateway.fast_paths
        )
    return RedisBackend(
        client,
        wait_replicas=gateway.redis_wait_replicas,
        wait_timeout_ms=gateway.redis_wait_timeout_ms,
        event_log_max_len=gateway.event_log_max_len,
        snapshot_every=gateway.snapshot_every,
        lease_ttl_seconds=gateway.lease_ttl_seconds,
        key_prefix=getattr(gateway, "redis_key_prefix", DEFAULT_PREFIX),
        conversation_ttl_seconds=gateway.conversation_ttl_seconds,
    )
