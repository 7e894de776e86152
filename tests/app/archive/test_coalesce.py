"""The writer's deferred start: a run that ends within ``DEFER_SECONDS`` is written once, with
its end; a run that lasts is archived as started after that delay; a delete cancels it."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence

import pytest
from prometheus_client import CollectorRegistry

from app.archive import Archive
from app.archive.records import ConversationWrite
from app.archive.writer import DEFER_SECONDS
from app.backends import Backend, ConversationMeta, ConversationRef, LogItem
from app.backends.memory import MemoryBackend
from app.config import ArchiveSection
from tests.app.archive.support import Database
from tests.app.support.backend_contract import event, run_events

REF = ConversationRef("alice", "k")


class Counted:
    """An archive over a memory backend, recording each conversation write's run status."""

    def __init__(self, archive: Archive, backend: Backend) -> None:
        self.archive, self.backend = archive, backend
        self.writes: list[str | None] = []
        apply = archive.store.apply

        async def counted(operations: Sequence[object], now: float) -> None:
            await apply(operations, now)  # type: ignore[arg-type]
            self.writes += [
                op.last_run_status for op in operations if isinstance(op, ConversationWrite)
            ]

        archive.store.apply = counted  # type: ignore[method-assign]


@pytest.fixture
async def gateway(database: Database) -> AsyncIterator[Counted]:
    archive = Archive(ArchiveSection(url=database.url), CollectorRegistry())
    backend = archive.wrap(MemoryBackend())
    await archive.start()
    yield Counted(archive, backend)
    await archive.close(5.0)


async def start_run(backend: Backend, meta: ConversationMeta) -> None:
    """What a run does first: its meta saved, then its first events appended."""
    await backend.save_meta(REF, meta)
    await backend.append_batch(REF, [LogItem.of_event(e) for e in run_events("r1", 3)])


def new_meta() -> ConversationMeta:
    now = time.time() * 1000
    return ConversationMeta(session_id="ses_test", created_at=now, updated_at=now)


async def test_a_short_run_is_written_once_with_its_end(gateway: Counted) -> None:
    meta = new_meta()
    await gateway.backend.create_conversation(REF, meta)
    started = time.monotonic()
    await start_run(gateway.backend, meta)
    await gateway.backend.append_event(REF, event("r1", 5, "run.completed"))
    await gateway.backend.save_meta(REF, meta)  # the meta saved after the run
    gateway.archive.run_ended(REF)  # the run-end hook (app/runs/ending.py)
    assert await gateway.archive.writer.wait_idle(10.0)
    assert time.monotonic() - started < DEFER_SECONDS  # the end did not wait for the delay
    assert gateway.writes == ["completed"]


async def test_a_lasting_run_is_archived_as_started_then_ended(gateway: Counted) -> None:
    meta = new_meta()
    await gateway.backend.create_conversation(REF, meta)
    await start_run(gateway.backend, meta)
    assert await gateway.archive.writer.wait_idle(10.0)  # idle only once the start is written
    assert gateway.writes == ["running"]
    failed = event("r1", 5, "run.failed", {"error": {"code": "x", "message": "y"}})
    await gateway.backend.append_batch(REF, [LogItem.of_event(failed)])
    await gateway.backend.save_meta(REF, meta)
    gateway.archive.run_ended(REF)
    assert await gateway.archive.writer.wait_idle(10.0)
    assert gateway.writes == ["running", "failed"]


async def test_a_delete_cancels_a_deferred_start(gateway: Counted) -> None:
    meta = new_meta()
    await gateway.backend.create_conversation(REF, meta)
    await start_run(gateway.backend, meta)
    assert await gateway.backend.delete(REF)
    assert await gateway.archive.writer.wait_idle(10.0)
    assert gateway.writes == []
    assert await gateway.archive.store.load(REF) is None
