"""The Redis Cluster client (``[gateway] redis_cluster = true``): redis-py's public RedisCluster.

A cluster client is handed to the backend where a ``Redis`` is expected: both speak the same
command API, and the few places that differ ask :func:`is_cluster` (the append script's
batches, :mod:`.cluster_scripts`; the owner inbox polls, one script call per slot; pub/sub,
sharded: ``SPUBLISH`` / ``SSUBSCRIBE`` through redis-py's ``ClusterPubSub``, which follows a
slot that moved). The fast paths of :mod:`app.compat.redis_fast` drive one standalone
connection pool: a cluster client always takes redis-py's public path.

The seed is ``redis_url`` as ``RedisCluster.from_url`` takes it (``rediss://`` for TLS, user
and password in the URL, as redis-py reads them); ``redis_cluster_nodes`` adds more seeds
(``host:port``), which share the URL's credentials and TLS. The client discovers the rest of
the cluster (``CLUSTER SLOTS``) and follows ``MOVED`` / ``ASK`` and failovers on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = ["cluster_client", "is_cluster", "node_address", "publish_command"]


def node_address(text: str) -> tuple[str, int]:
    """``"host:port"`` (``[v6]:port`` too) as (host, port); ValueError when it is not one."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"not host:port: {text!r}")
    return host.strip("[]"), int(port)


def cluster_client(
    url: str, nodes: Sequence[str] = (), max_connections: int = 2000, **options: Any
) -> Redis:
    """A ``RedisCluster`` seeded by ``url`` and ``nodes`` that fails fast (503 instead of
    hanging) and retries a command through a failover (topology refreshed between attempts).

    Typed as ``Redis``: the backend uses the command API both clients share."""
    settings: dict[str, Any] = {
        # Per node: every conversation followed by a blocking XREAD holds one on its node.
        "max_connections": max_connections,
        "socket_connect_timeout": 1.0,
        "socket_timeout": 5.0,
        # A failover takes a few seconds of cluster-node-timeout: the retries span it.
        "retry": Retry(ExponentialBackoff(cap=0.5, base=0.05), 12),
        "retry_on_error": [RedisConnectionError, RedisTimeoutError, ConnectionResetError],
        "health_check_interval": 15,
        "protocol": 2,
        **options,
    }
    if nodes:
        settings["startup_nodes"] = [ClusterNode(*node_address(n)) for n in nodes]
    client = RedisCluster.from_url(url, **settings)
    return cast(Redis, client)


def is_cluster(client: Any) -> bool:
    """Whether ``client`` is a cluster client (sharded pub/sub, one slot per script call)."""
    return isinstance(client, RedisCluster)


def publish_command(client: Any) -> str:
    """The command that publishes a per-conversation wake-up: ``SPUBLISH`` on a cluster (the
    message goes to the shard owning the conversation's slot only), else ``PUBLISH``."""
    return "SPUBLISH" if is_cluster(client) else "PUBLISH"
