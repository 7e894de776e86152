"""Helpers of the concurrency tests: ``gateways`` (``start_gateway`` on both backends, saying
whether the gateways of one test share their conversations), WS and SSE clients."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import orjson
import pytest
import websockets

from app.config import Settings
from providers.context import RunContext
from tests.app.support.gateway_server import RunningGateway, StartGateway
from tests.app.support.scripted_provider import ScriptedProvider

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
    """``await gateways(settings, providers=...)`` -> a RunningGateway on the test's backend
    (``start_gateway``); on Redis every gateway of one test shares a key prefix (one cluster)."""

    def __init__(self, start: StartGateway, backend: str) -> None:
        self.backend = backend
        self._start = start

    @property
    def shared(self) -> bool:
        """Gateways started by one test share their conversations (several instances)."""
        return self.backend in ("redis", "redis-cluster")

    async def __call__(self, settings: Settings | None = None, **kwargs: Any) -> RunningGateway:
        return await self._start(settings, **kwargs)


@pytest.fixture
def gateways(start_gateway: StartGateway, backend_kind: str) -> Gateways:
    """Gateways on the test's backend (memory and Redis), stopped after the test."""
    return Gateways(start_gateway, backend_kind)


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
