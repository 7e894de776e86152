"""Memory held by stalled SSE subscribers (ARCHITECTURE decisions 1–2). Not a timed test.

A real gateway on loopback (memory backend) streams one run of EVENTS deltas of SIZE bytes to
one healthy subscriber and K subscribers that never read (raw sockets with a small receive
buffer). Because subscribers only keep a cursor into the shared log (no per-subscriber queue),
a stalled one holds at most what its socket buffers accept — about one transport high-water
mark — however long the run is; after ``send_timeout_seconds`` it is dropped.

Prints, per K: the process RSS growth over the run while the K subscribers are stalled, the
bytes queued in the server's transport buffers (the user-space memory a stalled subscriber can
pin), per stalled subscriber, and the same after ``send_timeout_seconds`` dropped them.

    .venv/bin/python bench/fanout_memory_bench.py [--events 2000] [--size 1024] [--stalled 0 10 40]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.app.support.gateway_server import RunningGateway, launch, make_settings
from tests.app.support.helpers import collect_sse, stalled_client, start_run, terminal
from tests.app.support.scripted_provider import ScriptedProvider

KEY = "bench"
EVENTS = f"/v1/conversations/{KEY}/events"
SEND_TIMEOUT = 10.0


def rss() -> int:
    gc.collect()
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def queued(gw: RunningGateway) -> int:
    """Bytes waiting in the server's transport write buffers (all connections)."""
    return sum(
        conn.transport.get_write_buffer_size()
        for conn in gw.server.server_state.connections
        if conn.transport is not None
    )


async def scenario(stalled: int, events: int, size: int) -> tuple[int, int, int, int]:
    settings = make_settings(
        gateway={
            "send_timeout_seconds": SEND_TIMEOUT,
            "heartbeat_seconds": 60,
            "event_log_max_len": events + 100,
        },
    )
    gw = await launch(settings, providers={"demo": ScriptedProvider()}, sndbuf=8192)
    request = f"GET {EVENTS} HTTP/1.1\r\nHost: bench\r\n\r\n"
    sockets = [await stalled_client(gw.port, request) for _ in range(stalled)]
    try:
        async with gw.client() as client:
            await asyncio.sleep(0.3)
            base = rss()
            healthy = asyncio.create_task(collect_sse(client, EVENTS, stop=terminal))
            await asyncio.sleep(0.1)
            await start_run(client, KEY, f"text:{events}:{size}")
            loop = asyncio.get_running_loop()
            started = loop.time()
            await healthy
            elapsed = loop.time() - started
            assert elapsed < SEND_TIMEOUT, "run too slow to measure stalled subscribers"
            held, held_queued = rss() - base, queued(gw)
            await asyncio.sleep(SEND_TIMEOUT + 1.0)
            return held, held_queued, rss() - base, queued(gw)
    finally:
        for sock in sockets:
            sock.close()
        await gw.stop()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--stalled", type=int, nargs="+", default=[0, 10, 40])
    args = parser.parse_args()
    print(
        f"run: {args.events} deltas of {args.size} B "
        f"(~{args.events * args.size / 1e6:.1f} MB of events); send_timeout {SEND_TIMEOUT}s"
    )
    for k in args.stalled:
        held, held_queued, after, after_queued = await scenario(k, args.events, args.size)
        per = held_queued / k if k else 0.0
        print(
            f"stalled={k:3d}  RSS growth {held / 1e6:6.2f} MB  transport buffers "
            f"{held_queued / 1e3:8.1f} kB ({per / 1e3:5.1f} kB per stalled subscriber)  "
            f"after drop: buffers {after_queued / 1e3:6.1f} kB, RSS growth {after / 1e6:6.2f} MB"
        )


if __name__ == "__main__":
    asyncio.run(main())
