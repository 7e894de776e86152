"""Reading the archive when the live backend does not hold a conversation.

``snapshot`` answers ``GET …/state``, ``GET …/runs/{runId}`` and the snapshot frame of the
streams; ``list_page`` the archived part of ``GET /v1/conversations``. ``restore`` brings an
archived conversation back into the live backend so a new run continues it: the same meta
(``sessionId``, session started, transcripts) and the archived state (the upstream history is
derived from it), seeded in one atomic step of the live backend, so instances restoring the
same conversation at once make one copy. A run archived as running whose end never came reads
back ended ``run.failed`` ``gateway_instance_lost``.

A database that fails, is slow (``READ_TIMEOUT_SECONDS``) or whose last write failed reads as
"not archived": the gateway answers from the live backend alone rather than waiting on it, and
after a failed read skips the archive for ``READ_BACKOFF_SECONDS``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

from app.archive.keys import ArchivedKeys
from app.archive.records import ArchivedConversation, ArchivedSummary
from app.archive.store import ArchiveStore
from app.archive.writer import ArchiveWriter, describe_error
from app.backends import Backend, ConversationMeta, ConversationRef, Snapshot
from app.backends.redis.lost_run import lost_run_events
from core.store import AgentStore

__all__ = ["READ_BACKOFF_SECONDS", "READ_TIMEOUT_SECONDS", "ArchiveReader", "close_lost_runs"]

logger = logging.getLogger("app.archive")
T = TypeVar("T")
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
    def __init__(
        self, store: ArchiveStore, writer: ArchiveWriter, keys: ArchivedKeys | None = None
    ) -> None:
        self._store = store
        self._writer = writer
        self._keys = keys  # None: every read asks the database
        self._skip_until = 0.0

    def _available(self) -> bool:
        return not self._writer.failing and time.monotonic() >= self._skip_until

    def _failed(self, what: str, why: str) -> None:
        self._skip_until = time.monotonic() + READ_BACKOFF_SECONDS
        logger.warning("archive read of %s failed: %s", what, why)

    async def _read(self, what: str, read: Awaitable[T]) -> T | None:
        """``read``, bounded by ``READ_TIMEOUT_SECONDS``; None when it failed or timed out."""
        try:
            return await asyncio.wait_for(read, READ_TIMEOUT_SECONDS)
        except TimeoutError:
            self._failed(what, f"no answer within {READ_TIMEOUT_SECONDS:g} s")
        except Exception as exc:
            self._failed(what, describe_error(exc))
        return None

    async def _load(self, ref: ConversationRef) -> ArchivedConversation | None:
        if self._writer.is_deleting(ref) or not self._available():
            return None
        if self._keys is not None and not self._keys.may_hold(ref):
            return None  # a brand-new conversation: no database read
        return await self._read(ref.key, self._store.load(ref))

    async def list_page(
        self, principal: str, after: tuple[float, str] | None, limit: int
    ) -> list[ArchivedSummary] | None:
        """A page of the principal's archived conversations; None when the archive cannot
        answer now (the listing then holds the live conversations only)."""
        if not self._available():
            return None
        return await self._read("the listing", self._store.list_page(principal, after, limit))

    async def snapshot(self, ref: ConversationRef) -> Snapshot | None:
        archived = await self._load(ref)
        if archived is None:
            return None
        state = close_lost_runs(archived.state, archived.meta.updated_at)
        return Snapshot(state, archived.cursor, archived.extensions, archived.meta)

    async def restore(self, ref: ConversationRef, backend: Backend) -> ConversationMeta | None:
        """Put the archived conversation back into the live ``backend``; its meta, or None when
        it is not archived."""
        archived = await self._load(ref)
        if archived is None:
            return None
        meta = archived.meta
        state = close_lost_runs(archived.state, meta.updated_at)
        if not await backend.restore_conversation(ref, meta, state, archived.extensions):
            return await backend.get_meta(ref)  # restored (or created) meanwhile, elsewhere too
        if state is not archived.state:
            self._writer.flush(ref)  # its lost runs are ended now
        logger.info("archive: restored %s", ref.key)
        return meta
