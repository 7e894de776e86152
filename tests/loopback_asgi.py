"""Serve an ASGI app with uvicorn on a free loopback port, inside the running event loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn


@asynccontextmanager
async def serve_asgi(app: Any, *, log_level: str = "warning") -> AsyncIterator[int]:
    """Start ``app`` on 127.0.0.1 (port 0) and yield the bound port; stop it on exit."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level=log_level, lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    port: int = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield port
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
