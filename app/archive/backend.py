"""The live backend with the archive's hooks: a run's start (``run.started``), a saved meta (a
run's start and end, a title) and a delete are queued for the writer. The hooks only queue; the
live backend's answers are passed through as they are."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.archive.writer import ArchiveWriter
from app.backends import Backend, ConversationMeta, ConversationRef, LogEntry
from app.backends.delegating import DelegatingBackend
from app.backends.types import LogItem

__all__ = ["ArchivingBackend"]


class ArchivingBackend(DelegatingBackend):
    def __init__(self, inner: Backend, writer: ArchiveWriter) -> None:
        super().__init__(inner)
        self._writer = writer

    async def save_meta(self, ref: ConversationRef, meta: ConversationMeta) -> None:
        await self._inner.save_meta(ref, meta)
        self._writer.flush(ref)

    async def delete(self, ref: ConversationRef) -> bool:
        meta = await self._inner.get_meta(ref)
        existed = await self._inner.delete(ref)
        self._writer.delete(ref, meta.session_id if meta is not None else None)
        return existed

    async def append_event(self, ref: ConversationRef, event: dict[str, Any]) -> LogEntry:
        entry = await self._inner.append_event(ref, event)
        if entry.event_type == "run.started":  # archived as started
            self._writer.flush(ref)
        return entry

    async def append_batch(self, ref: ConversationRef, items: Sequence[LogItem]) -> list[LogEntry]:
        entries = await self._inner.append_batch(ref, items)
        if any(entry.event_type == "run.started" for entry in entries):  # archived as started
            self._writer.flush(ref)
        return entries
