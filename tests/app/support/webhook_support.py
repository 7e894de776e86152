"""A loopback webhook receiver: records every delivery, can fail or answer late."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.loopback_asgi import serve_asgi

__all__ = ["Receiver", "serve_receiver"]


@dataclass
class Receiver:
    """Records every POST; fails the first ``fail_first`` with 500; answers after ``delay`` s
    and, when ``hold`` is given, not before it is set."""

    fail_first: int = 0
    delay: float = 0.0
    url: str = ""
    attempts: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    acknowledged: list[dict[str, Any]] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    hold: asyncio.Event | None = None

    async def handle(self, request: Request) -> Response:
        body = await request.body()
        self.attempts.append((dict(request.headers), body))
        self.arrived.set()
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.hold is not None:
            await self.hold.wait()
        if len(self.attempts) <= self.fail_first:
            return Response(status_code=500)
        self.acknowledged.append(orjson.loads(body))
        return Response(status_code=204)

    async def wait_acknowledged(self, count: int, within: float = 10.0) -> None:
        deadline = time.monotonic() + within
        while len(self.acknowledged) < count:
            assert time.monotonic() < deadline, f"only {len(self.acknowledged)} acknowledged"
            await asyncio.sleep(0.02)


@asynccontextmanager
async def serve_receiver(receiver: Receiver) -> AsyncIterator[Receiver]:
    app = Starlette(routes=[Route("/hook", receiver.handle, methods=["POST"])])
    async with serve_asgi(app) as port:
        receiver.url = f"http://127.0.0.1:{port}/hook"
        yield receiver
