"""The order of one conversation's archive writes, forced: two instances' writers share one live
backend (as Redis is shared) and one database, and the test holds a write at the point where it
could land out of order.

- A snapshot whose meta is read before its state (Redis reads them in two round trips) while the
  run ends in between is never archived as the run's end with the meta of its start.
- The end of run N, retried with backoff on instance A, lands after the start of run N+1 written
  by instance B: it does not replace it.
- A write retried after a ``DELETE`` of its incarnation does not bring the conversation back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from app.archive.engine import create_engine
from app.archive.migrate import migrate
from app.archive.records import ConversationDelete, ConversationWrite
from app.archive.store import ArchiveStore
from app.archive.url import database_url
from app.archive.writer import ArchiveWriter
from app.backends import ConversationMeta, ConversationRef, LogItem, Snapshot
from app.backends.delegating import DelegatingBackend
from app.backends.memory import MemoryBackend
from tests.app.archive.support import Database
from tests.app.support.backend_contract import event, run_events
from tests.support import eventually

REF = ConversationRef("alice", "k")
SESSION = "ses_test"  # the session of backend_contract's events


class HeldStore(ArchiveStore):
    """The store of one instance whose transactions fail until ``open`` is set (a database
    this instance cannot reach for a while): its writer retries them with backoff."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.open = asyncio.Event()
        self.open.set()
        self.failures = 0

    async def apply(
        self, operations: Sequence[ConversationWrite | ConversationDelete], now: float
    ) -> None:
        if not self.open.is_set():
            self.failures += 1
            raise OSError("the archive database is unreachable")
        await super().apply(operations, now)


class SplitReads(DelegatingBackend):
    """A live backend whose snapshot reads the meta first and the state after an await, as the
    Redis backend does; the first snapshot pauses in between until ``resume`` is set."""

    def __init__(self, inner: MemoryBackend) -> None:
        super().__init__(inner)
        self.paused = asyncio.Event()
        self.resume = asyncio.Event()
        self.snapshots = 0

    async def snapshot(self, ref: ConversationRef) -> Snapshot | None:
        self.snapshots += 1
        meta = await self._inner.get_meta(ref)
        if meta is None:
            return None
        meta = ConversationMeta.from_dict(orjson.loads(orjson.dumps(meta.to_dict())))
        if self.snapshots == 1:
            self.paused.set()
            await self.resume.wait()
        snapshot = await self._inner.snapshot(ref)
        if snapshot is None:
            return None
        return Snapshot(snapshot.state, snapshot.cursor, snapshot.extensions, meta)


class Instance:
    def __init__(self, store: HeldStore, writer: ArchiveWriter) -> None:
        self.store, self.writer = store, writer


class Cluster:
    """Instances over one live backend and one archive database."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.live = MemoryBackend()
        self.instances: list[Instance] = []
        self.engines: list[Any] = []

    async def instance(self, live: Any = None) -> Instance:
        engine = create_engine(database_url(self.database.url))
        self.engines.append(engine)
        if len(self.engines) == 1:
            await migrate(engine)
        store = HeldStore(engine)
        writer = ArchiveWriter(
            store, live or self.live, retry_max_seconds=0.05, registry=CollectorRegistry()
        )
        writer.start()
        instance = Instance(store, writer)
        self.instances.append(instance)
        return instance

    async def close(self) -> None:
        for instance in self.instances:
            await instance.writer.close(5.0)
        for engine in self.engines:
            await engine.dispose()

    # --- the conversation as a run changes it in the live backend -------------------------
    async def create(self) -> None:
        assert await self.live.create_conversation(REF, ConversationMeta(SESSION, now(), now()))

    async def start_run(self, run: str) -> ConversationMeta:
        meta = await self.live.get_meta(REF)
        assert meta is not None
        meta = ConversationMeta.from_dict({**meta.to_dict(), "lastRunId": run, "updatedAt": now()})
        meta.session_started = True
        await self.live.save_meta(REF, meta)
        await self.live.append_batch(REF, _items(run_events(run, 3)))
        return meta

    async def end_run(self, run: str) -> ConversationMeta:
        await self.live.append_event(REF, event(run, 5, "run.completed"))
        meta = await self.live.get_meta(REF)
        assert meta is not None
        meta = ConversationMeta.from_dict({**meta.to_dict(), "updatedAt": now()})
        meta.transcripts = {"chat": {"ended": run}}
        await self.live.save_meta(REF, meta)
        return meta

    async def archived(self) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """The archived meta and state, as the database holds them."""
        rows = await self.database.query(
            "SELECT meta, state FROM archived_conversations WHERE conversation_key = $1", REF.key
        )
        if not rows:
            return None
        meta, state = rows[0]
        return orjson.loads(meta), orjson.loads(state)


def now() -> float:
    return time.time() * 1000


def _items(events: list[dict[str, Any]]) -> list[LogItem]:
    return [LogItem(e) for e in events]


def run_status(state: dict[str, Any], run: str) -> str | None:
    found = state.get("runs", {}).get(run)
    return None if found is None else str(found["status"])


@pytest.fixture
async def cluster(database: Database) -> AsyncIterator[Cluster]:
    cluster = Cluster(database)
    yield cluster
    await cluster.close()


async def test_a_snapshot_read_across_a_runs_end_is_not_archived_with_the_start_meta(
    cluster: Cluster,
) -> None:
    split = SplitReads(cluster.live)
    a = await cluster.instance(split)
    await cluster.create()
    await cluster.start_run("r1")
    a.writer.flush(REF)
    await asyncio.wait_for(split.paused.wait(), 10)  # the meta of the run's start is read
    end = await cluster.end_run("r1")  # the run ends before the state is read
    split.resume.set()
    assert await a.writer.wait_idle(10)
    archived = await cluster.archived()
    assert archived is not None
    meta, state = archived
    # One moment of the live backend: the ended run with the meta saved at its end.
    assert run_status(state, "r1") == "completed"
    assert meta == end.to_dict()
    assert split.snapshots >= 2  # the first, mixed snapshot was taken again


async def test_the_end_of_run_n_retried_after_the_start_of_run_n1_does_not_replace_it(
    cluster: Cluster,
) -> None:
    a, b = await cluster.instance(), await cluster.instance()
    await cluster.create()
    await cluster.start_run("r1")
    await cluster.end_run("r1")
    a.store.open.clear()  # instance A cannot reach the database for a while
    a.writer.flush(REF)  # gathers the end of r1 at once, then retries with backoff
    await eventually(lambda: a.store.failures >= 2, what="A's write retried")

    started = await cluster.start_run("r2")  # r2 on instance B
    b.writer.flush(REF)
    assert await b.writer.wait_idle(10)
    archived = await cluster.archived()
    assert archived is not None and run_status(archived[1], "r2") == "running"

    a.store.open.set()  # A's retry of r1's end lands now, after B's newer write
    assert await a.writer.wait_idle(10)
    archived = await cluster.archived()
    assert archived is not None
    meta, state = archived
    assert meta == started.to_dict()
    assert run_status(state, "r1") == "completed" and run_status(state, "r2") == "running"

    ended = await cluster.end_run("r2")
    b.writer.flush(REF)
    assert await b.writer.wait_idle(10)
    archived = await cluster.archived()
    assert archived is not None
    assert archived[0] == ended.to_dict() and run_status(archived[1], "r2") == "completed"


async def test_a_write_retried_after_a_delete_does_not_bring_the_conversation_back(
    cluster: Cluster,
) -> None:
    a, b = await cluster.instance(), await cluster.instance()
    await cluster.create()
    await cluster.start_run("r1")
    b.writer.flush(REF)
    assert await b.writer.wait_idle(10)
    assert await cluster.archived() is not None

    await cluster.end_run("r1")
    a.store.open.clear()
    a.writer.flush(REF)
    await eventually(lambda: a.store.failures >= 2, what="A's write retried")
    assert await cluster.live.delete(REF)  # DELETE on instance B
    b.writer.delete(REF, SESSION)
    assert await b.writer.wait_idle(10)
    assert await cluster.archived() is None

    a.store.open.set()
    assert await a.writer.wait_idle(10)
    assert await cluster.archived() is None
