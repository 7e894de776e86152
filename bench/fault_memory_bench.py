"""Gateway memory under faults: RSS before, during and after each fault. Not a test.

A gateway process (memory backend, uvloop + httptools, ``bench/harness/serve.py``) faces, one
after the other:

- ``flood``: upstreams that send 50 MB without a newline (runs fail ``upstream_event_too_large``);
- ``silent``: upstreams that accept the request and never answer (``upstream_idle_timeout``);
- ``slow-loris``: clients that declare a body and trickle it a byte at a time, never finishing;
- ``stalled``: SSE subscribers that never read, during a large run (dropped after the send
  timeout);
- ``rst``: SSE subscribers that vanish with a TCP reset.

For each: the process RSS before, its peak during (VmHWM reset before the fault), the RSS while
the fault holds, and the RSS once the fault is over and the gateway settled; also whether a
healthy conversation ran to completion during the fault. The faults run ``--rounds`` times
(default 2): CPython keeps freed memory for reuse, so "after" stays near the peak, but a second
round that does not grow beyond the first shows nothing is leaked per fault.

    .venv/bin/python bench/fault_memory_bench.py [--scale 1.0]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import struct
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from bench.harness.procs import Server, start_server
from tests.app.support.helpers import collect_sse, events_of, stalled_client, terminal
from tests.app.support.security_upstream import Upstream, serve_upstream

MB = 1024 * 1024
SEND_TIMEOUT = 3.0
IDLE_TIMEOUT = 4.0


def _config(upstream: Upstream) -> str:
    text = f"""
[gateway]
default_provider = "demo"
demo_page = false
send_timeout_seconds = {SEND_TIMEOUT}
heartbeat_seconds = 30
event_log_max_len = 20000

[limits]
max_subscribers_per_conversation = 5000
max_subscribers_per_principal = 10000
runs_per_minute_per_principal = 1000000
max_conversations_per_principal = 1000000

[providers.flood]
kind = "agent-event"
url = "{upstream.url("/flood")}"
idle_timeout_seconds = 30

[providers.events]
kind = "agent-event"
url = "{upstream.url("/events")}"
idle_timeout_seconds = 30

[providers.silent]
kind = "agent-event"
url = "{upstream.url("/silent")}"
idle_timeout_seconds = {IDLE_TIMEOUT}
"""
    handle, path = tempfile.mkstemp(prefix="fault-bench-", suffix=".toml")
    with os.fdopen(handle, "w") as file:
        file.write(text)
    return path


async def _healthy(client: httpx.AsyncClient, key: str) -> bool:
    """A normal demo run streamed to its end while the fault holds."""
    try:
        stream = asyncio.create_task(
            collect_sse(client, f"/v1/conversations/{key}/events", stop=terminal)
        )
        await asyncio.sleep(0.05)
        answer = await client.post(
            f"/v1/conversations/{key}/runs", json={"input": {"prompt": "hello"}}
        )
        if answer.status_code != 202:
            return False
        frames = await asyncio.wait_for(stream, 30)
        return bool(events_of(frames)[-1]["type"] == "run.completed")
    except Exception:
        return False


async def _wait_idle(client: httpx.AsyncClient, keys: list[str], within: float) -> int:
    """Wait until every conversation in ``keys`` has no active run; returns how many ended."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    ended = 0
    for key in keys:
        while loop.time() < deadline:
            state = await client.get(f"/v1/conversations/{key}/state")
            if state.status_code == 200 and state.json()["activeRunId"] is None:
                ended += 1
                break
            await asyncio.sleep(0.1)
    return ended


Fault = Callable[[httpx.AsyncClient, Server, Upstream, float], Awaitable[Callable[[], Any]]]


async def fault_flood(
    client: httpx.AsyncClient, gw: Server, upstream: Upstream, scale: float
) -> Callable[[], Any]:
    keys = [f"flood{i}" for i in range(max(1, int(4 * scale)))]
    upstream.flood_sent = 0
    for key in keys:
        await client.post(
            f"/v1/conversations/{key}/runs", json={"input": {"prompt": "x"}, "provider": "flood"}
        )

    async def end() -> str:
        ended = await _wait_idle(client, keys, 60)
        sent = upstream.flood_sent / MB / len(keys)
        return f"{ended}/{len(keys)} runs ended; upstream wrote {sent:.0f} MB each before hang-up"

    await asyncio.sleep(1.0)
    return end


async def fault_silent(
    client: httpx.AsyncClient, gw: Server, upstream: Upstream, scale: float
) -> Callable[[], Any]:
    keys = [f"silent{i}" for i in range(int(200 * scale))]
    for key in keys:
        await client.post(
            f"/v1/conversations/{key}/runs",
            json={"input": {"prompt": "x"}, "provider": "silent"},
        )
    await asyncio.sleep(1.0)

    async def end() -> str:
        ended = await _wait_idle(client, keys, IDLE_TIMEOUT + 30)
        return f"{ended}/{len(keys)} runs ended (idle timeout {IDLE_TIMEOUT:.0f} s)"

    return end


async def fault_slow_loris(
    client: httpx.AsyncClient, gw: Server, upstream: Upstream, scale: float
) -> Callable[[], Any]:
    loop = asyncio.get_running_loop()
    socks = []
    for i in range(int(500 * scale)):
        sock = socket.socket()
        sock.setblocking(False)
        await loop.sock_connect(sock, ("127.0.0.1", gw.port))
        head = (
            f"POST /v1/conversations/loris{i}/runs HTTP/1.1\r\nHost: x\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n"
        )
        await loop.sock_sendall(sock, head.encode() + b'{"input": {"prompt": "')
        socks.append(sock)
    for _ in range(3):
        for sock in socks:
            await loop.sock_sendall(sock, b"a" * 100)
        await asyncio.sleep(0.2)

    async def end() -> str:
        for sock in socks:
            sock.close()
        return f"{len(socks)} connections closed by the clients"

    return end


async def fault_stalled(
    client: httpx.AsyncClient, gw: Server, upstream: Upstream, scale: float
) -> Callable[[], Any]:
    path = "/v1/conversations/stalled/events"
    request = f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n"
    socks = [await stalled_client(gw.port, request) for _ in range(int(200 * scale))]
    await asyncio.sleep(0.3)
    # Three runs of 2,000 deltas of 1 KiB (6 MB logged): stalled subscribers fall behind.
    upstream.script = [
        ("message.started", {"messageId": "m1", "role": "assistant"}),
        *[("message.delta", {"messageId": "m1", "delta": "x" * 1024})] * 2000,
        ("message.completed", {"messageId": "m1"}),
    ]
    for _ in range(3):
        await client.post(
            "/v1/conversations/stalled/runs",
            json={"input": {"prompt": "x"}, "provider": "events", "multitask": "enqueue"},
        )
    await asyncio.sleep(1.0)

    async def end() -> str:
        await _wait_idle(client, ["stalled"], 120)
        await asyncio.sleep(SEND_TIMEOUT + 1)
        for sock in socks:
            sock.close()
        return f"{len(socks)} stalled subscribers (send timeout {SEND_TIMEOUT:.0f} s)"

    return end


async def fault_rst(
    client: httpx.AsyncClient, gw: Server, upstream: Upstream, scale: float
) -> Callable[[], Any]:
    path = "/v1/conversations/rst/events"
    socks = []
    for _ in range(int(300 * scale)):
        sock = socket.create_connection(("127.0.0.1", gw.port))
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        socks.append(sock)
    await asyncio.sleep(1.0)

    async def end() -> str:
        for sock in socks:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
        return f"{len(socks)} subscribers reset"

    return end


FAULTS: dict[str, Fault] = {
    "flood": fault_flood,
    "silent": fault_silent,
    "slow-loris": fault_slow_loris,
    "stalled": fault_stalled,
    "rst": fault_rst,
}


async def main(scale: float, rounds: int, only: list[str]) -> None:
    async with serve_upstream() as upstream:
        upstream.flood_bytes = 50 * MB
        gw = start_server("gateway", config=_config(upstream))
        try:
            async with httpx.AsyncClient(base_url=gw.url, timeout=30) as client:
                await _healthy(client, "warmup")
                print(
                    f"{'fault':<11} {'before':>8} {'peak':>8} {'during':>8} {'after':>8}  "
                    "healthy-run  note"
                )
                faults = [
                    (f"{name}#{r + 1}", fault)
                    for r in range(rounds)
                    for name, fault in FAULTS.items()
                    if not only or name in only
                ]
                for n, (name, fault) in enumerate(faults):
                    await asyncio.sleep(1.0)
                    before = gw.rss_bytes()
                    gw.reset_peak_rss()
                    end = await fault(client, gw, upstream, scale)
                    healthy = await _healthy(client, f"healthy{n}")
                    during = gw.rss_bytes()
                    note = await end()
                    await asyncio.sleep(2.0)
                    peak = gw.peak_rss_bytes()
                    after = gw.rss_bytes()
                    print(
                        f"{name:<13} {before / MB:7.1f}M {peak / MB:7.1f}M {during / MB:7.1f}M "
                        f"{after / MB:7.1f}M  {'ok' if healthy else 'FAILED':<11}  {note}",
                        flush=True,
                    )
        finally:
            gw.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply fault sizes")
    parser.add_argument(
        "--rounds", type=int, default=2, help="repeat the faults (growth across rounds = a leak)"
    )
    parser.add_argument("--only", nargs="*", default=[], choices=sorted(FAULTS))
    args = parser.parse_args()
    asyncio.run(main(args.scale, args.rounds, args.only))
