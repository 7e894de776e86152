"""The archive's writes are monotonic per conversation: a write delayed by an outage that lands
after a newer one (from another instance) never replaces it. Retention run by several instances
at once."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator

import pytest

from app.archive.engine import create_engine
from app.archive.migrate import migrate
from app.archive.records import ConversationDelete
from app.archive.retention import RetentionTask
from app.archive.store import ArchiveStore
from app.archive.url import database_url
from app.backends import ConversationRef
from tests.app.archive.support import ARCHIVED_REF as REF
from tests.app.archive.support import Database, write

DAY_MS = 86_400_000.0


@pytest.fixture
async def store(database: Database) -> AsyncIterator[ArchiveStore]:
    engine = create_engine(database_url(database.url))
    await migrate(engine)
    yield ArchiveStore(engine)
    await engine.dispose()


async def title(store: ArchiveStore) -> str | None:
    page = await store.list_page(REF.principal, None, 10)
    assert len(page) <= 1
    return page[0].title if page else None


async def test_a_delayed_older_write_never_replaces_a_newer_one(store: ArchiveStore) -> None:
    await store.apply([write(10, 200.0)], now=1)
    await store.apply([write(5, 100.0)], now=2)  # gathered earlier, landed later
    assert await title(store) == "after 10 events at 200.0"
    loaded = await store.load(REF)
    assert loaded is not None and loaded.cursor == "c10"
    await store.apply([write(10, 150.0)], now=3)  # as many events, an older meta
    assert await title(store) == "after 10 events at 200.0"
    await store.apply([write(10, 250.0)], now=4)  # a title changed since: newer
    assert await title(store) == "after 10 events at 250.0"
    await store.apply([write(12, 240.0)], now=5)  # more events: newer (clock skew aside)
    assert await title(store) == "after 12 events at 240.0"
    await store.apply([write(12, 240.0)], now=6)  # the same write again: harmless
    assert await title(store) == "after 12 events at 240.0"


async def test_incarnations_newest_wins_and_a_deleted_one_stays_deleted(
    store: ArchiveStore,
) -> None:
    await store.apply([write(3, 100.0, session="ses_new", created_at=50.0)], now=1)
    # A delayed write of an incarnation created before it (deleted, then created again).
    await store.apply([write(9, 90.0, session="ses_old", created_at=10.0)], now=2)
    assert await title(store) == "after 3 events at 100.0"
    await store.apply([ConversationDelete(REF, "ses_new", 200.0)], now=3)
    await store.apply([write(4, 300.0, session="ses_new", created_at=50.0)], now=4)
    assert await title(store) is None
    await store.apply([write(1, 400.0, session="ses_next", created_at=350.0)], now=5)
    assert await title(store) == "after 1 events at 400.0"


async def test_one_batch_of_writes_and_deletes_applies_in_order(store: ArchiveStore) -> None:
    other = ConversationRef("alice", "other")
    kept = write(2, 100.0)
    gone = dataclasses.replace(write(3, 100.0), ref=other)
    late = dataclasses.replace(write(4, 110.0), ref=other)
    await store.apply([kept, gone, ConversationDelete(other, "ses_1", 105.0), late], now=1)
    assert [row.key for row in await store.list_page("alice", None, 10)] == ["k"]


async def test_retention_run_by_two_instances_at_once_drops_each_idle_conversation_once(
    store: ArchiveStore, database: Database
) -> None:
    now = time.time() * 1000
    idle = [
        dataclasses.replace(write(1, now - 10 * DAY_MS), ref=ConversationRef("alice", f"old{n}"))
        for n in range(20)
    ]
    fresh = [
        dataclasses.replace(write(1, now), ref=ConversationRef("alice", f"new{n}"))
        for n in range(5)
    ]
    await store.apply([*idle, *fresh], now=now)
    other = create_engine(database_url(database.url))  # a second instance's engine
    try:
        tasks = [RetentionTask(store, 1, 3600), RetentionTask(ArchiveStore(other), 1, 3600)]
        dropped = await asyncio.gather(*(task.run_once() for task in tasks))
    finally:
        await other.dispose()
    assert sum(dropped) == len(idle)
    keys = sorted(row.key for row in await store.list_page("alice", None, 100))
    assert keys == sorted(w.ref.key for w in fresh)
