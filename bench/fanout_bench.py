"""Figure 2: fan-out of one run to K SSE subscribers.

For each K (1, 50, 200, 500): K subscribers open ``GET …/events`` (snapshot first), then one run
of ``--chunks`` deltas at ``--delay`` ms is started; every subscriber must receive every delta.
Latency is the delta's emit time at the mock upstream to its read by the subscriber (p50/p99
over every delivery to up to 50 probe subscribers spread over the K; the others only count
what they receive, so the client does not lag behind what it measures). CPU is the gateway
process's CPU-seconds during the round, per delivered event. Rounds alternate the gateway and
a naive baseline (the minimal normalizer broadcasting to one queue per subscriber). Targets:
p99 <= 100 ms at K=500; gateway CPU per delivered event at K=500 <= 0.25 x at K=1.

Usage: ``.venv/bin/python bench/fanout_bench.py [--ks 1,50,200,500] [--chunks 5000]
[--delay 1] [--rounds 1] [--backend memory|redis] [--no-baseline]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import uvloop

from bench.harness import procs
from bench.harness.client import StreamResult, read_stream, request_json
from bench.harness.flows import baseline_body, gateway_run_body, new_key
from bench.harness.gate import Gate, value_of
from bench.harness.stats import median, percentile, table

#: The K the targets are set at.
TARGET_K = 500
P99_TARGET_MS = 100.0
CPU_RATIO_TARGET = 0.25


@dataclass
class Round:
    k: int
    complete: bool
    p50_ms: float
    p99_ms: float
    cpu_s: float
    delivered: int
    cpu_us_per_delivery: float = field(init=False)

    def __post_init__(self) -> None:
        self.cpu_us_per_delivery = self.cpu_s / max(1, self.delivered) * 1e6


#: Subscribers whose every delivery latency is recorded; the others only count deliveries (a
#: client parsing 2.5 M emit times for K = 500 would lag and inflate what it measures).
PROBES = 50


async def _subscribe(port: int, paths: list[str]) -> tuple[list[asyncio.Task[StreamResult]], bool]:
    connected = [asyncio.Event() for _ in paths]
    step = max(1, len(paths) // PROBES)  # probes spread over the connection order
    readers = [
        asyncio.create_task(
            read_stream(port, "GET", path, connected=event, keep_latencies=i % step == 0)
        )
        for i, (path, event) in enumerate(zip(paths, connected, strict=True))
    ]
    try:
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in connected)), 60)
    except TimeoutError:
        return readers, False
    return readers, True


def _round(k: int, chunks: int, results: list[StreamResult], cpu: float) -> Round:
    latencies: list[float] = []
    complete = True
    delivered = 0
    for result in results:
        complete &= result.deltas == chunks and result.terminal == b"completed"
        delivered += result.frames
        latencies.extend(result.latencies)
    return Round(
        k,
        complete,
        percentile(latencies, 50) * 1000,
        percentile(latencies, 99) * 1000,
        cpu,
        delivered,
    )


async def gateway_round(server: procs.Server, k: int, chunks: int, delay: float) -> Round:
    key = new_key("fan")
    readers, ok = await _subscribe(server.port, [f"/v1/conversations/{key}/events"] * k)
    if not ok:
        raise RuntimeError("subscribers did not all connect")
    before = server.cpu_seconds()
    status, body = await request_json(
        server.port, "POST", f"/v1/conversations/{key}/runs", gateway_run_body(chunks, delay)
    )
    if status != 202:
        raise RuntimeError(f"run not accepted: {status} {body[:200]!r}")
    results = await asyncio.gather(*readers)
    return _round(k, chunks, results, server.cpu_seconds() - before)


async def baseline_round(server: procs.Server, k: int, chunks: int, delay: float) -> Round:
    key = new_key("fan")
    readers, ok = await _subscribe(server.port, [f"/fanout/{key}/events"] * k)
    if not ok:
        raise RuntimeError("baseline subscribers did not all connect")
    before = server.cpu_seconds()
    status, body = await request_json(
        server.port, "POST", f"/fanout/{key}/start", baseline_body(chunks, delay)
    )
    if status != 202:
        raise RuntimeError(f"baseline run not accepted: {status} {body[:200]!r}")
    results = await asyncio.gather(*readers)
    return _round(k, chunks, results, server.cpu_seconds() - before)


async def measure(
    gateway: procs.Server,
    baseline: procs.Server | None,
    ks: list[int],
    chunks: int,
    delay: float,
    rounds: int,
) -> dict[str, dict[int, list[Round]]]:
    out: dict[str, dict[int, list[Round]]] = {"gateway": {}, "baseline": {}}
    await gateway_round(gateway, 1, 10, 0)  # warm-up
    for k in ks:
        for _ in range(rounds):
            out["gateway"].setdefault(k, []).append(await gateway_round(gateway, k, chunks, delay))
            if baseline is not None:
                out["baseline"].setdefault(k, []).append(
                    await baseline_round(baseline, k, chunks, delay)
                )
    return out


def summarize(rounds: list[Round]) -> list[object]:
    return [
        rounds[0].k,
        "yes" if all(r.complete for r in rounds) else "NO",
        median([r.p50_ms for r in rounds]),
        median([r.p99_ms for r in rounds]),
        median([r.cpu_s for r in rounds]),
        median([r.cpu_us_per_delivery for r in rounds]),
    ]


def report(
    data: dict[str, dict[int, list[Round]]], chunks: int, delay: float, label: str = ""
) -> None:
    header = ["K", "all delivered", "p50 ms", "p99 ms", "CPU s", "CPU µs/delivery"]
    for name, per_k in data.items():
        if per_k:
            print(
                table(
                    f"Figure 2{label}: {name}, one run of {chunks:,} chunks at {delay:g} ms, "
                    "medians over rounds",
                    header,
                    [summarize(rounds) for rounds in per_k.values()],
                )
            )
            print()


def judge(gateway: dict[int, list[Round]], label: str = "figure2") -> Gate:
    """The targets at ``TARGET_K`` on the medians over the gateway's rounds; a K the sizes did
    not run (K = 1 for the ratio, ``TARGET_K``) is not measured, never a pass."""
    gate = Gate(label)
    gate.holds(
        "all delivered",
        bool(gateway) and all(r.complete for rounds in gateway.values() for r in rounds),
    )
    if TARGET_K not in gateway:
        gate.not_measured(f"p99 at K={TARGET_K}", f"K={TARGET_K} not run (K: {sorted(gateway)})")
        gate.not_measured(f"CPU/delivery K={TARGET_K} / K=1", f"K={TARGET_K} not run")
        return gate
    top = gateway[TARGET_K]
    gate.at_most(f"p99 at K={TARGET_K}", [r.p99_ms for r in top], P99_TARGET_MS, " ms")
    name = f"CPU/delivery K={TARGET_K} / K=1"
    if 1 not in gateway:
        gate.not_measured(name, f"K=1 not run (K: {sorted(gateway)})")
    else:
        one = value_of([r.cpu_us_per_delivery for r in gateway[1]])
        many = value_of([r.cpu_us_per_delivery for r in top])
        ratio = many / one if many is not None and one else None
        gate.at_most(name, ratio, CPU_RATIO_TARGET)
    return gate


@contextlib.contextmanager
def stack(backend: str, with_baseline: bool) -> Iterator[tuple[procs.Server, procs.Server | None]]:
    with contextlib.ExitStack() as exits:
        upstream = procs.start_server("upstream")
        exits.callback(upstream.stop)
        redis_url = None
        if backend == "redis":
            redis_url = exits.enter_context(procs.redis_server())
        config = procs.gateway_config(upstream.url, backend=backend, redis_url=redis_url)
        gateway = procs.start_server("gateway", config=config)
        exits.callback(gateway.stop)
        baseline = None
        if with_baseline:
            baseline = procs.start_server("baseline", env={"BENCH_UPSTREAM": upstream.url})
            exits.callback(baseline.stop)
        yield gateway, baseline


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ks", default="1,50,200,500")
    parser.add_argument("--chunks", type=int, default=5000)
    parser.add_argument("--delay", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--backend", choices=["memory", "redis"], default="memory")
    parser.add_argument("--no-baseline", action="store_true")
    args = parser.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    with stack(args.backend, not args.no_baseline) as (gateway, baseline):
        data = uvloop.run(measure(gateway, baseline, ks, args.chunks, args.delay, args.rounds))
    report(data, args.chunks, args.delay, f" ({args.backend} backend)")
    gate = judge(data["gateway"])
    print(
        f"SUMMARY figure2 backend={args.backend} K={','.join(map(str, ks))}: "
        + "; ".join(f"{c.name} {c.detail}" for c in gate.checks)
        + f" {gate.verdict.value}"
    )
    return gate.finish()


if __name__ == "__main__":
    sys.exit(main())
