"""Helpers of the concurrency tests: one gateway fixture over both backends, WS and SSE clients.

``gateways`` starts gateways on the memory backend or (every gateway of one test sharing a key
prefix, i.e. one cluster) on the Redis backend on the shared Redis.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson
import pytest
import websockets

from app.config import Settings
from providers.context import RunContext
from tests.app.gateway_server import RunningGateway, launch, make_settings
from tests.app.redis_http import redis_backend_for
from tests.app.redis_support import shared_redis, unique_prefix
from tests.app.scripted_provider import ScriptedProvider

__all__ = [
    "TERMINALS",
    "CountingProvider",
    "Gateways",
    "HeldProvider",
    "gateways",
    "run_log",
    "ws_requests",
]

TERMINALS = ("run.completed", "run.failed", "run.cancelled")


class Gateways:
    """``await gateways(settings, providers=...)`` -> a RunningGateway on ``backend``; on
    Redis every gateway of one test shares a key prefix (they form one cluster)."""

    def __init__(self, backend: str, prefix: str) -> None:
        self.backend = backend
        self.prefix = prefix
        self.running: list[RunningGateway] = []

    @property
    def shared(self) -> bool:
        """Gateways started by one test share their conversations (several instances)."""
        return self.backend == "redis"

    async def __call__(self, settings: Settings | None = None, **kwargs: Any) -> RunningGateway:
        settings = settings or make_settings()
        if self.backend == "redis":
            instance = f"{self.prefix}-gw{len(self.running)}"
            kwargs["backend"] = redis_backend_for(settings, self.prefix, instance)
        gateway = await launch(settings, **kwargs)
        self.running.append(gateway)
        return gateway


@pytest.fixture(params=["memory", "redis"])
async def gateways(request: pytest.FixtureRequest) -> AsyncIterator[Gateways]:
    """Gateways on the param's backend, stopped after the test."""
    starter = Gateways(request.param, unique_prefix())
    async with shared_redis(starter.prefix):
        yield starter
        for gateway in starter.running:
            if not gateway.task.done():
                await gateway.stop()


async def ws_requests(gw: RunningGateway, key: str, frames: list[dict[str, Any]]) -> list[str]:
    """Send ``frames`` back to back on one WebSocket, without waiting in between; the run ids
    of the acks, in order."""
    async with websockets.connect(f"{gw.ws_url}/v1/conversations/{key}/ws") as ws:
        for frame in frames:
            await ws.send(orjson.dumps(frame).decode())
        run_ids: list[str] = []
        while len(run_ids) < len(frames):
            message = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
            if message.get("type") == "ack":
                run_ids.append(message["runId"])
            assert message.get("type") != "error", message
    return run_ids


def run_log(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(runId, type) of the run lifecycle events, in log order."""
    return [
        (e["runId"], e["type"])
        for e in events
        if e["type"] == "run.started" or e["type"] in TERMINALS
    ]


class CountingProvider(ScriptedProvider):
    """The scripted provider, recording the prompt of every request that reached the upstream."""

    def __init__(self) -> None:
        super().__init__()
        self.reached: list[str] = []

    async def prepare_request(self, input: Mapping[str, Any], ctx: RunContext) -> Any:
        self.reached.append(str(input.get("prompt")))
        return await super().prepare_request(input, ctx)


class HeldProvider(CountingProvider):
    """A run whose prompt contains ``hold`` waits (ignoring aborts) until ``release`` is set:
    a run that outlives the gateway's shutdown grace."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.holding = asyncio.Event()

    async def prepare_request(self, input: Mapping[str, Any], ctx: RunContext) -> Any:
        if "hold" in str(input.get("prompt")):
            self.holding.set()
            await self.release.wait()
        return await super().prepare_request(input, ctx)
