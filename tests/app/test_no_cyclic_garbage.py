"""A finished run and a finished stream leave nothing for the cycle collector.

Cyclic garbage is freed only by a collection, and what a cycle holds lives until then: a
connection's objects, a response, a run's stopper. Under load, that garbage was most of what
the collector's full passes walked (93-180 ms pauses at 175 concurrent streams).
"""

from __future__ import annotations

import asyncio
import gc
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import orjson
import websockets
from redis.exceptions import ResponseError

from app.streams.sse import _GatewayEventSource
from providers.transports._abort import Stopper
from tests.app.support.gateway_server import StartGateway, make_settings
from tests.app.support.helpers import collect_sse, metric, start_run, terminal, wait_state
from tests.app.support.security_upstream import serve_upstream
from tests.support import eventually_async

SCRIPT = [
    ("message.started", {"messageId": "m1", "role": "assistant"}),
    ("message.delta", {"messageId": "m1", "delta": "hello"}),
    ("message.completed", {"messageId": "m1"}),
]


def _ends_a_run(frame: dict[str, Any]) -> bool:
    return frame["type"] == "event" and frame["event"]["type"] in (
        "run.completed",
        "run.failed",
        "run.cancelled",
    )


@contextmanager
def collector_held() -> Iterator[list[Any]]:
    """No automatic collection inside; on exit, the cyclic garbage made inside, kept for
    inspection (``DEBUG_SAVEALL``), in the yielded list."""
    gc.collect()
    gc.disable()
    found: list[Any] = []
    try:
        yield found
    finally:
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            gc.collect()
            found.extend(gc.garbage)
            gc.garbage.clear()
        finally:
            gc.set_debug(0)
            gc.enable()


def _what(obj: Any, upstream_port: int) -> str | None:
    """A name for a garbage object the server made, or None."""
    kind = type(obj)
    if kind.__name__ == "RequestResponseCycle":  # uvicorn's, one per request
        return "a request's connection"
    if isinstance(obj, _GatewayEventSource):
        return "an SSE response"
    if isinstance(obj, Stopper):
        return "a run's stopper"
    if isinstance(obj, httpx.Response) and obj.request.url.port == upstream_port:
        return "an upstream response"
    if isinstance(obj, asyncio.CancelledError):
        return "a cancelled task's error"
    if isinstance(obj, ResponseError):  # Redis: a read of a log not created yet
        return "a Redis error reply"
    return None


async def test_runs_and_streams_leave_no_cyclic_garbage(start_gateway: StartGateway) -> None:
    async with serve_upstream() as upstream:
        upstream.script = SCRIPT
        settings = make_settings(
            gateway={"default_provider": "native"},
            providers={"native": {"kind": "agent-event", "url": upstream.url("/events")}},
        )
        gw = await start_gateway(settings)
        async with gw.client() as client:

            async def converse(key: str) -> None:
                first = asyncio.Event()
                reading = asyncio.create_task(
                    collect_sse(
                        client, f"/v1/conversations/{key}/events", stop=terminal, first_frame=first
                    )
                )
                await first.wait()
                await start_run(client, key, "go")
                assert terminal(await reading)
                await wait_state(client, key, lambda s: s["activeRunId"] is None)

            async def over_websocket(key: str) -> None:
                url = f"{gw.ws_url}/v1/conversations/{key}/ws"
                async with websockets.connect(url) as ws:
                    assert orjson.loads(await ws.recv())["type"] == "snapshot"
                    await ws.send(
                        orjson.dumps({"op": "request", "input": {"prompt": "go"}}).decode()
                    )
                    while not _ends_a_run(orjson.loads(await ws.recv())):
                        pass
                await wait_state(client, key, lambda s: s["activeRunId"] is None)

            async def streams_closed() -> bool:
                sse = await metric(client, "agent_gateway_subscribers")
                return sse == 0 and await metric(client, "agent_gateway_subscribers", "ws") == 0

            await converse("warm")  # what a first request builds once (caches, pools)
            await over_websocket("warm-ws")
            await eventually_async(streams_closed, what="the warm-up stream ended")
            with collector_held() as garbage:
                await asyncio.gather(
                    *(converse(f"c{i}") for i in range(4)),
                    over_websocket("w1"),
                    over_websocket("w2"),
                )
                await eventually_async(streams_closed, what="every stream ended")
    named = Counter(what for obj in garbage if (what := _what(obj, upstream.port)) is not None)
    assert not named, named
