"""Figure 5: gateway memory (RSS of the gateway process, memory backend).

(a) RSS per idle conversation: after a warm-up, ``--conversations`` (1,000) short conversations
    (one run of ``--deltas`` deltas each, read to its end, 8 at a time); RSS growth / count.
    Target ≤ 50 KB each.
(b) RSS growth during one ``--events`` (50,000) event run while one subscriber is stalled (a
    raw socket with a 4 KB receive buffer that never reads) and another reads the run to its
    end; RSS sampled every 50 ms, growth = peak − RSS before. The same run in a fresh gateway
    with no stalled subscriber gives what the run itself costs. Targets: the run's growth
    ≤ 10 MB; with the stalled subscriber, ≤ 1 MB more.

Usage: ``.venv/bin/python bench/memory_bench.py [--conversations 1000] [--events 50000]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import uvloop

from bench.harness import procs
from bench.harness.flows import gateway_run, new_key
from bench.harness.stats import table

PER_CONVERSATION_TARGET = 50 * 1024
RUN_TARGET = 10 * 1024 * 1024
STALLED_EXTRA_TARGET = 1024 * 1024


async def conversations(gateway: procs.Server, count: int, deltas: int) -> float:
    semaphore = asyncio.Semaphore(8)

    async def one() -> None:
        async with semaphore:
            result = await gateway_run(gateway.port, deltas)
            if result.terminal != b"completed":
                raise RuntimeError(f"run ended {result.terminal!r} {result.body_head[:200]!r}")

    await asyncio.gather(*(one() for _ in range(50)))  # warm-up
    await asyncio.sleep(0.5)
    before = gateway.rss_bytes()
    await asyncio.gather(*(one() for _ in range(count)))
    await asyncio.sleep(0.5)
    return (gateway.rss_bytes() - before) / count


async def stalled_run(
    gateway: procs.Server, events: int, stalled: int = 1
) -> tuple[float, float, bool]:
    await gateway_run(gateway.port, 2000)  # warm-up of the streaming path
    key = new_key("stall")
    loop = asyncio.get_running_loop()
    sockets = []
    for _ in range(stalled):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await loop.sock_connect(sock, ("127.0.0.1", gateway.port))
        request = f"GET /v1/conversations/{key}/events HTTP/1.1\r\nhost: x\r\n\r\n"
        await loop.sock_sendall(sock, request.encode())
        sockets.append(sock)
    await asyncio.sleep(0.3)  # subscribed; from now on they never read
    before = gateway.rss_bytes()
    peak = before
    done = False

    async def sample() -> None:
        nonlocal peak
        while not done:
            peak = max(peak, gateway.rss_bytes())
            await asyncio.sleep(0.05)

    sampler = asyncio.ensure_future(sample())
    try:
        result = await gateway_run(gateway.port, events, key=key)
    finally:
        done = True
        await sampler
        for sock in sockets:
            sock.close()
    peak = max(peak, gateway.rss_bytes())
    complete = result.terminal == b"completed" and result.deltas == events
    return float(peak - before), float(gateway.rss_bytes() - before), complete


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--deltas", type=int, default=20)
    parser.add_argument("--events", type=int, default=50000)
    parser.add_argument("--stalled", type=int, default=1, help="stalled subscribers (0: none)")
    args = parser.parse_args()
    with contextlib.ExitStack() as exits:
        upstream = procs.start_server("upstream")
        exits.callback(upstream.stop)
        gateway = procs.start_server("gateway", config=procs.gateway_config(upstream.url))
        exits.callback(gateway.stop)
        per_conv = uvloop.run(conversations(gateway, args.conversations, args.deltas))
        stalled = procs.start_server("gateway", config=procs.gateway_config(upstream.url))
        exits.callback(stalled.stop)
        peak, end, complete = uvloop.run(stalled_run(stalled, args.events, args.stalled))
        # The same run in a fresh gateway with no stalled subscriber: what the run itself costs
        # (retained log, reduced state), so the difference is what stalling costs.
        plain = procs.start_server("gateway", config=procs.gateway_config(upstream.url))
        exits.callback(plain.stop)
        plain_peak, _, plain_complete = uvloop.run(stalled_run(plain, args.events, 0))
        complete = complete and plain_complete
    rows = [
        [
            f"RSS per idle conversation ({args.conversations} x {args.deltas} deltas)",
            f"{per_conv / 1024:.1f} KB",
            "<= 50 KB",
        ],
        [
            f"RSS growth, {args.events:,}-event run, read normally (peak)",
            f"{plain_peak / 2**20:.2f} MB",
            "<= 10 MB",
        ],
        ["  same run + 1 stalled subscriber (peak)", f"{peak / 2**20:.2f} MB", ""],
        ["  same, at the end of the run", f"{end / 2**20:.2f} MB", ""],
        [
            "  attributable to the stalled subscriber(s)",
            f"{(peak - plain_peak) / 2**20:.2f} MB",
            "<= 1 MB",
        ],
    ]
    print(table("Figure 5: gateway memory", ["measure", "value", "target"], rows))
    ok = (
        per_conv <= PER_CONVERSATION_TARGET
        and plain_peak <= RUN_TARGET
        and peak - plain_peak <= STALLED_EXTRA_TARGET
        and complete
    )
    print(
        f"SUMMARY figure5 per_conversation={per_conv / 1024:.1f} KB (target <= 50) "
        f"run_growth={plain_peak / 2**20:.2f} MB (target <= 10) "
        f"stalled_extra={(peak - plain_peak) / 2**20:.2f} MB (target <= 1) "
        f"run_complete={complete} {'PASS' if ok else 'FAIL'}"
    )


if __name__ == "__main__":
    main()
