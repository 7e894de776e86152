"""Fault injection with a real loopback upstream and real clients.

Hostile or broken peers on either side: slow-loris request bodies, half-closed and vanished SSE
clients, a client that never reads, an upstream sending 50 MB without a newline, an upstream
that never answers. In every case the gateway keeps serving other conversations, every accepted
run ends with exactly one terminal event, and what a subscriber received is in the log.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from typing import Any

import httpx
import pytest

from app.backends import EMPTY_CURSOR
from tests.app.support.gateway_server import RunningGateway, StartGateway, make_settings
from tests.app.support.helpers import (
    collect_sse,
    drained_to_eof,
    events_of,
    stalled_client,
    start_run,
    terminal,
    wait_metric,
    wait_state,
)
from tests.app.support.scripted_provider import ScriptedProvider
from tests.app.support.security_upstream import Upstream, serve_upstream
from tests.support import eventually

TERMINALS = ("run.completed", "run.failed", "run.cancelled")


async def _gateway(
    start_gateway: StartGateway, upstream: Upstream | None = None, **gateway: Any
) -> RunningGateway:
    providers: dict[str, Any] = {}
    if upstream is not None:
        for name in ("flood", "silent", "slow", "events"):
            providers[name] = {
                "kind": "agent-event",
                "url": upstream.url(f"/{name}"),
                "idle_timeout_seconds": 0.5 if name == "silent" else 10,
                "timeout_seconds": 30,
            }
        # The silent upstream again, with an idle timeout far beyond any bound of a test.
        providers["mute"] = {
            **providers["silent"],
            "idle_timeout_seconds": 60,
            "timeout_seconds": 90,
        }
    settings = make_settings(gateway=gateway, providers=providers)
    return await start_gateway(settings, providers={"demo": ScriptedProvider()})


async def _finished(client: httpx.AsyncClient, key: str, within: float = 15.0) -> dict[str, Any]:
    state = await wait_state(
        client,
        key,
        lambda s: s["activeRunId"] is None and bool(s["agentState"]["runs"]),
        within=within,
    )
    runs = list(state["agentState"]["runs"].values())
    assert all(run["status"] in ("completed", "failed", "cancelled") for run in runs), runs
    return state


async def _log(client: httpx.AsyncClient, key: str) -> list[dict[str, Any]]:
    """Every retained event of the conversation (resumed from the empty cursor)."""
    path = f"/v1/conversations/{key}/events?untilIdle=true&since={EMPTY_CURSOR}"
    return events_of(await collect_sse(client, path))


async def _healthy_conversation(client: httpx.AsyncClient, key: str) -> None:
    """A normal run elsewhere, streamed to the end while the fault is going on."""
    following = asyncio.Event()
    stream = asyncio.create_task(
        collect_sse(client, f"/v1/conversations/{key}/events", stop=terminal, first_frame=following)
    )
    await asyncio.wait_for(following.wait(), 10)
    await start_run(client, key, "text:50")
    frames = await asyncio.wait_for(stream, 15)
    events = events_of(frames)
    assert events[-1]["type"] == "run.completed"
    assert sum(e["type"] == "message.delta" for e in events) == 50


def _one_terminal(events: list[dict[str, Any]]) -> dict[str, Any]:
    ends = [e for e in events if e["type"] in TERMINALS]
    assert len(ends) == 1, [e["type"] for e in events]
    return ends[0]


async def test_upstream_sending_50_mb_without_a_newline(start_gateway: StartGateway) -> None:
    async with serve_upstream() as upstream:
        gw = await _gateway(start_gateway, upstream)
        async with gw.client() as client:
            await start_run(client, "flooded", "x", provider="flood")
            await _healthy_conversation(client, "other")
            state = await _finished(client, "flooded")
            (run,) = state["agentState"]["runs"].values()
            assert run["status"] == "failed"
            assert run["error"]["code"] == "upstream_event_too_large"
            for _ in range(100):  # the gateway hung up on the upstream
                if upstream.open_connections == 0:
                    break
                await asyncio.sleep(0.05)
            assert upstream.open_connections == 0
    # It stopped reading soon after the 4 MiB event limit, far from the 50 MB sent.
    assert upstream.flood_sent < 20 * 1024 * 1024, upstream.flood_sent


async def test_upstream_that_never_answers(start_gateway: StartGateway) -> None:
    async with serve_upstream() as upstream:
        gw = await _gateway(start_gateway, upstream)
        async with gw.client() as client:
            await start_run(client, "mute", "x", provider="silent")
            await _healthy_conversation(client, "other")
            state = await _finished(client, "mute")
            (run,) = state["agentState"]["runs"].values()
            assert run["status"] == "failed"
            assert run["error"]["code"] == "upstream_idle_timeout"
            # Aborting a run stuck on a silent upstream ends it at once and hangs up.
            await start_run(client, "mute2", "x", provider="mute")
            await eventually(lambda: upstream.open_connections > 0, what="the upstream called")
            upstream.disconnected.clear()
            aborted = await client.post("/v1/conversations/mute2/abort", json={})
            assert aborted.status_code == 202
            # Bounds far below the 60 s idle timeout that would end it otherwise.
            await asyncio.wait_for(upstream.disconnected.wait(), 10)
            state = await _finished(client, "mute2", within=10)
            (run,) = state["agentState"]["runs"].values()
            assert run["status"] == "cancelled"
            assert _one_terminal(await _log(client, "mute2"))["type"] == "run.cancelled"


async def _slow_loris(port: int, path: str, declared: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, ("127.0.0.1", port))
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {declared}\r\n\r\n"
    )
    await loop.sock_sendall(sock, head.encode() + b'{"input": {"prompt": "')
    return sock


async def test_slow_loris_bodies_do_not_block_others(
    start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> None:
    gw = await _gateway(start_gateway)
    uvicorn_errors = logging.getLogger("uvicorn.error")  # does not propagate to the root
    loop = asyncio.get_running_loop()
    lorises = [
        await _slow_loris(gw.port, f"/v1/conversations/loris{i}/runs", 100_000) for i in range(40)
    ]
    try:
        async with gw.client() as client:
            for round_ in range(3):  # trickle a byte into each, then check others are served
                for sock in lorises:
                    await loop.sock_sendall(sock, b"a")
                await _healthy_conversation(client, f"other{round_}")
            # A loris whose trickle passes max_body_bytes is refused with 413 (counted while
            # reading, whatever Content-Length said).
            small = await _gateway(start_gateway, max_body_bytes=64)
            liar = await _slow_loris(small.port, "/v1/conversations/x/runs", 10)
            await loop.sock_sendall(liar, b"b" * 100)
            answer = await asyncio.wait_for(loop.sock_recv(liar, 4096), 5)
            liar.close()
            assert answer.startswith(b"HTTP/1.1 4"), answer[:80]
            # Nothing was accepted from the unfinished bodies: no loris conversation exists,
            # and once the healthy runs finished up (slot released) nothing runs.
            for i in range(len(lorises)):
                missing = await client.get(f"/v1/conversations/loris{i}/state")
                assert missing.status_code == 404, missing.text
            await eventually(lambda: gw.gateway.runs.active_count() == 0, what="nothing runs")
    finally:
        uvicorn_errors.addHandler(caplog.handler)  # after the last uvicorn.Config (dictConfig)
        for sock in lorises:
            sock.close()
    # Clients leaving mid-body are not errors: no traceback per connection (log flooding).
    # Once the servers closed every connection and ended every request, any would be logged.
    servers = [gw.server.server_state, small.server.server_state]
    await eventually(lambda: not any(s.connections or s.tasks for s in servers))
    uvicorn_errors.removeHandler(caplog.handler)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]


def _raw_get(port: int, path: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n".encode())
    sock.settimeout(5)
    assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    return sock


async def test_half_closed_and_vanished_sse_clients_free_their_slots(
    start_gateway: StartGateway,
) -> None:
    gw = await _gateway(start_gateway, heartbeat_seconds=0.2)
    path = "/v1/conversations/shared/events"
    half_closed = [await asyncio.to_thread(_raw_get, gw.port, path) for _ in range(10)]
    vanished = [await asyncio.to_thread(_raw_get, gw.port, path) for _ in range(10)]
    streams = gw.gateway.runs.limits.open_streams
    assert sum(streams.values()) == 20
    for sock in half_closed:
        sock.shutdown(socket.SHUT_WR)  # FIN: the client will send nothing more
    for sock in vanished:  # RST, like a client killed mid-stream
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    async with gw.client() as client:
        await _healthy_conversation(client, "shared")
        # Both are gone: a client's FIN is a disconnect for the server (the stream ends and
        # its subscriber slot is freed) just like a reset.
        await eventually(lambda: not streams, within=10, what="every slot is freed")
    for sock in half_closed:
        sock.close()
    await eventually(lambda: not streams, within=10, what="every slot stays freed")


async def test_client_that_never_reads_is_dropped_and_nothing_is_lost(
    start_gateway: StartGateway,
) -> None:
    settings = make_settings(gateway={"send_timeout_seconds": 0.5, "heartbeat_seconds": 30})
    gw = await start_gateway(settings, providers={"demo": ScriptedProvider()}, sndbuf=4096)
    path = "/v1/conversations/big/events"
    stalled = [
        await stalled_client(gw.port, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n") for _ in range(5)
    ]
    try:
        async with gw.client() as client:
            await wait_metric(client, "agent_gateway_subscribers", 5)  # the stalled ones follow
            following = asyncio.Event()
            healthy = asyncio.create_task(
                collect_sse(client, path, stop=terminal, first_frame=following)
            )
            await asyncio.wait_for(following.wait(), 10)
            await start_run(client, "big", "text:300:2000")
            frames = await asyncio.wait_for(healthy, 20)
            got = events_of(frames)
            assert got[-1]["type"] == "run.completed"
            logged = await _log(client, "big")
            assert [e["eventId"] for e in got] == [e["eventId"] for e in logged]
            await _healthy_conversation(client, "other")
            # Still not reading: each is dropped once send_timeout_seconds passed.
            await wait_metric(client, "agent_gateway_dropped_subscribers_total", 5)
            dropped = [await drained_to_eof(sock, 10.0) for sock in stalled]
            assert all(dropped), "a stalled subscriber was not dropped"
        streams = gw.gateway.runs.limits.open_streams
        await eventually(lambda: not streams, within=10, what="the dropped ones free their slots")
    finally:
        for sock in stalled:
            sock.close()


def _pinned(gw: RunningGateway) -> int:
    """Connections with bytes waiting in the server's transport write buffer."""
    return sum(
        1
        for conn in gw.server.server_state.connections
        if conn.transport is not None and conn.transport.get_write_buffer_size() > 0
    )


def _queued(gw: RunningGateway) -> int:
    """Bytes waiting in the server's transport write buffers (all connections)."""
    return sum(
        conn.transport.get_write_buffer_size()
        for conn in gw.server.server_state.connections
        if conn.transport is not None
    )


async def test_stalled_subscribers_of_a_large_conversation_pin_little(
    start_gateway: StartGateway,
) -> None:
    """N clients that never read a multi-MB snapshot pin about a high-water mark each (the
    frame is serialized once, shared, and sent in pieces), not N copies of the snapshot."""
    settings = make_settings(gateway={"send_timeout_seconds": 30, "heartbeat_seconds": 30})
    gw = await start_gateway(settings, providers={"demo": ScriptedProvider()}, sndbuf=4096)
    async with gw.client() as client:
        await start_run(client, "large", "text:200:20000")  # ~4 MB of text in the state
        await _finished(client, "large")
        path = "/v1/conversations/large/events"
        stalled = [
            await stalled_client(gw.port, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n")
            for _ in range(20)
        ]
        try:
            # Every stalled subscriber has its snapshot send under way (bytes pinned for it).
            await eventually(lambda: _pinned(gw) >= 20, what="20 snapshot sends under way")
            queued = _queued(gw)
            assert queued < 20 * 256 * 1024, queued  # not 20 × the ~4 MB snapshot
            await _healthy_conversation(client, "other")
        finally:
            for sock in stalled:
                sock.close()


async def test_a_subscriber_joining_mid_run_shares_the_snapshot_in_flight(
    start_gateway: StartGateway,
) -> None:
    """While a stalled subscriber still holds a large snapshot frame, a new subscriber gets
    that frame (older cursor) plus the log entries since — exactly once, in order — instead
    of a serialized copy of its own."""
    from app.backends import ConversationRef
    from app.streams.sse import _snapshots

    settings = make_settings(gateway={"send_timeout_seconds": 30, "heartbeat_seconds": 30})
    provider = ScriptedProvider()
    gw = await start_gateway(settings, providers={"demo": provider}, sndbuf=4096)
    path = "/v1/conversations/mid/events"
    ref = ConversationRef("anonymous", "mid")
    async with gw.client() as client:
        await start_run(client, "mid", "text:100:20000 gate:later text:5 sleep:30")
        await wait_state(client, "mid", lambda s: len(str(s["messages"])) > 100 * 20000)
        stalled = await stalled_client(gw.port, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            in_flight = None
            for _ in range(500):  # the stalled subscriber's snapshot frame is being sent
                shared = _snapshots.get(gw.gateway)
                in_flight = None if shared is None else shared.get((ref, True))
                if in_flight is not None:
                    break
                await asyncio.sleep(0.01)
            assert in_flight is not None
            shared_cursor = in_flight.cursor
            del in_flight
            provider.gates["later"].set()
            later = await wait_state(
                client, "mid", lambda s: s["cursor"] != shared_cursor, within=10
            )  # the 5 small deltas are logged: the new subscriber's snapshot is later
            frames = await collect_sse(
                client, path, stop=lambda f: sum(x.event == "message" for x in f) >= 5
            )
            assert frames[0].event == "snapshot"
            assert frames[0].id == shared_cursor != later["cursor"]
            got = [f.id for f in frames[1:] if f.event == "message"]
            log = await collect_sse(
                client,
                f"{path}?since={shared_cursor}",
                stop=lambda f: sum(x.event == "message" for x in f) >= 5,
            )
            assert got == [f.id for f in log if f.event == "message"]
            assert _queued(gw) < 512 * 1024
            await client.post("/v1/conversations/mid/abort", json={})
        finally:
            stalled.close()
