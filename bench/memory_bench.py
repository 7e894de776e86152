"""Figure 5: gateway memory (RSS of the gateway process, memory backend).

(a) RSS per idle conversation: after a warm-up, ``--conversations`` (1,000) short conversations
    (one run of ``--deltas`` deltas each, read to its end, 8 at a time); RSS growth / count.
    Target ≤ 50 KB each.
(b) A stalled reader through a run far longer than the log: ``event_log_max_len`` is
    ``--log-max-len`` (default ``--events`` / 5: 10,000), and one ``--events`` (50,000) event
    burst run is read to its end while ``--stalled`` (1) subscribers, connected before it
    started, never read (a raw socket with a 4 KB receive buffer). Then their sockets close.
    The same run in a fresh gateway with no stalled subscriber gives what the run itself costs.
    Measured in each gateway, from the RSS before the run: the peak (VmHWM, over the run and
    the close), the RSS at the run's end, and the RSS once the closed subscribers are gone.
    Targets: the run's growth (sampled every 50 ms, as before) ≤ 10 MB; what the stalled
    subscriber adds to the peak ≤ 1 MB, and to the RSS after its socket closed ≤ 1 MB.

Exits 1 when a target is missed or a run did not complete.

Usage: ``.venv/bin/python bench/memory_bench.py [--conversations 1000] [--events 50000]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
import uvloop

from bench.harness import procs
from bench.harness.flows import gateway_run, new_key
from bench.harness.gate import Gate
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


@dataclass
class RunMemory:
    """RSS growth of one gateway from before the run, in bytes."""

    sampled_peak: float  # sampled every 50 ms during the run
    peak: float  # VmHWM: the run and the close of the stalled sockets
    end: float  # at the run's end (stalled sockets still open)
    after_close: float  # once the closed subscribers are gone
    complete: bool


async def _subscribers(gateway: procs.Server) -> float:
    async with httpx.AsyncClient() as client:
        text = (await client.get(gateway.url + "/metrics")).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("agent_gateway_subscribers{")
    )


async def _wait_subscribers(gateway: procs.Server, count: int, within: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while await _subscribers(gateway) != count:
        if loop.time() > deadline:
            raise RuntimeError(f"subscribers never reached {count}")
        await asyncio.sleep(0.05)


async def stalled_run(gateway: procs.Server, events: int, stalled: int = 1) -> RunMemory:
    await gateway_run(gateway.port, 2000)  # warm-up of the streaming path
    key = new_key("stall")
    loop = asyncio.get_running_loop()
    sockets = []
    for _ in range(stalled):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect
        sock.setblocking(False)
        await loop.sock_connect(sock, ("127.0.0.1", gateway.port))
        request = f"GET /v1/conversations/{key}/events HTTP/1.1\r\nhost: x\r\n\r\n"
        await loop.sock_sendall(sock, request.encode())
        sockets.append(sock)
    await _wait_subscribers(gateway, stalled)  # subscribed; from now on they never read
    await asyncio.sleep(0.2)
    before = gateway.rss_bytes()
    gateway.reset_peak_rss()
    sampled = before
    done = False

    async def sample() -> None:
        nonlocal sampled
        while not done:
            sampled = max(sampled, gateway.rss_bytes())
            await asyncio.sleep(0.05)

    sampler = asyncio.ensure_future(sample())
    try:
        result = await gateway_run(gateway.port, events, key=key)
    finally:
        done = True
        await sampler
    sampled = max(sampled, gateway.rss_bytes())
    end = gateway.rss_bytes()
    still = await _subscribers(gateway)
    for sock in sockets:
        sock.close()
    await _wait_subscribers(gateway, 0)
    await asyncio.sleep(0.5)  # what leaving does after the gauge dropped (task teardown)
    after = gateway.rss_bytes()
    peak = max(gateway.peak_rss_bytes(), sampled, after)
    complete = result.terminal == b"completed" and result.deltas == events and still == stalled
    return RunMemory(
        float(sampled - before),
        float(peak - before),
        float(end - before),
        float(after - before),
        complete,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--deltas", type=int, default=20)
    parser.add_argument("--events", type=int, default=50000)
    parser.add_argument(
        "--log-max-len", type=int, default=None, help="event_log_max_len (default: events / 5)"
    )
    parser.add_argument("--stalled", type=int, default=1, help="stalled subscribers (0: none)")
    args = parser.parse_args()
    log_max_len = args.log_max_len or max(1, args.events // 5)
    with contextlib.ExitStack() as exits:
        upstream = procs.start_server("upstream")
        exits.callback(upstream.stop)
        gateway = procs.start_server("gateway", config=procs.gateway_config(upstream.url))
        exits.callback(gateway.stop)
        per_conv = uvloop.run(conversations(gateway, args.conversations, args.deltas))
        config = procs.gateway_config(upstream.url, gateway={"event_log_max_len": log_max_len})
        stalled_gateway = procs.start_server("gateway", config=config)
        exits.callback(stalled_gateway.stop)
        stalled = uvloop.run(stalled_run(stalled_gateway, args.events, args.stalled))
        # The same run in a fresh gateway with no stalled subscriber: what the run itself costs
        # (retained log, reduced state), so the difference is what stalling costs.
        plain_gateway = procs.start_server("gateway", config=config)
        exits.callback(plain_gateway.stop)
        plain = uvloop.run(stalled_run(plain_gateway, args.events, 0))
    extra_peak = stalled.peak - plain.peak
    extra_after = stalled.after_close - plain.after_close
    mb = 2**20
    rows = [
        [
            f"RSS per idle conversation ({args.conversations} x {args.deltas} deltas)",
            f"{per_conv / 1024:.1f} KB",
            "<= 50 KB",
        ],
        [
            f"RSS growth, {args.events:,}-event run, read normally (sampled peak)",
            f"{plain.sampled_peak / mb:.2f} MB",
            "<= 10 MB",
        ],
        [f"  log cap (event_log_max_len): {log_max_len:,}", "", ""],
        [
            "  read normally: peak (VmHWM) / at the end / after",
            f"{plain.peak / mb:.2f} / {plain.end / mb:.2f} / {plain.after_close / mb:.2f} MB",
            "",
        ],
        [
            f"  + {args.stalled} stalled: peak (VmHWM) / at the end / after the close",
            f"{stalled.peak / mb:.2f} / {stalled.end / mb:.2f} / {stalled.after_close / mb:.2f} MB",
            "",
        ],
        ["  stalled subscriber(s) add to the peak", f"{extra_peak / mb:.2f} MB", "<= 1 MB"],
        ["  ... and to the RSS after the close", f"{extra_after / mb:.2f} MB", "<= 1 MB"],
    ]
    print(table("Figure 5: gateway memory", ["measure", "value", "target"], rows))
    complete = stalled.complete and plain.complete
    gate = Gate("figure5")
    gate.holds("runs complete", complete)
    kb = per_conv / 1024
    gate.at_most("RSS per idle conversation", kb, PER_CONVERSATION_TARGET / 1024, " KB")
    gate.at_most("RSS growth of a run", plain.sampled_peak / mb, RUN_TARGET / mb, " MB")
    gate.at_most("stalled extra peak", extra_peak / mb, STALLED_EXTRA_TARGET / mb, " MB")
    gate.at_most("stalled extra after close", extra_after / mb, STALLED_EXTRA_TARGET / mb, " MB")
    print(
        f"SUMMARY figure5 per_conversation={per_conv / 1024:.1f} KB (target <= 50) "
        f"run_growth={plain.sampled_peak / mb:.2f} MB (target <= 10) "
        f"stalled_extra_peak={extra_peak / mb:.2f} MB (target <= 1) "
        f"stalled_extra_after_close={extra_after / mb:.2f} MB (target <= 1) "
        f"run_complete={complete} {gate.verdict.value}"
    )
    sys.exit(gate.finish())


if __name__ == "__main__":
    main()
