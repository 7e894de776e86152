"""uvicorn's internals (``app/compat/uvicorn_fast.py``): with each removed, or with
``[gateway] fast_paths = false``, the gateway still serves runs and SSE streams on the public
ASGI path (real uvicorn on loopback, both backends): a run pushed to a follower, its POST
``?stream=true`` answer, a resume with Last-Event-ID, a stalled subscriber dropped past
``send_timeout_seconds`` while a healthy one gets everything."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from starlette.types import Message, Receive, Scope, Send
from uvicorn.protocols.http import h11_impl, httptools_impl

from app.compat import uvicorn_fast
from app.factory import GatewayApp
from tests.app.support.gateway_server import StartGateway, make_settings
from tests.app.support.helpers import (
    collect_sse,
    drained_to_eof,
    events_of,
    metric,
    stalled_client,
    start_run,
    terminal,
    wait_metric,
)
from tests.app.support.scripted_provider import ScriptedProvider

KEY = "compat"
EVENTS = f"/v1/conversations/{KEY}/events"
#: "on": the control (the fast path is taken); the others each remove what the fast path
#: needs: the setting, the cycle's signature (the start-up check), ``send.__self__`` (the
#: per-connection check).
VARIANTS = ["on", "setting_off", "cycle_signature_changed", "send_not_bound"]


def _with_other_signature(init: Callable[..., None]) -> Callable[..., None]:
    def changed(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)

    return changed


@pytest.fixture(params=VARIANTS)
def variant(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    name: str = request.param
    uvicorn_fast.available.cache_clear()
    request.addfinalizer(uvicorn_fast.available.cache_clear)
    if name == "cycle_signature_changed":
        for module in (h11_impl, httptools_impl):
            cycle = module.RequestResponseCycle
            monkeypatch.setattr(cycle, "__init__", _with_other_signature(cycle.__init__))
    elif name == "send_not_bound":
        served = GatewayApp.__call__

        async def plain_send(self: GatewayApp, scope: Scope, receive: Receive, send: Send) -> None:
            async def plain(message: Message) -> None:
                await send(message)

            await served(self, scope, receive, plain)

        monkeypatch.setattr(GatewayApp, "__call__", plain_send)
    return name


async def test_runs_and_streams_without_uvicorns_internals(
    variant: str,
    start_gateway: StartGateway,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    pushed: list[bool] = []
    send_now = uvicorn_fast.send_now

    def spy(send: Send, message: Message) -> bool:
        pushed.append(send_now(send, message))
        return pushed[-1]

    monkeypatch.setattr(uvicorn_fast, "send_now", spy)
    connections: list[uvicorn_fast.Connection | None] = []
    connection_of = uvicorn_fast.connection_of

    def seen(send: Send) -> uvicorn_fast.Connection | None:
        connections.append(connection_of(send))
        return connections[-1]

    monkeypatch.setattr(uvicorn_fast, "connection_of", seen)
    settings = make_settings(
        gateway={
            "send_timeout_seconds": 3,
            "heartbeat_seconds": 30,
            "fast_paths": variant != "setting_off",
        }
    )
    with caplog.at_level(logging.WARNING, logger="app.compat.uvicorn_fast"):
        gw = await start_gateway(settings, providers={"demo": ScriptedProvider()}, sndbuf=4096)
    warnings = [r for r in caplog.records if r.name == "app.compat.uvicorn_fast"]
    if variant == "cycle_signature_changed":
        assert (
            len(warnings) == 1
            and "RequestResponseCycle(transport=, flow=)" in warnings[0].getMessage()
        )
    else:
        assert warnings == []
    stalled = await stalled_client(gw.port, f"GET {EVENTS} HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        async with gw.client() as client:
            await wait_metric(client, "agent_gateway_subscribers", 1)  # the stalled one follows
            following = asyncio.Event()
            healthy = asyncio.create_task(
                collect_sse(client, EVENTS, stop=terminal, first_frame=following)
            )
            await asyncio.wait_for(following.wait(), 10)
            await start_run(client, KEY, "text:200:2000")
            frames = await asyncio.wait_for(healthy, 30)
            assert frames[0].event == "snapshot"
            followed = frames[1:]
            assert events_of(followed)[-1]["type"] == "run.completed"
            assert len(events_of(followed)) == 207  # 200 deltas + 7 framing events
            resumed = await collect_sse(
                client,
                EVENTS,
                headers={"Last-Event-ID": followed[99].id},
                params={"untilIdle": "true"},
            )
            assert [f.id for f in resumed] == [f.id for f in followed[100:]]
            assert events_of(resumed) == events_of(followed[100:])
            answer = await collect_sse(
                client,
                f"/v1/conversations/{KEY}/runs",
                method="POST",
                params={"stream": "true"},
                json={"input": {"prompt": "text:3"}},
            )
            events = events_of(answer)
            assert events[0]["type"] == "run.started" and events[-1]["type"] == "run.completed"
            # Still stalled (never read): dropped once send_timeout_seconds (3 s) passed.
            await wait_metric(client, "agent_gateway_dropped_subscribers_total", 1)
            assert await drained_to_eof(stalled, 10.0), "stalled subscriber was not closed"
            assert await subscribers_gone(client)
    finally:
        stalled.close()
    if variant == "on":
        assert any(connections), "the fast path was not taken"
    else:
        assert not any(connections) and pushed == [], "a fast path was taken without its internals"


async def subscribers_gone(client: httpx.AsyncClient) -> bool:
    """No SSE subscriber is left (the stalled one included)."""
    for _ in range(500):
        if await metric(client, "agent_gateway_subscribers") == 0:
            return True
        await asyncio.sleep(0.02)
    return False
