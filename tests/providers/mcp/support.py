"""Helpers of the MCP provider tests: settings for a test server, event picks, the test MCP
server as its own process (to kill it), a mock model upstream that holds a turn back."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from providers.contract import AgentEvent
from providers.mcp import McpServerConfig, McpSettings
from tests.loopback_asgi import serve_asgi
from tests.mcp_server import DEFAULT_TOKEN
from tests.providers.support.mock_upstreams import Frames, MockUpstream
from tests.support import eventually_async, free_port

ROOT = Path(__file__).resolve().parents[3]


def settings_for(url: str, name: str = "tools", **server: Any) -> McpSettings:
    """One server ``name`` at ``url`` (with the right token unless ``headers`` is given)."""
    server.setdefault("headers", {"Authorization": f"Bearer {DEFAULT_TOKEN}"})
    server.setdefault("approval", "never")
    server.setdefault("timeout_seconds", 10.0)
    max_parallel = server.pop("max_parallel", 4)
    config = McpServerConfig(name=name, url=url, **server)
    return McpSettings({name: config}, max_parallel=max_parallel)


def of_type(events: Sequence[AgentEvent], *types: str) -> list[AgentEvent]:
    return [event for event in events if event["type"] in types]


def types_of(events: Sequence[AgentEvent], *prefixes: str) -> list[str]:
    return [e["type"] for e in events if e["type"].startswith(prefixes)]


@dataclass
class McpProcess:
    """``python -m tests.mcp_server --port N`` running: its process and MCP endpoint."""

    process: asyncio.subprocess.Process
    url: str

    async def kill(self) -> None:
        """SIGKILL: the server is gone at once, its port refuses connections."""
        if self.process.returncode is None:
            self.process.kill()
        await self.process.wait()


@asynccontextmanager
async def mcp_server_process() -> AsyncIterator[McpProcess]:
    """The test MCP server in a process of its own on a free port, once it answers."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.mcp_server",
        "--port",
        str(port),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    served = McpProcess(process, f"http://127.0.0.1:{port}/mcp/")
    try:
        async with httpx.AsyncClient(timeout=1) as http:

            async def answers() -> bool:
                assert process.returncode is None, "the test MCP server exited"
                try:
                    return (await http.get(f"http://127.0.0.1:{port}/stats")).status_code == 200
                except httpx.HTTPError:
                    return False

            await eventually_async(answers, within=30, what="the test MCP server answers")
        yield served
    finally:
        await served.kill()


@dataclass
class GatedMock(MockUpstream):
    """A :class:`MockUpstream` whose first answer waits: ``asked`` is set when the first
    request arrives, and the answer goes out once the test sets ``gate``."""

    asked: asyncio.Event = field(default_factory=asyncio.Event)
    gate: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: Request) -> Response:
        if not self.requests:
            self.asked.set()
            await self.gate.wait()
        return await super().handle(request)


@asynccontextmanager
async def serve_gated_mock(responses: Sequence[Frames]) -> AsyncIterator[GatedMock]:
    """:func:`~tests.providers.support.mock_upstreams.serve_mock` with a :class:`GatedMock`."""
    mock = GatedMock(list(responses))
    app = Starlette(routes=[Route("/{path:path}", mock.handle, methods=["POST"])])
    async with serve_asgi(app) as port:
        mock.url = f"http://127.0.0.1:{port}/v1/endpoint"
        yield mock
