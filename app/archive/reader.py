"""Reading the archive when the live backend does not hold a conversation.

``snapshot`` answers ``GET …/state``, ``GET …/runs/{runId}`` and the snapshot frame of the
streams. ``restore`` brings an archived conversation back into the live backend so a new run
continues it: the same meta (``sessionId``, session started, transcripts), and the archived log
replayed, so the state and the upstream history are the conversation's. A run archived as
running whose end never came reads back ended ``run.failed`` ``gateway_instance_lost``.

A database that fails, is slow (``READ_TIMEOUT_SECONDS``) or whose last write failed reads as
"not archived": the gateway answers from the live backend alone rather than waiting on it, and
after a failed read skips the archive for ``READ_BACKOFF_SECONDS``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from app.archive.records import ArchivedConversation
from app.archive.store import ArchiveStore
from app.archive.writer import ArchiveWriter, describe_error
from app.backends import Backend, ConversationMeta, ConversationRef, Snapshot
from app.backends.redis.lost_run import lost_run_events
from core.store import AgentStore

__all__ = ["READ_TIMEOUT_SECONDS", "ArchiveReader", "close_lost_runs"]

logger = logging.getLogger("app.archive")
READ_TIMEOUT_SECONDS = 1.0
READ_BACKOFF_SECONDS = 5.0


def _running(state: dict[str, Any]) -> list[str]:
    runs: dict[str, Any] = state.get("runs", {})
    return [run_id for run_id, run in runs.items() if run.get("status") == "running"]


def close_lost_runs(state: dict[str, Any], now_ms: float) -> dict[str, Any]:
    """``state`` with every run still running ended ``run.failed`` ``gateway_instance_lost``."""
    running = _running(state)
    if not running:
        return state
    store = AgentStore(state)
    for run_id in running:
        for event in lost_run_events(dict(store.get_snapshot()), run_id, now_ms):
            store.dispatch(event)
    return dict(store.get_snapshot())


class ArchiveReader:
    def __init__(self, store: ArchiveStore, writer: ArchiveWriter) -> None:
        self._store = store
        self._writer = writer
        self._skip_until = 0.0

    def _available(self) -> bool:
        return not self._writer.failing and time.monotonic() >= self._skip_until

    def _failed(self, ref: ConversationRef, exc: BaseException) -> None:
        self._skip_until = time.monotonic() + READ_BACKOFF_SECONDS
        logger.warning("archive read of %s failed: %s", ref.key, describe_error(exc))

    async def _load(self, ref: ConversationRef) -> ArchivedConversation | None:
        if self._writer.is_deleting(ref) or not self._available():
            return None
        try:
            return await asyncio.wait_for(self._store.load(ref), READ_TIMEOUT_SECONDS)
        except Exception as exc:
            self._failed(ref, exc)
            return None

    async def snapshot(self, ref: ConversationRef) -> Snapshot | None:
        archived = await self._load(ref)
        if archived is None:
            return None
        state = close_lost_runs(archived.state, archived.meta.updated_at)
        return Snapshot(state, archived.cursor, archived.extensions, archived.meta)

    async def restore(self, ref: ConversationRef, backend: Backend) -> ConversationMeta | None:
        """Put the archived conversation back into the live ``backend`` (the archiving one, whose
        ``inner`` is the live backend itself); its meta, or None when it is not archived."""
        archived = await self._load(ref)
        if archived is None:
            return None
        try:
            entries = await asyncio.wait_for(self._store.load_entries(ref), READ_TIMEOUT_SECONDS)
        except Exception as exc:
            self._failed(ref, exc)
            return None
        live: Backend = getattr(backend, "inner", backend)  # replayed entries are archived already
        meta = archived.meta
        updated_at = meta.updated_at
        if not await live.create_conversation(ref, meta):
            return await backend.get_meta(ref)  # restored (or created) meanwhile
        for kind, value in entries:
            if kind == "event":
                await live.append_event(ref, value)
            else:
                await live.append_extension(ref, value["key"], value["value"])
        snapshot = await live.snapshot(ref)
        if snapshot is not None:
            for run_id in _running(snapshot.state):
                for event in lost_run_events(snapshot.state, run_id, updated_at):
                    await backend.append_event(ref, event)  # archived with the next write
        meta.updated_at = updated_at
        await backend.save_meta(ref, meta)
        logger.info("archive: restored %s (%d entries)", ref.key, len(entries))
        return meta
