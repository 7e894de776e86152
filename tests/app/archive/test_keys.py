"""The archive's key index: with a live backend of its own, a brand-new conversation is known
to be absent without a database read, while every archived one (from before a restart, or
written by this instance since) is still restored. With a shared live backend every lookup
asks the database (another instance may have archived the key)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from app.archive import Archive
from app.archive.keys import ArchivedKeys
from app.archive.records import ArchivedConversation
from app.backends import Backend, ConversationMeta, ConversationRef
from app.backends.delegating import DelegatingBackend
from app.backends.memory import MemoryBackend
from app.config import ArchiveSection
from tests.app.archive.support import ARCHIVED_REF as ARCHIVED
from tests.app.archive.support import Database, write
from tests.support import eventually


class SharedBackend(DelegatingBackend):
    """A live backend other instances share (as Redis is): its limits live in it."""

    def limit_store(self) -> Any:
        return object()


class Gateway:
    """An archive over a live backend, counting the archive's conversation reads."""

    def __init__(self, archive: Archive, live: MemoryBackend, backend: Backend) -> None:
        self.archive, self.live, self.backend = archive, live, backend
        self.reads = 0
        load = archive.store.load

        async def counted(ref: ConversationRef) -> ArchivedConversation | None:
            self.reads += 1
            return await load(ref)

        archive.store.load = counted  # type: ignore[method-assign]

    async def restore(self, key: str) -> ConversationMeta | None:
        return await self.archive.restore(ConversationRef("alice", key), self.backend)


Start = Callable[..., Awaitable[Gateway]]


@pytest.fixture
async def start(database: Database) -> AsyncIterator[Start]:
    archives: list[Archive] = []

    async def started(shared: bool = False) -> Gateway:
        archive = Archive(ArchiveSection(url=database.url), CollectorRegistry())
        live = MemoryBackend()
        backend = archive.wrap(SharedBackend(live) if shared else live)
        await archive.start()
        archives.append(archive)
        return Gateway(archive, live, backend)

    yield started
    for archive in archives:
        await archive.close(5.0)


async def index_loaded(gateway: Gateway) -> None:
    """Until the index answers for alice (a key never archived reads absent)."""
    keys = gateway.archive.reader._keys
    assert keys is not None
    probe = ConversationRef("alice", "never-archived")
    await eventually(lambda: not keys.may_hold(probe), what="alice's keys loaded")


async def test_new_keys_cost_no_read_and_archived_ones_are_restored(start: Start) -> None:
    first = await start()
    await first.archive.store.apply([write(3, 100.0)], now=1)  # archived before a restart
    await first.archive.close(5.0)

    gateway = await start()
    assert await gateway.restore("new-1") is None  # the index is loading: the database answers
    assert gateway.reads == 1
    await index_loaded(gateway)
    assert await gateway.restore("new-2") is None
    assert gateway.reads == 1  # known absent: no read
    meta = await gateway.restore(ARCHIVED.key)
    assert meta is not None and meta.session_id == "ses_1"
    assert await gateway.live.get_meta(ARCHIVED) is not None

    # A conversation this instance archives later, then forgets (LRU), is restored too.
    later = ConversationRef("alice", "later")
    await gateway.backend.create_conversation(later, ConversationMeta("ses_later", 1.0, 1.0))
    gateway.archive.writer.flush(later)
    assert await gateway.archive.writer.wait_idle(10.0)
    assert await gateway.live.delete(later)  # the live backend alone forgets it
    meta = await gateway.restore("later")
    assert meta is not None and meta.session_id == "ses_later"


async def test_a_shared_live_backend_finds_what_another_instance_archived(start: Start) -> None:
    gateway = await start(shared=True)
    assert await gateway.restore("new-1") is None
    await gateway.archive.store.apply([write(3, 100.0)], now=1)  # another instance's write
    await asyncio.sleep(0)
    meta = await gateway.restore(ARCHIVED.key)
    assert meta is not None and meta.session_id == "ses_1"
    assert gateway.reads == 2


# --- the index alone (no database) -----------------------------------------------------------


def ref(key: str, principal: str = "alice") -> ConversationRef:
    return ConversationRef(principal, key)


class Keys:
    """A fake ``load_keys``: answers each load with ``archived[principal]`` once released."""

    def __init__(self, archived: dict[str, list[str]]) -> None:
        self.archived = archived
        self.release = asyncio.Event()
        self.release.set()
        self.loads: list[str] = []
        self.fail = False

    async def __call__(self, principal: str, limit: int) -> list[str]:
        self.loads.append(principal)
        answer = list(self.archived.get(principal, []))  # the query's snapshot
        await self.release.wait()
        if self.fail:
            raise OSError("database down")
        return answer[:limit]


async def loaded(index: ArchivedKeys, principal: str = "alice") -> None:
    probe = ref("never-archived", principal)
    await eventually(lambda: not index.may_hold(probe), what=f"{principal}'s keys loaded")


async def test_a_commit_while_the_load_runs_is_kept() -> None:
    source = Keys({"alice": ["a"]})
    source.release.clear()
    index = ArchivedKeys(source)
    assert index.may_hold(ref("x"))  # starts the load; unknown meanwhile
    index.written(ref("b"))  # committed after the load's query
    source.release.set()
    await loaded(index)
    assert index.may_hold(ref("a")) and index.may_hold(ref("b"))
    assert not index.may_hold(ref("c"))
    index.written(ref("c"))
    assert index.may_hold(ref("c"))
    await index.close()


async def test_a_failed_load_answers_maybe_and_is_tried_again() -> None:
    source = Keys({"alice": ["a"]})
    source.fail = True
    index = ArchivedKeys(source)
    assert index.may_hold(ref("x"))
    await eventually(lambda: len(source.loads) == 1 and index.may_hold(ref("x")))
    source.fail = False
    assert index.may_hold(ref("x"))  # asked again: loaded again
    await loaded(index)
    assert source.loads == ["alice", "alice"]
    await index.close()


async def test_bounds_too_many_keys_are_always_looked_up_and_lru_principals_dropped() -> None:
    source = Keys({"alice": ["a1", "a2", "a3", "a4"], "bob": ["b1", "b2"], "carol": ["c1"]})
    index = ArchivedKeys(source, max_keys=3, max_per_principal=3)
    index.may_hold(ref("x"))
    index.may_hold(ref("x", "bob"))
    await loaded(index, "bob")  # and alice's, started first
    assert index.may_hold(ref("never-archived"))  # more than 3: every key may be archived
    assert index.may_hold(ref("b1", "bob"))
    index.may_hold(ref("x", "carol"))  # 1 + 2 + 1 keys: the least recently used one is dropped
    await loaded(index, "carol")
    assert index.may_hold(ref("x"))  # alice's entry was dropped: loaded again
    await eventually(lambda: source.loads == ["alice", "bob", "carol", "alice"])
    await index.close()
