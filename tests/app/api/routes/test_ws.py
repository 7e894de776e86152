"""WebSocket: the same stream as SSE plus in-band ops; bad frames get an error frame."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
import websockets

from tests.app.support.gateway_server import RunningGateway, StartGateway, make_settings
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
from tests.support import eventually, eventually_async

KEY = "w1"


@pytest.fixture
async def gw(start_gateway: StartGateway) -> RunningGateway:
    return await start_gateway(make_settings(), providers={"demo": ScriptedProvider()})


def ws_url(gw: RunningGateway, query: str = "") -> str:
    return f"{gw.ws_url}/v1/conversations/{KEY}/ws{query}"


async def recv(ws: Any) -> dict[str, Any]:
    frame: dict[str, Any] = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
    return frame


async def recv_until(ws: Any, predicate: Any) -> list[dict[str, Any]]:
    frames = []
    while True:
        frame = await recv(ws)
        frames.append(frame)
        if predicate(frame):
            return frames


def is_terminal(frame: dict[str, Any]) -> bool:
    return frame["type"] == "event" and frame["event"]["type"] in (
        "run.completed",
        "run.failed",
        "run.cancelled",
    )


async def test_snapshot_request_ack_events(gw: RunningGateway) -> None:
    async with websockets.connect(ws_url(gw)) as ws:
        snapshot = await recv(ws)
        assert snapshot["type"] == "snapshot" and snapshot["cursor"] == "0"
        assert snapshot["messages"] == [] and snapshot["activeRunId"] is None
        await ws.send(orjson.dumps({"op": "request", "input": {"prompt": "text:2"}}).decode())
        frames = await recv_until(ws, is_terminal)
        acks = [f for f in frames if f["type"] == "ack"]
        assert len(acks) == 1 and acks[0]["op"] == "request"
        assert set(acks[0]) == {"type", "op", "runId", "cursor", "status"}
        events = [f for f in frames if f["type"] == "event"]
        assert {f["event"]["runId"] for f in events} == {acks[0]["runId"]}
        assert all(f["cursor"] for f in events)
    async with gw.client() as client:
        sse = await collect_sse(
            client,
            f"/v1/conversations/{KEY}/events",
            params={"since": "0", "untilIdle": "true"},
        )
    assert [f["event"] for f in events] == events_of(sse)
    assert [f["cursor"] for f in events] == [f.id for f in sse]


async def test_malformed_frames_get_error_frames_and_socket_survives(gw: RunningGateway) -> None:
    async with websockets.connect(ws_url(gw)) as ws:
        await recv(ws)
        cases = [
            ("not json", "invalid_request"),
            ("[1, 2]", "invalid_request"),
            ('{"op": 5}', "invalid_request"),
            ('{"op": "dance"}', "unknown_op"),
            ('{"op": "request"}', "invalid_request"),
            ('{"op": "request", "input": {"prompt": "x"}, "provider": "nope"}', "unknown_provider"),
            (
                '{"op": "approve", "approvalId": "a", "decision": "approved"}',
                "conversation_not_found",
            ),
        ]
        for text, expected in cases:
            await ws.send(text)
            frame = await recv(ws)
            assert frame["type"] == "error", text
            assert frame["code"] == expected, (text, frame)
            assert frame["message"]
        await ws.send(b"binary")
        assert (await recv(ws))["code"] == "invalid_request"
        await ws.send('{"op": "abort"}')
        assert await recv(ws) == {"type": "ack", "op": "abort", "aborted": False}


async def test_abort_and_resume_ops(gw: RunningGateway) -> None:
    async with websockets.connect(ws_url(gw)) as ws:
        await recv(ws)
        await ws.send(
            orjson.dumps({"op": "request", "input": {"prompt": "text:1 sleep:30"}}).decode()
        )
        frames = await recv_until(ws, lambda f: f["type"] == "ack")
        run_id = frames[-1]["runId"]
        await recv_until(
            ws, lambda f: f["type"] == "event" and f["event"]["type"] == "message.delta"
        )
        await ws.send('{"op": "abort"}')
        frames = await recv_until(ws, is_terminal)
        ack = next(f for f in frames if f["type"] == "ack")
        assert ack == {"type": "ack", "op": "abort", "runId": run_id, "aborted": True}
        assert frames[-1]["event"]["type"] == "run.cancelled"
        await ws.send('{"op": "resume", "cursor": "0"}')
        replay = await recv_until(ws, is_terminal)
        assert replay[0]["type"] == "event" and replay[0]["event"]["type"] == "session.started"
        await ws.send('{"op": "resume", "cursor": "bogus-1"}')
        assert (await recv(ws))["type"] == "snapshot"


async def test_since_query_resumes(gw: RunningGateway) -> None:
    async with websockets.connect(ws_url(gw)) as ws:
        await recv(ws)
        await ws.send(orjson.dumps({"op": "request", "input": {"prompt": "text:3"}}).decode())
        frames = await recv_until(ws, is_terminal)
    events = [f for f in frames if f["type"] == "event"]
    middle = events[2]["cursor"]
    async with websockets.connect(ws_url(gw, f"?since={middle}")) as ws:
        first = await recv(ws)
        assert first["type"] == "event" and first["cursor"] == events[3]["cursor"]


async def test_bad_key_and_bad_token(start_gateway: StartGateway) -> None:
    settings = make_settings(auth={"mode": "bearer", "tokens": {"tok": "alice"}})
    gw = await start_gateway(settings, providers={"demo": ScriptedProvider()})
    async with websockets.connect(ws_url(gw)) as ws:  # bad token: error frame, then 1008
        assert (await recv(ws))["code"] == "unauthorized"
        with pytest.raises(websockets.exceptions.ConnectionClosed) as refused:
            await ws.recv()
        assert refused.value.rcvd is not None and refused.value.rcvd.code == 1008
    async with websockets.connect(ws_url(gw, "?access_token=tok")) as ws:
        assert (await recv(ws))["type"] == "snapshot"
    url = f"{gw.ws_url}/v1/conversations/bad%20key/ws?access_token=tok"
    async with websockets.connect(url) as ws:
        assert (await recv(ws))["code"] == "invalid_request"
        with pytest.raises(websockets.exceptions.ConnectionClosed) as closed:
            await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


async def test_shutdown_delivers_run_cancelled_then_closes_1001(
    start_gateway: StartGateway,
) -> None:
    gw = await start_gateway(make_settings(), providers={"demo": ScriptedProvider()})
    async with websockets.connect(ws_url(gw)) as ws:
        await recv(ws)
        await ws.send(orjson.dumps({"op": "request", "input": {"prompt": "sleep:30"}}).decode())
        await recv_until(ws, lambda f: f["type"] == "event" and f["event"]["type"] == "run.started")
        stopping = asyncio.create_task(gw.stop())
        frames = await recv_until(ws, is_terminal)
        assert frames[-1]["event"]["type"] == "run.cancelled"
        assert frames[-1]["event"]["payload"]["reason"] == "shutdown"
        with pytest.raises(websockets.exceptions.ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001
        await asyncio.wait_for(stopping, 15)


async def test_stalled_websocket_is_dropped(start_gateway: StartGateway) -> None:
    settings = make_settings(gateway={"send_timeout_seconds": 0.5})
    gw = await start_gateway(settings, providers={"demo": ScriptedProvider()}, sndbuf=4096)
    sock = await stalled_client(
        gw.port,
        f"GET /v1/conversations/{KEY}/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Sec-WebSocket-Version: 13\r\n\r\n",
    )
    try:
        async with gw.client() as client:
            streams = gw.gateway.runs.limits.open_streams
            await eventually(lambda: sum(streams.values()) == 1, what="the stalled one subscribed")
            following = asyncio.Event()
            healthy = asyncio.create_task(
                collect_sse(
                    client, f"/v1/conversations/{KEY}/events", stop=terminal, first_frame=following
                )
            )
            await asyncio.wait_for(following.wait(), 10)
            await start_run(client, KEY, "text:200:2000")
            frames = await asyncio.wait_for(healthy, 20)
            assert events_of(frames)[-1]["type"] == "run.completed"
            # Still stalled (never read): dropped once send_timeout_seconds passed.
            await wait_metric(client, "agent_gateway_dropped_subscribers_total", 1, "ws")
            assert await drained_to_eof(sock, 5.0), "stalled WebSocket was not closed"
    finally:
        sock.close()


async def test_an_open_websocket_counts_as_a_subscriber(gw: RunningGateway) -> None:
    async with gw.client() as client:
        async with websockets.connect(ws_url(gw)) as ws:
            assert (await recv(ws))["type"] == "snapshot"
            await wait_metric(client, "agent_gateway_subscribers", 1, "ws")
            assert await metric(client, "agent_gateway_subscribers", "ws") == 1

        async def gone() -> bool:
            return await metric(client, "agent_gateway_subscribers", "ws") == 0

        await eventually_async(gone, what="the closed WebSocket is no longer counted")
