"""Fixtures of the app tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from tests.app.gateway_server import RunningGateway, launch

StartGateway = Callable[..., Awaitable[RunningGateway]]


@pytest.fixture
async def start_gateway() -> AsyncIterator[StartGateway]:
    """``await start_gateway(settings, providers=..., sndbuf=...)`` -> a RunningGateway."""
    running: list[RunningGateway] = []

    async def start(*args: Any, **kwargs: Any) -> RunningGateway:
        gateway = await launch(*args, **kwargs)
        running.append(gateway)
        return gateway

    yield start
    for gateway in running:
        if not gateway.task.done():
            await gateway.stop()
