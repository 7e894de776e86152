"""Figure 7: the gateway beside a peer, CopilotKit Runtime v2, relaying the same AG-UI stream.

The mock AG-UI upstream streams one assistant message of N ``TEXT_MESSAGE_CONTENT`` deltas at
full speed. The same lean client reads it through: the gateway's ``ag-ui`` provider
(``POST …/runs?stream=true``) and CopilotKit Runtime (``@copilotkit/runtime`` v2,
``CopilotRuntime`` with an AG-UI ``HttpAgent``, Node listener; ``POST
/api/copilotkit/agent/bench/run``), telemetry off, loopback only. For N = 2k, 5k, 10k, 20k,
rounds alternate the two; medians of events/s, server CPU µs per event and p99 delta latency.
Targets: gateway ≥ 10× CopilotKit's events/s at 20k; gateway CPU/event at 20k ≤ 1.5× at 2k.

The peer lives in ``bench/peer`` (package.json + package-lock.json); its ``node_modules`` is
installed here with ``npm ci`` on first use.

Usage: ``.venv/bin/python bench/peer_bench.py [--sizes 2000,5000,10000,20000] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson
import uvloop

from bench.harness import procs
from bench.harness.client import StreamResult, read_stream
from bench.harness.flows import gateway_run_body, new_key
from bench.harness.gate import Gate
from bench.harness.mock_upstream import prompt
from bench.harness.stats import median, percentile, table

PEER_DIR = Path(__file__).resolve().parent / "peer"
THROUGHPUT_TARGET = 10.0
FLAT_TARGET = 1.5
#: The sizes the targets are set at: the ratio at N = 20k, the flatness from 2k to 20k.
TARGET_N = 20000
FLAT_FROM_N = 2000


@dataclass
class Cell:
    events_per_s: list[float] = field(default_factory=list)
    cpu_us: list[float] = field(default_factory=list)
    p99_ms: list[float] = field(default_factory=list)

    def add(self, result: StreamResult, n: int, cpu: float) -> None:
        if result.status != 200 or result.deltas != n:
            raise RuntimeError(
                f"incomplete stream: status {result.status}, {result.deltas}/{n} deltas "
                f"{result.body_head[:200]!r}"
            )
        self.events_per_s.append(result.frames / result.elapsed)
        self.cpu_us.append(cpu / result.frames * 1e6)
        self.p99_ms.append(percentile(result.latencies, 99) * 1000)


def ensure_peer_installed() -> None:
    if (PEER_DIR / "node_modules" / "@copilotkit" / "runtime").is_dir():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is not installed")
    env = {**os.environ, "SCARF_ANALYTICS": "false", "DO_NOT_TRACK": "1"}
    subprocess.run(
        [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
        cwd=PEER_DIR,
        env=env,
        check=True,
    )


def start_peer(upstream: procs.Server) -> procs.Server:
    port = procs.free_port()
    env = {
        "PORT": str(port),
        "BENCH_AGUI_URL": upstream.url + "/agui",
        "COPILOTKIT_TELEMETRY_DISABLED": "true",
        "DO_NOT_TRACK": "1",
        "NODE_ENV": "production",
    }
    node = shutil.which("node") or "node"
    return procs.start_process(
        "copilotkit",
        [node, "copilotkit_peer.mjs"],
        port,
        env=env,
        health="/api/copilotkit/info",
        cwd=PEER_DIR,
    )


def peer_body(n: int) -> bytes:
    key = new_key("peer")
    return orjson.dumps(
        {
            "threadId": key,
            "runId": f"run-{key}",
            "messages": [{"id": f"u-{key}", "role": "user", "content": prompt(n)}],
            "tools": [],
            "context": [],
            "state": {},
            "forwardedProps": {},
        }
    )


async def gateway_once(server: procs.Server, n: int) -> tuple[StreamResult, float]:
    before = server.cpu_seconds()
    result = await read_stream(
        server.port,
        "POST",
        f"/v1/conversations/{new_key('peer')}/runs?stream=true",
        gateway_run_body(n, provider="bench-agui"),
    )
    return result, server.cpu_seconds() - before


async def peer_once(server: procs.Server, n: int) -> tuple[StreamResult, float]:
    before = server.cpu_seconds()
    result = await read_stream(
        server.port,
        "POST",
        "/api/copilotkit/agent/bench/run",
        peer_body(n),
        stop_at_terminal=False,
    )
    return result, server.cpu_seconds() - before


async def measure(
    gateway: procs.Server, peer: procs.Server, sizes: list[int], rounds: int
) -> dict[str, dict[int, Cell]]:
    cells: dict[str, dict[int, Cell]] = {"gateway": {}, "copilotkit": {}}
    for _ in range(2):  # warm-up (JIT, connections)
        await gateway_once(gateway, 1000)
        await peer_once(peer, 1000)
    for n in sizes:
        for _ in range(rounds):
            result, cpu = await gateway_once(gateway, n)
            cells["gateway"].setdefault(n, Cell()).add(result, n, cpu)
            result, cpu = await peer_once(peer, n)
            cells["copilotkit"].setdefault(n, Cell()).add(result, n, cpu)
    return cells


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="2000,5000,10000,20000")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    ensure_peer_installed()
    with contextlib.ExitStack() as exits:
        upstream = procs.start_server("upstream")
        exits.callback(upstream.stop)
        gateway = procs.start_server("gateway", config=procs.gateway_config(upstream.url))
        exits.callback(gateway.stop)
        peer = start_peer(upstream)
        exits.callback(peer.stop)
        cells = uvloop.run(measure(gateway, peer, sizes, args.rounds))
    rows = []
    for n in sizes:
        for name in ("gateway", "copilotkit"):
            cell = cells[name][n]
            rows.append(
                [n, name, median(cell.events_per_s), median(cell.cpu_us), median(cell.p99_ms)]
            )
    print(
        table(
            f"Figure 7: one AG-UI message of N deltas, medians of {args.rounds} rounds",
            ["N", "server", "events/s", "CPU µs/event", "p99 latency ms"],
            rows,
        )
    )
    big, small = max(sizes), min(sizes)
    speedup = median(cells["gateway"][big].events_per_s) / median(
        cells["copilotkit"][big].events_per_s
    )
    flat = median(cells["gateway"][big].cpu_us) / median(cells["gateway"][small].cpu_us)
    peer_flat = median(cells["copilotkit"][big].cpu_us) / median(cells["copilotkit"][small].cpu_us)
    gate = Gate("figure7")
    if big < TARGET_N:
        gate.not_measured(f"gateway/copilotkit events/s at N={TARGET_N}", f"largest N {big}")
    else:
        gate.at_least(f"gateway/copilotkit events/s at N={big}", speedup, THROUGHPUT_TARGET)
    if big < TARGET_N or small > FLAT_FROM_N:
        gate.not_measured(
            f"gateway CPU/event N={TARGET_N} / N={FLAT_FROM_N}", f"N from {small} to {big}"
        )
    else:
        gate.at_most(f"gateway CPU/event N={big} / N={small}", flat, FLAT_TARGET)
    print(
        f"SUMMARY figure7 N={big}: gateway/copilotkit events/s = {speedup:.1f}x "
        f"(target >= {THROUGHPUT_TARGET:g}x); gateway CPU/event N={big}/N={small} = {flat:.2f} "
        f"(target <= {FLAT_TARGET}; copilotkit {peer_flat:.2f}) {gate.verdict.value}"
    )
    return gate.finish()


if __name__ == "__main__":
    sys.exit(main())
