"""The Redis backend on a Redis Cluster (``[gateway] redis_cluster``): the shared backend
contract on the cluster ``make test`` starts (three masters, three replicas), plus the
configuration that builds a cluster client."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.crc import key_slot

from app.backends import ConversationRef
from app.backends.redis import RedisBackend, create_redis_backend, is_cluster
from app.backends.redis.cluster import node_address, publish_command
from app.backends.redis.keys import (
    CLUSTER_INDEX_BUCKETS,
    ConversationKeys,
    index_bucket,
    sweep_index_keys,
)
from app.backends.types import LogItem
from app.config import ConfigError, Settings, load_settings
from providers.contract import Command
from tests.app.backends.redis.cluster_support import (
    SHARED_CLUSTER_URL,
    make_cluster_backend,
    shared_cluster,
)
from tests.app.support.backend_contract import LOG_MAX, BackendContract, Control, meta, run_events
from tests.app.support.command_counter import round_trips
from tests.app.support.redis_support import unique_prefix
from tests.support import eventually, eventually_async


class TestRedisClusterBackendContract(BackendContract):
    @pytest.fixture
    async def backend(self) -> AsyncIterator[RedisBackend]:
        prefix = unique_prefix()
        async with shared_cluster(prefix):
            backend = make_cluster_backend(prefix, event_log_max_len=LOG_MAX)
            await backend.start()
            yield backend
            await backend.close()


@pytest.fixture
async def cluster_pair() -> AsyncIterator[tuple[RedisBackend, RedisBackend]]:
    """Two instances on the shared cluster (short leases, a poll far longer than any bound
    below: a wake-up that arrives in time came by pub/sub)."""
    prefix = unique_prefix()
    async with shared_cluster(prefix):
        options: dict[str, Any] = {"lease_ttl_seconds": 0.5, "snapshot_every": 3}
        a = make_cluster_backend(prefix, instance_id="A", poll_interval=30.0, **options)
        b = make_cluster_backend(prefix, instance_id="B", poll_interval=30.0, **options)
        await a.start()
        await b.start()
        yield a, b
        await a.close()
        await b.close()


def test_settings_build_a_cluster_client_seeded_by_the_url_and_the_nodes(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(
        '[gateway]\nbackend = "redis"\n'
        f'redis_url = "{SHARED_CLUSTER_URL}"\nredis_cluster = true\n'
        'redis_cluster_nodes = ["127.0.0.1:7381", "[::1]:7382"]\nredis_wait_replicas = 1\n'
    )
    settings = load_settings(config)
    backend = create_redis_backend(settings)
    assert is_cluster(backend.redis)
    client: Any = backend.redis
    seeds = {node.name for node in client.nodes_manager.startup_nodes.values()}
    assert {"127.0.0.1:7381", "::1:7382"} <= seeds
    assert publish_command(backend.redis) == "SPUBLISH"
    standalone = create_redis_backend(Settings.model_validate({"gateway": {"backend": "redis"}}))
    assert not is_cluster(standalone.redis) and publish_command(standalone.redis) == "PUBLISH"


@pytest.mark.parametrize(
    ("gateway", "wrong"),
    [
        ({"redis_cluster": True, "redis_cluster_nodes": ["nohost"]}, "host:port"),
        ({"redis_cluster_nodes": ["127.0.0.1:7381"]}, "needs redis_cluster"),
        ({"redis_wait_replicas": 1}, "applies to a cluster"),
    ],
)
def test_cluster_settings_that_cannot_work_are_refused(
    tmp_path: Path, gateway: dict[str, object], wrong: str
) -> None:
    config = tmp_path / "gateway.toml"
    lines = [f"{name} = {orjson.dumps(value).decode()}" for name, value in gateway.items()]
    config.write_text("[gateway]\n" + "\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=wrong):
        load_settings(config)


def test_node_address_reads_host_and_port() -> None:
    assert node_address("10.0.0.1:7000") == ("10.0.0.1", 7000)
    assert node_address("[::1]:7001") == ("::1", 7001)
    with pytest.raises(ValueError):
        node_address("10.0.0.1")


def test_a_conversations_keys_and_channels_share_one_slot() -> None:
    keys = ConversationKeys.for_conversation("alice", "c1", "agw")
    names = [*keys.all_keys(), keys.ctl, keys.turn, keys.accepted("scope"), *keys.queue_keys]
    names.append(f"agw:{{{keys.tag}}}:subs")  # limits.py's per-conversation subscribers
    assert {key_slot(name.encode()) for name in names} == {key_slot(keys.meta.encode())}


def test_the_sweep_indexes_are_one_key_standalone_and_buckets_on_a_cluster() -> None:
    assert sweep_index_keys("agw", "runs", 1) == ["agw:runs"]
    buckets = sweep_index_keys("agw", "runs", CLUSTER_INDEX_BUCKETS)
    assert len(set(buckets)) == CLUSTER_INDEX_BUCKETS
    slots = {key_slot(b.encode()) for b in buckets}
    assert len(slots) == CLUSTER_INDEX_BUCKETS
    # The three masters of a cluster made by redis-cli split the slots in thirds: each holds
    # some buckets, so no shard takes every run start's mark.
    thirds = {slot * 3 // 16384 for slot in slots}
    assert thirds == {0, 1, 2}
    tags = [ConversationKeys.for_conversation("p", f"k{n}").tag for n in range(200)]
    used = {index_bucket(tag, CLUSTER_INDEX_BUCKETS) for tag in tags}
    assert used == set(range(CLUSTER_INDEX_BUCKETS))


async def test_a_lost_owner_nobody_looks_at_is_swept_from_its_bucket(
    cluster_pair: tuple[RedisBackend, RedisBackend],
) -> None:
    a, b = cluster_pair
    ref = ConversationRef("alice", "unwatched")
    await a.create_conversation(ref, meta())
    assert await a.claim_run(ref, Control("r1"))
    for e in run_events("r1", 1):
        await a.append_event(ref, e)
    keys = a.keys(ref)
    bucket = a.ownership.index_key(keys)
    assert bucket != f"{a.prefix}:runs" and bucket.startswith(f"{a.prefix}:{{runs.")
    assert await a.redis.zscore(bucket, keys.tag) is not None
    await a._owned.pop(keys.tag).stop()  # A is gone; nobody reads the conversation

    async def run_failed() -> bool:
        last: Any = await b.redis.xrevrange(keys.log, count=1)
        return bool(last) and last[0][1][b"t"] == b"run.failed"

    await eventually_async(run_failed, within=10, what="the sweeper ends the run")

    async def unmarked() -> bool:
        return await b.redis.zscore(bucket, keys.tag) is None

    await eventually_async(unmarked, within=10, what="the sweeper drops the run's entry")
    assert b.hub.readers == {}  # found by the sweep, not by a reader


async def test_an_abort_from_another_instance_wakes_the_owner_by_sharded_pubsub(
    cluster_pair: tuple[RedisBackend, RedisBackend],
) -> None:
    """Polls are 30 s apart here: the owner hears an abort and a command from the other
    instance within seconds only through its shard channel (SSUBSCRIBE), for conversations
    on every master."""
    a, b = cluster_pair
    refs = [ConversationRef("alice", f"wake-{n}") for n in range(6)]
    controls = {}
    for n, ref in enumerate(refs):
        await a.create_conversation(ref, meta())
        controls[ref] = Control(f"r{n}")
        assert await a.claim_run(ref, controls[ref])
    client: Any = b.redis
    await client.initialize()  # the slots known (a cluster client learns them at first use)
    masters = {client.get_node_from_key(a.keys(ref).ctl).name for ref in refs}
    assert len(masters) >= 2  # conversations on several shards

    async def subscribed() -> bool:
        """A's shard subscriptions are in place (they follow the claims; a wake-up published
        before one is heard by the poll only, 30 s here)."""
        for ref in refs:
            channel = a.keys(ref).ctl
            node = client.get_node_from_key(channel)
            reply = await client.execute_command("PUBSUB SHARDNUMSUB", channel, target_nodes=node)
            ((_, count),) = reply  # [(channel, subscribers)]
            if int(count) < 1:
                return False
        return True

    await eventually_async(subscribed, within=10, what="the owner's shard channels subscribed")
    polls = a.bus.polls
    started = time.monotonic()
    for n, ref in enumerate(refs):
        if n % 2:
            assert await b.request_abort(ref, None, "aborted") == f"r{n}"
        else:
            approve = Command("approval.resolve", {"approvalId": f"ap{n}", "decision": "ok"})
            assert await b.send_command(ref, f"r{n}", approve) is True
    await eventually(
        lambda: all(
            controls[ref].aborts == ["aborted"] if n % 2 else len(controls[ref].commands) == 1
            for n, ref in enumerate(refs)
        ),
        within=10,
        what="every owner woken",
    )
    assert time.monotonic() - started < 10
    assert a.bus.polls > polls  # woken, then polled the woken inboxes
    for n, ref in enumerate(refs):
        await a.release_run(ref, f"r{n}")


async def test_a_claim_costs_the_same_round_trips_on_a_cluster_as_standalone(
    cluster_pair: tuple[RedisBackend, RedisBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As ``test_run_start``'s first test: the claim script (with the run's index entry),
    then one pipeline (index bucket, meta, snapshot and the new log, on two shards at once);
    the run's first snapshot sends nothing; an append batch is one script call."""
    a, _ = cluster_pair
    ref = ConversationRef("p", "fresh")
    assert await a.create_conversation(ref, meta())
    with round_trips(monkeypatch, cluster=True) as sent:
        assert await a.claim_run(ref, Control("r1"))
        claimed = list(sent)
        snapshot = await a.snapshot(ref)
    assert len(claimed) == 2, claimed
    assert claimed[0] == "ZADD&EVALSHA", claimed  # the run indexed ahead of its claim, at once
    assert "XRANGE" in claimed[1] and "HGETALL" in claimed[1], claimed
    assert sent == claimed  # the snapshot sent nothing
    assert snapshot is not None and snapshot.meta.title == "t"
    pipe: Any = a.instance.log._append
    before = pipe.round_trips
    items = [LogItem.of_event(e) for e in run_events("r1", 20)]
    assert len(await a.append_batch(ref, items)) == len(items)
    assert pipe.round_trips - before == 1  # a delta batch: one script call, one round trip
