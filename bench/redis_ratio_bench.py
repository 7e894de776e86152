"""Figure 6: figures 1 and 2 with ``backend = "redis"``, as ratios to the memory backend.

One mock upstream, one memory-backend gateway and one Redis-backend gateway (on a private
``redis-server``), measured in alternating rounds: throughput of one ``--chunks`` stream
(events/s, gateway CPU µs/event, and gateway + redis-server CPU µs/event: work moved into Lua
scripts is not free) and fan-out of one ``--fan-chunks`` run at ``--delay`` ms to K
subscribers (p99 latency, CPU µs per delivered event). Ratios are redis / memory of the medians.
Targets (issue 15): events/s ≥ 0.5 x memory's; gateway + redis-server CPU per event ≤ 2 x
memory's; p99 on Redis ≤ 250 ms at K = 50 and ≤ 1,000 ms at K = 500.

Usage: ``.venv/bin/python bench/redis_ratio_bench.py [--chunks 20000] [--rounds 3]
[--ks 1,50,200,500] [--fan-chunks 5000] [--delay 1]``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import uvloop

from bench.fanout_bench import Round, gateway_round
from bench.harness import procs
from bench.harness.flows import gateway_run
from bench.harness.gate import Gate
from bench.harness.stats import median, table
from bench.throughput_bench import Series

BACKENDS = ("memory", "redis")
#: Issue 15's targets, Redis against memory.
EVENTS_TARGET = 0.5
CPU_TARGET = 2.0
FAN_P99_TARGETS_MS = {50: 250.0, 500: 1000.0}


async def measure(
    gateways: dict[str, procs.Server],
    redis: procs.RedisProcess,
    chunks: int,
    rounds: int,
    ks: list[int],
    fan_chunks: int,
    delay: float,
) -> tuple[dict[str, Series], dict[str, dict[int, list[Round]]], dict[str, list[float]]]:
    series = {name: Series(name) for name in BACKENDS}
    fan: dict[str, dict[int, list[Round]]] = {name: {} for name in BACKENDS}
    #: gateway + redis-server CPU µs per event (the memory gateway uses no redis-server).
    total: dict[str, list[float]] = {name: [] for name in BACKENDS}
    for server in gateways.values():
        await gateway_run(server.port, 10)
    for _ in range(rounds):
        for name in BACKENDS:
            server = gateways[name]
            before, redis_before = server.cpu_seconds(), redis.cpu_seconds()
            result = await gateway_run(server.port, chunks)
            cpu = server.cpu_seconds() - before
            series[name].add(result, cpu)
            if name == "redis":
                cpu += redis.cpu_seconds() - redis_before
            total[name].append(cpu / max(1, result.frames) * 1e6)
    for k in ks:
        for _ in range(max(1, rounds // 2)):
            for name in BACKENDS:
                fan[name].setdefault(k, []).append(
                    await gateway_round(gateways[name], k, fan_chunks, delay)
                )
    return series, fan, total


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ks", default="1,50,200,500")
    parser.add_argument("--fan-chunks", type=int, default=5000)
    parser.add_argument("--delay", type=float, default=1.0)
    args = parser.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    with procs.gateways_per_backend(BACKENDS) as (redis, gateways):
        series, fan, total = uvloop.run(
            measure(gateways, redis, args.chunks, args.rounds, ks, args.fan_chunks, args.delay)
        )
    mem, red = series["memory"], series["redis"]
    rows: list[list[object]] = [
        [
            f"fig 1: events/s ({args.chunks:,} chunks)",
            median(mem.events_per_s),
            median(red.events_per_s),
            _ratio(median(red.events_per_s), median(mem.events_per_s)),
        ],
        [
            "fig 1: gateway CPU µs/event",
            median(mem.cpu_us_per_event),
            median(red.cpu_us_per_event),
            _ratio(median(red.cpu_us_per_event), median(mem.cpu_us_per_event)),
        ],
        [
            "fig 1: gateway+redis CPU µs/event",
            median(total["memory"]),
            median(total["redis"]),
            _ratio(median(total["redis"]), median(total["memory"])),
        ],
    ]
    complete = True
    for k in ks:
        m, r = fan["memory"][k], fan["redis"][k]
        complete &= all(x.complete for x in m + r)
        for label, attr in (("p99 ms", "p99_ms"), ("CPU µs/delivery", "cpu_us_per_delivery")):
            a = median([getattr(x, attr) for x in m])
            b = median([getattr(x, attr) for x in r])
            rows.append([f"fig 2: K={k} {label}", a, b, _ratio(b, a)])
    print(
        table(
            f"Figure 6: Redis backend vs memory backend (medians; fan-out {args.fan_chunks:,} "
            f"chunks at {args.delay:g} ms)",
            ["measure", "memory", "redis", "redis/memory"],
            rows,
        )
    )
    thr = _ratio(median(red.events_per_s), median(mem.events_per_s))
    kmax = max(ks)
    p99 = median([x.p99_ms for x in fan["redis"][kmax]])
    cpu = _ratio(median(total["redis"]), median(total["memory"]))
    gate = judge(series, total, fan, complete)
    print(
        f"SUMMARY figure6 redis/memory events/s = {thr:.2f}; CPU/event (gateway+redis) = "
        f"{cpu:.2f}x; redis K={kmax} p99 = {p99:.1f} ms; all delivered = {complete} "
        f"{gate.verdict.value}"
    )
    return gate.finish()


def judge(
    series: dict[str, Series],
    total: dict[str, list[float]],
    fan: dict[str, dict[int, list[Round]]],
    complete: bool,
) -> Gate:
    """Issue 15's targets on the medians over the rounds; a K the sizes did not run is not
    measured."""
    gate = Gate("figure6")
    gate.holds("all delivered", complete)
    gate.at_least(
        "redis/memory events/s",
        _ratio(median(series["redis"].events_per_s), median(series["memory"].events_per_s)),
        EVENTS_TARGET,
    )
    gate.at_most(
        "redis/memory CPU/event (gateway+redis-server)",
        _ratio(median(total["redis"]), median(total["memory"])),
        CPU_TARGET,
    )
    for k, bound in FAN_P99_TARGETS_MS.items():
        if k in fan["redis"]:
            gate.at_most(f"redis p99 at K={k}", [x.p99_ms for x in fan["redis"][k]], bound, " ms")
        else:
            gate.not_measured(f"redis p99 at K={k}", f"K={k} not run (K: {sorted(fan['redis'])})")
    return gate


if __name__ == "__main__":
    sys.exit(main())
