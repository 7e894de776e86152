"""A run's start on Redis, in round trips: what the claim reads with one pipeline, and what the
run's first snapshot and the readers' ticks no longer ask Redis for (each round trip is ~50 µs
of the gateway's CPU, ~20 of them a run). Counted on the calling task and the tasks it starts
(the claim's ``gather``), so the backend's own loops (polls, lease renewals) do not count."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.backends import ConversationRef
from app.backends.redis import RedisBackend, redis_client
from app.backends.types import LogItem
from tests.app.support.backend_contract import Control, event, meta
from tests.app.support.command_counter import round_trips
from tests.app.support.redis_support import SHARED_REDIS_URL, shared_redis, unique_prefix


@pytest.fixture
async def pair() -> AsyncIterator[tuple[RedisBackend, RedisBackend]]:
    prefix = unique_prefix()
    async with shared_redis(prefix):
        a = RedisBackend(redis_client(SHARED_REDIS_URL), key_prefix=prefix, instance_id="A")
        b = RedisBackend(redis_client(SHARED_REDIS_URL), key_prefix=prefix, instance_id="B")
        await a.start()
        await b.start()
        yield a, b
        await a.close()
        await b.close()


async def test_a_conversation_created_here_is_claimed_in_two_round_trips_and_started_in_none(
    pair: tuple[RedisBackend, RedisBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim script (with the run's index entry), then one pipeline (index, meta,
    snapshot and the new log); the run's first snapshot is the owner's, with the meta the claim
    read: no round trip."""
    a, _ = pair
    ref = ConversationRef("p", "fresh")
    assert await a.create_conversation(ref, meta())
    with round_trips(monkeypatch) as sent:
        assert await a.claim_run(ref, Control("r1"))
        claimed = list(sent)
        snapshot = await a.snapshot(ref)
    assert len(claimed) == 2, claimed
    assert claimed[0] == "ZADD&EVALSHA", claimed  # the run indexed ahead of its claim, at once
    assert "XRANGE" in claimed[1] and "HGETALL" in claimed[1], claimed
    assert sent == claimed  # the snapshot sent nothing
    assert snapshot is not None and snapshot.meta.title == "t"
    assert snapshot.cursor == await a.head_cursor(ref)
    # The next snapshot reads the meta again.
    with round_trips(monkeypatch) as sent:
        assert await a.snapshot(ref) is not None
    assert len(sent) == 1, sent


async def test_a_claim_takes_what_was_logged_before_it_from_the_log_it_read_along(
    pair: tuple[RedisBackend, RedisBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Created here, then written to by another instance before the claim (a free append: no
    run active): the claim's state holds it, read with the claim, not read again."""
    a, b = pair
    ref = ConversationRef("p", "written")
    assert await a.create_conversation(ref, meta())
    await b.append_batch(ref, [LogItem.of_extension("k", {"v": 1})])
    await b.append_batch(ref, [LogItem.of_event(event("r0", 0, "run.started"))])
    with round_trips(monkeypatch) as sent:
        assert await a.claim_run(ref, Control("r1"))
        snapshot = await a.snapshot(ref)
    assert len(sent) == 2, sent
    assert snapshot is not None
    assert snapshot.extensions == {"k": {"v": 1}}
    assert snapshot.state["runs"]["r0"]["status"] == "running"
    assert snapshot.cursor == await a.head_cursor(ref)
    assert snapshot == await b.snapshot(ref)  # as any instance rebuilds it


async def test_a_conversation_not_created_here_is_claimed_reading_its_log_after_its_snapshot(
    pair: tuple[RedisBackend, RedisBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = pair
    ref = ConversationRef("p", "elsewhere")
    assert await b.create_conversation(ref, meta())
    await b.append_batch(ref, [LogItem.of_extension("k", 2)])
    with round_trips(monkeypatch) as sent:
        assert await a.claim_run(ref, Control("r1"))
    assert len(sent) == 3, sent  # claim, snapshot + meta, then the log after the snapshot
    snapshot = await a.snapshot(ref)
    assert snapshot is not None and snapshot.extensions == {"k": 2}


async def test_a_meta_saved_after_the_claim_is_what_the_first_snapshot_answers(
    pair: tuple[RedisBackend, RedisBackend],
) -> None:
    a, _ = pair
    ref = ConversationRef("p", "renamed")
    assert await a.create_conversation(ref, meta())
    assert await a.claim_run(ref, Control("r1"))
    renamed = meta()
    renamed.title = "renamed"
    await a.save_meta(ref, renamed)
    snapshot = await a.snapshot(ref)
    assert snapshot is not None and snapshot.meta.title == "renamed"


async def test_the_reader_tick_asks_nothing_of_a_conversation_whose_run_is_ours(
    pair: tuple[RedisBackend, RedisBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Owned and written here: the tick looks neither for a re-created conversation nor for a
    lost owner; once the run is released, it looks again (three commands)."""
    a, _ = pair
    ref = ConversationRef("p", "ticked")
    assert await a.create_conversation(ref, meta())
    assert await a.claim_run(ref, Control("r1"))
    keys = a.instance.keys(ref)
    with round_trips(monkeypatch) as sent:
        await a.instance._tick([keys])
    assert sent == []
    await a.release_run(ref, "r1")
    with round_trips(monkeypatch) as sent:
        await a.instance._tick([keys])
    assert sent == ["HGET|GET|EXISTS"]
