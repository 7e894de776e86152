"""Issue 52's figures on a Redis Cluster, side by side with standalone Redis and memory.

One mock upstream; a private standalone ``redis-server`` and a private Redis Cluster (three
masters, three replicas; ``bench/harness/redis_cluster.py``), every node with the deployed
append-only file; four gateways: ``memory``, ``redis`` (the standalone), ``cluster``
(``[gateway] redis_cluster = true``, seeded by one node) and ``cluster-wait`` (the same with
``redis_wait_replicas = 1``). Each round, in an order that rotates by one every round:

- **throughput**: one streamed run of ``--chunks`` deltas per gateway; events/s, and CPU per
  event of the gateway plus every Redis process it reads (the cluster: masters and replicas,
  from ``/proc``);
- **spread**: on ``cluster``, ``--conversations`` conversations streaming at once (one SSE
  subscriber each, ``--deltas`` deltas at ``--rate`` deltas/s, as in the capacity bench); each
  master's CPU over the window; the figure is the busiest master's share of the masters' sum.

Targets (issue 52), on the medians over the rounds: cluster ÷ standalone events/s ≥ 0.8;
cluster ÷ standalone CPU per event (gateway + Redis) ≤ 1.25; the busiest master ≤ 45 % of the
masters' CPU. The cost of ``redis_wait_replicas = 1`` (``cluster-wait`` ÷ ``cluster``) is
reported; it has no bound, but a run that cannot measure it fails.

Usage: ``.venv/bin/python bench/cluster_bench.py [--chunks 20000] [--rounds 5]
[--conversations 100] [--deltas 150] [--rate 50]``
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis
import uvloop

from bench.capacity_bench import step
from bench.harness import procs
from bench.harness.flows import gateway_run
from bench.harness.gate import Gate, value_of
from bench.harness.redis_cluster import ClusterNode, RedisCluster
from bench.harness.stats import median, table

VARIANTS = ("memory", "redis", "cluster", "cluster-wait")
#: Issue 52's targets.
EVENTS_TARGET = 0.8
CPU_TARGET = 1.25
BUSIEST_TARGET = 0.45


@dataclass
class Series:
    """One variant's throughput rounds."""

    events_per_s: list[float] = field(default_factory=list)
    #: The gateway's CPU µs per event.
    gateway_us: list[float] = field(default_factory=list)
    #: The gateway's plus every Redis process's CPU µs per event.
    total_us: list[float] = field(default_factory=list)
    #: Of ``total_us``: the cluster's replicas (0 elsewhere).
    replica_us: list[float] = field(default_factory=list)


@dataclass
class Spread:
    """One round of many conversations streaming at once on the cluster."""

    complete: bool
    #: CPU seconds of each master over the window, by port.
    master_cpu: dict[int, float]
    #: Conversations created on each master in the window, by port.
    conversations: dict[int, int]
    p99_ms: float

    @property
    def busiest_share(self) -> float:
        return busiest_share(self.master_cpu)


def busiest_share(cpu: dict[int, float]) -> float:
    """The busiest node's share of the nodes' summed CPU; NaN when none was used."""
    total = sum(cpu.values())
    return max(cpu.values()) / total if cpu and total > 0 else math.nan


def rotated(names: tuple[str, ...], by: int) -> list[str]:
    """``names`` starting at its ``by``-th (mod its length): each round a different one first."""
    k = by % len(names)
    return [*names[k:], *names[:k]]


def _metas(node: ClusterNode) -> int:
    """The conversations on ``node`` (their meta keys)."""
    client = redis.Redis(port=node.port, socket_timeout=10)
    try:
        return sum(1 for _ in client.scan_iter(match="*:meta", count=1000))
    finally:
        client.close()


async def throughput(fleet: procs.Fleet, name: str, chunks: int, into: Series) -> None:
    server = fleet.gateways[name]
    cluster = fleet.cluster if name.startswith("cluster") else None
    before, redis_before = server.cpu_seconds(), fleet.redis_cpu_seconds(name)
    replicas = cluster.replicas() if cluster is not None else []
    replicas_before = sum(node.cpu_seconds() for node in replicas)
    result = await gateway_run(server.port, chunks)
    gateway = server.cpu_seconds() - before
    total = gateway + fleet.redis_cpu_seconds(name) - redis_before
    replica = sum(node.cpu_seconds() for node in replicas) - replicas_before
    if result.status != 200 or result.terminal != b"completed" or result.deltas != chunks:
        raise RuntimeError(f"{name}: bad stream {result.status} {result.body_head[:200]!r}")
    frames = max(1, result.frames)
    into.events_per_s.append(result.frames / result.elapsed)
    into.gateway_us.append(gateway / frames * 1e6)
    into.total_us.append(total / frames * 1e6)
    into.replica_us.append(replica / frames * 1e6)


async def spread(
    server: procs.Server, cluster: RedisCluster, conversations: int, deltas: int, rate: float
) -> Spread:
    masters = cluster.masters()
    metas = {node.port: _metas(node) for node in masters}
    before = {node.port: node.cpu_seconds() for node in masters}
    got = await step(server, conversations, deltas, rate)
    used = {node.port: node.cpu_seconds() - before[node.port] for node in masters}
    created = {node.port: _metas(node) - metas[node.port] for node in masters}
    return Spread(got.complete, used, created, got.p99_ms)


async def measure(
    fleet: procs.Fleet,
    variants: tuple[str, ...],
    chunks: int,
    rounds: int,
    conversations: int,
    deltas: int,
    rate: float,
) -> tuple[dict[str, Series], list[Spread]]:
    series = {name: Series() for name in variants}
    spreads: list[Spread] = []
    for name in variants:
        await gateway_run(fleet.gateways[name].port, 10)
    for number in range(rounds):
        for name in rotated(variants, number):
            await throughput(fleet, name, chunks, series[name])
        if "cluster" in variants and fleet.cluster is not None and conversations:
            spreads.append(
                await spread(fleet.gateways["cluster"], fleet.cluster, conversations, deltas, rate)
            )
    return series, spreads


def ratio(a: list[float], b: list[float]) -> float:
    """The median of ``a`` ÷ the median of ``b``; NaN when either is missing."""
    top, bottom = median(a), median(b)
    return top / bottom if bottom and not math.isnan(bottom) else math.nan


def judge(series: dict[str, Series], spreads: list[Spread]) -> Gate:
    """Issue 52's targets on the medians over the rounds; a figure not measured fails."""
    gate = Gate("cluster")
    empty = Series()
    cluster, standalone = series.get("cluster", empty), series.get("redis", empty)
    gate.at_least(
        "cluster/standalone events/s",
        ratio(cluster.events_per_s, standalone.events_per_s),
        EVENTS_TARGET,
    )
    gate.at_most(
        "cluster/standalone CPU/event (gateway+redis)",
        ratio(cluster.total_us, standalone.total_us),
        CPU_TARGET,
    )
    gate.holds(
        "spread: all delivered",
        bool(spreads) and all(s.complete for s in spreads),
        f"{sum(s.complete for s in spreads)} of {len(spreads)} rounds",
    )
    gate.at_most(
        "busiest master's share of the masters' CPU",
        [s.busiest_share for s in spreads],
        BUSIEST_TARGET,
    )
    wait = ratio(series.get("cluster-wait", empty).events_per_s, cluster.events_per_s)
    gate.holds(
        "redis_wait_replicas = 1 cost measured",
        value_of(wait) is not None,
        f"cluster-wait/cluster events/s = {wait:.3g}",
    )
    return gate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--conversations", type=int, default=100)
    parser.add_argument("--deltas", type=int, default=150)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help="the gateways (bench/harness/procs.py VARIANTS; redis-public: no fast path)",
    )
    args = parser.parse_args()
    variants = tuple(v for v in args.variants.split(",") if v)
    with procs.fleet(variants) as fleet:
        series, spreads = uvloop.run(
            measure(
                fleet,
                variants,
                args.chunks,
                args.rounds,
                args.conversations,
                args.deltas,
                args.rate,
            )
        )
    rows: list[list[object]] = []
    empty = Series()
    base = series.get("redis", empty)
    for name in variants:
        s = series[name]
        rows.append(
            [
                name,
                median(s.events_per_s),
                median(s.gateway_us),
                median(s.total_us),
                median(s.replica_us),
                ratio(s.events_per_s, base.events_per_s),
                ratio(s.total_us, base.total_us),
            ]
        )
    print(
        table(
            f"Throughput: one stream of {args.chunks:,} deltas (medians of {args.rounds} rounds)",
            [
                "gateway",
                "events/s",
                "gateway µs/event",
                "+redis µs/event",
                "of which replicas",
                "events/s ÷ redis",
                "CPU ÷ redis",
            ],
            rows,
        )
    )
    spread_rows: list[list[object]] = []
    for number, one in enumerate(spreads, 1):
        ports = sorted(one.master_cpu)
        spread_rows.append(
            [
                number,
                " / ".join(f"{one.master_cpu[p]:.2f}" for p in ports),
                " / ".join(str(one.conversations[p]) for p in ports),
                one.busiest_share,
                one.p99_ms,
                "yes" if one.complete else "NO",
            ]
        )
    if spread_rows:
        print(
            table(
                f"Spread: {args.conversations} conversations streaming at once on the cluster "
                f"({args.deltas} deltas at {args.rate:g}/s each)",
                ["round", "master CPU s", "conversations", "busiest share", "p99 ms", "delivered"],
                spread_rows,
            )
        )
    cluster = series.get("cluster", empty)
    wait = series.get("cluster-wait", empty)
    gate = judge(series, spreads)
    print(
        f"SUMMARY cluster cluster/standalone events/s = "
        f"{ratio(cluster.events_per_s, base.events_per_s):.2f} (target >= {EVENTS_TARGET}); "
        f"CPU/event (gateway+redis) = {ratio(cluster.total_us, base.total_us):.2f}x "
        f"(target <= {CPU_TARGET}); busiest master = "
        f"{median([s.busiest_share for s in spreads]) * 100:.1f} % "
        f"(target <= {BUSIEST_TARGET * 100:.0f} %); redis_wait_replicas = 1: events/s x "
        f"{ratio(wait.events_per_s, cluster.events_per_s):.2f}, CPU/event x "
        f"{ratio(wait.total_us, cluster.total_us):.2f} {gate.verdict.value}"
    )
    return gate.finish()


if __name__ == "__main__":
    sys.exit(main())
