"""A reusable in-process gateway on loopback for tests: real uvicorn, real sockets.

``start_gateway`` (fixture in ``tests/conftest.py``) starts ``create_app(settings, providers=...)``
on a free port in the test's event loop, on the memory or the Redis backend, and stops it after
the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
import uvicorn
from fastapi import FastAPI

from app.backends import Backend
from app.backends.redis import RedisBackend, redis_client
from app.config import Settings
from app.factory import create_app
from app.gateway import Gateway
from app.server import GatewayServer
from providers.contract import AgentProvider
from tests.app.support.redis_support import (
    FAST_PATHS,
    SHARED_REDIS_URL,
    shared_redis,
    unique_prefix,
)

__all__ = [
    "RunningGateway",
    "StartGateway",
    "gateway_on",
    "launch",
    "make_settings",
    "redis_backend_for",
    "start_server",
]


def make_settings(**sections: Mapping[str, Any]) -> Settings:
    """Settings from plain section dicts, ignoring the environment (short shutdown grace)."""
    data = {name: dict(values) for name, values in sections.items()}
    data.setdefault("gateway", {}).setdefault("shutdown_grace_seconds", 0.2)
    data["gateway"].setdefault("fast_paths", FAST_PATHS)  # the one variable read
    return Settings.model_validate(data)  # hermetic: no environment overrides


def redis_backend_for(settings: Settings, prefix: str, instance: str) -> RedisBackend:
    """The Redis backend the settings would configure, under ``prefix`` on the shared Redis."""
    gateway = settings.gateway
    return RedisBackend(
        redis_client(SHARED_REDIS_URL, fast_paths=gateway.fast_paths),
        event_log_max_len=gateway.event_log_max_len,
        snapshot_every=gateway.snapshot_every,
        lease_ttl_seconds=gateway.lease_ttl_seconds,
        key_prefix=prefix,
        instance_id=instance,
        conversation_ttl_seconds=gateway.conversation_ttl_seconds,
    )


def redis_cluster_backend_for(settings: Settings, prefix: str, instance: str) -> RedisBackend:
    """:func:`redis_backend_for` on the shared Redis Cluster (``[gateway] redis_cluster``)."""
    from tests.app.backends.redis.cluster_support import gateway_cluster_client

    gateway = settings.gateway
    return RedisBackend(
        gateway_cluster_client(),
        event_log_max_len=gateway.event_log_max_len,
        snapshot_every=gateway.snapshot_every,
        lease_ttl_seconds=gateway.lease_ttl_seconds,
        key_prefix=prefix,
        instance_id=instance,
        conversation_ttl_seconds=gateway.conversation_ttl_seconds,
        wait_replicas=gateway.redis_wait_replicas,
        wait_timeout_ms=gateway.redis_wait_timeout_ms,
    )


@contextlib.asynccontextmanager
async def gateway_on(backend_kind: str, settings: Settings | None = None) -> AsyncIterator[Gateway]:
    """A started ``Gateway`` object (no server) on ``backend_kind``, for a test that drives it
    directly; on Redis under a key prefix of its own, deleted afterwards."""
    settings = settings or make_settings()
    prefix = unique_prefix()
    async with contextlib.AsyncExitStack() as stack:
        backend: Backend | None = None
        if backend_kind == "redis":
            await stack.enter_async_context(shared_redis(prefix))
            backend = redis_backend_for(settings, prefix, f"{prefix}-gw")
        elif backend_kind == "redis-cluster":
            from tests.app.backends.redis.cluster_support import shared_cluster

            await stack.enter_async_context(shared_cluster(prefix))
            backend = redis_cluster_backend_for(settings, prefix, f"{prefix}-gw")
        gateway = Gateway(settings, backend=backend)
        await gateway.start()
        try:
            yield gateway
        finally:
            await gateway.close()


@dataclass
class RunningGateway:
    app: FastAPI
    server: GatewayServer
    task: asyncio.Task[None]
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    @property
    def gateway(self) -> Gateway:
        gateway: Gateway = self.app.state.gateway
        return gateway

    def client(self, **kwargs: Any) -> httpx.AsyncClient:
        kwargs.setdefault("timeout", 10.0)
        return httpx.AsyncClient(base_url=self.url, **kwargs)

    async def stop(self) -> None:
        """Stop as SIGTERM would: the gateway drains, then uvicorn shuts down."""
        self.server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(self.task, 30)


async def launch(
    settings: Settings | None = None,
    *,
    providers: Mapping[str, AgentProvider] | None = None,
    sndbuf: int | None = None,
    backend: Backend | None = None,
) -> RunningGateway:
    """A gateway started directly, on the backend the settings (or ``backend``) name. In a test,
    the backend guard (``tests/backend_guard.py``) holds it to the test's backend."""
    return await start_server(settings, providers=providers, sndbuf=sndbuf, backend=backend)


async def start_server(
    settings: Settings | None = None,
    *,
    providers: Mapping[str, AgentProvider] | None = None,
    sndbuf: int | None = None,
    backend: Backend | None = None,
) -> RunningGateway:
    """uvicorn serving ``create_app(...)`` on a free loopback port, in this event loop."""
    app = create_app(settings or make_settings(), providers=providers, backend=backend)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if sndbuf is not None:  # accepted sockets inherit it (Linux): a stalled client blocks fast
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=20)
    server = GatewayServer(config, install_signal_handlers=False)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    for _ in range(500):
        if server.started or task.done():
            break
        await asyncio.sleep(0.01)
    if task.done():
        task.result()
    assert server.started, "gateway did not start"
    return RunningGateway(app, server, task, port)


class StartGateway(Protocol):
    """The ``start_gateway`` fixture: ``await start_gateway(settings, providers=...)``."""

    async def __call__(
        self,
        settings: Settings | None = None,
        *,
        providers: Mapping[str, AgentProvider] | None = None,
        sndbuf: int | None = None,
        backend: Backend | None = None,
    ) -> RunningGateway: ...
