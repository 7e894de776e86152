"""The append script's calls on a Redis Cluster (``ClusterScriptPipeline``): calls for several
shards in one flush, and ``redis_wait_replicas``: an append answered only once a replica has
it, or, with no replica answering, after the bounded wait (counted)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.crc import key_slot

from app.backends import ConversationRef
from app.backends.redis import RedisBackend
from app.backends.redis.cluster_scripts import ClusterScriptPipeline
from app.backends.types import LogItem
from tests.app.backends.redis.cluster_support import (
    make_cluster_backend,
    private_cluster,
    shared_cluster,
)
from tests.app.support.backend_contract import Control, meta, run_events
from tests.app.support.redis_support import unique_prefix


def pipeline_of(backend: RedisBackend) -> ClusterScriptPipeline:
    append: Any = backend.instance.log._append
    assert isinstance(append, ClusterScriptPipeline)
    return append


async def replica_length(backend: RedisBackend, key: str) -> int:
    """XLEN of ``key`` read on a replica of its shard (READONLY), not on its master."""
    client: Any = backend.redis
    node = client.get_node_from_key(key, replica=True)
    master = client.get_node_from_key(key)
    assert node.name != master.name
    replica = Redis(host=node.host, port=node.port)
    try:
        await replica.readonly()
        return int(await replica.xlen(key))
    finally:
        await replica.aclose()


async def test_appends_of_runs_on_every_shard_share_a_flush_and_wait_for_a_replica() -> None:
    prefix = unique_prefix()
    async with shared_cluster(prefix):
        backend = make_cluster_backend(prefix, wait_replicas=1, wait_timeout_ms=2000)
        await backend.start()
        try:
            refs = [ConversationRef("alice", f"w{n}") for n in range(6)]
            for n, ref in enumerate(refs):
                await backend.create_conversation(ref, meta())
                assert await backend.claim_run(ref, Control(f"r{n}"))
            pipe = pipeline_of(backend)
            before = pipe.round_trips
            batches = [
                [LogItem.of_event(e) for e in run_events(f"r{n}", 3)] for n in range(len(refs))
            ]
            pairs = list(zip(refs, batches, strict=True))
            appended = await asyncio.gather(*(backend.append_batch(r, b) for r, b in pairs))
            assert [len(a) for a in appended] == [len(b) for b in batches]
            # One flush: its calls went to the shards' lanes, one round trip per shard.
            client: Any = backend.redis
            shards = {client.get_node_from_key(backend.keys(ref).log).name for ref in refs}
            assert len(shards) >= 2
            assert pipe.round_trips - before == len(shards)
            assert pipe.unreplicated == 0
            for ref, batch in zip(refs, batches, strict=True):
                assert await replica_length(backend, backend.keys(ref).log) == len(batch)
        finally:
            await backend.close()


@pytest.mark.slow
@pytest.mark.only_backend("redis-cluster", reason="kills a replica of a private Redis Cluster")
async def test_with_no_replica_answering_an_append_waits_its_bound_and_goes_on() -> None:
    with private_cluster() as nodes:
        prefix = unique_prefix()
        backend = make_cluster_backend(prefix, nodes.url, wait_replicas=1, wait_timeout_ms=300)
        await backend.start()
        try:
            ref = ConversationRef("alice", "lonely")
            await backend.create_conversation(ref, meta())
            assert await backend.claim_run(ref, Control("r1"))
            slot = key_slot(backend.keys(ref).log.encode())
            os.kill(nodes.pid(nodes.replica_of(nodes.master_of(slot))), signal.SIGKILL)
            pipe = pipeline_of(backend)
            started = time.monotonic()
            events = [LogItem.of_event(e) for e in run_events("r1", 2)]
            assert len(await backend.append_batch(ref, events)) == len(events)
            assert time.monotonic() - started < 3  # the WAIT's bound, not a hang
            assert pipe.unreplicated == 1
        finally:
            await backend.close()
