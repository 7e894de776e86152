"""What redis-py's private internals buy: Redis gateways with ``fast_paths`` on and off.

One mock upstream, one private ``redis-server``, one memory gateway and Redis gateways: this
tree with ``[gateway] fast_paths = true`` (``app/compat/redis_fast``) and ``= false`` (redis-py's
stock client, public API only), and with ``--base TREE`` that tree's Redis gateway too (e.g.
main's tree before issue 50, unpacked with ``git worktree add``). Rounds alternate between the
gateways, each round starting at the next one. Per round and gateway: figure 6's throughput
of one ``--chunks`` stream (events/s,
gateway CPU µs/event, gateway + redis-server CPU µs/event; the memory gateway gives the
Redis ÷ memory ratios), figure 2's fan-out of one ``--fan-chunks`` run to ``--k`` subscribers
(p99 ms, CPU µs per delivery) when ``--k`` > 0, and ``run_start_bench.py``'s round (CPU ms
per start: sequential, burst of ``--concurrent``, answered 202; ms to the first delta).
Medians over the rounds.

Usage: ``.venv/bin/python bench/redis_fast_paths_bench.py [--rounds 5] [--chunks 5000]
[--n 60] [--concurrent 30] [--k 50] [--fan-chunks 2000] [--base /tmp/base-tree]``
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import uvloop

from bench.fanout_bench import Round, gateway_round
from bench.harness import procs
from bench.harness.flows import gateway_run
from bench.harness.stats import median, table
from bench.run_start_bench import Samples, one_round
from bench.throughput_bench import Series


@dataclass
class Figures:
    """What one gateway measured over every round."""

    series: Series
    total_cpu_us: list[float] = field(default_factory=list)  # gateway + redis-server
    fan: list[Round] = field(default_factory=list)
    starts: Samples = field(default_factory=Samples)


async def measure(
    gateways: dict[str, procs.Server], redis: procs.RedisProcess, args: argparse.Namespace
) -> dict[str, Figures]:
    figures = {name: Figures(Series(name)) for name in gateways}
    for server in gateways.values():  # warm up: imports, connections, scripts
        await gateway_run(server.port, 10)
        await one_round(server, Samples(), 10, min(args.concurrent, 10), 2)
    order = list(gateways.items())
    for i in range(args.rounds):
        # Each round starts at the next gateway: none is always measured after the same one.
        for name, server in order[i % len(order) :] + order[: i % len(order)]:
            f = figures[name]
            before, redis_before = server.cpu_seconds(), redis.cpu_seconds()
            result = await gateway_run(server.port, args.chunks)
            cpu = server.cpu_seconds() - before
            f.series.add(result, cpu)
            if name != "memory":
                cpu += redis.cpu_seconds() - redis_before
            f.total_cpu_us.append(cpu / max(1, result.frames) * 1e6)
            if args.k > 0:
                f.fan.append(await gateway_round(server, args.k, args.fan_chunks, args.delay))
            await one_round(server, f.starts, args.n, args.concurrent, 2)
    return figures


def _rows(figures: dict[str, Figures], args: argparse.Namespace) -> list[list[object]]:
    names = list(figures)

    def row(label: str, values: list[float]) -> list[object]:
        return [label, *values]

    def each(pick: Callable[[Figures], list[float]]) -> list[float]:
        return [median(pick(figures[n])) for n in names]

    rows = [
        row(
            f"fig 6: events/s ({args.chunks:,} chunks)",
            each(lambda f: f.series.events_per_s),
        ),
        row("fig 6: gateway CPU µs/event", each(lambda f: f.series.cpu_us_per_event)),
        row("fig 6: gateway+redis CPU µs/event", each(lambda f: f.total_cpu_us)),
    ]
    if args.k > 0:
        rows += [
            row(f"fig 2: K={args.k} p99 ms", each(lambda f: [r.p99_ms for r in f.fan])),
            row(
                f"fig 2: K={args.k} CPU µs/delivery",
                each(lambda f: [r.cpu_us_per_delivery for r in f.fan]),
            ),
        ]
    rows += [
        row("run start: CPU ms seq", each(lambda f: f.starts.cpu_stream)),
        row("run start: CPU ms burst", each(lambda f: f.starts.cpu_burst)),
        row("run start: CPU ms 202", each(lambda f: f.starts.cpu_202)),
        row("run start: ms to first delta", each(lambda f: f.starts.first_delta)),
        row("run start: burst ms to first delta", each(lambda f: f.starts.burst_delta)),
    ]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--chunks", type=int, default=5000)
    parser.add_argument("--n", type=int, default=60, help="sequential run starts per round")
    parser.add_argument("--concurrent", type=int, default=30, help="run starts sent at once")
    parser.add_argument("--k", type=int, default=50, help="fan-out subscribers (0: none)")
    parser.add_argument("--fan-chunks", type=int, default=2000)
    parser.add_argument("--delay", type=float, default=1.0)
    parser.add_argument("--base", default="", help="another source tree's Redis gateway too")
    args = parser.parse_args()
    with contextlib.ExitStack() as exits:
        upstream = procs.start_server("upstream")
        exits.callback(upstream.stop)
        redis = exits.enter_context(procs.redis_process())

        def config(backend: str, fast: bool = True) -> str:
            return procs.gateway_config(
                upstream.url, backend=backend, redis_url=redis.url, gateway={"fast_paths": fast}
            )

        # Every gateway started the same way (the base tree's can only be started so).
        here = procs.ROOT
        gateways: dict[str, procs.Server] = {}
        gateways["memory"] = procs.start_tree_gateway(here, config("memory"))
        gateways["redis fast on"] = procs.start_tree_gateway(here, config("redis"))
        gateways["redis fast off"] = procs.start_tree_gateway(here, config("redis", False))
        if args.base:
            base_config = procs.gateway_config(upstream.url, backend="redis", redis_url=redis.url)
            gateways["redis base"] = procs.start_tree_gateway(Path(args.base), base_config)
        for server in gateways.values():
            exits.callback(server.stop)
        figures = uvloop.run(measure(gateways, redis, args))
    print(
        table(
            f"Redis fast paths on vs off: medians of {args.rounds} alternating rounds",
            ["figure", *figures],
            _rows(figures, args),
        )
    )


if __name__ == "__main__":
    main()
