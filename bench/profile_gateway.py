"""Profile the gateway's hot path with py-spy while it relays long streams (or a fan-out).

Starts the mock upstream and a gateway process, attaches ``py-spy record`` to the gateway,
runs ``--runs`` streams of ``--chunks`` deltas (``--subscribers K`` > 0: one run fanned out to K
SSE subscribers at ``--delay`` ms), then prints the functions with the most samples: by own
time (leaf frames) and inclusive. The raw collapsed stacks are kept at ``--out``.

Usage: ``.venv/bin/python bench/profile_gateway.py [--chunks 20000] [--runs 3]
[--subscribers 0] [--burst 16] [--capacity 0] [--backend memory|redis|cluster|cluster-wait]
[--out /tmp/gateway.folded]``; the capacity
load: ``--capacity 200 --chunks 150 --delay 20 --runs 1``
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import uvloop

from bench.capacity_bench import step as capacity_step
from bench.harness import procs
from bench.harness.client import read_stream
from bench.harness.flows import gateway_run, gateway_run_body, new_key


class _Port:
    """What ``capacity_step`` needs of a server: its port (CPU is not measured here)."""

    def __init__(self, port: int) -> None:
        self.port = port

    def cpu_seconds(self) -> float:
        return 0.0


async def workload(
    port: int,
    chunks: int,
    runs: int,
    subscribers: int,
    delay: float,
    burst: int | None,
    capacity: int = 0,
) -> None:
    for _ in range(runs):
        if capacity > 0:
            # One capacity-bench step: ``capacity`` conversations, one subscriber each.
            await capacity_step(
                _Port(port),  # type: ignore[arg-type]
                capacity,
                chunks,
                1000.0 / delay,
            )
            continue
        if subscribers <= 0:
            await gateway_run(port, chunks, burst=burst)
            continue
        key = new_key("prof")
        connected = [asyncio.Event() for _ in range(subscribers)]
        readers = [
            asyncio.ensure_future(
                read_stream(
                    port,
                    "GET",
                    f"/v1/conversations/{key}/events",
                    connected=ev,
                    keep_latencies=False,
                )
            )
            for ev in connected
        ]
        await asyncio.gather(*(ev.wait() for ev in connected))
        await read_stream(
            port,
            "POST",
            f"/v1/conversations/{key}/runs?stream=true",
            gateway_run_body(chunks, delay),
        )
        await asyncio.gather(*readers)


def summarize(folded: Path, top: int) -> None:
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    # Split on "\n" only: py-spy can sample a frame mid-update and record a name holding "\r"
    # or NUL, which splitlines() would break into a line with no count.
    for line in folded.read_text(errors="replace").split("\n"):
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    print(f"{total} samples")
    print("\nTop own time:")
    for frame, count in own.most_common(top):
        print(f"{100 * count / total:6.1f}%  {frame}")
    print("\nTop inclusive:")
    for frame, count in inclusive.most_common(top * 2):
        print(f"{100 * count / total:6.1f}%  {frame}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--subscribers", type=int, default=0)
    parser.add_argument("--delay", type=float, default=1.0)
    parser.add_argument(
        "--burst", type=int, default=None, help="upstream events per write (mock default: 64)"
    )
    parser.add_argument(
        "--capacity",
        type=int,
        default=0,
        help="C > 0: a capacity-bench step (C conversations, one subscriber each, --chunks "
        "deltas at one per --delay ms)",
    )
    parser.add_argument("--backend", choices=sorted(procs.VARIANTS), default="memory")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--out", default="/tmp/gateway.folded")
    args = parser.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    out = Path(args.out)
    with procs.fleet((args.backend,)) as started:
        gateway = started.gateways[args.backend]
        uvloop.run(gateway_run(gateway.port, 10))
        recorder = subprocess.Popen(
            [
                spy,
                "record",
                "--pid",
                str(gateway.pid),
                "--format",
                "raw",
                "--rate",
                "250",
                "--output",
                str(out),
                "--nonblocking",
            ],
            stdout=subprocess.DEVNULL,
        )
        time.sleep(1.0)
        uvloop.run(
            workload(
                gateway.port,
                args.chunks,
                args.runs,
                args.subscribers,
                args.delay,
                args.burst,
                args.capacity,
            )
        )
        recorder.send_signal(2)
        recorder.wait(30)
    summarize(out, args.top)


if __name__ == "__main__":
    main()
