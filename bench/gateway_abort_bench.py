"""Figure 4: abort request → upstream disconnect, through the gateway's HTTP API.

A run streams from the mock upstream (a delta every ``--delay`` ms, far more than it will
send); once its deltas flow, ``POST …/abort`` is sent and the time until the mock upstream sees
its connection close is recorded (wall clock in both processes). In-process: the abort goes to
the instance running the run (memory backend). Across instances: two gateway processes on one
private Redis; the run is started on A and the abort sent to B. Every run must end with
``run.cancelled``. Targets: p99 ≤ 50 ms in-process, ≤ 250 ms across instances.

Usage: ``.venv/bin/python bench/gateway_abort_bench.py [--runs 20] [--no-redis]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson
import uvloop

from bench.harness import procs
from bench.harness.client import read_stream, request_json
from bench.harness.flows import gateway_run_body, new_key
from bench.harness.gate import Gate
from bench.harness.stats import median, percentile, table

TARGETS_MS = {"in-process (memory)": 50.0, "across instances (redis)": 250.0}


async def one_abort(
    upstream: procs.Server, run_on: procs.Server, abort_on: procs.Server, delay: float
) -> float:
    key = new_key("abort")
    tag = key.replace("-", "")
    first = asyncio.Event()
    stream = asyncio.ensure_future(
        read_stream(
            run_on.port,
            "POST",
            f"/v1/conversations/{key}/runs?stream=true",
            gateway_run_body(1_000_000, delay, tag),
            connected=first,
        )
    )
    await asyncio.wait_for(first.wait(), 10)
    await asyncio.sleep(0.05)  # deltas are flowing
    started = time.time()
    status, body = await request_json(
        abort_on.port, "POST", f"/v1/conversations/{key}/abort", b"{}"
    )
    if status != 202:
        raise RuntimeError(f"abort not accepted: {status} {body[:200]!r}")
    disconnected = None
    deadline = time.monotonic() + 10
    while disconnected is None and time.monotonic() < deadline:
        _, answer = await request_json(upstream.port, "GET", f"/disconnects/{tag}")
        disconnected = orjson.loads(answer)["t"]
        if disconnected is None:
            await asyncio.sleep(0.002)
    result = await asyncio.wait_for(stream, 15)
    if result.terminal != b"cancelled":
        raise RuntimeError(f"run ended with {result.terminal!r}, expected cancelled")
    if disconnected is None:
        raise RuntimeError("the upstream never saw a disconnect")
    return (float(disconnected) - started) * 1000


async def measure(
    upstream: procs.Server,
    pairs: dict[str, tuple[procs.Server, procs.Server]],
    runs: int,
    delay: float,
) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {name: [] for name in pairs}
    for _ in range(runs):  # alternate the setups round by round
        for name, (run_on, abort_on) in pairs.items():
            samples[name].append(await one_abort(upstream, run_on, abort_on, delay))
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--delay", type=float, default=5.0)
    parser.add_argument("--no-redis", action="store_true")
    args = parser.parse_args()
    with contextlib.ExitStack() as exits:
        upstream = procs.start_server("upstream")
        exits.callback(upstream.stop)
        memory = procs.start_server("gateway", config=procs.gateway_config(upstream.url))
        exits.callback(memory.stop)
        pairs = {"in-process (memory)": (memory, memory)}
        if not args.no_redis:
            redis_url = exits.enter_context(procs.redis_server())
            config = procs.gateway_config(upstream.url, backend="redis", redis_url=redis_url)
            a = procs.start_server("gateway", config=config)
            exits.callback(a.stop)
            b = procs.start_server("gateway", config=config)
            exits.callback(b.stop)
            pairs["across instances (redis)"] = (a, b)
        samples = uvloop.run(measure(upstream, pairs, args.runs, args.delay))
    rows = [
        [name, len(v), median(v), percentile(v, 99), max(v), TARGETS_MS[name]]
        for name, v in samples.items()
    ]
    print(
        table(
            f"Figure 4: abort → upstream disconnect (ms), {args.runs} runs each",
            ["setup", "runs", "median", "p99", "max", "target p99"],
            rows,
        )
    )
    gate = Gate("figure4")
    verdicts = []
    for name, values in samples.items():
        p99 = percentile(values, 99)
        verdict = gate.at_most(f"{name} p99", p99, TARGETS_MS[name], " ms")
        verdicts.append(
            f"{name}: p99={p99:.1f} ms (target <= {TARGETS_MS[name]:g}) {verdict.value}"
        )
    if args.no_redis:
        gate.not_measured("across instances (redis) p99", "--no-redis")
    print("SUMMARY figure4 " + "; ".join(verdicts))
    return gate.finish()


if __name__ == "__main__":
    sys.exit(main())
