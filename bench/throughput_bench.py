"""Figure 1: throughput of one long stream, gateway vs the minimal normalizer and raw relay.

One run of ``--chunks`` (20,000) content deltas from the mock OpenAI-compatible upstream at full
speed, read by the same lean client through: the gateway (``openai-chat`` provider,
``POST …/runs?stream=true``), the minimal normalizer and the raw byte relay. The upstream packs
``--bursts`` SSE events per write (1: one event per TCP read; 16: what a real upstream often
sends in one read), one table each. Rounds alternate the three servers; the tables show medians.
Targets: gateway events/s ≥ 1.0 × the normalizer's at every burst, gateway CPU ≤ 10 µs/event.

Usage: ``.venv/bin/python bench/throughput_bench.py [--chunks 20000] [--rounds 5]
[--bursts 1,16] [--backend memory|redis]``
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import uvloop

from bench.harness import procs
from bench.harness.client import StreamResult
from bench.harness.flows import gateway_run, stream_baseline
from bench.harness.gate import Gate
from bench.harness.stats import median, table

TARGET = 1.0
CPU_TARGET_US = 10.0


@dataclass
class Series:
    name: str
    events_per_s: list[float] = field(default_factory=list)
    deltas_per_s: list[float] = field(default_factory=list)
    cpu_us_per_event: list[float] = field(default_factory=list)

    def add(self, result: StreamResult, cpu: float) -> None:
        if result.status != 200 or result.deltas == 0:
            raise RuntimeError(
                f"{self.name}: bad stream {result.status} {result.body_head[:200]!r}"
            )
        self.events_per_s.append(result.frames / result.elapsed)
        self.deltas_per_s.append(result.deltas / result.elapsed)
        self.cpu_us_per_event.append(cpu / result.frames * 1e6)

    def row(self) -> list[object]:
        return [
            self.name,
            median(self.events_per_s),
            median(self.deltas_per_s),
            median(self.cpu_us_per_event),
        ]


async def measure(
    gateway: procs.Server, baseline: procs.Server, chunks: int, rounds: int, bursts: list[int]
) -> dict[int, dict[str, Series]]:
    by_burst = {
        burst: {name: Series(name) for name in ("gateway", "normalizer", "relay")}
        for burst in bursts
    }
    await gateway_run(gateway.port, 10)  # warm up connections and imports
    await stream_baseline(baseline.port, "/normalize", 10)
    for _ in range(rounds):
        for burst, series in by_burst.items():
            before = gateway.cpu_seconds()
            series["gateway"].add(
                await gateway_run(gateway.port, chunks, burst=burst),
                gateway.cpu_seconds() - before,
            )
            for name, route in (("normalizer", "/normalize"), ("relay", "/relay")):
                before = baseline.cpu_seconds()
                result = await stream_baseline(baseline.port, route, chunks, burst=burst)
                series[name].add(result, baseline.cpu_seconds() - before)
    return by_burst


def report(series: dict[str, Series], chunks: int, rounds: int, label: str) -> float:
    print(
        table(
            f"Figure 1{label}: one stream of {chunks:,} chunks, medians of {rounds} rounds",
            ["server", "events/s", "deltas/s", "CPU µs/event"],
            [s.row() for s in series.values()],
        )
    )
    ratio = median(series["gateway"].events_per_s) / median(series["normalizer"].events_per_s)
    return ratio


@contextlib.contextmanager
def stack(backend: str) -> Iterator[tuple[procs.Server, procs.Server]]:
    with contextlib.ExitStack() as exits:
        upstream = procs.start_server("upstream")
        exits.callback(upstream.stop)
        redis_url = None
        if backend == "redis":
            redis_url = exits.enter_context(procs.redis_server())
        config = procs.gateway_config(upstream.url, backend=backend, redis_url=redis_url)
        gateway = procs.start_server("gateway", config=config)
        exits.callback(gateway.stop)
        baseline = procs.start_server("baseline", env={"BENCH_UPSTREAM": upstream.url})
        exits.callback(baseline.stop)
        yield gateway, baseline


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bursts", default="1,16", help="upstream SSE events per write")
    parser.add_argument("--backend", choices=["memory", "redis"], default="memory")
    args = parser.parse_args()
    bursts = [int(b) for b in args.bursts.split(",") if b]
    with stack(args.backend) as (gateway, baseline):
        by_burst = uvloop.run(measure(gateway, baseline, args.chunks, args.rounds, bursts))
    parts = []
    gate = Gate("figure1")
    for burst, series in by_burst.items():
        label = f" ({args.backend} backend, {burst} upstream events per write)"
        ratio = report(series, args.chunks, args.rounds, label)
        cpu = median(series["gateway"].cpu_us_per_event)
        gate.at_least(f"burst={burst} gateway/normalizer events/s", ratio, TARGET)
        gate.at_most(f"burst={burst} gateway CPU", cpu, CPU_TARGET_US, " µs/event")
        parts.append(f"burst={burst}: ratio {ratio:.2f}, gateway CPU {cpu:.1f} µs/event")
    print(
        f"SUMMARY figure1 backend={args.backend} chunks={args.chunks} "
        f"gateway/normalizer events/s; {'; '.join(parts)} "
        f"(targets: ratio >= {TARGET}, CPU <= {CPU_TARGET_US} µs/event) "
        f"{gate.verdict.value}"
    )
    return gate.finish()


if __name__ == "__main__":
    sys.exit(main())
