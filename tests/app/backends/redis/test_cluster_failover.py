"""A master of the Redis Cluster is killed (SIGKILL) while runs stream on it and on the other
shards, with two gateway instances: its replica is promoted, and still every accepted run ends
with exactly one terminal, and every reader (live, or resuming with ``Last-Event-ID``) sees
each event at most once and no gap it is not told about (a snapshot frame first)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest
from httpx_sse import aconnect_sse
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

from app.backends.redis import RedisBackend
from app.backends.redis.keys import ConversationKeys
from tests.app.backends.redis.cluster_support import gateway_cluster_client, private_cluster
from tests.app.support.gateway_server import RunningGateway, make_settings, start_server
from tests.app.support.redis_support import unique_prefix
from tests.app.support.scripted_provider import ScriptedProvider
from tests.support import eventually_async

pytestmark = [
    pytest.mark.slow,
    pytest.mark.only_backend("redis-cluster", reason="kills a master of a private Redis Cluster"),
]

TERMINALS = {"run.completed", "run.failed", "run.cancelled"}
#: About 6 s of streaming per run: five deltas every 0.25 s.
PROMPT = " ".join(["text:5 sleep:0.25"] * 24)
PRINCIPAL = "anonymous"
LEASE_TTL = 3.0


Frame = tuple[str, str, dict[str, Any]]  # ("snapshot" | "event", SSE id, data)


class Reader:
    """An SSE reader of one conversation that, like a browser, reconnects with
    ``Last-Event-ID`` when its stream ends early, until it saw ``run_id``'s terminal."""

    def __init__(self, bases: list[str], key: str, run_id: str) -> None:
        self.bases, self.key, self.run_id = bases, key, run_id
        self.frames: list[Frame] = []
        self.reconnects = 0
        self.following = asyncio.Event()
        self.task = asyncio.create_task(self._run())

    def last_id(self) -> str | None:
        ids = [frame_id for kind, frame_id, _ in self.frames if kind == "event" and frame_id]
        return ids[-1] if ids else None

    async def _run(self) -> None:
        attempt = 0
        while True:
            base = self.bases[attempt % len(self.bases)]
            since = self.last_id()
            headers = {"Last-Event-ID": since} if since else {}
            try:
                async with (
                    httpx.AsyncClient(base_url=base, timeout=httpx.Timeout(30.0)) as client,
                    aconnect_sse(
                        client, "GET", f"/v1/conversations/{self.key}/events", headers=headers
                    ) as source,
                ):
                    if source.response.status_code == 200:
                        async for sse in source.aiter_sse():
                            if sse.event == "snapshot":
                                self.frames.append(("snapshot", sse.id, orjson.loads(sse.data)))
                                self.following.set()
                                continue
                            if sse.event != "message" or not sse.data:
                                continue
                            event = orjson.loads(sse.data)
                            self.frames.append(("event", sse.id, event))
                            self.following.set()
                            if event["runId"] == self.run_id and event["type"] in TERMINALS:
                                return
            except (httpx.HTTPError, ValueError):
                pass
            attempt += 1
            self.reconnects += 1
            await asyncio.sleep(0.2)  # a browser's retry: the SSE retry hint


def assert_told(frames: list[Frame], after_sequence: int | None = None) -> None:
    """Between two snapshot frames, the events are each new and in sequence (+1 each): a jump,
    or an event again, comes only right after a snapshot (the reader was told)."""
    last = after_sequence
    seen: set[str] = set()
    for kind, _, data in frames:
        if kind == "snapshot":
            last, seen = None, set()
            continue
        assert data["eventId"] not in seen, f"an event twice, untold: {data['eventId']}"
        seen.add(data["eventId"])
        if last is not None:
            assert data["sequence"] == last + 1, f"a gap, untold: {last} -> {data['sequence']}"
        last = data["sequence"]


async def logged(client: RedisCluster, keys: ConversationKeys) -> list[tuple[str, str]]:
    """(run id, event type) of every entry of the conversation's log, in order."""
    entries: Any = await client.xrange(keys.log)
    return [(f[b"r"].decode(), f[b"t"].decode()) for _, f in entries if b"r" in f]


@asynccontextmanager
async def gateways(url: str, prefix: str) -> AsyncIterator[list[RunningGateway]]:
    settings = make_settings(gateway={"lease_ttl_seconds": LEASE_TTL})
    running: list[RunningGateway] = []
    async with AsyncExitStack() as stack:
        for name in ("A", "B"):
            backend = RedisBackend(
                gateway_cluster_client(url),
                key_prefix=prefix,
                instance_id=f"{prefix}-{name}",
                lease_ttl_seconds=LEASE_TTL,
            )
            gw = await start_server(
                settings, providers={"demo": ScriptedProvider()}, backend=backend
            )
            running.append(gw)
            stack.push_async_callback(gw.stop)
        yield running


def conversations(prefix: str, victim_slots: tuple[int, int]) -> tuple[list[str], list[str]]:
    """Three conversation keys on the victim master's slots and three elsewhere."""
    on: list[str] = []
    off: list[str] = []
    n = 0
    while len(on) < 3 or len(off) < 3:
        key = f"fo-{n}"
        n += 1
        slot = key_slot(ConversationKeys.for_conversation(PRINCIPAL, key, prefix).meta.encode())
        side = on if victim_slots[0] <= slot <= victim_slots[1] else off
        if len(side) < 3:
            side.append(key)
    return on, off


async def test_a_master_killed_mid_stream_loses_no_run_and_hides_no_gap() -> None:
    with private_cluster() as nodes:
        prefix = unique_prefix()
        masters = nodes.masters()
        victim = sorted(masters)[0]
        on, off = conversations(prefix, masters[victim])
        # Seeded by every node: its first use comes after the victim died.
        plain = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", p) for p in nodes.ports])
        try:
            async with gateways(nodes.url, prefix) as (a, b):
                runs: dict[str, str] = {}
                readers: dict[str, Reader] = {}
                for n, key in enumerate(on + off):
                    accepting, other = (a, b) if n % 2 == 0 else (b, a)
                    async with accepting.client(timeout=10) as client:
                        res = await client.post(
                            f"/v1/conversations/{key}/runs", json={"input": {"prompt": PROMPT}}
                        )
                    assert res.status_code == 202, res.text
                    runs[key] = res.json()["runId"]
                    readers[key] = Reader([other.url, accepting.url], key, runs[key])
                for reader in readers.values():
                    await asyncio.wait_for(reader.following.wait(), 10)

                # Some deltas are out on every conversation; then the victim dies.
                async def streaming() -> bool:
                    return all(
                        sum(f[0] == "event" for f in r.frames) >= 8 for r in readers.values()
                    )

                await eventually_async(streaming, within=15, what="every run streams")
                before = {key: r.last_id() for key, r in readers.items()}
                killed_at = time.monotonic()
                os.kill(nodes.pid(victim), signal.SIGKILL)

                # Runs on the other shards do not notice: they keep streaming meanwhile.
                counts = {key: len(readers[key].frames) for key in off}

                async def others_stream() -> bool:
                    return all(len(readers[key].frames) > counts[key] + 5 for key in off)

                await eventually_async(others_stream, within=5, what="the other shards stream")
                assert time.monotonic() - killed_at < 5

                await asyncio.wait_for(
                    asyncio.gather(*(r.task for r in readers.values())), timeout=90
                )
                # The replica took over the victim's slots.
                assert nodes.master_of(masters[victim][0]) != victim

                for key, run_id in runs.items():
                    keys = ConversationKeys.for_conversation(PRINCIPAL, key, prefix)
                    entries = await logged(plain, keys)
                    terminals = [t for r, t in entries if r == run_id and t in TERMINALS]
                    assert len(terminals) == 1, (key, entries[-5:])  # never lost, never two
                    assert_told(readers[key].frames)
                for key in off:
                    assert readers[key].reconnects == 0  # untouched by the failover

                # Resuming from the cursor each reader had when the master died, on either
                # instance: the rest, or a snapshot first; never a silent gap or a repeat.
                for key, since in before.items():
                    assert since is not None
                    seq = next(
                        d["sequence"]
                        for kind, frame_id, d in readers[key].frames
                        if kind == "event" and frame_id == since
                    )
                    for gw in (a, b):
                        resumed = Reader([gw.url], key, runs[key])
                        resumed.frames.append(("event", since, {"eventId": "", "sequence": seq}))
                        await asyncio.wait_for(resumed.task, 20)
                        assert_told(resumed.frames[1:], after_sequence=seq)
        finally:
            await plain.aclose()
