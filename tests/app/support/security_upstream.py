"""A raw loopback upstream for the security and fault tests (asyncio streams, no framework).

It records every request exactly as it arrived on the socket (request line, headers, body) and
answers by the first path segment:

- ``/events`` — a native AgentEvent SSE stream (for ``kind = "agent-event"``): the events of
  ``Upstream.script`` (``(type, payload)`` or ``(type, payload, envelope overrides)``), then
  ``run.completed``;
- ``/openai`` — a minimal OpenAI Chat Completions stream ("ok", then ``[DONE]``);
- ``/flood`` — headers, then ``flood_bytes`` of ``x`` without a single newline (slowly enough
  to be aborted), chunked;
- ``/silent`` — accepts the request and never answers (until the client leaves);
- ``/slow`` — one event, then a ``run.completed`` after ``slow_seconds``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = ["RawRequest", "Upstream", "serve_upstream"]


@dataclass
class RawRequest:
    head: bytes
    body: bytes

    @property
    def request_line(self) -> str:
        return self.head.split(b"\r\n", 1)[0].decode("latin-1")

    @property
    def headers(self) -> dict[str, str]:
        lines = self.head.decode("latin-1").split("\r\n")[1:]
        pairs = (line.split(":", 1) for line in lines if ":" in line)
        return {name.strip().lower(): value.strip() for name, value in pairs}


@dataclass
class Upstream:
    port: int = 0
    requests: list[RawRequest] = field(default_factory=list)
    #: (type, payload) or (type, payload, envelope fields to override)
    script: list[tuple[Any, ...]] = field(default_factory=list)
    flood_bytes: int = 50 * 1024 * 1024
    flood_sent: int = 0
    slow_seconds: float = 1.0
    open_connections: int = 0
    disconnected: asyncio.Event = field(default_factory=asyncio.Event)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open_connections += 1
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            request = RawRequest(head, b"")
            length = int(request.headers.get("content-length", "0") or 0)
            request.body = await reader.readexactly(length) if length else b""
            self.requests.append(request)
            path = request.request_line.split(" ")[1]
            await self._answer(path.split("?")[0].strip("/").split("/")[0], reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.open_connections -= 1
            self.disconnected.set()
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _answer(
        self, route: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if route == "silent":
            await reader.read()  # returns when the gateway closes the connection
            return
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        if route == "flood":  # flood_bytes per connection; flood_sent counts all of them
            piece = b"x" * 65536
            sent = 0
            while sent < self.flood_bytes:
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                sent += len(piece)
                self.flood_sent += len(piece)
                await writer.drain()
            await reader.read()
            return
        for frame in self._frames(route):
            writer.write(b"%x\r\n%s\r\n" % (len(frame), frame))
            await writer.drain()
            if route == "slow":
                await asyncio.sleep(self.slow_seconds)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    def _frames(self, route: str) -> list[bytes]:
        if route == "openai":
            chunk = {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": []}
            delta = {**chunk, "choices": [{"index": 0, "delta": {"content": "ok"}}]}
            stop = {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            return [_data(delta), _data(stop), b"data: [DONE]\n\n"]
        events = [("run.started", {}), *self.script]
        if route == "slow":
            events = [("run.started", {})]
        events.append(("run.completed", {}))
        return [
            _data({**_envelope(seq, item[0], item[1]), **(item[2] if len(item) > 2 else {})})
            for seq, item in enumerate(events)
        ]


def _envelope(seq: int, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "protocolVersion": "0.1",
        "type": kind,
        "eventId": f"up-{seq}",
        "sessionId": "up-session",
        "runId": "up-run",
        "sequence": seq,
        "timestamp": 1.0,
        "payload": payload,
    }


def _data(payload: Any) -> bytes:
    try:
        text = orjson.dumps(payload)
    except TypeError:  # integers beyond 64 bits: written as JSON digits, like other servers do
        text = json.dumps(payload).encode()
    return b"data: " + text + b"\n\n"


@contextlib.asynccontextmanager
async def serve_upstream() -> AsyncIterator[Upstream]:
    upstream = Upstream()
    server = await asyncio.start_server(upstream.handle, "127.0.0.1", 0)
    upstream.port = server.sockets[0].getsockname()[1]
    try:
        yield upstream
    finally:
        server.close()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2):
                await server.wait_closed()
