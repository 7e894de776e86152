"""The baselines measured beside the gateway, each a tiny ASGI app in front of the mock upstream.

- ``POST /relay``: raw byte relay. The request body goes to the upstream as is; the response
  bytes come back untouched (``httpx`` stream → ``StreamingResponse``, no parsing).
- ``POST /normalize``: minimal normalizer. Parse the upstream SSE (``httpx-sse``),
  ``orjson.loads`` each event, re-emit one small normalized event per delta.
- ``POST /fanout/{key}/start`` and ``GET /fanout/{key}/events``: the minimal normalizer
  broadcasting one run to every subscriber of ``key`` (one queue per subscriber, each event
  serialized once): the naive fan-out that the gateway's log-following design replaces.

The upstream base URL comes from ``BENCH_UPSTREAM`` (``http://127.0.0.1:PORT``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
from httpx_sse import EventSource
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

__all__ = ["app"]

UPSTREAM = os.environ.get("BENCH_UPSTREAM", "http://127.0.0.1:8001")
CHAT = "/v1/chat/completions"
_client: httpx.AsyncClient | None = None
_subscribers: dict[str, list[asyncio.Queue[bytes | None]]] = {}


def client() -> httpx.AsyncClient:
    global _client
    if _client is None:
        _client = httpx.AsyncClient(
            base_url=UPSTREAM,
            timeout=httpx.Timeout(60.0),
            limits=httpx.Limits(max_connections=None),
        )
    return _client


async def _upstream_lines(body: bytes) -> AsyncIterator[bytes]:
    """Normalized event frames from the upstream's SSE."""
    async with client().stream(
        "POST", CHAT, content=body, headers={"content-type": "application/json"}
    ) as response:
        async for sse in EventSource(response).aiter_sse():
            if sse.data == "[DONE]":
                break
            chunk = orjson.loads(sse.data)
            for choice in chunk.get("choices") or ():
                content = (choice.get("delta") or {}).get("content")
                if content:
                    yield (
                        b"data: "
                        + orjson.dumps({"type": "message.delta", "payload": {"delta": content}})
                        + b"\n\n"
                    )
                if choice.get("finish_reason"):
                    yield b'data: {"type":"run.completed"}\n\n'


async def relay(request: Request) -> Response:
    body = await request.body()
    upstream = client().build_request(
        "POST", CHAT, content=body, headers={"content-type": "application/json"}
    )
    response = await client().send(upstream, stream=True)
    return StreamingResponse(
        response.aiter_raw(),
        media_type="text/event-stream",
        background=BackgroundTask(response.aclose),
    )


async def normalize(request: Request) -> Response:
    body = await request.body()
    return StreamingResponse(_upstream_lines(body), media_type="text/event-stream")


async def fanout_events(request: Request) -> Response:
    key = request.path_params["key"]
    queue: asyncio.Queue[bytes | None] = asyncio.Queue()
    _subscribers.setdefault(key, []).append(queue)

    async def frames() -> AsyncIterator[bytes]:
        yield b"event: snapshot\ndata: {}\n\n"
        try:
            while True:
                frame = await queue.get()
                if frame is None:
                    return
                yield frame
        finally:
            subs = _subscribers.get(key, [])
            if queue in subs:
                subs.remove(queue)

    return StreamingResponse(frames(), media_type="text/event-stream")


async def fanout_start(request: Request) -> Response:
    key = request.path_params["key"]
    body = await request.body()

    async def pump() -> None:
        async for frame in _upstream_lines(body):
            for queue in list(_subscribers.get(key, [])):
                queue.put_nowait(frame)
        for queue in list(_subscribers.get(key, [])):
            queue.put_nowait(None)

    task = asyncio.ensure_future(pump())
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)
    return JSONResponse({"subscribers": len(_subscribers.get(key, []))}, status_code=202)


_tasks: set[asyncio.Task[Any]] = set()


async def healthz(request: Request) -> Response:
    return JSONResponse({"ok": True})


app = Starlette(
    routes=[
        Route("/relay", relay, methods=["POST"]),
        Route("/normalize", normalize, methods=["POST"]),
        Route("/fanout/{key}/events", fanout_events, methods=["GET"]),
        Route("/fanout/{key}/start", fanout_start, methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
    ]
)
