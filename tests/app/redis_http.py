"""The app's HTTP-level tests, re-run on the Redis backend.

A ``tests/app/test_redis_http_*.py`` module imports the tests (and the ``gw`` fixture) of one
HTTP test module and overrides ``start_gateway`` with :func:`redis_start_gateway`: every gateway
the test starts then runs on a :class:`RedisBackend` on the shared Redis, with a key prefix of
its own (deleted afterwards). Gateways started by one test share that prefix, i.e. they form a
cluster, exactly like replicas behind a load balancer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.backends.redis import RedisBackend, redis_client
from app.config import Settings
from tests.app.conftest import StartGateway
from tests.app.gateway_server import RunningGateway, launch, make_settings
from tests.app.redis_support import SHARED_REDIS_URL, shared_redis, unique_prefix

__all__ = ["redis_backend_for", "redis_start_gateway"]


def redis_backend_for(settings: Settings, prefix: str, instance: str) -> RedisBackend:
    """The Redis backend the settings would configure, under ``prefix`` on the shared Redis."""
    gateway = settings.gateway
    return RedisBackend(
        redis_client(SHARED_REDIS_URL),
        event_log_max_len=gateway.event_log_max_len,
        snapshot_every=gateway.snapshot_every,
        lease_ttl_seconds=gateway.lease_ttl_seconds,
        key_prefix=prefix,
        instance_id=instance,
        conversation_ttl_seconds=gateway.conversation_ttl_seconds,
    )


@pytest.fixture(name="start_gateway")
async def redis_start_gateway() -> AsyncIterator[StartGateway]:
    """Like ``start_gateway``, on the Redis backend (one key prefix per test)."""
    prefix = unique_prefix()
    running: list[RunningGateway] = []

    async def start(settings: Settings | None = None, **kwargs: Any) -> RunningGateway:
        settings = settings or make_settings()
        backend = redis_backend_for(settings, prefix, f"{prefix}-gw{len(running)}")
        gateway = await launch(settings, backend=backend, **kwargs)
        running.append(gateway)
        return gateway

    async with shared_redis(prefix):
        yield start
        for gateway in running:
            if not gateway.task.done():
                await gateway.stop()
