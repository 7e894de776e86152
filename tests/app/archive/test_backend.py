"""The archiving wrapper: what a run's writes tell the archive writer, awaited or not."""

from __future__ import annotations

from typing import Any

from app.archive.backend import ArchivingBackend
from app.backends import ConversationMeta, ConversationRef, LogItem
from tests.app.support.helpers import SoonMemoryBackend
from tests.support import eventually

REF = ConversationRef("p", "c")


class Writer:
    """The archive writer's calls, recorded."""

    def __init__(self) -> None:
        self.flushes: list[tuple[ConversationRef, bool]] = []

    def flush(self, ref: ConversationRef, *, defer: bool = False) -> None:
        self.flushes.append((ref, defer))


def _event(type_: str, seq: int) -> dict[str, Any]:
    return {"type": type_, "runId": "r1", "sessionId": "s", "eventId": f"e{seq}"}


async def test_a_write_not_waited_for_tells_the_archive_of_the_runs_start_only() -> None:
    """``append_soon`` is passed on with what ``append_batch`` adds: a run's start is archived
    with a delay; its terminal, and the meta saved after it, are not its end (written by the
    run-end hook, ``Archive.run_ended``): they write nothing at once."""
    writer = Writer()
    backend = ArchivingBackend(SoonMemoryBackend(), writer)  # type: ignore[arg-type]
    meta = ConversationMeta("s", 1.0, 1.0)
    await backend.create_conversation(REF, meta)
    outcomes: list[Any] = []

    def soon(type_: str, seq: int) -> None:
        items = [LogItem.of_event(_event(type_, seq))]
        assert backend.append_soon(REF, items, lambda e, x: outcomes.append((e, x)))

    soon("run.started", 0)
    await eventually(lambda: len(outcomes) == 1, what="run.started logged")
    soon("run.completed", 1)
    await eventually(lambda: len(outcomes) == 2, what="run.completed logged")
    assert [error for _, error in outcomes] == [None, None]
    assert writer.flushes == [(REF, True)]
    await backend.save_meta(REF, meta)
    assert writer.flushes == [(REF, True), (REF, True)]  # deferred like any saved meta
