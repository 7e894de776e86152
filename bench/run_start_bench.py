"""Run starts: the gateway's CPU per run start and the time to ``run.started`` / first delta.

A gateway on the memory backend reading the mock upstream. Each round: ``--n`` sequential
starts (``POST …/runs?stream=true`` on a new conversation, read to the terminal), then
``--concurrent`` starts sent at once (the capacity bench's burst of starts), then ``--n``
sequential ``POST …/runs`` answered 202 (the capacity bench's start, timed to the 202). Runs
are short (``--chunks`` deltas, no delay), so the CPU is mostly the start's. CPU comes from
``/proc/<pid>/stat`` (10 ms ticks: keep ``--n`` large enough).

``--trees A,B`` starts one gateway per source tree (e.g. main's tree unpacked into
``/tmp/start-before`` and this worktree) and alternates their rounds in the same minutes: an
A/B that wall-clock noise from other processes hits alike.

Usage: ``.venv/bin/python bench/run_start_bench.py [--n 200] [--concurrent 60] [--rounds 3]
[--chunks 2] [--trees /tmp/start-before,.]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import uvloop

from bench.harness import procs
from bench.harness.client import StreamResult, read_stream, request_json
from bench.harness.flows import gateway_run_body, new_key
from bench.harness.stats import median, percentile, table


@dataclass
class Samples:
    """What one gateway measured over every round."""

    first_frame: list[float] = field(default_factory=list)  # ms, sequential ?stream=true
    first_delta: list[float] = field(default_factory=list)
    burst_frame: list[float] = field(default_factory=list)  # ms, concurrent ?stream=true
    burst_delta: list[float] = field(default_factory=list)
    accepted: list[float] = field(default_factory=list)  # ms to the 202, sequential
    cpu_stream: list[float] = field(default_factory=list)  # CPU ms per start, per round
    cpu_burst: list[float] = field(default_factory=list)
    cpu_202: list[float] = field(default_factory=list)


def _marks(result: StreamResult) -> tuple[float, float]:
    if result.status != 200 or result.first_frame is None or result.first_delta is None:
        raise RuntimeError(f"no first event: {result.status} {result.body_head[:200]!r}")
    return (
        (result.first_frame - result.started) * 1000,
        (result.first_delta - result.started) * 1000,
    )


async def _stream_start(port: int, body: bytes) -> StreamResult:
    return await read_stream(
        port, "POST", f"/v1/conversations/{new_key('rs')}/runs?stream=true", body
    )


async def _accept(port: int, body: bytes) -> float:
    started = time.perf_counter()
    status, payload = await request_json(
        port, "POST", f"/v1/conversations/{new_key('rs')}/runs", body
    )
    if status != 202:
        raise RuntimeError(f"run not accepted: {status} {payload[:200]!r}")
    return (time.perf_counter() - started) * 1000


async def _settle(server: procs.Server) -> None:
    """Wait until the gateway's CPU stops moving (the 202-answered runs still finishing)."""
    last = server.cpu_seconds()
    while True:
        await asyncio.sleep(0.2)
        now = server.cpu_seconds()
        if now == last:
            return
        last = now


async def one_round(server: procs.Server, samples: Samples, n: int, c: int, chunks: int) -> None:
    body = gateway_run_body(chunks)
    await _settle(server)
    before = server.cpu_seconds()
    for _ in range(n):
        frame, delta = _marks(await _stream_start(server.port, body))
        samples.first_frame.append(frame)
        samples.first_delta.append(delta)
    samples.cpu_stream.append((server.cpu_seconds() - before) * 1000 / n)

    await _settle(server)
    before = server.cpu_seconds()
    results = await asyncio.gather(*(_stream_start(server.port, body) for _ in range(c)))
    for result in results:
        frame, delta = _marks(result)
        samples.burst_frame.append(frame)
        samples.burst_delta.append(delta)
    samples.cpu_burst.append((server.cpu_seconds() - before) * 1000 / c)

    await _settle(server)
    before = server.cpu_seconds()
    for _ in range(n):
        samples.accepted.append(await _accept(server.port, body))
    await _settle(server)  # the runs end after their 202: their CPU counts too
    samples.cpu_202.append((server.cpu_seconds() - before) * 1000 / n)


def _start_gateway(tree: Path, upstream: procs.Server) -> procs.Server:
    """A gateway process importing the app from ``tree`` (its own ``bench/harness/serve.py``)."""
    port = procs.free_port()
    serve = tree / "bench" / "harness" / "serve.py"
    config = procs.gateway_config(upstream.url)
    args = [sys.executable, str(serve), "gateway", "--port", str(port), "--config", config]
    return procs.start_process(f"gateway {tree}", args, port, cwd=tree)


async def measure(
    gateways: dict[str, procs.Server], rounds: int, n: int, c: int, chunks: int
) -> dict[str, Samples]:
    samples = {name: Samples() for name in gateways}
    for server in gateways.values():  # warm up: imports, first-use caches
        await one_round(server, Samples(), 20, min(c, 10), chunks)
    for _ in range(rounds):
        for name, server in gateways.items():
            await one_round(server, samples[name], n, c, chunks)
    return samples


def _rows(samples: dict[str, Samples]) -> list[list[object]]:
    rows: list[list[object]] = []
    for name, s in samples.items():
        rows.append(
            [
                name,
                median(s.cpu_stream),
                median(s.cpu_burst),
                median(s.cpu_202),
                median(s.first_frame),
                median(s.first_delta),
                median(s.burst_frame),
                median(s.burst_delta),
                percentile(s.burst_delta, 99),
                median(s.accepted),
            ]
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=200, help="sequential starts per round")
    parser.add_argument("--concurrent", type=int, default=60, help="starts sent at once")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chunks", type=int, default=2, help="deltas per run")
    parser.add_argument("--trees", default=str(procs.ROOT), help="source trees, comma-separated")
    parser.add_argument("--raw", action="store_true", help="also print each round's CPU figures")
    args = parser.parse_args()
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    with contextlib.ExitStack() as exits:
        upstream = procs.start_server("upstream")
        exits.callback(upstream.stop)
        gateways: dict[str, procs.Server] = {}
        for tree in trees:
            gateways[str(tree)] = _start_gateway(tree, upstream)
            exits.callback(gateways[str(tree)].stop)
        samples = uvloop.run(measure(gateways, args.rounds, args.n, args.concurrent, args.chunks))
    print(
        table(
            f"Run starts: {args.rounds} rounds of {args.n} sequential, {args.concurrent} "
            f"concurrent; {args.chunks} deltas per run (CPU ms per start, times in ms)",
            [
                "tree",
                "cpu seq",
                "cpu burst",
                "cpu 202",
                "frame",
                "delta",
                "burst frame",
                "burst delta",
                "burst p99",
                "202",
            ],
            _rows(samples),
        )
    )
    if args.raw:
        for name, s in samples.items():
            print(f"{name}: seq {s.cpu_stream} burst {s.cpu_burst} 202 {s.cpu_202}")


if __name__ == "__main__":
    main()
