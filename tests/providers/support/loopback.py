"""A real loopback upstream (uvicorn on a free port) for transport and fault tests.

It speaks native AgentEvent 0.1 over SSE (``POST /sse/{scenario}``) and WebSocket
(``/ws/{scenario}``), streams slowly on demand, and records when the client disconnected
(``disconnects``: monotonic times) and the WebSocket close codes it saw.

SSE scenarios: ``slow`` (``?delay=&count=&first_delay=``), ``status`` (``?code=``), ``malformed``,
``drop`` (connection cut without the chunked terminator), ``stall`` (one event then silence),
``invalid`` (an invalid envelope), ``no-terminal`` (clean end without a run terminal),
``approval`` (waits on an approval; the continuation request with ``commands`` finishes),
``big`` (one event of 4 KiB, then silence).
"""

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
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from tests.loopback_asgi import serve_asgi

UP_SESSION = "up-session"
UP_RUN = "up-run"


def envelope(seq: int, type: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "protocolVersion": "0.1",
        "type": type,
        "eventId": f"up-{seq}",
        "sessionId": UP_SESSION,
        "runId": UP_RUN,
        "sequence": seq,
        "timestamp": 1.0,
        "payload": payload,
    }


def sse(event: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(event) + b"\n\n"


def opening() -> list[dict[str, Any]]:
    return [
        envelope(0, "run.started", {}),
        envelope(1, "message.started", {"messageId": "m1", "role": "assistant"}),
    ]


@dataclass
class Loopback:
    url: str = ""
    requests: list[Any] = field(default_factory=list)
    disconnects: list[float] = field(default_factory=list)
    first_chunk_sent: list[float] = field(default_factory=list)
    close_codes: list[int] = field(default_factory=list)
    connected: asyncio.Event = field(default_factory=asyncio.Event)
    disconnected: asyncio.Event = field(default_factory=asyncio.Event)

    def _record_disconnect(self, code: int | None = None) -> None:
        self.disconnects.append(time.monotonic())
        if code is not None:
            self.close_codes.append(code)
        self.disconnected.set()

    # -- SSE -------------------------------------------------------------------------------------

    async def sse_route(self, request: Request) -> Response:
        scenario = request.path_params["scenario"]
        body = orjson.loads(await request.body())
        self.requests.append(body)
        q = request.query_params
        if scenario == "status":
            code = int(q.get("code", "500"))
            return JSONResponse({"error": {"message": f"status {code}", "type": "x"}}, code)
        self.connected.set()
        return StreamingResponse(self._stream(scenario, body, q), media_type="text/event-stream")

    async def _stream(self, scenario: str, body: Any, q: Any) -> AsyncIterator[bytes]:
        try:
            if scenario == "slow":
                await asyncio.sleep(float(q.get("first_delay", "0")))
                for event in opening():
                    yield sse(event)
                self.first_chunk_sent.append(time.monotonic())
                for i in range(int(q.get("count", "1000"))):
                    await asyncio.sleep(float(q.get("delay", "0.05")))
                    yield sse(envelope(2 + i, "message.delta", {"messageId": "m1", "delta": "x"}))
                n = 2 + int(q.get("count", "1000"))
                yield sse(envelope(n, "message.completed", {"messageId": "m1"}))
                yield sse(envelope(n + 1, "run.completed", {}))
            elif scenario == "big":
                for event in opening():
                    yield sse(event)
                big = envelope(2, "message.delta", {"messageId": "m1", "delta": "x" * 4096})
                yield sse(big)
                await asyncio.sleep(3600)
            elif scenario == "malformed":
                for event in opening():
                    yield sse(event)
                yield b"data: {not json\n\n"
            elif scenario == "drop":
                for event in opening():
                    yield sse(event)
                await asyncio.sleep(0.01)
                raise RuntimeError("drop the connection")
            elif scenario == "stall":
                for event in opening():
                    yield sse(event)
                await asyncio.sleep(3600)
            elif scenario == "invalid":
                for event in opening():
                    yield sse(event)
                yield sse({**envelope(2, "message.delta", {"messageId": "m1"})})
            elif scenario == "no-terminal":
                for event in opening():
                    yield sse(event)
                yield sse(envelope(2, "message.delta", {"messageId": "m1", "delta": "hi"}))
            elif scenario == "tools":
                if not body.get("commands"):
                    yield sse(envelope(0, "run.started", {}))
                    tool = envelope(1, "tool.requested", {"toolCallId": "t1", "name": "geo"})
                    yield sse({**tool, "meta": {"executor": "app"}})
                    yield sse(
                        envelope(2, "tool.arguments_delta", {"toolCallId": "t1", "delta": "{}"})
                    )
                    yield sse(envelope(3, "approval.requested", {"approvalId": "a1"}))
                else:
                    yield sse(envelope(4, "run.completed", {"output": body["commands"]}))
            elif scenario == "approval":
                if not body.get("commands"):
                    for event in opening():
                        yield sse(event)
                    yield sse(envelope(2, "message.delta", {"messageId": "m1", "delta": "hi"}))
                    yield sse(envelope(3, "message.completed", {"messageId": "m1"}))
                    yield sse(
                        envelope(4, "approval.requested", {"approvalId": "a1", "risk": "high"})
                    )
                else:
                    decision = body["commands"][0]["payload"]["decision"]
                    yield sse(
                        envelope(5, "message.started", {"messageId": "m2", "role": "assistant"})
                    )
                    yield sse(envelope(6, "message.delta", {"messageId": "m2", "delta": decision}))
                    yield sse(envelope(7, "message.completed", {"messageId": "m2"}))
                    yield sse(envelope(8, "run.completed", {"output": decision}))
        finally:
            self._record_disconnect()

    # -- WebSocket -------------------------------------------------------------------------------

    async def ws_route(self, websocket: WebSocket) -> None:
        scenario = websocket.path_params["scenario"]
        await websocket.accept()
        first = await websocket.receive_json()
        self.requests.append(first)
        self.connected.set()
        q = websocket.query_params
        sender = asyncio.create_task(self._ws_send(websocket, scenario, q))
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    self._record_disconnect(int(message.get("code", 1000)))
                    break
                data = orjson.loads(message.get("text") or message.get("bytes") or b"{}")
                self.requests.append(data)
                if scenario == "approval" and "command" in data:
                    decision = data["command"]["payload"]["decision"]
                    for event in (
                        envelope(5, "message.started", {"messageId": "m2", "role": "assistant"}),
                        envelope(6, "message.delta", {"messageId": "m2", "delta": decision}),
                        envelope(7, "message.completed", {"messageId": "m2"}),
                        envelope(8, "run.completed", {"output": decision}),
                    ):
                        await websocket.send_bytes(orjson.dumps(event))
        except WebSocketDisconnect as exc:
            self._record_disconnect(exc.code)
        finally:
            sender.cancel()

    async def _ws_send(self, websocket: WebSocket, scenario: str, q: Any) -> None:
        try:
            if scenario == "slow":
                await asyncio.sleep(float(q.get("first_delay", "0")))
                for event in opening():
                    await websocket.send_text(orjson.dumps(event).decode())
                self.first_chunk_sent.append(time.monotonic())
                for i in range(int(q.get("count", "1000"))):
                    await asyncio.sleep(float(q.get("delay", "0.05")))
                    event = envelope(2 + i, "message.delta", {"messageId": "m1", "delta": "x"})
                    await websocket.send_text(orjson.dumps(event).decode())
            elif scenario == "approval":
                for event in [
                    *opening(),
                    envelope(2, "message.completed", {"messageId": "m1", "content": "hi"}),
                    envelope(3, "approval.requested", {"approvalId": "a1"}),
                ]:
                    await websocket.send_text(orjson.dumps(event).decode())
            elif scenario == "big":
                for event in opening():
                    await websocket.send_text(orjson.dumps(event).decode())
                big = envelope(2, "message.delta", {"messageId": "m1", "delta": "x" * 4096})
                await websocket.send_text(orjson.dumps(big).decode())
            elif scenario == "invalid":
                for event in opening():
                    await websocket.send_text(orjson.dumps(event).decode())
                await websocket.send_text('{"protocolVersion": "0.1"}')
        except Exception:  # the client went away
            return

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/sse/{scenario}", self.sse_route, methods=["POST"]),
                WebSocketRoute("/ws/{scenario}", self.ws_route),
            ]
        )


@asynccontextmanager
async def serve_loopback() -> AsyncIterator[Loopback]:
    loopback = Loopback()
    async with serve_asgi(loopback.app(), log_level="critical") as port:
        loopback.url = f"127.0.0.1:{port}"
        yield loopback
