"""Run starts: the gateway's CPU per run start and the time to ``run.started`` / first delta.

A gateway on the memory backend reading the mock upstream. Each round: ``--n`` sequential
starts (``POST …/runs?stream=true`` on a new conversation, read to the terminal), then
``--concurrent`` starts sent at once (the capacity bench's burst of starts), then ``--n``
sequential ``POST …/runs`` answered 202 (the capacity bench's start, timed to the 202). Runs
are short (``--chunks`` deltas, no delay), so the CPU is mostly the start's. CPU comes from
``/proc/<pid>/stat`` (10 ms ticks: keep ``--n`` large enough).

``--trees A,B`` starts one gateway per source tree (e.g. main's tree unpacked into
``/tmp/start-before`` and this worktree) and alternates their rounds in the same minutes: an
A/B that wall-clock noise from other processes hits alike.

``--asgi`` measures the CPU of the start itself instead, with less noise: a process per tree
and round sends ``--n`` starts straight to the ASGI app (no sockets, no uvicorn; the tests'
scripted provider, no upstream) and reports ``time.process_time`` per start, runs included
(and, with ``[telemetry]`` on, the export of their spans: flushed before and after the
window). ``--serving-gc`` tunes the collector there as ``agent-gateway serve`` does.

Usage: ``.venv/bin/python bench/run_start_bench.py [--n 200] [--concurrent 60] [--rounds 3]
[--chunks 2] [--trees /tmp/start-before,.] [--asgi [--serving-gc]]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import uvloop

from bench.harness import procs
from bench.harness.client import StreamResult, read_stream, request_json
from bench.harness.flows import gateway_run_body, new_key
from bench.harness.stats import median, percentile, table


@dataclass
class Samples:
    """What one gateway measured over every round."""

    first_frame: list[float] = field(default_factory=list)  # ms, sequential ?stream=true
    first_delta: list[float] = field(default_factory=list)
    burst_frame: list[float] = field(default_factory=list)  # ms, concurrent ?stream=true
    burst_delta: list[float] = field(default_factory=list)
    accepted: list[float] = field(default_factory=list)  # ms to the 202, sequential
    cpu_stream: list[float] = field(default_factory=list)  # CPU ms per start, per round
    cpu_burst: list[float] = field(default_factory=list)
    cpu_202: list[float] = field(default_factory=list)


def _marks(result: StreamResult) -> tuple[float, float]:
    if result.status != 200 or result.first_frame is None or result.first_delta is None:
        raise RuntimeError(f"no first event: {result.status} {result.body_head[:200]!r}")
    return (
        (result.first_frame - result.started) * 1000,
        (result.first_delta - result.started) * 1000,
    )


async def _stream_start(port: int, body: bytes) -> StreamResult:
    return await read_stream(
        port, "POST", f"/v1/conversations/{new_key('rs')}/runs?stream=true", body
    )


async def _accept(port: int, body: bytes) -> float:
    started = time.perf_counter()
    status, payload = await request_json(
        port, "POST", f"/v1/conversations/{new_key('rs')}/runs", body
    )
    if status != 202:
        raise RuntimeError(f"run not accepted: {status} {payload[:200]!r}")
    return (time.perf_counter() - started) * 1000


#: CPU an idle gateway still uses per ``_settle`` sample (its timers); counted from the
#: scheduler's ns, an idle gateway never reads exactly 0 (this waited for ever).
IDLE_CPU_SECONDS = 0.002


async def _settle(server: procs.Server) -> None:
    """Wait until the gateway's CPU stops moving (the 202-answered runs still finishing)."""
    last = server.cpu_seconds()
    while True:
        await asyncio.sleep(0.2)
        now = server.cpu_seconds()
        if now - last < IDLE_CPU_SECONDS:
            return
        last = now


async def one_round(server: procs.Server, samples: Samples, n: int, c: int, chunks: int) -> None:
    body = gateway_run_body(chunks)
    await _settle(server)
    before = server.cpu_seconds()
    for _ in range(n):
        frame, delta = _marks(await _stream_start(server.port, body))
        samples.first_frame.append(frame)
        samples.first_delta.append(delta)
    samples.cpu_stream.append((server.cpu_seconds() - before) * 1000 / n)

    await _settle(server)
    before = server.cpu_seconds()
    results = await asyncio.gather(*(_stream_start(server.port, body) for _ in range(c)))
    for result in results:
        frame, delta = _marks(result)
        samples.burst_frame.append(frame)
        samples.burst_delta.append(delta)
    samples.cpu_burst.append((server.cpu_seconds() - before) * 1000 / c)

    await _settle(server)
    before = server.cpu_seconds()
    for _ in range(n):
        samples.accepted.append(await _accept(server.port, body))
    await _settle(server)  # the runs end after their 202: their CPU counts too
    samples.cpu_202.append((server.cpu_seconds() - before) * 1000 / n)


def _start_gateway(tree: Path, upstream: procs.Server) -> procs.Server:
    """A gateway process importing the app from ``tree`` (its own ``bench/harness/serve.py``)."""
    return procs.start_tree_gateway(tree, procs.gateway_config(upstream.url))


async def measure(
    gateways: dict[str, procs.Server], rounds: int, n: int, c: int, chunks: int
) -> dict[str, Samples]:
    samples = {name: Samples() for name in gateways}
    for server in gateways.values():  # warm up: imports, first-use caches
        await one_round(server, Samples(), 20, min(c, 10), chunks)
    for _ in range(rounds):
        for name, server in gateways.items():
            await one_round(server, samples[name], n, c, chunks)
    return samples


def _rows(samples: dict[str, Samples]) -> list[list[object]]:
    rows: list[list[object]] = []
    for name, s in samples.items():
        rows.append(
            [
                name,
                median(s.cpu_stream),
                median(s.cpu_burst),
                median(s.cpu_202),
                median(s.first_frame),
                median(s.first_delta),
                median(s.burst_frame),
                median(s.burst_delta),
                percentile(s.burst_delta, 99),
                median(s.accepted),
            ]
        )
    return rows


async def asgi_starts(n: int, stream: bool, serving_gc: bool = False) -> float:
    """CPU ms per start of ``n`` starts sent straight to a gateway app (imported from the
    first entry of ``sys.path``), their runs included. ``serving_gc``: the collector tuned as
    ``agent-gateway serve`` tunes it (``app/gc_policy.py``) once the gateway started."""
    import logging

    import orjson
    from starlette.types import Message

    from app.backends import ConversationRef
    from app.factory import create_app
    from tests.app.support.gateway_server import make_settings
    from tests.app.support.scripted_provider import ScriptedProvider

    logging.disable(logging.CRITICAL)
    settings = make_settings(
        limits={"runs_per_minute_per_principal": 10**9, "max_conversations_per_principal": 10**9}
    )
    app = create_app(settings, providers={"demo": ScriptedProvider()})
    gateway = app.state.gateway
    await gateway.start()
    if serving_gc:
        from app.gc_policy import tune_for_serving

        tune_for_serving()
    body = orjson.dumps({"input": {"prompt": "text:2"}})
    never = asyncio.Event()

    async def start(key: str) -> None:
        path = f"/v1/conversations/{key}/runs"
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"stream=true" if stream else b"",
            "root_path": "",
            "headers": [
                (b"host", b"gateway"),
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 2),
            "state": {},
        }
        messages = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive() -> Message:
            if messages:
                return messages.pop()
            await never.wait()  # the client never leaves
            raise AssertionError

        status: list[int] = []

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])

        await app(scope, receive, send)
        if status != [200 if stream else 202]:
            raise RuntimeError(f"start refused: {status}")

    async def starts(prefix: str, count: int) -> None:
        keys = [f"{prefix}-{index}" for index in range(count)]
        for key in keys:
            await start(key)
        for key in keys:  # a 202's run ends after its answer
            await gateway.runs.wait_idle(ConversationRef("anonymous", key), 10.0)

    # With [telemetry] on, every span of the measured starts is exported inside the window (the
    # warm-up's before it): else the batch processor's schedule decides how many are counted.
    telemetry = getattr(gateway, "telemetry", None)
    await starts("warm", 100)
    if telemetry is not None:
        telemetry.tracer_provider.force_flush()
    before = time.process_time()
    await starts("k", n)
    if telemetry is not None:
        telemetry.tracer_provider.force_flush()
    cpu = (time.process_time() - before) * 1000 / n
    await gateway.close()
    return cpu


def _asgi_child(tree: Path, n: int, stream: bool, serving_gc: bool) -> float:
    # This module from this tree (it puts this tree first on sys.path), then ``tree`` first:
    # ``app`` and ``tests`` are imported from ``tree`` (not imported by this module).
    code = (
        "import runpy, sys, uvloop; "
        f"bench = runpy.run_path({__file__!r}, run_name='run_start_bench'); "
        f"sys.path.insert(0, {str(tree)!r}); "
        "assert 'app' not in sys.modules; "
        f"print(uvloop.run(bench['asgi_starts']({n}, {stream}, {serving_gc})))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True, check=True)
    return float(out.stdout.decode().split()[-1])


def asgi_main(trees: list[Path], n: int, rounds: int, serving_gc: bool) -> None:
    cpu: dict[tuple[Path, bool], list[float]] = {(t, s): [] for t in trees for s in (False, True)}
    for _ in range(rounds):
        for stream in (False, True):
            for tree in trees:
                cpu[tree, stream].append(_asgi_child(tree, n, stream, serving_gc))
    rows = [[str(tree), median(cpu[tree, False]), median(cpu[tree, True])] for tree in trees]
    print(
        table(
            f"Run starts through the ASGI app: {rounds} rounds of {n} (CPU ms per start, median)",
            ["tree", "202 start", "?stream=true start"],
            rows,
        )
    )
    for (tree, stream), values in cpu.items():
        print(f"{tree} {'stream' if stream else '202'}: {[round(v, 3) for v in values]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=200, help="sequential starts per round")
    parser.add_argument("--concurrent", type=int, default=60, help="starts sent at once")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chunks", type=int, default=2, help="deltas per run")
    parser.add_argument("--trees", default=str(procs.ROOT), help="source trees, comma-separated")
    parser.add_argument("--raw", action="store_true", help="also print each round's CPU figures")
    parser.add_argument("--asgi", action="store_true", help="CPU per start in process")
    parser.add_argument(
        "--serving-gc", action="store_true", help="--asgi: the collector tuned as `serve` tunes it"
    )
    args = parser.parse_args()
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    if args.asgi:
        asgi_main(trees, args.n, args.rounds, args.serving_gc)
        return
    with contextlib.ExitStack() as exits:
        upstream = procs.start_server("upstream")
        exits.callback(upstream.stop)
        gateways: dict[str, procs.Server] = {}
        for tree in trees:
            gateways[str(tree)] = _start_gateway(tree, upstream)
            exits.callback(gateways[str(tree)].stop)
        samples = uvloop.run(measure(gateways, args.rounds, args.n, args.concurrent, args.chunks))
    print(
        table(
            f"Run starts: {args.rounds} rounds of {args.n} sequential, {args.concurrent} "
            f"concurrent; {args.chunks} deltas per run (CPU ms per start, times in ms)",
            [
                "tree",
                "cpu seq",
                "cpu burst",
                "cpu 202",
                "frame",
                "delta",
                "burst frame",
                "burst delta",
                "burst p99",
                "202",
            ],
            _rows(samples),
        )
    )
    if args.raw:
        for name, s in samples.items():
            print(f"{name}: seq {s.cpu_stream} burst {s.cpu_burst} 202 {s.cpu_202}")


if __name__ == "__main__":
    main()
