"""Time to first event with Redis one network hop away: memory vs Redis behind a delaying proxy.

A small TCP proxy on loopback (``tests/app/support/redis_proxy.py``, in a thread of this
process) holds every chunk Redis sends back for ``--delay-ms`` (1 ms: Redis across a
network), so each round trip of the gateway to Redis costs at least that. Two gateway
processes, one on the memory backend, one on Redis through the proxy, take a streamed run
(``POST …/runs?stream=true``) on a new conversation each, in alternating rounds; measured from
sending the request to reading the frame of the upstream's first delta. The proxy also times
every command, so each Redis round gives the round trips the gateway waited for one after the
other between the ``POST`` and the first delta (``CommandLog.sequential``).

Targets (issue 52): Redis median − memory median ≤ 4 ms; at most 3 sequential round trips on
the path (median). Standalone Redis only: a cluster's nodes announce their own ports, so the
gateway process would need an address remap of its own configuration to go through proxies
(the tests count the cluster's round trips in process, ``test_round_trips.py``).

Usage: ``.venv/bin/python bench/ttfe_delay_bench.py [--rounds 40] [--delay-ms 1]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import uvloop

from bench.harness import procs
from bench.harness.client import StreamResult, read_stream
from bench.harness.flows import gateway_run_body, new_key
from bench.harness.gate import Gate
from bench.harness.stats import median, percentile, table
from tests.app.support.redis_proxy import CommandLog, DelayProxy

ADDED_MAX_MS = 4.0
ROUND_TRIPS_MAX = 3
CHUNKS = 5
REDIS = ("127.0.0.1", int(os.environ.get("BENCH_REDIS_PORT", "6379")))
#: A database of its own on the Redis the tests use; its conversations expire.
REDIS_DB = 3


@contextlib.contextmanager
def proxy_thread(delay: float) -> Iterator[tuple[DelayProxy, CommandLog]]:
    """A :class:`DelayProxy` to Redis serving in a thread of its own (the gateway process
    connects while this one waits for it to start)."""
    log = CommandLog()
    proxy = DelayProxy(REDIS, delay, log)
    loop = uvloop.new_event_loop()
    ready = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(proxy.start())
        ready.set()
        loop.run_forever()
        loop.run_until_complete(proxy.stop())
        loop.close()

    thread = threading.Thread(target=serve, name="redis-delay-proxy", daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield proxy, log
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def _ms(result: StreamResult) -> float:
    if result.status != 200 or result.first_delta is None:
        raise RuntimeError(f"no first delta: {result.status} {result.body_head[:200]!r}")
    return (result.first_delta - result.started) * 1000


async def _run(port: int) -> StreamResult:
    return await read_stream(
        port,
        "POST",
        f"/v1/conversations/{new_key('ttfe')}/runs?stream=true",
        gateway_run_body(CHUNKS),
    )


async def measure(
    memory: procs.Server, redis: procs.Server, log: CommandLog, rounds: int
) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {"memory": [], "redis (proxied)": [], "round trips": []}
    for _ in range(3):  # warm: connections, scripts, code paths
        await _run(memory.port)
        await _run(redis.port)
    for _ in range(rounds):
        samples["memory"].append(_ms(await _run(memory.port)))
        result = await _run(redis.port)
        samples["redis (proxied)"].append(_ms(result))
        assert result.first_delta is not None
        samples["round trips"].append(log.sequential(result.started, result.first_delta))
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--delay-ms", type=float, default=1.0)
    args = parser.parse_args()
    gateway = {"conversation_ttl_seconds": 600}
    with contextlib.ExitStack() as exits:
        proxy, log = exits.enter_context(proxy_thread(args.delay_ms / 1000))
        upstream = procs.start_server("upstream", timeout=120)
        exits.callback(upstream.stop)
        memory = procs.start_server(
            "gateway", config=procs.gateway_config(upstream.url), timeout=120
        )
        exits.callback(memory.stop)
        config = procs.gateway_config(
            upstream.url,
            backend="redis",
            redis_url=f"redis://127.0.0.1:{proxy.port}/{REDIS_DB}",
            gateway=gateway,
        )
        redis = procs.start_server("gateway", config=config, timeout=120)
        exits.callback(redis.stop)
        samples = uvloop.run(measure(memory, redis, log, args.rounds))
    base = median(samples["memory"])
    rows = [
        [name, median(values), percentile(values, 90), median(values) - base]
        for name, values in samples.items()
        if name != "round trips"
    ]
    print(
        table(
            f"Time to first delta, Redis replies held {args.delay_ms:g} ms, "
            f"{args.rounds} alternating rounds (ms)",
            ["backend", "median", "p90", "added median"],
            rows,
        )
    )
    trips = samples["round trips"]
    print(
        f"sequential round trips POST -> first delta: median {median(trips):g}, "
        f"min {min(trips):g}, max {max(trips):g}"
    )
    added = median(samples["redis (proxied)"]) - base
    gate = Gate("ttfe-delay")
    gate.at_most("added time to first delta (redis - memory)", added, ADDED_MAX_MS, " ms")
    gate.at_most("sequential round trips to the first delta", trips, ROUND_TRIPS_MAX)
    print(
        f"SUMMARY ttfe-delay added {added:.2f} ms (target <= {ADDED_MAX_MS:g}), "
        f"round trips {median(trips):g} (target <= {ROUND_TRIPS_MAX}) {gate.verdict.value}"
    )
    return gate.finish()


if __name__ == "__main__":
    sys.exit(main())
