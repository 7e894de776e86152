"""The Redis backend: the shared backend contract, plus what only a distributed backend does
(several backend objects on one Redis stand for several instances)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from app.api.errors import error_status
from app.backends import EMPTY_CURSOR, ConversationRef, IdempotencyRecord
from app.backends.redis import RedisBackend
from app.backends.redis.fanout import LogReader
from app.backends.redis.keys import ConversationKeys
from app.backends.types import AcceptedAnswer, LogItem, QueuedRun
from app.errors import GatewayError
from app.tasks import stop_task
from providers.contract import Command
from tests.app.support.backend_contract import (
    LOG_MAX,
    BackendContract,
    Control,
    event,
    meta,
    run_events,
)
from tests.app.support.redis_support import (
    SHARED_REDIS_URL,
    gateway_redis_client,
    shared_redis,
    unique_prefix,
)
from tests.support import eventually, eventually_async


def make_backend(prefix: str, **kwargs: object) -> RedisBackend:
    client = gateway_redis_client(SHARED_REDIS_URL)
    return RedisBackend(client, key_prefix=prefix, **kwargs)  # type: ignore[arg-type]


class TestRedisBackendContract(BackendContract):
    @pytest.fixture
    async def backend(self) -> AsyncIterator[RedisBackend]:
        prefix = unique_prefix()
        async with shared_redis(prefix):
            backend = make_backend(prefix, event_log_max_len=LOG_MAX)
            await backend.start()
            yield backend
            await backend.close()


@pytest.fixture
async def pair() -> AsyncIterator[tuple[RedisBackend, RedisBackend]]:
    prefix = unique_prefix()
    async with shared_redis(prefix):
        a = make_backend(prefix, lease_ttl_seconds=0.5, snapshot_every=3, instance_id="A")
        b = make_backend(prefix, lease_ttl_seconds=0.5, snapshot_every=3, instance_id="B")
        await a.start()
        await b.start()
        yield a, b
        await a.close()
        await b.close()


async def test_a_cursor_redis_trimmed_reads_as_trimmed_even_where_a_reader_fed_it() -> None:
    """A log retaining 5 entries, and the owner's reader started before the run (a subscriber
    that connected first) fed all 12 events: a read from the first event's cursor answers
    ``trimmed`` (the caller sends a snapshot) on the owner too, as on another instance and on
    memory, never events the log no longer holds."""
    prefix = unique_prefix()
    async with shared_redis(prefix):
        a = make_backend(prefix, event_log_max_len=5, instance_id="A")
        b = make_backend(prefix, event_log_max_len=5, instance_id="B")
        await a.start()
        await b.start()
        try:
            ref = ConversationRef("alice", "retained")
            reader = await a.hub.acquire(a.keys(ref))
            try:
                await a.create_conversation(ref, meta())
                assert await a.claim_run(ref, Control("r1"))
                logged: list[Any] = []
                for e in run_events("r1", 10):
                    logged += await a.append_batch(ref, [LogItem.of_event(e)])
                assert len(logged) == 12
                for backend in (a, b):
                    got = await backend.read(ref, logged[0].cursor, limit=100, wait=0)
                    assert got.status == "trimmed", backend
                    recent = await backend.read(ref, logged[-3].cursor, limit=100, wait=0)
                    assert [e.cursor for e in recent.entries] == [e.cursor for e in logged[-2:]]
            finally:
                a.hub.release(reader)
        finally:
            await a.close()
            await b.close()


def tool_and_approval_events(run: str) -> list[dict[str, object]]:
    return [
        *run_events(run, 2),
        event(run, 4, "tool.requested", {"toolCallId": "t1", "name": "lookup"}),
        event(run, 5, "approval.requested", {"approvalId": "a1"}),
        event(run, 6, "reasoning.started", {"reasoningId": "r1"}),
        event(run, 7, "reasoning.completed", {"reasoningId": "r1"}),
    ]


async def test_an_instance_that_never_saw_the_conversation_rebuilds_it(
    pair: tuple[RedisBackend, RedisBackend],
) -> None:
    a, b = pair
    ref = ConversationRef("alice", "c1")
    await a.create_conversation(ref, meta())
    control = Control("r1")
    assert await a.claim_run(ref, control)
    events = [*run_events("r1", 7), event("r1", 9, "message.completed", {"messageId": "m"})]
    for e in events:
        await a.append_event(ref, e)
    await a.append_extension(ref, "agui.state", {"step": 2})
    # Mid-run: the snapshot persisted every 3 events plus the tail gives B the same state.
    mid_a, mid_b = await a.snapshot(ref), await b.snapshot(ref)
    assert mid_a is not None and mid_b is not None
    assert mid_b.state == mid_a.state and mid_b.cursor == mid_a.cursor
    assert mid_b.extensions == {"agui.state": {"step": 2}}
    stored = await a.redis.hgetall(a.keys(ref).snap)
    assert stored, "a snapshot was persisted during the run"
    await a.append_event(ref, event("r1", 10, "run.completed"))
    await a.release_run(ref, "r1")
    stored = await a.redis.hgetall(a.keys(ref).snap)
    final_a = await a.snapshot(ref)
    assert final_a is not None
    assert stored[b"cursor"] == final_a.cursor.rpartition(".")[2].encode()  # at run end
    # A third instance with an empty cache reads only the snapshot (the tail is empty).
    c = make_backend(a.prefix, instance_id="C")
    try:
        fresh = await c.snapshot(ref)
        assert fresh is not None
        assert fresh.state == final_a.state and fresh.cursor == final_a.cursor
        assert fresh.state["runs"]["r1"]["status"] == "completed"
        assert fresh.meta.session_id == "ses_test"
    finally:
        await c.close()
    assert (await b.snapshot(ref)).state == final_a.state  # type: ignore[union-attr]


async def test_the_owners_entries_are_the_frames_every_instance_reads(
    pair: tuple[RedisBackend, RedisBackend],
) -> None:
    """The owner builds the entries it logs straight from what it wrote (no second decode):
    they are the frames another instance reads back from Redis, and the owner's own readers
    are served those very objects."""
    a, b = pair
    ref = ConversationRef("alice", "frames")
    await a.create_conversation(ref, meta())
    assert await a.claim_run(ref, Control("r1"))
    reader = await a.hub.acquire(a.keys(ref))  # the owner's local reader, fed by its writes
    try:
        items = [LogItem.of_event(e) for e in run_events("r1", 5)]
        items.insert(2, LogItem.of_extension("agui.state", {"step": "é"}))
        logged = await a.append_batch(ref, items)
        logged += [await a.append_event(ref, event("r1", 6, "message.delta", {"delta": "\n"}))]
        from_a = await a.read(ref, EMPTY_CURSOR, limit=100, wait=0)
        tail = await a.read(ref, logged[2].cursor, limit=100, wait=0)
    finally:
        a.hub.release(reader)
    assert [e.kind for e in logged[:4]] == ["event", "event", "extension", "event"]
    from_b = await b.read(ref, EMPTY_CURSOR, limit=100, wait=0)
    assert [e.sse for e in from_b.entries] == [e.sse for e in logged]
    assert [(e.cursor, e.data, e.event_type, e.run_id) for e in from_b.entries] == [
        (e.cursor, e.data, e.event_type, e.run_id) for e in logged
    ]
    assert all(got is made for got, made in zip(from_a.entries, logged, strict=True))
    assert all(got is made for got, made in zip(tail.entries, logged[3:], strict=True))


async def test_lost_owner_is_fenced_and_its_run_failed_by_another_instance(
    pair: tuple[RedisBackend, RedisBackend],
) -> None:
    a, b = pair
    ref = ConversationRef("alice", "lost")
    await a.create_conversation(ref, meta())
    control = Control("r1")
    assert await a.claim_run(ref, control)
    for e in tool_and_approval_events("r1"):
        await a.append_event(ref, e)
    head = await b.head_cursor(ref)
    # A freezes (stops renewing, polling): what kill -9 looks like from Redis.
    owned = a._owned[a.keys(ref).tag]
    await owned.stop()
    assert await b.claim_run(ref, Control("r2")) is False  # lease still alive
    # B's subscriber notices the lost owner within the lease TTL plus one reader tick.
    got = await b.read(ref, head, limit=100, wait=3)
    types = [e.event_type for e in got.entries]
    assert types == ["approval.resolved", "tool.failed", "message.failed", "run.failed"]
    failed = got.entries[-1].decoded()
    assert failed["payload"]["error"] == {
        "code": "gateway_instance_lost",
        "message": "The gateway instance running this run was lost.",
        "retryable": True,
    }
    assert [e.decoded()["sequence"] for e in got.entries] == [8, 9, 10, 11]
    snap = await b.snapshot(ref)
    assert snap is not None and snap.state["issues"] == []
    assert snap.state["runs"]["r1"]["status"] == "failed"
    approval = next(iter(snap.state["approvals"].values()))
    assert approval["decision"] == "expired"
    # The fenced owner cannot append anything any more.
    with pytest.raises(Exception, match="r1"):
        await a.append_event(
            ref, event("r1", 12, "message.delta", {"messageId": "m", "delta": "x"})
        )
    assert await b.head_cursor(ref) == got.entries[-1].cursor
    assert await b.active_run(ref) is None
    assert await b.claim_run(ref, Control("r2")) is True
    await b.release_run(ref, "r2")


async def test_a_lost_run_that_logged_nothing_is_started_and_failed(
    pair: tuple[RedisBackend, RedisBackend],
) -> None:
    # The owner claimed the slot (the client has its 202) and died before its first append.
    a, b = pair
    ref = ConversationRef("alice", "silent")
    await a.create_conversation(ref, meta())
    assert await a.claim_run(ref, Control("r1"))
    head = await b.head_cursor(ref)
    await a._owned[a.keys(ref).tag].stop()
    got = await b.read(ref, head, limit=100, wait=3)
    assert [e.event_type for e in got.entries] == ["run.started", "run.failed"]
    started, failed = (e.decoded() for e in got.entries)
    assert started["sessionId"] == failed["sessionId"] == "ses_test"
    assert [started["sequence"], failed["sequence"]] == [0, 1]
    assert failed["payload"]["error"]["code"] == "gateway_instance_lost"
    snap = await b.snapshot(ref)
    assert snap is not None and snap.state["issues"] == []
    assert snap.state["runs"]["r1"]["status"] == "failed"


async def test_every_instance_notices_a_lost_owner_when_it_touches_the_conversation(
    pair: tuple[RedisBackend, RedisBackend],
) -> None:
    a, b = pair
    # Only the touch may notice it: the periodic sweeps (every 0.25 s here) would race it, and a
    # sweep holding the run while it ends it reads as a live holder (the sweep has its own test,
    # test_a_lost_owner_nobody_looks_at_is_swept).
    for backend in pair:
        await stop_task(backend._sweeper)
        backend._sweeper = None
    ref = ConversationRef("alice", "touch")
    await a.create_conversation(ref, meta())
    assert await a.claim_run(ref, Control("r1"))
    for e in run_events("r1", 1):
        await a.append_event(ref, e)
    await a._owned[a.keys(ref).tag].stop()
    lease = a.keys(ref).lease

    async def lease_expired() -> bool:  # the lease (0.5 s) expires; nobody subscribes
        return await a.redis.exists(lease) == 0

    await eventually_async(lease_expired, what="A's lease expires")
    assert await b.request_abort(ref, None, "aborted") is None  # reaped, nothing to abort
    snap = await b.snapshot(ref)
    assert snap is not None and snap.state["runs"]["r1"]["status"] == "failed"
    assert not any(m["status"] == "streaming" for m in snap.state["messages"].values())


def _answer(run_id: str, status: str) -> AcceptedAnswer:
    body = {"runId": run_id, "status": status}
    return AcceptedAnswer(f"key:{run_id}", IdempotencyRecord("fp", 202, body), 60)


async def test_the_answer_of_a_run_is_stored_by_the_step_that_accepts_it_and_only_then(
    pair: tuple[RedisBackend, RedisBackend],
) -> None:
    a, b = pair
    ref = ConversationRef("alice", "accepted")
    await a.create_conversation(ref, meta())
    assert await a.claim_run(ref, Control("r1"), _answer("r1", "started"))
    assert not await b.claim_run(ref, Control("r2"), _answer("r2", "started"))  # busy
    queued = [QueuedRun(run_id, {"prompt": run_id}, "demo") for run_id in ("r3", "r4")]
    assert await a.enqueue_run(ref, queued[0], limit=1, answer=_answer("r3", "queued"))
    assert not await b.enqueue_run(ref, queued[1], limit=1, answer=_answer("r4", "queued"))
    for run_id, status in (("r1", "started"), ("r3", "queued")):  # on every instance
        assert await b.accepted_answer(ref, f"key:{run_id}") == _answer(run_id, status).record
    assert await b.accepted_answer(ref, "key:r2") is None  # refused: nothing to answer
    assert await b.accepted_answer(ref, "key:r4") is None
    other = ConversationRef("alice", "elsewhere")
    assert await b.accepted_answer(other, "key:r1") is None  # kept with its conversation


async def test_a_claim_given_up_before_it_was_used_takes_its_answer_with_it(
    pair: tuple[RedisBackend, RedisBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = pair
    ref = ConversationRef("alice", "given-up")
    await a.create_conversation(ref, meta())

    def unreachable(*_: Any) -> None:  # the first step after the claim
        raise ConnectionError("Redis went away after the claim")

    monkeypatch.setattr(a.ownership, "mark_in", unreachable)
    with pytest.raises(GatewayError) as refused:
        await a.claim_run(ref, Control("r1"), _answer("r1", "started"))
    assert refused.value.code == "backend_unavailable"
    assert await b.active_run(ref) is None  # the slot was released...
    assert await b.accepted_answer(ref, "key:r1") is None  # ...and the answer with it


async def test_a_released_run_is_unmarked_and_wakes_the_runs_waiting_on_every_instance(
    pair: tuple[RedisBackend, RedisBackend],
) -> None:
    """The release's tidying (one round trip: unmark, expiry, wake-up) does all three, and
    only once the run is no longer the instance's own."""
    a, b = pair
    ref = ConversationRef("alice", "turns")
    keys = a.keys(ref)
    index = a.ownership.index_key(keys)
    await a.create_conversation(ref, meta())
    assert await a.claim_run(ref, Control("r1"))
    assert await a.redis.zscore(index, keys.tag) is not None  # marked by the claim
    waiters = [asyncio.create_task(x.wait_run_slot(ref, 30.0)) for x in (a, b)]

    async def b_listens() -> bool:
        ((_, count),) = await b.redis.pubsub_numsub(keys.turn)
        return int(count) >= 1

    await eventually_async(b_listens, what="B subscribed to the slot's turn")
    await a.release_run(ref, "r1")
    assert keys.tag not in a.instance.owned
    await asyncio.wait_for(asyncio.gather(*waiters), 5.0)  # woken, not timed out (30 s)
    assert await a.redis.zscore(index, keys.tag) is None
    assert await b.claim_run(ref, Control("r2"))  # the slot is free for any instance


async def test_the_owner_and_any_other_instance_tell_the_same_run_issues(
    pair: tuple[RedisBackend, RedisBackend],
) -> None:
    """The owner answers ``run_issues`` from its live state; another instance from a
    snapshot: the same issues, those of the snapshot's state."""
    a, b = pair
    ref = ConversationRef("alice", "issues")
    await a.create_conversation(ref, meta())
    assert await a.claim_run(ref, Control("r1"))
    events = run_events("r1", 1)
    events.append(event("r1", 3, "message.delta", {"messageId": "nope", "delta": "x"}))
    events.append(event("r1", 2, "run.completed"))  # a sequence already used
    await a.append_batch(ref, [LogItem.of_checked_event(e) for e in events])
    snap = await b.snapshot(ref)
    assert snap is not None
    expected = [i for i in snap.state["issues"] if i["runId"] == "r1"]
    assert [i["code"] for i in expected] == ["missing_entity", "invalid_sequence"]
    assert keys_owned(a, ref)
    assert await a.run_issues(ref, "r1") == expected == await b.run_issues(ref, "r1")
    assert await a.run_issues(ref, "r2") == [] == await b.run_issues(ref, "r2")


def keys_owned(backend: RedisBackend, ref: ConversationRef) -> bool:
    return backend.keys(ref).tag in backend.instance.owned


async def test_read_of_an_unknown_position_and_empty_cursor(
    pair: tuple[RedisBackend, RedisBackend],
) -> None:
    a, b = pair
    ref = ConversationRef("alice", "pos")
    await a.create_conversation(ref, meta())
    entry = await a.append_event(ref, event("r1", 0, "run.started"))
    inc, _, sid = entry.cursor.rpartition(".")
    ms, _, _ = sid.partition("-")
    future = f"{inc}.{int(ms) + 10_000}-0"
    assert (await b.read(ref, future, limit=10, wait=0)).status == "unknown"
    result = await b.read(ref, EMPTY_CURSOR, limit=10, wait=0)
    assert [e.cursor for e in result.entries] == [entry.cursor]


async def test_idle_conversations_expire_after_the_ttl() -> None:
    prefix = unique_prefix()
    async with shared_redis(prefix):
        backend = make_backend(prefix, conversation_ttl_seconds=60)
        try:
            ref = ConversationRef("alice", "ttl")
            await backend.create_conversation(ref, meta())
            assert await backend.claim_run(ref, Control("r1"))
            for e in run_events("r1", 1):
                await backend.append_event(ref, e)
            await backend.release_run(ref, "r1")
            keys = backend.keys(ref)
            for key in (keys.meta, keys.log, keys.snap, keys.fence):
                ttl = await backend.redis.pttl(key)
                assert 50_000 < ttl <= 60_000, (key, ttl)
            # A conversation that expired disappears from the listing too.
            await backend.redis.delete(keys.meta)
            assert await backend.list_conversations("alice") == []
        finally:
            await backend.close()


async def test_owner_rebuilds_its_state_after_a_failed_append(
    pair: tuple[RedisBackend, RedisBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = pair
    ref = ConversationRef("alice", "flaky")
    await a.create_conversation(ref, meta())
    assert await a.claim_run(ref, Control("r1"))
    events = run_events("r1", 3)
    await a.append_event(ref, events[0])
    owned = a._owned[a.keys(ref).tag]
    real = owned.writer.append

    async def broken(*args: object, **kwargs: object) -> list[str]:
        raise ConnectionError("redis went away")

    monkeypatch.setattr(owned.writer, "append", broken)
    with pytest.raises(GatewayError):
        await a.append_event(ref, events[1])  # reduced locally, never logged
    monkeypatch.setattr(owned.writer, "append", real)
    for e in events[1:]:
        await a.append_event(ref, e)  # the retry is accepted: the state was rebuilt
    snap_a, snap_b = await a.snapshot(ref), await b.snapshot(ref)
    assert snap_a is not None and snap_b is not None
    assert snap_a.state == snap_b.state and snap_a.state["issues"] == []
    assert next(iter(snap_a.state["messages"].values()))["content"] == "0,1,2,"
    await a.release_run(ref, "r1")


async def test_a_command_in_flight_is_refused_on_every_instance(
    pair: tuple[RedisBackend, RedisBackend],
) -> None:
    a, b = pair
    ref = ConversationRef("alice", "cmd")
    await a.create_conversation(ref, meta())
    control = Control("r1")
    assert await a.claim_run(ref, control)
    approve = Command("approval.resolve", {"approvalId": "ap1", "decision": "approved"})
    assert await b.send_command(ref, "r1", approve) is True  # B -> owner A
    for backend in (a, b):
        with pytest.raises(GatewayError) as refused:
            await backend.send_command(ref, "r1", approve)
        assert (error_status(refused.value), refused.value.code) == (
            409,
            "approval_already_resolved",
        )
    result = Command("tool.submit_result", {"toolCallId": "t1", "result": 1})
    assert await a.send_command(ref, "r1", result) is True  # local delivery, marked too
    with pytest.raises(GatewayError) as refused:
        await b.send_command(ref, "r1", result)
    assert refused.value.code == "tool_not_awaiting_result"
    await eventually(lambda: len(control.commands) == 2, what="B's command reaches A")
    assert sorted(c.type for c in control.commands) == ["approval.resolve", "tool.submit_result"]
    await a.release_run(ref, "r1")
    assert await a.redis.exists(a.keys(ref).inflight) == 0


async def test_a_lost_owner_nobody_looks_at_is_swept(
    pair: tuple[RedisBackend, RedisBackend],
) -> None:
    a, b = pair
    ref = ConversationRef("alice", "unwatched")
    await a.create_conversation(ref, meta())
    assert await a.claim_run(ref, Control("r1"))
    for e in run_events("r1", 1):
        await a.append_event(ref, e)
    keys = a.keys(ref)
    assert await a.redis.zscore(f"{a.prefix}:runs", keys.tag) is not None
    await a._owned.pop(keys.tag).stop()  # A is gone; nobody reads the conversation

    async def run_failed() -> bool:
        last: Any = await a.redis.xrevrange(keys.log, count=1)
        return bool(last) and last[0][1][b"t"] == b"run.failed"

    await eventually_async(run_failed, within=10, what="the sweeper ends the run")

    async def slot_released() -> bool:
        # The terminal is logged first, the run's entry in the registry dropped after it.
        return await a.redis.zscore(f"{a.prefix}:runs", keys.tag) is None

    await eventually_async(slot_released, within=10, what="the sweeper drops the run's entry")
    assert b.hub.readers == {}  # found by the sweep, not by a reader


def test_public_surface() -> None:
    import app.backends.redis as package

    assert sorted(package.__all__) == sorted(
        [
            "DEFAULT_PREFIX",
            "ConversationKeys",
            "RedisBackend",
            "RunFenced",
            "cluster_client",
            "conversation_tag",
            "create_redis_backend",
            "is_cluster",
            "redis_client",
        ]
    )
    for name in package.__all__:
        assert hasattr(package, name)


async def test_wake_readers_ends_a_waiting_read_at_once(
    pair: tuple[RedisBackend, RedisBackend],
) -> None:
    a, _ = pair
    ref = ConversationRef("alice", "wake")
    await a.create_conversation(ref, meta())
    head = (await a.append_event(ref, event("r1", 0, "run.started"))).cursor
    reader = asyncio.create_task(a.read(ref, head, limit=10, wait=30))
    await eventually(lambda: a.keys(ref).tag in a.hub.readers, what="the read is waiting")
    assert not reader.done()
    a.wake_readers()  # shutdown: streams must not wait out their heartbeat
    result = await asyncio.wait_for(reader, 10)  # the wake-up, not the 30 s wait
    assert (result.status, result.entries) == ("ok", [])


async def test_two_instances_restoring_one_conversation_make_one_copy(
    pair: tuple[RedisBackend, RedisBackend],
) -> None:
    a, b = pair
    ref = ConversationRef("p", "archived")
    await a.create_conversation(ref, meta())
    for e in run_events("r1", 3):
        await a.append_event(ref, e)
    archived = await a.snapshot(ref)
    assert archived is not None
    await a.delete(ref)  # the live data is gone (expired, flushed); the archive still has it
    state, extensions = dict(archived.state), dict(archived.extensions)
    for _ in range(20):
        results = await asyncio.gather(
            a.restore_conversation(ref, meta(), state, extensions),
            b.restore_conversation(ref, meta(), state, extensions),
        )
        assert sorted(results) == [False, True]
        for instance in (a, b):
            snap = await instance.snapshot(ref)
            assert snap is not None and snap.state == archived.state
            assert (await instance.read(ref, EMPTY_CURSOR, limit=10, wait=0)).entries == []
        await a.delete(ref)


async def test_a_restore_never_lands_beside_an_active_run(
    pair: tuple[RedisBackend, RedisBackend],
) -> None:
    a, b = pair
    ref = ConversationRef("p", "busy")
    await a.create_conversation(ref, meta())
    assert await a.claim_run(ref, Control("r1")) is True
    redis = a.redis
    await redis.delete(a.keys(ref).meta)  # the meta is gone, a run still holds the slot
    assert await b.restore_conversation(ref, meta(), {}, {}) is False


def _count_lookups(backend: RedisBackend) -> list[None]:
    """The incarnation lookups ``backend``'s reads make from now on (one item each)."""
    lookups: list[None] = []
    lookup = backend._lookup

    async def counted(reader: LogReader, keys: ConversationKeys) -> str | None:
        lookups.append(None)
        return await lookup(reader, keys)

    backend._lookup = counted  # type: ignore[method-assign]
    return lookups


async def _waiting_followers(
    backend: RedisBackend, ref: ConversationRef, n: int
) -> tuple[list[None], list[asyncio.Task[Any]]]:
    """``n`` reads of ``ref`` from its start, all waiting; and the incarnation lookups made
    (one item each) from now on."""
    lookups = _count_lookups(backend)
    followers = [
        asyncio.create_task(backend.read(ref, EMPTY_CURSOR, limit=10, wait=10)) for _ in range(n)
    ]
    hub = backend.hub

    def waiting() -> bool:
        """All registered, and they looked the conversation up (no lookup in flight): a
        registered read looks it up before it waits."""
        readers = list(hub.readers.values())
        looked = all(r.inc_lookup is not None and r.inc_lookup.done() for r in readers)
        return sum(r.refs for r in readers) == n and len(lookups) >= 1 and looked

    await eventually(waiting, what="all waiting")
    return lookups, followers


async def test_followers_waiting_for_a_conversation_share_its_incarnation_lookups() -> None:
    """Hundreds of followers of a conversation not created yet all wake when its first entry
    is logged: they share one HGET per wake-up, not one each, and each gets the entry."""
    prefix = unique_prefix()
    async with shared_redis(prefix):
        backend = make_backend(prefix)
        await backend.start()
        try:
            ref = ConversationRef("alice", "later")
            lookups, followers = await _waiting_followers(backend, ref, 50)
            await backend.create_conversation(ref, meta())
            entry = await backend.append_event(ref, event("run_a", 0, "run.started"))
            results = await asyncio.wait_for(asyncio.gather(*followers), 10)
            assert all([e.cursor for e in r.entries] == [entry.cursor] for r in results)
            assert len(lookups) <= 4, lookups  # not one per follower (50 without sharing)
        finally:
            await backend.close()


async def test_followers_of_a_conversation_its_owner_creates_read_with_no_lookup(
    one: RedisBackend,
) -> None:
    """Followers waiting for a conversation this instance creates and runs learn its
    incarnation from the run's claim (which reads it in its own round trip): their wake-up
    costs no HGET, and what they read is what another instance reads, cursors included."""
    backend = one
    ref = ConversationRef("alice", "owned-later")
    lookups, followers = await _waiting_followers(backend, ref, 5)
    before = len(lookups)
    await backend.create_conversation(ref, meta())
    assert await backend.claim_run(ref, Control("r1"))
    (entry,) = await backend.append_batch(ref, [LogItem.of_event(event("r1", 0, "run.started"))])
    results = await asyncio.wait_for(asyncio.gather(*followers), 10)
    assert all([e.cursor for e in r.entries] == [entry.cursor] for r in results)
    assert len(lookups) == before  # woken with the incarnation known
    assert entry.cursor == await backend.head_cursor(ref)  # the incarnation Redis holds
    other = make_backend(backend.prefix)
    try:
        from_other = await other.read(ref, EMPTY_CURSOR, limit=10, wait=0)
    finally:
        await other.close()
    assert [e.cursor for e in from_other.entries] == [entry.cursor]


async def test_a_read_of_a_conversation_not_created_yet_looks_it_up_once(
    one: RedisBackend,
) -> None:
    """A follower that finds no conversation asks Redis once per read (it asked twice: the
    answer it had just looked up was looked up again), and a later read looks again."""
    backend = one
    ref = ConversationRef("alice", "not-yet")
    lookups = _count_lookups(backend)
    result = await backend.read(ref, EMPTY_CURSOR, limit=10, wait=0)
    assert (result.status, result.entries, len(lookups)) == ("ok", [], 1)
    await backend.create_conversation(ref, meta())
    entry = await backend.append_event(ref, event("run_a", 0, "run.started"))
    result = await backend.read(ref, EMPTY_CURSOR, limit=10, wait=0)
    assert [e.cursor for e in result.entries] == [entry.cursor]


@pytest.fixture
async def one() -> AsyncIterator[RedisBackend]:
    prefix = unique_prefix()
    async with shared_redis(prefix):
        backend = make_backend(prefix)
        await backend.start()
        yield backend
        await backend.close()


async def _run_meta(backend: RedisBackend, ref: ConversationRef) -> Any:
    """A new conversation's meta, as a run of it holds it."""
    await backend.create_conversation(ref, meta())
    run_meta = await backend.get_meta(ref)
    assert run_meta is not None
    return run_meta


async def test_a_title_set_while_a_run_end_saves_its_meta_is_the_one_kept(
    one: RedisBackend,
) -> None:
    """The run's end saves under the stored title; told another one, it saves again under
    that one, still only if unchanged: a PATCH landing between those two calls is not
    overwritten by the title the run's end was just told."""
    ref = ConversationRef("alice", "titles")
    run_meta = await _run_meta(one, ref)
    store = one  # its conversations role
    script = store._save_meta
    patches = iter(["first", "second"])

    async def patched_in_between(**kwargs: Any) -> Any:
        title = next(patches, None)
        if title is not None:  # a PATCH before each of the run's calls lands
            current = await one.get_meta(ref)
            assert current is not None
            current.title = title
            await script(
                keys=kwargs["keys"], args=[orjson.dumps(current.to_dict()), current.session_id]
            )
        return await script(**kwargs)

    store._save_meta = patched_in_between  # type: ignore[assignment]  # a function for the script
    run_meta.last_run_id = "r1"
    await one.save_meta(ref, run_meta, keep_title=True)
    stored = await one.get_meta(ref)
    assert stored is not None
    assert (stored.title, stored.last_run_id) == ("second", "r1")


async def test_a_stored_meta_without_a_title_field_is_saved_keeping_no_title(
    one: RedisBackend,
) -> None:
    ref = ConversationRef("alice", "untitled")
    run_meta = await _run_meta(one, ref)
    stored = run_meta.to_dict()
    del stored["title"]  # as a meta written without the field
    await one.instance.redis.hset(one.instance.keys(ref).meta, "meta", orjson.dumps(stored))
    run_meta.last_run_id = "r1"
    await asyncio.wait_for(one.save_meta(ref, run_meta, keep_title=True), 5)
    after = await one.get_meta(ref)
    assert after is not None and (after.title, after.last_run_id) == (None, "r1")
