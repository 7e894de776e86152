"""Slow streams' appends in process: what one delta costs a memory and a Redis backend.

The capacity load (C answers at 50 deltas/s, one subscriber each) without HTTP, SSE or the
upstream: C conversations, each with a claimed run and one follower waiting at the head with a
sink (an SSE subscriber's read: the appending task hands it the entries), each run appending
one delta every ``1/rate`` s as the runner's pipe writes a slow stream's (``append_soon`` when
the backend starts it without waiting, else ``append_batch``). Per backend, in alternating
rounds in one process: this process's CPU per delta (``time.process_time``; the loop's timers
and the followers' reads included, the same on both), and Redis minus memory, the part a
change of the Redis append path moves. A private ``redis-server`` (its CPU is not counted).
``--trees A,B``: the Redis figure of each source tree's ``app``, one process per tree and
round (a before/after comparison of one change).

Usage: ``.venv/bin/python bench/slow_appends_bench.py [--c 200] [--rate 50] [--seconds 3]
[--rounds 3] [--trees /tmp/before,.]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


async def measure(backend_name: str, redis_url: str, c: int, rate: float, seconds: float) -> float:
    """CPU seconds per delta of one round on ``backend_name``."""
    from app.backends import ConversationMeta, ConversationRef, LogItem
    from app.backends.memory import MemoryBackend
    from app.backends.redis import RedisBackend, redis_client
    from bench.redis_bench import _event  # this tree's (``--tree`` is first on the path)

    backend: Any
    if backend_name == "redis":
        prefix = f"bench-slow-{time.monotonic_ns()}"
        backend = RedisBackend(redis_client(redis_url), key_prefix=prefix)
    else:
        backend = MemoryBackend()
    await backend.start()

    class Control:
        def __init__(self, run_id: str) -> None:
            self.run_id = run_id

        def abort(self, reason: str) -> bool:
            return True

        def deliver(self, command: Any) -> None:
            pass

    refs = [ConversationRef("bench", f"c{n}") for n in range(c)]
    now = time.time() * 1000
    for n, ref in enumerate(refs):
        await backend.create_conversation(
            ref, ConversationMeta(session_id="ses_bench", created_at=now, updated_at=now)
        )
        assert await backend.claim_run(ref, Control(f"r{n}"))
        run = f"r{n}"
        await backend.append_batch(
            ref,
            [
                LogItem(_event(run, 0, "run.started", {}), checked=True),
                LogItem(
                    _event(run, 1, "message.started", {"messageId": "m", "role": "assistant"}),
                    checked=True,
                ),
            ],
        )
    heads = [await backend.head_cursor(ref) for ref in refs]
    period = 1.0 / rate
    per_run = int(seconds * rate)
    received = [0] * c

    async def follower(n: int) -> None:
        ref, pos = refs[n], heads[n]
        last: list[Any] = [None]

        def sink(entries: list[Any]) -> bool:
            received[n] += len(entries)
            last[0] = entries[-1]
            return True

        while received[n] < per_run:
            last[0] = None
            result = await backend.read(ref, pos, limit=256, wait=1.0, sink=sink)
            if last[0] is not None:
                pos = last[0].cursor
            if result.entries:
                received[n] += len(result.entries)
                pos = result.entries[-1].cursor

    failures: list[Exception] = []

    def logged(entries: list[Any] | None, error: Exception | None) -> None:
        if error is not None:
            failures.append(error)

    # This tree's backend starts an append without waiting when it can, as the runner's pipe
    # has it do (an older tree's only awaits).
    soon = getattr(backend, "append_soon", None)

    async def owner(n: int) -> None:
        ref, run = refs[n], f"r{n}"
        await asyncio.sleep(n * period / c)  # spread over one period, like real answers
        due = time.monotonic()
        for i in range(per_run):
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            delta = _event(run, 2 + i, "message.delta", {"messageId": "m", "delta": f"{i} "})
            items = [LogItem(delta, checked=True)]
            if soon is None or not soon(ref, items, logged):
                await backend.append_batch(ref, items)
            due += period

    followers = [asyncio.ensure_future(follower(n)) for n in range(c)]
    await asyncio.sleep(0.2)  # every follower waits at the head
    cpu = time.process_time()
    await asyncio.gather(*(owner(n) for n in range(c)))
    await asyncio.wait_for(asyncio.gather(*followers), 30)
    cpu = time.process_time() - cpu
    assert not failures, failures[:3]
    assert received == [per_run] * c, "a follower missed deltas"
    for n, ref in enumerate(refs):
        await backend.release_run(ref, f"r{n}")
        await backend.delete(ref)
    await backend.close()
    return cpu / (c * per_run)


def _child(args: argparse.Namespace, backend: str) -> float:
    """One round in a fresh process (``--tree``'s app), its CPU per delta."""
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            backend,
            "--tree",
            args.tree,
            "--c",
            str(args.c),
            "--rate",
            str(args.rate),
            "--seconds",
            str(args.seconds),
            "--redis-url",
            args.redis_url,
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return float(json.loads(out.strip().splitlines()[-1])["cpu_per_delta"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--c", type=int, default=200)
    p.add_argument("--rate", type=float, default=50.0)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--trees", default="", help="compare the Redis path of these source trees")
    p.add_argument("--tree", default=str(ROOT))
    p.add_argument("--child", default="")
    p.add_argument("--redis-url", default="")
    args = p.parse_args()
    if args.child:
        sys.path.insert(0, args.tree)
        import uvloop

        from app.gc_policy import tune_for_serving

        async def child() -> float:
            tune_for_serving()  # as a serving process
            return await measure(args.child, args.redis_url, args.c, args.rate, args.seconds)

        print(json.dumps({"cpu_per_delta": uvloop.run(child())}))
        return
    sys.path.insert(0, str(ROOT))
    from bench.harness import procs

    with procs.redis_process() as redis:
        args.redis_url = redis.url
        if args.trees:
            trees = args.trees.split(",")
            got: dict[str, list[float]] = {t: [] for t in trees}
            for _ in range(args.rounds):
                for tree in trees:
                    args.tree = tree
                    got[tree].append(_child(args, "redis") * 1e6)
            for tree in trees:
                xs = got[tree]
                print(
                    f"{tree}: redis {statistics.median(xs):.2f} us/delta "
                    f"({', '.join(f'{x:.2f}' for x in xs)})"
                )
            return
        runs: dict[str, list[float]] = {"memory": [], "redis": []}
        for _ in range(args.rounds):
            for name in runs:
                runs[name].append(_child(args, name) * 1e6)
        mem, red = statistics.median(runs["memory"]), statistics.median(runs["redis"])
        for name, xs in runs.items():
            print(f"{name:6s} {', '.join(f'{x:.2f}' for x in xs)} us/delta")
        print(
            f"SUMMARY slow appends C={args.c} at {args.rate:g}/s: memory {mem:.2f}, "
            f"redis {red:.2f} us CPU per delta; redis - memory = {red - mem:.2f} us"
        )


if __name__ == "__main__":
    main()
