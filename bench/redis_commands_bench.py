"""Plain Redis commands: the gateway's CPU per call, with its command mux and without.

The gateway's client (``redis_client``) on a private ``redis-server``, in one process: ``HGET``
and a pipeline of three commands (a snapshot's read), sent by ``--cs`` callers at once, first
each on a connection of its own (the mux off), then through the mux (one held connection, one
write per loop turn). CPU per call (``time.process_time``; the loop and the callers included).

Usage: ``.venv/bin/python bench/redis_commands_bench.py [--cs 1,10,50] [--calls 4000]``
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import uvloop

from app.backends.redis import redis_client
from bench.harness import procs
from bench.harness.stats import table


async def _per_call(call: Callable[[], Awaitable[Any]], c: int, calls: int) -> float:
    for _ in range(50):  # warm: connections, the mux's
        await asyncio.gather(*(call() for _ in range(c)))
    rounds = max(1, calls // c)
    before = time.process_time()
    for _ in range(rounds):
        await asyncio.gather(*(call() for _ in range(c)))
    return (time.process_time() - before) / (rounds * c) * 1e6


async def measure(url: str, cs: list[int], calls: int) -> list[list[object]]:
    client = redis_client(url)
    mux = client.mux  # type: ignore[attr-defined]
    await client.hset("bench:meta", mapping={"inc": "1", "meta": "{}"})

    async def hget() -> Any:
        return await client.hget("bench:meta", "inc")

    async def pipeline() -> Any:
        pipe = client.pipeline(transaction=False)
        pipe.hmget("bench:meta", ["inc", "meta"])
        pipe.get("bench:run")
        pipe.exists("bench:lease")
        return await pipe.execute()

    rows: list[list[object]] = []
    for name, call in (("HGET", hget), ("pipeline of 3", pipeline)):
        for c in cs:
            client.mux = None  # type: ignore[attr-defined]
            alone = await _per_call(call, c, calls)
            client.mux = mux  # type: ignore[attr-defined]
            shared = await _per_call(call, c, calls)
            rows.append([name, c, round(alone, 1), round(shared, 1)])
    await client.aclose()
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--cs", default="1,10,50")
    p.add_argument("--calls", type=int, default=4000)
    args = p.parse_args()
    cs = [int(c) for c in args.cs.split(",")]
    with procs.redis_process() as redis:
        rows = uvloop.run(measure(redis.url, cs, args.calls))
    print(
        table(
            "Gateway CPU per Redis call (us), callers at once",
            ["call", "at once", "own connection", "command mux"],
            rows,
        )
    )


if __name__ == "__main__":
    main()
