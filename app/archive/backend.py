"""The live backend with the archive's hooks: they only queue, and the live backend's answers
are passed through as they are. A run's start (``run.started``, the meta saved before the run)
and a title are written ``DEFER_SECONDS`` later, unless the run's end came first — a short run is
written once. The end is written by the run-end hook (:meth:`.service.Archive.run_ended`, called
by ``app/runs/ending.py``), not by a write seen here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.archive.writer import ArchiveWriter
from app.backends import Backend, ConversationMeta, ConversationRef, LogEntry
from app.backends.delegating import DelegatingBackend
from app.backends.types import AppendDone, LogItem

__all__ = ["ArchivingBackend"]

_STARTED = "run.started"
_HOOKED = frozenset({_STARTED})


class ArchivingBackend(DelegatingBackend):
    def __init__(self, inner: Backend, writer: ArchiveWriter) -> None:
        super().__init__(inner)
        self._writer = writer

    async def save_meta(
        self, ref: ConversationRef, meta: ConversationMeta, *, keep_title: bool = False
    ) -> None:
        await self._inner.save_meta(ref, meta, keep_title=keep_title)
        # A run's start (or a title): its end, if it comes within the delay, replaces it.
        self._writer.flush(ref, defer=True)

    async def delete(self, ref: ConversationRef) -> bool:
        meta = await self._inner.get_meta(ref)
        existed = await self._inner.delete(ref)
        self._writer.delete(ref, meta.session_id if meta is not None else None)
        return existed

    async def append_event(self, ref: ConversationRef, event: dict[str, Any]) -> LogEntry:
        entry = await self._inner.append_event(ref, event)
        self._seen(ref, entry.event_type)
        return entry

    async def append_batch(self, ref: ConversationRef, items: Sequence[LogItem]) -> list[LogEntry]:
        entries = await self._inner.append_batch(ref, items)
        for entry in entries:
            if entry.event_type in _HOOKED:
                self._seen(ref, entry.event_type)
        return entries

    def append_soon(self, ref: ConversationRef, items: Sequence[LogItem], done: AppendDone) -> bool:
        def seen(entries: list[LogEntry] | None, error: Exception | None) -> None:
            for entry in entries or ():
                if entry.event_type in _HOOKED:
                    self._seen(ref, entry.event_type)
            done(entries, error)

        return self._inner.append_soon(ref, items, seen)

    def _seen(self, ref: ConversationRef, event_type: str | None) -> None:
        if event_type == _STARTED:  # archived as started (if the run lasts)
            self._writer.flush(ref, defer=True)
