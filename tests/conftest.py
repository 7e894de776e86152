"""Fixtures of the whole tests tree: ``start_gateway``, on every backend.

A test that starts a gateway (``start_gateway``, directly or through a fixture) runs once per
backend: ``[memory]`` and ``[redis]`` (a key prefix of its own on the shared Redis, deleted
afterwards; the gateways one test starts share it, i.e. they form a cluster, like replicas
behind a load balancer), and, marked ``on_redis_cluster``, ``[redis-cluster]`` (the same on
the shared Redis Cluster of ``scripts/redis-cluster.sh``). A test that holds only on one
backend says so: ``@pytest.mark.only_backend("redis", reason="...")``. The backend guard
(``tests/backend_guard.py``) fails a test that runs a gateway any other way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import AsyncExitStack

import pytest

from app.backends import Backend
from app.config import Settings
from providers.contract import AgentProvider
from tests import backend_guard
from tests.app.backends.redis.cluster_support import shared_cluster
from tests.app.support.gateway_server import (
    RunningGateway,
    StartGateway,
    make_settings,
    redis_backend_for,
    redis_cluster_backend_for,
    start_server,
)
from tests.app.support.redis_support import shared_redis, unique_prefix
from tests.backend_guard import BACKEND_GUARD

BACKENDS = ("memory", "redis", "redis-cluster")
#: What a test runs on unless marked: ``redis-cluster`` (the Redis backend on the Redis Cluster
#: ``make test`` starts) only for tests marked ``on_redis_cluster`` (the contract, concurrency,
#: multi-instance, outage and durability tests), or naming it in ``only_backend``.
DEFAULT_BACKENDS = ("memory", "redis")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``--dist loadgroup``) the slow tests (a browser, nginx, redis-servers
    of their own, gateway processes) run on one worker, one after another: they never compete
    with each other for the machine's cores, whose load their wall-clock bounds assume."""
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(pytest.mark.xdist_group("slow"))
        only = item.get_closest_marker("only_backend")
        if only is not None:
            assert only.kwargs.get("reason"), f"{item.nodeid}: only_backend(...) needs reason=..."
            assert only.args and set(only.args) <= set(BACKENDS), f"{item.nodeid}: {only.args}"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend_kind" not in metafunc.fixturenames:
        return
    kinds: tuple[str, ...] = DEFAULT_BACKENDS
    if metafunc.definition.get_closest_marker("on_redis_cluster") is not None:
        kinds = BACKENDS
    marker = metafunc.definition.get_closest_marker("only_backend")
    if marker is not None:
        kinds = tuple(marker.args)
        assert kinds and set(kinds) <= set(BACKENDS), f"only_backend{kinds}: unknown backend"
        assert marker.kwargs.get("reason"), "only_backend(...) needs reason=..."
    metafunc.parametrize("backend_kind", kinds, indirect=True)


def pytest_configure(config: pytest.Config) -> None:
    backend_guard.install()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """A test that runs a gateway outside the backend parametrization fails, unless it is marked
    ``only_backend`` with its reason: a new gateway test cannot silently skip Redis
    (``tests/backend_guard.py``). Armed before the test's fixtures, module-scoped ones too."""
    callspec = getattr(item, "callspec", None)
    backend = callspec.params.get("backend_kind") if callspec is not None else None
    marked = item.get_closest_marker("only_backend") is not None
    BACKEND_GUARD.arm(item.nodeid, backend, marked)
    return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    try:
        result = yield
    finally:
        violations = BACKEND_GUARD.disarm()
    if violations:
        raise backend_guard.OffBackends("\n".join(violations))
    return result


@pytest.fixture
def backend_kind(request: pytest.FixtureRequest) -> str:
    """The backend the test's gateways run on: ``"memory"``, ``"redis"`` or ``"redis-cluster"``."""
    kind: str = request.param
    return kind


@pytest.fixture
async def start_gateway(
    request: pytest.FixtureRequest, backend_kind: str
) -> AsyncIterator[StartGateway]:
    """``await start_gateway(settings, providers=..., sndbuf=...)`` -> a RunningGateway on the
    test's backend (``backend_kind``)."""
    running: list[RunningGateway] = []
    prefix = unique_prefix()
    marked_only = request.node.get_closest_marker("only_backend") is not None

    async def start(
        settings: Settings | None = None,
        *,
        providers: Mapping[str, AgentProvider] | None = None,
        sndbuf: int | None = None,
        backend: Backend | None = None,
    ) -> RunningGateway:
        settings = settings or make_settings()
        if backend is not None or settings.gateway.backend != "memory":
            # The test picked a backend of its own: it must not be collected for the other one.
            assert marked_only, "a test that picks its backend needs @pytest.mark.only_backend"
        elif backend_kind == "redis":
            backend = redis_backend_for(settings, prefix, f"{prefix}-gw{len(running)}")
        elif backend_kind == "redis-cluster":
            backend = redis_cluster_backend_for(settings, prefix, f"{prefix}-gw{len(running)}")
        gateway = await start_server(settings, providers=providers, sndbuf=sndbuf, backend=backend)
        running.append(gateway)
        return gateway

    async with AsyncExitStack() as stack:
        if backend_kind == "redis":
            await stack.enter_async_context(shared_redis(prefix))
        elif backend_kind == "redis-cluster":
            await stack.enter_async_context(shared_cluster(prefix))
        yield start
        for gateway in running:
            if not gateway.task.done():
                await gateway.stop()
