"""Abort → the MCP server sees the tool call's cancellation, p99 over 20 aborts.

Each round is one ``openai-chat`` run against a loopback mock upstream whose model calls the
test MCP server's ``slow`` tool (``tests/mcp_server.py``, the ``mcp`` SDK over streamable HTTP,
in this process); once the server runs the tool the run's signal is aborted, and the time until
the tool sees its cancellation (the SDK's ``notifications/cancelled``) is recorded.

Usage: ``.venv/bin/python bench/mcp_abort_bench.py [--runs 20]``; prints the figures as JSON,
then a ``GATE`` line (target: p99 ≤ 250 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness.gate import Gate
from bench.harness.stats import median, percentile
from providers.openai_chat import OpenAIChatProvider
from providers.testing import make_options, run_collect
from tests.mcp_server import TestMcpServer, serve_mcp
from tests.providers.mcp.support import settings_for
from tests.providers.support.mock_upstreams import openai_frames, serve_mock

TARGET_MS = 250.0


async def one_abort(server: TestMcpServer, provider: OpenAIChatProvider) -> float:
    server.slow_started.clear()
    server.cancel_seen.clear()
    server.cancelled.clear()
    options = make_options(now=None, wait_timeout_seconds=60)
    task = asyncio.create_task(run_collect(provider, {"prompt": "bench"}, options=options))
    await asyncio.wait_for(server.slow_started.wait(), 10)
    aborted_at = time.monotonic()
    options.signal.abort()
    await asyncio.wait_for(server.cancel_seen.wait(), 10)
    latency = server.cancelled[0][1] - aborted_at
    events = await asyncio.wait_for(task, 10)
    assert events[-1]["type"] == "run.cancelled", events[-1]
    return latency * 1000.0


async def main(runs: int) -> dict[str, Any]:
    calls = [("call_1", "tools__slow", '{"seconds": 60}')]
    async with serve_mcp() as served:
        async with serve_mock([openai_frames(tool_calls=calls) for _ in range(runs)]) as mock:
            provider = OpenAIChatProvider(url=mock.url, model="m", mcp=settings_for(served.url))
            samples = [await one_abort(served.server, provider) for _ in range(runs)]
            await provider.transport.aclose()
    return {
        "runs": runs,
        "unit": "ms",
        "p99": round(percentile(samples, 99), 3),
        "median": round(median(samples), 3),
        "worst": round(max(samples), 3),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    result = asyncio.run(main(args.runs))
    print(json.dumps(result, indent=2))
    gate = Gate("mcp_abort")
    gate.at_most("abort → MCP cancellation p99", result["p99"], TARGET_MS, " ms")
    sys.exit(gate.finish())
