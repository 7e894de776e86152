"""The Redis backend on a Redis Cluster (``[gateway] redis_cluster``): the shared backend
contract on the cluster ``make test`` starts (three masters, three replicas), plus the
configuration that builds a cluster client."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.backends.redis import RedisBackend
from tests.app.backend_contract import LOG_MAX, BackendContract
from tests.app.backends.redis.cluster_support import (
    make_cluster_backend,
    shared_cluster,
)
from tests.app.redis_support import unique_prefix


class TestRedisClusterBackendContract(BackendContract):
    @pytest.fixture
    async def backend(self) -> AsyncIterator[RedisBackend]:
        prefix = unique_prefix()
        async with shared_cluster(prefix):
            backend = make_cluster_backend(prefix, event_log_max_len=LOG_MAX)
            await backend.start()
            yield backend
            await backend.close()
