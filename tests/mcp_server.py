"""A real MCP server for the tests (the ``mcp`` SDK, streamable HTTP on loopback).

Tools: ``echo`` (its arguments back), ``slow`` (sleeps ``seconds``; a cancellation is recorded
in ``cancelled`` with the time it was seen, then honoured), ``fails`` (an MCP error result),
``needs_auth`` (an error result unless the ``Authorization`` header is ``Bearer <token>``),
``grow`` (adds the tool ``extra`` and notifies ``notifications/tools/list_changed``).

In a test: ``async with serve_mcp() as server`` (same event loop, so a test can wait on
``server.cancel_seen``). Alone: ``python -m tests.mcp_server --port N`` (``GET /stats`` gives
the calls and cancellations as JSON).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolListChangedNotification
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from tests.loopback_asgi import serve_asgi

DEFAULT_TOKEN = "test-mcp-token"


class TestMcpServer:
    """The server's tools and what it saw (calls, headers, cancellations)."""

    __test__ = False  # not a pytest class

    def __init__(self, token: str = DEFAULT_TOKEN) -> None:
        self.token = token
        self.calls: list[tuple[str, dict[str, Any]]] = []
        #: (tool, monotonic time the cancellation reached the tool)
        self.cancelled: list[tuple[str, float]] = []
        self.cancel_seen = asyncio.Event()
        self.slow_started = asyncio.Event()
        self.authorizations: list[str] = []
        #: ``slow`` calls running now, and the most that ever ran at once
        self.in_flight = 0
        self.max_in_flight = 0
        #: True: every MCP request is answered 503 (a server gone down behind its proxy)
        self.down = False
        self.mcp = MCPServer("gateway-test-tools")
        self._register()
        self._endpoint = self.mcp.streamable_http_app(streamable_http_path="/")

    def _register(self) -> None:
        mcp = self.mcp

        @mcp.tool(description="Return the text it was given.")
        def echo(text: str, times: int = 1) -> str:
            self.calls.append(("echo", {"text": text, "times": times}))
            return " ".join([text] * times)

        @mcp.tool(description="Sleep for some seconds, then answer.")
        async def slow(seconds: float = 30.0) -> str:
            self.calls.append(("slow", {"seconds": seconds}))
            self.slow_started.set()
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                await anyio.sleep(seconds)
            except anyio.get_cancelled_exc_class():
                self.cancelled.append(("slow", time.monotonic()))
                self.cancel_seen.set()
                raise
            finally:
                self.in_flight -= 1
            return f"slept {seconds}"

        @mcp.tool(description="Always fails.")
        def fails(reason: str = "broken") -> str:
            self.calls.append(("fails", {"reason": reason}))
            raise ToolError(f"the tool failed: {reason}")

        @mcp.tool(description="Answers only with the right Authorization header.")
        def needs_auth(ctx: Context) -> str:
            request = ctx.request_context.request
            headers = getattr(request, "headers", {})
            value = str(headers.get("authorization", ""))
            self.authorizations.append(value)
            self.calls.append(("needs_auth", {}))
            if value != f"Bearer {self.token}":
                raise ToolError("unauthorised")
            return "authorised"

        @mcp.tool(description="Add the tool `extra` and announce the new tool list.")
        async def grow(ctx: Context) -> str:
            self.calls.append(("grow", {}))
            if "extra" not in {tool.name for tool in await mcp.list_tools()}:
                mcp.add_tool(_extra, name="extra", description="A tool added at run time.")
            # on the call's own stream, so the client sees it before the result
            await ctx.request_context.session.send_notification(
                ToolListChangedNotification(), related_request_id=ctx.request_id
            )
            return "grown"

    def stats(self) -> dict[str, Any]:
        return {
            "calls": [[name, args] for name, args in self.calls],
            "cancelled": [name for name, _ in self.cancelled],
        }

    def app(self) -> Starlette:
        """The MCP endpoint at ``/mcp`` and ``GET /stats``; run it inside :meth:`running`."""
        inner = self._endpoint

        async def stats(request: Request) -> JSONResponse:
            return JSONResponse(self.stats())

        async def endpoint(scope: Any, receive: Any, send: Any) -> None:
            if self.down and scope["type"] == "http":
                await JSONResponse({"error": "down"}, 503)(scope, receive, send)
                return
            await inner(scope, receive, send)

        return Starlette(routes=[Route("/stats", stats), Mount("/mcp", app=endpoint)])

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The session manager's task group (the ASGI lifespan's job, done here)."""
        async with self.mcp.session_manager.run():
            yield


def _extra(note: str = "") -> str:
    return f"extra {note}".strip()


@asynccontextmanager
async def serve_mcp(token: str = DEFAULT_TOKEN) -> AsyncIterator[ServedMcp]:
    """Start a :class:`TestMcpServer` on a free loopback port in this event loop."""
    server = TestMcpServer(token)
    async with server.running(), serve_asgi(server.app()) as port:
        yield ServedMcp(server, port)


@asynccontextmanager
async def serve_mcp_in_task(token: str = DEFAULT_TOKEN) -> AsyncIterator[ServedMcp]:
    """:func:`serve_mcp` held by a task of its own: for a fixture, whose setup and teardown
    run in different tasks (the SDK's task groups must be left by the task that entered)."""
    stop = asyncio.Event()
    ready: asyncio.Future[ServedMcp] = asyncio.get_running_loop().create_future()

    async def hold() -> None:
        async with serve_mcp(token) as served:
            ready.set_result(served)
            await stop.wait()

    task = asyncio.create_task(hold())
    waiters: set[asyncio.Future[Any]] = {task, ready}
    done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        task.result()  # it failed to start: raise why
    try:
        yield ready.result()
    finally:
        stop.set()
        await task


class ServedMcp:
    """A running test server: its tools' record and its URL."""

    def __init__(self, server: TestMcpServer, port: int) -> None:
        self.server = server
        self.port = port
        self.url = f"http://127.0.0.1:{port}/mcp/"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--token", default=DEFAULT_TOKEN)
    args = parser.parse_args(argv)
    server = TestMcpServer(args.token)

    async def serve() -> None:
        config = uvicorn.Config(
            server.app(), host="127.0.0.1", port=args.port, log_level="warning", lifespan="off"
        )
        async with server.running():
            await uvicorn.Server(config).serve()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())


if __name__ == "__main__":
    main()
