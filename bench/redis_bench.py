"""Redis backend: cross-instance abort latency and lost-owner detection time.

Two ``RedisBackend`` objects on one Redis stand for two gateway instances A and B (the same
code paths as two processes: Lua scripts, pub/sub, polling, the per-instance log reader).

- abort: A owns a run; B calls ``request_abort``; we time until A's run control is aborted.
  Measured with the pub/sub wake-up (normal path) and with polling only (pub/sub lost).
- lost owner: A owns a run and freezes (stops renewing and polling, as after ``kill -9``); a
  subscriber on B reads the conversation; we time from the freeze until B's subscriber receives
  ``run.failed`` ``gateway_instance_lost``, and report it against the lease TTL.
- ``--e2e``: the same two measurements through the HTTP API with two gateway processes and a
  slow mock upstream (abort: POST on B until the upstream sees its connection closed).

The Redis runs with the deployed append-only file meanwhile (``CONFIG SET``, set back after).

Usage: ``python -m bench.redis_bench [--redis-url URL] [--rounds N] [--lease-ttl S] [--e2e]``
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any, Literal

from app.backends import ConversationMeta, ConversationRef
from app.backends.redis import RedisBackend, redis_client
from bench.harness.procs import persistent
from providers.contract import Command


class TimedControl:
    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.aborted = asyncio.Event()
        self.aborted_at = 0.0

    def abort(self, reason: Literal["aborted", "interrupted", "shutdown"]) -> bool:
        if self.aborted.is_set():
            return False
        self.aborted_at = time.perf_counter()
        self.aborted.set()
        return True

    def deliver(self, command: Command) -> None:
        pass


def _meta() -> ConversationMeta:
    now = time.time() * 1000
    return ConversationMeta(session_id="ses_bench", created_at=now, updated_at=now)


def _event(run: str, seq: int, type_: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "protocolVersion": "0.1",
        "type": type_,
        "eventId": f"{run}:{seq}:{type_}",
        "sessionId": "ses_bench",
        "runId": run,
        "sequence": seq,
        "timestamp": time.time() * 1000,
        "payload": payload,
    }


def _summary(name: str, values_ms: list[float]) -> str:
    values = sorted(values_ms)
    p95 = values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]
    return (
        f"{name}: n={len(values)} p50={statistics.median(values):.1f} ms "
        f"p95={p95:.1f} ms max={values[-1]:.1f} ms"
    )


async def abort_latency(url: str, rounds: int, pubsub: bool) -> list[float]:
    prefix = f"agwbench-{uuid.uuid4().hex[:8]}"
    a = RedisBackend(redis_client(url), key_prefix=prefix, instance_id="A")
    b = RedisBackend(redis_client(url), key_prefix=prefix, instance_id="B")
    await a.start()
    await b.start()
    if not pubsub:
        await a.bus.stop()  # pub/sub "dropped": only the abort flag poll remains
    out: list[float] = []
    try:
        await asyncio.sleep(0.2)
        for i in range(rounds):
            ref = ConversationRef("bench", f"abort-{i}")
            await a.create_conversation(ref, _meta())
            control = TimedControl(f"run_{i}")
            assert await a.claim_run(ref, control)
            await asyncio.sleep(0.15)  # the owner's inbox is subscribed and idle
            started = time.perf_counter()
            assert await b.request_abort(ref, None, "aborted") == control.run_id
            await asyncio.wait_for(control.aborted.wait(), 5)
            out.append((control.aborted_at - started) * 1000)
            await a.release_run(ref, control.run_id)
    finally:
        await _cleanup(a, prefix)
        await a.close()
        await b.close()
    return out


async def lost_owner_detection(url: str, rounds: int, lease_ttl: float) -> list[float]:
    prefix = f"agwbench-{uuid.uuid4().hex[:8]}"
    a = RedisBackend(
        redis_client(url), key_prefix=prefix, instance_id="A", lease_ttl_seconds=lease_ttl
    )
    b = RedisBackend(
        redis_client(url), key_prefix=prefix, instance_id="B", lease_ttl_seconds=lease_ttl
    )
    await a.start()
    await b.start()
    out: list[float] = []
    try:
        for i in range(rounds):
            ref = ConversationRef("bench", f"lost-{i}")
            await a.create_conversation(ref, _meta())
            control = TimedControl(f"run_{i}")
            assert await a.claim_run(ref, control)
            await a.append_event(ref, _event(control.run_id, 0, "run.started", {}))
            await a.append_event(
                ref,
                _event(
                    control.run_id, 1, "message.started", {"messageId": "m", "role": "assistant"}
                ),
            )
            cursor = await b.head_cursor(ref)
            await b.read(ref, cursor, limit=10, wait=0)  # B has a subscriber (its log reader)
            await a._owned[a.keys(ref).tag].stop()  # freeze, as after kill -9
            frozen = time.perf_counter()
            seen = 0.0
            while not seen:
                result = await b.read(ref, cursor, limit=100, wait=lease_ttl + 5)
                for entry in result.entries:
                    cursor = entry.cursor
                    if entry.event_type == "run.failed":
                        seen = time.perf_counter()
            out.append((seen - frozen) * 1000)
            a._owned.clear()
    finally:
        await _cleanup(a, prefix)
        await a.close()
        await b.close()
    return out


async def _cleanup(backend: RedisBackend, prefix: str) -> None:
    keys = [k async for k in backend.redis.scan_iter(match=f"{prefix}:*", count=1000)]
    if keys:
        await backend.redis.delete(*keys)


async def e2e(url: str, rounds: int, lease_ttl: float) -> tuple[list[float], list[float]]:
    """Abort and lost-owner times through HTTP with two gateway processes."""
    import httpx

    from tests.app.support.redis_support import GatewayProcess, serve_slow_upstream

    aborts: list[float] = []
    lost: list[float] = []
    prefix = f"agwbench-{uuid.uuid4().hex[:8]}"
    for i in range(rounds):
        async with serve_slow_upstream() as upstream:
            a = GatewayProcess("A", url, prefix, lease_ttl=lease_ttl, upstream_url=upstream.url)
            b = GatewayProcess("B", url, prefix, lease_ttl=lease_ttl, upstream_url=upstream.url)
            try:
                a.start()
                b.start()
                await asyncio.gather(a.wait_ready(), b.wait_ready())
                async with httpx.AsyncClient(timeout=10.0) as client:
                    key = f"e2e-abort-{i}"
                    body = {"input": {"prompt": "hi"}, "provider": "slow"}
                    res = await client.post(f"{a.url}/v1/conversations/{key}/runs", json=body)
                    assert res.status_code == 202, res.text
                    await asyncio.wait_for(upstream.started.wait(), 10)
                    await asyncio.sleep(0.3)
                    started = time.monotonic()
                    await client.post(f"{b.url}/v1/conversations/{key}/abort", json={})
                    await asyncio.wait_for(upstream.disconnected.wait(), 5)
                    assert upstream.disconnected_at is not None
                    aborts.append((upstream.disconnected_at - started) * 1000)

                    upstream.started.clear()
                    key = f"e2e-lost-{i}"
                    res = await client.post(f"{a.url}/v1/conversations/{key}/runs", json=body)
                    assert res.status_code == 202, res.text
                    await asyncio.wait_for(upstream.started.wait(), 10)
                    await asyncio.sleep(0.3)
                    a.kill()
                    killed = time.monotonic()
                    async with client.stream(
                        "GET", f"{b.url}/v1/conversations/{key}/events"
                    ) as stream:
                        async for line in stream.aiter_lines():
                            if '"run.failed"' in line:
                                lost.append((time.monotonic() - killed) * 1000)
                                break
            finally:
                a.close()
                b.close()
    return aborts, lost


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--lease-ttl", type=float, default=1.0)
    parser.add_argument("--e2e", action="store_true", help="also through HTTP, two processes")
    args = parser.parse_args()
    with persistent(args.redis_url):  # the Redis found running persists as deployed
        await _measure(args)


async def _measure(args: argparse.Namespace) -> None:
    print(_summary("abort A<-B (pub/sub)", await abort_latency(args.redis_url, args.rounds, True)))
    print(
        _summary(
            "abort A<-B (poll only)",
            await abort_latency(args.redis_url, max(5, args.rounds // 3), False),
        )
    )
    rounds = max(3, args.rounds // 6)
    lost = await lost_owner_detection(args.redis_url, rounds, args.lease_ttl)
    print(_summary(f"lost owner -> run.failed on B (lease TTL {args.lease_ttl:g} s)", lost))
    if args.e2e:
        aborts, lost_e2e = await e2e(args.redis_url, 3, args.lease_ttl)
        print(_summary("e2e: POST abort on B -> upstream of A closed", aborts))
        print(_summary("e2e: kill -9 A -> run.failed on B's SSE", lost_e2e))


if __name__ == "__main__":
    asyncio.run(main())
