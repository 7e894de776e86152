"""Redis append path alone: C run owners each append one event every ``1/rate`` s, in process.

Isolates what the capacity bench's Redis gateway does per delta (the fenced append, through
``FencedWriter`` and ``EventLog``) from HTTP, SSE and the upstream: per-append latency p50/p99,
this process's CPU seconds and the Redis round trips made (``ScriptPipeline.round_trips``;
``-`` on a tree without it). ``--tree`` runs another checkout's ``app`` (a before/after
comparison on one machine, one Redis). Keys go under a fresh prefix, deleted at the end. The
Redis runs with the deployed append-only file meanwhile (``CONFIG SET``, set back after).

Usage: ``.venv/bin/python bench/redis_appends_bench.py [--c 100] [--rate 50] [--seconds 3]
[--redis-url redis://127.0.0.1:6379/0] [--tree PATH]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--c", type=int, default=100)
    p.add_argument("--rate", type=float, default=50.0)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    p.add_argument("--tree", default=str(Path(__file__).resolve().parent.parent))
    return p.parse_args()


async def _main(args: argparse.Namespace) -> None:
    import orjson
    from redis.asyncio import Redis

    from app.backends.redis.claims import Ownership
    from app.backends.redis.eventlog import KIND_EVENT, EventLog, FencedWriter, Pending
    from app.backends.redis.keys import ConversationKeys

    redis = Redis.from_url(args.redis_url, protocol=2)  # RESP2, as the gateway's client
    prefix = f"bench-appends-{os.getpid()}"
    own = Ownership(redis, "bench", 60_000)
    log = EventLog(redis, 1000)
    writers = []
    for i in range(args.c):
        keys = ConversationKeys.for_conversation("bench", f"k{i}", prefix=prefix)
        writers.append(FencedWriter(log, keys, (await own.claim(keys, f"run_{i}")).token.raw))
    period = 1.0 / args.rate
    latencies: list[float] = []

    async def owner(writer: FencedWriter, offset: float) -> None:
        await asyncio.sleep(offset)  # spread the owners over one period, like real answers
        due = time.monotonic()
        end = due + args.seconds
        n = 0
        while due < end:
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            t0 = time.monotonic()
            delta = {"type": "text.delta", "n": n, "text": "hello world"}
            await writer.append([Pending(KIND_EVENT, orjson.dumps(delta))])
            latencies.append(time.monotonic() - t0)
            n += 1
            due += period

    cpu = time.process_time()
    await asyncio.gather(*(owner(w, i * period / args.c) for i, w in enumerate(writers)))
    cpu = time.process_time() - cpu
    latencies.sort()
    trips: Any = getattr(log._append, "round_trips", "-")
    print(
        f"C={args.c} appends={len(latencies)} "
        f"p50={latencies[len(latencies) // 2] * 1000:.2f}ms "
        f"p99={latencies[int(len(latencies) * 0.99)] * 1000:.2f}ms "
        f"cpu={cpu:.2f}s round_trips={trips}"
    )
    stale = [k async for k in redis.scan_iter(match=f"{prefix}*", count=1000)]
    if stale:
        await redis.delete(*stale)
    await redis.aclose()


def main() -> None:
    args = _args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from bench.harness.procs import persistent

    sys.path.insert(0, args.tree)
    import uvloop

    with persistent(args.redis_url):  # the Redis found running persists as deployed
        uvloop.run(_main(args))


if __name__ == "__main__":
    main()
