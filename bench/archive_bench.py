"""The archive's cost: the same gateway with ``[archive]`` off and on, side by side.

- Many short conversations: ``--conversations`` (1,000) new conversations of ``--deltas`` (20)
  content deltas each, ``--concurrency`` (20) at a time; runs/s, on ÷ off (target ≥ 0.9).
- Figure 1: one stream of ``--chunks`` (20,000) deltas; events/s, on ÷ off (target ≥ 0.95).

With the archive on, each figure's clock runs until the archive has written everything
(``agent_gateway_archive_pending`` 0): the writes happen off the stream's path, but not for
free. ``drain s`` is the part of it after the last run ended.

Rounds alternate off and on; the table shows medians. The archive is a SQLite file in a temp
directory unless ``--archive-url`` names another (e.g. ``postgresql://postgres@127.0.0.1/db``).

The gateway's CPU time (``/proc``, its threads included) per run and per event is shown too,
counted until the archive has written everything: on a machine shared with other work the
wall-clock ratios move by ±30 % from run to run, the CPU ones by a few %.

Usage: ``.venv/bin/python bench/archive_bench.py [--conversations 1000] [--deltas 20]
[--concurrency 20] [--chunks 20000] [--rounds 3] [--archive-url URL]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
import uvloop

from bench.harness import procs
from bench.harness.flows import gateway_run
from bench.harness.gate import Gate
from bench.harness.stats import median, table

RUNS_TARGET = 0.9
EVENTS_TARGET = 0.95
MODES = ("off", "on")
T = TypeVar("T")
COLUMNS = ("runs/s", "drain s", "CPU ms/run", "events/s", "CPU µs/event")


async def many_conversations(port: int, conversations: int, deltas: int, concurrency: int) -> None:
    """``conversations`` new conversations of ``deltas`` deltas, ``concurrency`` at a time."""
    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in range(conversations):
        queue.put_nowait(index)

    async def worker() -> None:
        while not queue.empty():
            queue.get_nowait()
            result = await gateway_run(port, deltas)
            if result.status != 200 or result.deltas != deltas:
                raise RuntimeError(f"bad run: {result.status} {result.body_head[:200]!r}")

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def archive_drained(port: int, within: float = 300.0) -> bool:
    """Whether the archive had nothing queued (``agent_gateway_archive_pending`` 0) within
    ``within`` seconds."""
    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        while time.perf_counter() - started < within:
            text = (await client.get("/metrics")).text
            for line in text.splitlines():
                if (
                    line.startswith("agent_gateway_archive_pending ")
                    and float(line.split()[1]) == 0
                ):
                    return True
            await asyncio.sleep(0.01)
    return False


async def timed(
    work: Awaitable[T],
    drained: Callable[[], Awaitable[bool]] | None,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[T, float, float]:
    """``work``'s result, the seconds it took, and the seconds until it was done *and* (with
    ``drained``) the archive had written it: the figure's clock. NaN when it never drained."""
    started = clock()
    result = await work
    ran = clock() - started
    if drained is None:
        return result, ran, ran
    if not await drained():
        return result, ran, math.nan
    return result, ran, clock() - started


async def measure(
    gateways: dict[str, procs.Server],
    args: argparse.Namespace,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, dict[str, list[float]]]:
    figures: dict[str, dict[str, list[float]]] = {
        mode: {name: [] for name in COLUMNS} for mode in MODES
    }
    for server in gateways.values():
        await gateway_run(server.port, 10)
    for _ in range(args.rounds):
        for mode in MODES:
            server = gateways[mode]
            port = server.port

            def drained(port: int = port) -> Awaitable[bool]:
                return archive_drained(port)

            until = drained if mode == "on" else None
            cpu = server.cpu_seconds()
            _, ran, total = await timed(
                many_conversations(port, args.conversations, args.deltas, args.concurrency),
                until,
                clock,
            )
            figures[mode]["runs/s"].append(args.conversations / total)
            figures[mode]["drain s"].append(total - ran)
            figures[mode]["CPU ms/run"].append(
                (server.cpu_seconds() - cpu) * 1000 / args.conversations
            )
            cpu = server.cpu_seconds()
            result, _, total = await timed(gateway_run(port, args.chunks), until, clock)
            if result.status != 200 or result.deltas != args.chunks:
                raise RuntimeError(f"bad stream: {result.status} {result.body_head[:200]!r}")
            figures[mode]["events/s"].append(result.frames / total)
            figures[mode]["CPU µs/event"].append((server.cpu_seconds() - cpu) * 1e6 / result.frames)
    return figures


@contextlib.contextmanager
def stack(archive_url: str | None) -> Iterator[dict[str, procs.Server]]:
    with contextlib.ExitStack() as exits:
        directory = exits.enter_context(tempfile.TemporaryDirectory(prefix="bench-archive-"))
        url = archive_url or f"sqlite:///{directory}/archive.db"
        upstream = procs.start_server("upstream")
        exits.callback(upstream.stop)
        gateways: dict[str, procs.Server] = {}
        for mode in MODES:
            config = procs.gateway_config(upstream.url)
            if mode == "on":
                with open(config, "a", encoding="utf-8") as file:
                    file.write(f'\n[archive]\nurl = "{url}"\n')
            gateways[mode] = procs.start_server("gateway", config=config)
            exits.callback(gateways[mode].stop)
        yield gateways


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--deltas", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--chunks", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--archive-url", default=None)
    args = parser.parse_args()
    with stack(args.archive_url) as gateways:
        figures = uvloop.run(measure(gateways, args))
    for mode in MODES:
        for name in COLUMNS:
            values = ", ".join(f"{value:.4g}" for value in figures[mode][name])
            print(f"{mode} {name}: {values}")
    rows = [[mode, *(median(figures[mode][name]) for name in COLUMNS)] for mode in MODES]
    print(
        table(
            f"Archive off vs on: {args.conversations:,} conversations x {args.deltas} deltas "
            f"(concurrency {args.concurrency}); one stream of {args.chunks:,} chunks; "
            f"medians of {args.rounds} rounds",
            ["archive", *COLUMNS],
            rows,
        )
    )
    runs = median(figures["on"]["runs/s"]) / median(figures["off"]["runs/s"])
    events = median(figures["on"]["events/s"]) / median(figures["off"]["events/s"])
    cpu_runs = median(figures["off"]["CPU ms/run"]) / median(figures["on"]["CPU ms/run"])
    cpu_events = median(figures["off"]["CPU µs/event"]) / median(figures["on"]["CPU µs/event"])
    gate = Gate("archive")
    runs_verdict = gate.at_least("runs/s on/off", runs, RUNS_TARGET)
    events_verdict = gate.at_least("events/s on/off", events, EVENTS_TARGET)
    print(
        f"CPU (work per CPU second) on/off: runs {cpu_runs:.2f}, events {cpu_events:.2f} "
        "(off's CPU time per run or event / on's)"
    )
    print(
        f"SUMMARY archive runs/s on/off = {runs:.2f} (target >= {RUNS_TARGET}) "
        f"{runs_verdict.value}; events/s on/off = {events:.2f} "
        f"(target >= {EVENTS_TARGET}) {events_verdict.value}"
    )
    return gate.finish()


if __name__ == "__main__":
    sys.exit(main())
