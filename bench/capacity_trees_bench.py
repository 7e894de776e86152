"""Capacity steps of two source trees side by side: what a change saves per step, same minutes.

One mock upstream, one private ``redis-server`` and, per tree in ``--trees``, a gateway on
``--backend`` importing the app from that tree (its own ``bench/harness/serve.py``); plus a
memory gateway of the last tree as the reference. For each C in ``--cs``, ``--rounds``
alternating capacity steps (``bench/capacity_bench.py``'s: C conversations with one SSE
subscriber each, C runs of ``--deltas`` deltas at 50/s). Prints per gateway the medians of its
CPU per step (user and system, from ``/proc``), ``redis-server``'s CPU in its steps, and p50 /
p99 delivery latency. The machine drifts by ±20 % over minutes: compare the trees, not runs.

Usage: ``.venv/bin/python bench/capacity_trees_bench.py --trees /tmp/before,. [--cs 40,70]
[--rounds 4] [--deltas 150] [--backend redis]``
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import uvloop

from bench.capacity_bench import step
from bench.harness import procs
from bench.harness.stats import table


@dataclass
class Sample:
    user_s: float
    sys_s: float
    redis_s: float
    p50_ms: float
    p99_ms: float
    complete: bool


async def measure(
    gateways: dict[str, procs.Server],
    redis: procs.RedisProcess,
    c: int,
    rounds: int,
    deltas: int,
) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {name: [] for name in gateways}
    for server in gateways.values():  # warm up: imports, pools, first-use caches
        await step(server, min(c, 10), 5, 50)
    for _ in range(rounds):
        for name, server in gateways.items():
            user, system = procs.pid_user_system_seconds(server.pid)
            redis_before = redis.cpu_seconds()
            s = await step(server, c, deltas, 50)
            user_after, system_after = procs.pid_user_system_seconds(server.pid)
            out[name].append(
                Sample(
                    user_after - user,
                    system_after - system,
                    redis.cpu_seconds() - redis_before,
                    s.p50_ms,
                    s.p99_ms,
                    s.complete,
                )
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trees", required=True, help="two or more source trees, comma-separated")
    parser.add_argument("--cs", default="40,70")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--deltas", type=int, default=150)
    parser.add_argument("--backend", default="redis")
    args = parser.parse_args()
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    with contextlib.ExitStack() as exits:
        upstream = procs.start_server("upstream")
        exits.callback(upstream.stop)
        redis = exits.enter_context(procs.redis_process())
        gateways: dict[str, procs.Server] = {}
        for n, tree in enumerate(trees):
            name = f"{chr(65 + n)} {args.backend}"
            gateways[name] = procs.start_tree_gateway(
                tree, procs.gateway_config(upstream.url, backend=args.backend, redis_url=redis.url)
            )
            exits.callback(gateways[name].stop)
        if args.backend != "memory":
            name = f"{chr(64 + len(trees))} memory"
            gateways[name] = procs.start_tree_gateway(
                trees[-1], procs.gateway_config(upstream.url, backend="memory", redis_url=redis.url)
            )
            exits.callback(gateways[name].stop)
        for c in (int(x) for x in args.cs.split(",")):
            samples = uvloop.run(measure(gateways, redis, c, args.rounds, args.deltas))
            rows: list[list[object]] = []
            for name, items in samples.items():
                cpu = [s.user_s + s.sys_s for s in items]
                rows.append(
                    [
                        name,
                        statistics.median(cpu),
                        statistics.median(s.user_s for s in items),
                        statistics.median(s.sys_s for s in items),
                        statistics.median(s.redis_s for s in items),
                        statistics.median(s.p50_ms for s in items),
                        ", ".join(f"{s.p99_ms:.0f}" for s in items),
                        "yes" if all(s.complete for s in items) else "NO",
                    ]
                )
            print(
                table(
                    f"C = {c}, {args.deltas} deltas at 50/s, {args.rounds} rounds (medians); "
                    + ", ".join(f"{chr(65 + n)} = {t}" for n, t in enumerate(trees)),
                    [
                        "gateway",
                        "CPU s",
                        "user s",
                        "sys s",
                        "redis s",
                        "p50 ms",
                        "p99 ms",
                        "all delivered",
                    ],
                    rows,
                )
            )


if __name__ == "__main__":
    main()
