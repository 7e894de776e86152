"""Figure 3: time to first event, added by the gateway over a direct upstream read.

Alternating rounds of: a direct read of the mock upstream (``POST /v1/chat/completions``), the
gateway (``POST …/runs?stream=true``, a new conversation each time), and the two baselines.
Measured from sending the request to reading the first frame that carries the upstream's first
delta (the first token); for the gateway also to its first frame of any kind (``run.started``).
Target: gateway median − direct median ≤ 2 ms.

Usage: ``.venv/bin/python bench/ttfe_bench.py [--rounds 50]``
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import uvloop

from bench.harness import procs
from bench.harness.client import StreamResult, read_stream
from bench.harness.flows import baseline_body, gateway_run_body, new_key
from bench.harness.gate import Gate
from bench.harness.stats import median, percentile, table

TARGET_MS = 2.0
CHUNKS = 5


def _ms(result: StreamResult, first_any: bool = False) -> float:
    mark = result.first_frame if first_any else result.first_delta
    if result.status != 200 or mark is None:
        raise RuntimeError(f"no first event: {result.status} {result.body_head[:200]!r}")
    return (mark - result.started) * 1000


async def measure(
    upstream: procs.Server, gateway: procs.Server, baseline: procs.Server, rounds: int
) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {
        "direct upstream": [],
        "gateway (first delta)": [],
        "gateway (first frame)": [],
        "normalizer": [],
        "relay": [],
    }
    body = baseline_body(CHUNKS)
    for warm in range(3):
        await read_stream(
            upstream.port, "POST", "/v1/chat/completions", body, stop_at_terminal=False
        )
        await read_stream(
            gateway.port,
            "POST",
            f"/v1/conversations/{new_key('warm')}/runs?stream=true",
            gateway_run_body(CHUNKS),
        )
        _ = warm
    for _ in range(rounds):
        result = await read_stream(
            upstream.port, "POST", "/v1/chat/completions", body, stop_at_terminal=False
        )
        samples["direct upstream"].append(_ms(result))
        result = await read_stream(
            gateway.port,
            "POST",
            f"/v1/conversations/{new_key('ttfe')}/runs?stream=true",
            gateway_run_body(CHUNKS),
        )
        samples["gateway (first delta)"].append(_ms(result))
        samples["gateway (first frame)"].append(_ms(result, first_any=True))
        for name, route in (("normalizer", "/normalize"), ("relay", "/relay")):
            result = await read_stream(baseline.port, "POST", route, body, stop_at_terminal=False)
            samples[name].append(_ms(result))
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    with contextlib.ExitStack() as exits:
        upstream = procs.start_server("upstream")
        exits.callback(upstream.stop)
        gateway = procs.start_server("gateway", config=procs.gateway_config(upstream.url))
        exits.callback(gateway.stop)
        baseline = procs.start_server("baseline", env={"BENCH_UPSTREAM": upstream.url})
        exits.callback(baseline.stop)
        samples = uvloop.run(measure(upstream, gateway, baseline, args.rounds))
    direct = median(samples["direct upstream"])
    rows = [
        [name, median(values), percentile(values, 90), median(values) - direct]
        for name, values in samples.items()
    ]
    print(
        table(
            f"Figure 3: time to first event, {args.rounds} alternating rounds (ms)",
            ["path", "median", "p90", "added median"],
            rows,
        )
    )
    added = median(samples["gateway (first delta)"]) - direct
    gate = Gate("figure3")
    gate.at_most("added time to first delta", added, TARGET_MS, " ms")
    print(
        f"SUMMARY figure3 added time to first delta = {added:.2f} ms "
        f"(target <= {TARGET_MS:g}) {gate.verdict.value}"
    )
    return gate.finish()


if __name__ == "__main__":
    sys.exit(main())
