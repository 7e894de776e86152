"""Redis outages: readiness flips, routes answer 503 quickly, everything resumes without loss.

These tests stop and restart Redis, so each runs its own ``redis-server`` on a free port
(persisting as deployed: AOF, ``appendfsync everysec``) and never touches the shared one. A
crash (``kill -9``) instead of a stop: ``test_redis_crash.py``.

Not on a Redis Cluster: stopping "Redis" there is stopping one node, which these tests'
assertions (readiness off, every route 503) do not describe (the other shards serve on). A
paused master of a cluster: ``test_faults.py``; a killed one: ``test_cluster_failover.py``.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from app.api.errors import error_status
from app.backends import ConversationRef, LogEntry
from app.backends.redis import RedisBackend, redis_client
from app.errors import GatewayError
from tests.app.support.backend_contract import event, meta
from tests.app.support.cluster_support import Subscriber, cluster, is_terminal
from tests.app.support.redis_support import private_redis, unique_prefix
from tests.support import eventually

pytestmark = pytest.mark.slow  # stops and restarts a redis-server of its own


async def _follow(
    backend: RedisBackend, ref: ConversationRef, after: str, out: list[LogEntry]
) -> None:
    """A subscriber loop like the SSE route's: read, wait, retry after backend errors."""
    while True:
        try:
            result = await backend.read(ref, after, limit=100, wait=0.5)
        except GatewayError as exc:
            assert error_status(exc) == 503
            await asyncio.sleep(0.1)
            continue
        assert result.status == "ok", result.status
        for entry in result.entries:
            out.append(entry)
            after = entry.cursor


async def test_outage_fails_fast_and_readers_resume_without_loss() -> None:
    with private_redis() as server:
        backend = RedisBackend(
            redis_client(server.url), key_prefix=unique_prefix(), lease_ttl_seconds=1
        )
        await backend.start()
        try:
            ref = ConversationRef("alice", "c1")
            await backend.create_conversation(ref, meta())
            for i in range(3):
                await backend.append_event(ref, event(f"r{i}", 0, "run.started"))
            head = await backend.head_cursor(ref)
            got: list[LogEntry] = []
            follower = asyncio.create_task(_follow(backend, ref, head, got))
            tag = backend.keys(ref).tag
            await eventually(lambda: tag in backend.hub.readers, what="the follower waits")
            assert await backend.ping()

            server.stop()
            assert not await backend.ping()
            started = time.monotonic()
            with pytest.raises(GatewayError) as failure:
                await backend.snapshot(ref)
            assert (
                error_status(failure.value) == 503 and failure.value.code == "backend_unavailable"
            )
            with pytest.raises(GatewayError):
                await backend.append_event(ref, event("r9", 0, "run.started"))
            assert time.monotonic() - started < 5, "calls must fail fast, not hang"
            await asyncio.sleep(1.0)  # stay down a while (mid-idle)

            server.start()
            deadline = time.monotonic() + 10
            while not await backend.ping():
                assert time.monotonic() < deadline, "no reconnect"
                await asyncio.sleep(0.1)
            appended = [
                await backend.append_event(ref, event(f"r{i}", 1, "run.completed"))
                for i in range(3)
            ]
            # A last entry: once it arrived, a duplicate of the others would have, before it.
            appended.append(await backend.append_event(ref, event("r9", 1, "run.completed")))
            await eventually(lambda: len(got) >= 4)
            assert [e.cursor for e in got] == [e.cursor for e in appended]
            follower.cancel()
            snap = await backend.snapshot(ref)
            assert snap is not None and snap.cursor == appended[-1].cursor
        finally:
            await backend.close()


@pytest.mark.only_backend("redis", reason="two gateway processes on a Redis of the test's own")
async def test_restart_mid_idle_two_instances_readiness_and_sse_resume() -> None:
    with private_redis() as server:
        async with cluster(redis_url=server.url) as (a, b):
            sub = Subscriber(b.url, "c1", lambda e: is_terminal(e) and e["runId"] == second)
            second = ""
            await sub.started()
            async with httpx.AsyncClient(timeout=10.0) as client:
                first = await client.post(
                    f"{a.url}/v1/conversations/c1/runs", json={"input": {"prompt": "text:3"}}
                )
                assert first.status_code == 202
                await eventually(lambda: any(is_terminal(e) for e in sub.events))

                server.stop()
                for gw in (a, b):
                    deadline = time.monotonic() + 5
                    while (await client.get(f"{gw.url}/readyz")).status_code != 503:
                        assert time.monotonic() < deadline, "readiness did not flip"
                        await asyncio.sleep(0.1)
                t0 = time.monotonic()
                down = await client.post(
                    f"{a.url}/v1/conversations/c1/runs", json={"input": {"prompt": "text:1"}}
                )
                assert time.monotonic() - t0 < 5
                assert down.status_code == 503
                assert down.json()["error"]["code"] == "backend_unavailable"
                await asyncio.sleep(1.0)

                server.start()
                for gw in (a, b):
                    deadline = time.monotonic() + 10
                    while (await client.get(f"{gw.url}/readyz")).status_code != 200:
                        assert time.monotonic() < deadline, "readiness did not recover"
                        await asyncio.sleep(0.1)
                again = await client.post(
                    f"{a.url}/v1/conversations/c1/runs", json={"input": {"prompt": "text:5"}}
                )
                assert again.status_code == 202, again.text
                second = again.json()["runId"]
            events = await sub.done(15)
            # The subscriber on B never left: both runs, every event once, in order.
            runs = [e["runId"] for e in events]
            assert runs.count(first.json()["runId"]) > 0 and runs[-1] == second
            assert len(set(sub.ids)) == len(sub.ids)
            for run_id in {first.json()["runId"], second}:
                seqs = [e["sequence"] for e in events if e["runId"] == run_id]
                assert seqs == list(range(len(seqs)))
            assert sum(e["type"] == "message.delta" and e["runId"] == second for e in events) == 5
