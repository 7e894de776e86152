"""Redis killed mid-run (``kill -9``) with its append-only file on, then restarted from it.

Two gateway processes (A runs, B serves a subscriber) on a ``redis-server`` of the test's own,
persisting as deployed (http-api.md "Durability on Redis"):

- ``appendfsync always``: Redis acknowledges a write once it is on disk, so a crash loses
  nothing acknowledged: every event a client received is in the log after the restart, and each
  accepted run (a 202) ends with exactly one terminal.
- ``appendfsync everysec``: after a ``kill -9`` the gateways recover (the run ends once, they
  serve what Redis holds). A crash of the host loses what the last second wrote (the kernel
  had not put it on disk yet): a test takes that second away by hand, cutting the AOF back to
  its size at an earlier moment before Redis starts again. The gateway recovers: the run ends
  (no run stuck ``running``), and a reader resuming from a cursor the log lost gets a snapshot,
  on the instance that had streamed the lost entries as on one that never saw them.

Not on a Redis Cluster: there a master's crash is answered by its replica's promotion, not by a
restart from its AOF; what it loses (the replication lag) and how the gateway recovers are
``test_cluster_failover.py``'s, and a lost entry whose id the new master reuses is
``test_lost_entries.py``'s (on the cluster too).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import httpx
import orjson
import pytest
from httpx_sse import aconnect_sse
from redis.asyncio import Redis

from app.backends import EMPTY_CURSOR
from tests.app.support.cluster_support import TERMINALS, cluster, post_run
from tests.app.support.helpers import collect_sse, events_of
from tests.app.support.redis_support import (
    GatewayProcess,
    PrivateRedis,
    private_redis,
    serve_slow_upstream,
)
from tests.support import eventually

# Kills and restarts a redis-server of its own, behind gateway processes on it.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.only_backend("redis", reason="crashes of the Redis the gateways run on"),
]

LEASE_TTL = 3.0
CHUNKS = 150
INTERVAL = 0.03


class Follower:
    """An EventSource in the background: reconnects with Last-Event-ID after any failure until
    it has a run terminal; records (cursor, event) and the snapshot frames."""

    def __init__(self, base: str, key: str) -> None:
        self.base, self.key = base, key
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.snapshots: list[dict[str, Any]] = []
        #: ``len(events)`` when each snapshot frame arrived.
        self.snapshot_at: list[int] = []
        self.following = asyncio.Event()
        self.done = asyncio.Event()
        self.task = asyncio.create_task(self._run())

    def deltas(self) -> int:
        return sum(e["type"] == "message.delta" for _, e in self.events)

    @property
    def cursor(self) -> str:
        return self.events[-1][0]

    async def _run(self) -> None:
        last: str | None = None
        async with httpx.AsyncClient(base_url=self.base, timeout=httpx.Timeout(30.0)) as client:
            while True:
                headers = {"Last-Event-ID": last} if last else {}
                try:
                    async with aconnect_sse(
                        client, "GET", f"/v1/conversations/{self.key}/events", headers=headers
                    ) as source:
                        if source.response.status_code == 200:
                            async for sse in source.aiter_sse():
                                if sse.event == "snapshot":
                                    self.snapshots.append(orjson.loads(sse.data))
                                    self.snapshot_at.append(len(self.events))
                                    last = sse.id or last
                                    self.following.set()
                                elif sse.event == "message" and sse.data:
                                    last = sse.id
                                    event = orjson.loads(sse.data)
                                    self.events.append((sse.id, event))
                                    if event["type"] in TERMINALS:
                                        self.done.set()
                                        return
                except (httpx.HTTPError, RuntimeError):
                    pass
                await asyncio.sleep(0.1)


async def _whole_log(base: str, key: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=base, timeout=30.0) as client:
        return events_of(
            await collect_sse(
                client, f"/v1/conversations/{key}/events?untilIdle=true&since={EMPTY_CURSOR}"
            )
        )


async def _stored_log(redis: PrivateRedis) -> list[dict[str, Any]]:
    """The events of the one conversation's log as Redis holds it (read from Redis)."""
    client = Redis.from_url(redis.url)
    try:
        (key,) = [k async for k in client.scan_iter(match="*}:log")]
        entries: list[tuple[bytes, dict[bytes, bytes]]] = await client.xrange(key)  # type: ignore[assignment]
        return [orjson.loads(fields[b"d"]) for _, fields in entries]
    finally:
        await client.aclose()


def _text(events: list[dict[str, Any]], run_id: str) -> str:
    return "".join(
        e["payload"].get("delta", "")
        for e in events
        if e["runId"] == run_id and e["type"] == "message.delta"
    )


def _answer(snapshot: dict[str, Any], run_id: str) -> str:
    messages = snapshot["agentState"]["messages"].values()
    return "".join(
        m["content"] for m in messages if m["runId"] == run_id and m["role"] == "assistant"
    )


async def _settled(base: str, key: str, run_id: str, within: float = 30.0) -> dict[str, Any]:
    """The conversation's state once nothing runs and ``run_id`` has ended (else it fails)."""
    deadline = asyncio.get_running_loop().time() + within
    async with httpx.AsyncClient(base_url=base, timeout=10.0) as client:
        while True:
            res = await client.get(f"/v1/conversations/{key}/state")
            if res.status_code == 200:
                body: dict[str, Any] = res.json()
                run = body["agentState"]["runs"].get(run_id)
                if body["activeRunId"] is None and run is not None:
                    assert run["status"] != "running", run
                    return body
            assert asyncio.get_running_loop().time() < deadline, f"{key} stuck: {res.text}"
            await asyncio.sleep(0.1)


def _one_terminal(log: list[dict[str, Any]], run_id: str) -> dict[str, Any]:
    ends = [e for e in log if e["runId"] == run_id and e["type"] in TERMINALS]
    assert len(ends) == 1, ends
    ids = [e["eventId"] for e in log]
    assert len(ids) == len(set(ids)), "an event is in the log twice"
    return ends[0]


async def _resume(base: str, key: str, cursor: str) -> list[tuple[str | None, str, Any]]:
    """What a reader resuming from ``cursor`` gets until the stream is idle: (event, id, data)."""
    async with httpx.AsyncClient(base_url=base, timeout=30.0) as client:
        frames = await collect_sse(
            client,
            f"/v1/conversations/{key}/events?untilIdle=true",
            headers={"Last-Event-ID": cursor},
        )
    return [(f.event, f.id, orjson.loads(f.data)) for f in frames]


async def _start(a: GatewayProcess, b: GatewayProcess, key: str) -> tuple[Follower, str]:
    follower = Follower(b.url, key)
    await asyncio.wait_for(follower.following.wait(), 10)
    res = await post_run(a.url, key, {"input": {"prompt": "hi"}, "provider": "slow"})
    assert res.status_code == 202, res.text
    return follower, res.json()["runId"]


async def _restart(redis: PrivateRedis, cut_to: int | None = None) -> None:
    """``kill -9`` Redis; with ``cut_to``, its AOF loses what was written after that size (what
    a host crash takes from an ``everysec`` AOF); then start it again from the AOF."""
    redis.crash()
    if cut_to is not None:
        os.truncate(redis.aof_tail(), cut_to)
    await asyncio.sleep(0.5)  # down a while: the gateways see it gone
    await asyncio.to_thread(redis.start)


async def _recovered(
    redis: PrivateRedis, a: GatewayProcess, b: GatewayProcess, follower: Follower, run_id: str
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """After the crash: the run ended (once, its terminal last; nothing left running), A and B
    serve the log exactly as Redis holds it, and the follower on B ends on the log's state: its
    last snapshot plus what came after it, each event once. -> (the stored log, the terminal)."""
    await asyncio.wait_for(follower.done.wait(), 40)
    state = await _settled(b.url, "c1", run_id)
    stored = await _stored_log(redis)
    ids = [e["eventId"] for e in stored]
    log = await _whole_log(b.url, "c1")
    assert [e["eventId"] for e in log] == ids, "B serves entries Redis does not hold"
    assert [e["eventId"] for e in await _whole_log(a.url, "c1")] == ids
    end = _one_terminal(log, run_id)
    assert log[-1] == end
    assert state["agentState"]["runs"][run_id]["status"] == end["type"].split(".")[1]
    at = follower.snapshot_at[-1]
    since = [e for _, e in follower.events[at:]]
    since_ids = [e["eventId"] for e in since]
    assert since and set(since_ids) <= set(ids) and len(since_ids) == len(set(since_ids))
    answer = _answer(follower.snapshots[-1], run_id) + _text(since, run_id)
    assert answer == _text(stored, run_id)
    return stored, end


async def test_kill_with_aof_always_loses_nothing_acknowledged() -> None:
    """``kill -9`` mid-run with ``appendfsync always``: every event the subscriber received is in
    the log afterwards, in order; the run, and a run accepted just before the kill, each end
    with exactly one terminal; nothing is left running."""
    with private_redis(appendfsync="always") as redis:
        async with (
            serve_slow_upstream(chunks=CHUNKS, interval=INTERVAL) as upstream,
            cluster(upstream.url, redis_url=redis.url, lease_ttl=LEASE_TTL) as (a, b),
        ):
            follower, run_id = await _start(a, b, "c1")
            await eventually(lambda: follower.deltas() >= 20, 15)
            late = await post_run(b.url, "c2", {"input": {"prompt": "text:3"}})
            assert late.status_code == 202, late.text  # acknowledged: it must not be lost
            received = list(follower.events)
            await _restart(redis)

            await asyncio.wait_for(follower.done.wait(), 40)
            log = await _whole_log(b.url, "c1")
            logged = [e["eventId"] for e in log]
            got = [e["eventId"] for _, e in received]
            assert set(got) <= set(logged), "an event a client received was lost"
            positions = [logged.index(i) for i in got]
            assert positions == sorted(positions)
            end = _one_terminal(log, run_id)
            assert log[-1] is end and follower.events[-1][1]["eventId"] == end["eventId"]
            await _settled(b.url, "c1", run_id)
            late_id = late.json()["runId"]
            state = await _settled(b.url, "c2", late_id)
            _one_terminal(await _whole_log(a.url, "c2"), late_id)
            assert state["agentState"]["runs"][late_id]["status"] in ("completed", "failed")
            # A crash well within the lease TTL: the run goes on and its answer is whole.
            assert end["type"] == "run.completed", end
            text = "".join(e["payload"].get("delta", "") for e in log if e["runId"] == run_id)
            assert text == "".join(f"w{i} " for i in range(CHUNKS))


async def test_kill_with_aof_everysec_gateway_recovers() -> None:
    """``kill -9`` mid-run with ``appendfsync everysec`` (as deployed): the gateways recover as
    after a stop, whatever the crash cost (usually nothing: http-api.md)."""
    with private_redis(appendfsync="everysec") as redis:
        async with (
            serve_slow_upstream(chunks=CHUNKS, interval=INTERVAL) as upstream,
            cluster(upstream.url, redis_url=redis.url, lease_ttl=LEASE_TTL) as (a, b),
        ):
            follower, run_id = await _start(a, b, "c1")
            await eventually(lambda: follower.deltas() >= 20, 15)
            await _restart(redis)
            await _recovered(redis, a, b, follower, run_id)


async def test_host_crash_with_aof_everysec_gateway_recovers() -> None:
    """The last writes of an ``everysec`` AOF lost (cut off by hand after the ``kill -9``): the
    run still ends, once; a reader resuming from a cursor the log lost gets a snapshot frame,
    then only what follows it, each event once (on A, the instance that never streamed those
    entries to a reader, and on B, which had them in its window)."""
    with private_redis(appendfsync="everysec") as redis:
        async with (
            serve_slow_upstream(chunks=CHUNKS, interval=INTERVAL) as upstream,
            cluster(upstream.url, redis_url=redis.url, lease_ttl=LEASE_TTL) as (a, b),
        ):
            follower, run_id = await _start(a, b, "c1")
            await eventually(lambda: follower.deltas() >= 10, 15)
            # What Redis had written by now survives; what it writes from here on is lost.
            await eventually(lambda: redis.aof_tail().stat().st_size > 0, 5)
            kept = redis.aof_tail().stat().st_size
            kept_cursor = follower.cursor
            seen = follower.deltas()
            await eventually(lambda: follower.deltas() >= seen + 15, 15)
            lost_cursor = follower.cursor
            await _restart(redis, cut_to=kept)

            stored_events, end = await _recovered(redis, a, b, follower, run_id)
            stored = [e["eventId"] for e in stored_events]
            got = [e["eventId"] for _, e in follower.events]
            assert set(got) - set(stored), "the cut AOF lost nothing: no loss was simulated"
            assert kept_cursor in {c for c, _ in follower.events}
            assert len(follower.snapshots) >= 2, "no snapshot after the loss"

            for base in (a.url, b.url):
                frames = await _resume(base, "c1", lost_cursor)
                assert frames and frames[0][0] == "snapshot", [f[:2] for f in frames[:3]]
                snapshot = frames[0][2]
                assert snapshot["activeRunId"] is None
                assert _answer(snapshot, run_id) == _text(stored_events, run_id)
                assert snapshot["agentState"]["runs"][run_id]["status"] != "running"
                after = [data["eventId"] for kind, _, data in frames[1:] if kind == "message"]
                assert len(after) == len(set(after)), "an event was delivered twice"
                assert after == [], "everything is in the snapshot: the run had ended"
                # A cursor the log still holds resumes without a snapshot.
                frames = await _resume(base, "c1", kept_cursor)
                assert frames and frames[0][0] == "message", [f[:2] for f in frames[:3]]
                assert frames[-1][2]["eventId"] == end["eventId"]
