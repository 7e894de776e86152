"""Abort → upstream-disconnect latency, per transport (SSE and WebSocket).

For each transport, 20 runs of the native ``agent-event`` provider against a real loopback
upstream (uvicorn, in this process) that streams one event every 20 ms: after 3 deltas the
run's signal is aborted, and the time until the upstream observes the disconnect (its
streaming generator torn down / its WebSocket receiving the close frame) is recorded.

Usage: ``.venv/bin/python bench/abort_bench.py [--runs 20] [--uvloop]``; prints one JSON
object with the
median and worst per transport, in milliseconds (target: median ≤ 50 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness.gate import Gate
from providers.agent_event import AgentEventProvider
from providers.testing import make_options, run_collect
from providers.transports import SSETransport, WebSocketTransport
from tests.providers.support.loopback import Loopback, serve_loopback

TARGET_MS = 50.0


async def one_run(loopback: Loopback, provider: AgentEventProvider) -> float:
    loopback.disconnects.clear()
    loopback.disconnected.clear()
    options = make_options(now=None)
    three = asyncio.Event()

    def watch(events: list[dict[str, Any]]) -> bool:
        if sum(e["type"] == "message.delta" for e in events) >= 3:
            three.set()
        return False

    task = asyncio.create_task(
        run_collect(provider, {"prompt": "bench"}, options=options, abort_when=watch)
    )
    await asyncio.wait_for(three.wait(), 10)
    aborted_at = time.monotonic()
    options.signal.abort()
    await asyncio.wait_for(loopback.disconnected.wait(), 10)
    latency = loopback.disconnects[0] - aborted_at
    events = await asyncio.wait_for(task, 10)
    assert events[-1]["type"] == "run.cancelled", events[-1]
    return latency * 1000.0


async def main(runs: int) -> dict[str, Any]:
    report: dict[str, Any] = {"runs": runs, "unit": "ms"}
    async with serve_loopback() as loopback:
        providers = {
            "sse": AgentEventProvider(
                "bench", f"http://{loopback.url}/sse/slow?delay=0.02", SSETransport()
            ),
            "websocket": AgentEventProvider(
                "bench", f"ws://{loopback.url}/ws/slow?delay=0.02", WebSocketTransport()
            ),
        }
        for name, provider in providers.items():
            samples = [await one_run(loopback, provider) for _ in range(runs)]
            report[name] = {
                "median": round(statistics.median(samples), 3),
                "worst": round(max(samples), 3),
                "best": round(min(samples), 3),
            }
            await provider.transport.aclose()
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop (as uvicorn does)")
    args = parser.parse_args()
    if args.uvloop:
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            result = runner.run(main(args.runs))
        result["loop"] = "uvloop"
    else:
        result = asyncio.run(main(args.runs))
        result["loop"] = "asyncio"
    print(json.dumps(result, indent=2))
    gate = Gate("abort")
    for transport in ("sse", "websocket"):
        gate.at_most(f"{transport} median", result[transport]["median"], TARGET_MS, " ms")
    print(
        "SUMMARY abort → upstream disconnect median: "
        + ", ".join(f"{t} {result[t]['median']:.1f} ms" for t in ("sse", "websocket"))
        + f" (target <= {TARGET_MS:g}) {gate.verdict.value}"
    )
    sys.exit(gate.finish())
