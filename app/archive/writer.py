"""The archive writer: one task, off the stream's path, writing in order with retries.

Hooks only queue (``flush``, ``delete``: no I/O, no await). ``LINGER_SECONDS`` after a wake-up
the task gathers each queued conversation from the live backend (state and meta, read so that
both were current at one moment: the write's version then describes both), writes up to
``BATCH`` operations per transaction, and retries a failed transaction with exponential backoff
(logged, counted) until it succeeds: a slow or failing database never delays or fails a run.
Flushes of one conversation coalesce while queued; a delete is ordered after the flushes queued
before it. A deferred flush (a run's start) waits ``DEFER_SECONDS`` first: when the run's end is
flushed meanwhile, the conversation is written once, with its end (a short run: one write, not two).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge

from app.archive.records import ConversationDelete, ConversationWrite
from app.archive.store import ArchiveStore
from app.backends import Backend, ConversationMeta, ConversationRef, Snapshot

__all__ = ["BATCH", "DEFER_SECONDS", "LINGER_SECONDS", "ArchiveWriter", "describe_error"]

logger = logging.getLogger("app.archive")
BATCH = 64
LINGER_SECONDS = 0.05
#: How long a run's start waits to be written. Most runs end sooner (the bench's 20-delta runs take
#: 0.05-0.3 s), and then only their end is written; a longer one is archived as started after 1 s.
DEFER_SECONDS = 1.0
_FIRST_RETRY_SECONDS = 0.1
#: Snapshots taken at most for one write while the meta changes under them.
_GATHER_TRIES = 3


def describe_error(exc: BaseException) -> str:
    """A short description of a database error: never the statement or its parameters."""
    origin = getattr(exc, "orig", None) or exc
    return f"{type(origin).__name__}: {str(origin).splitlines()[0][:200] if str(origin) else ''}"


def _last_run(state: dict[str, Any], meta: ConversationMeta) -> tuple[str | None, str | None]:
    runs: dict[str, Any] = state.get("runs", {})
    last_id = meta.last_run_id if meta.last_run_id in runs else next(reversed(runs), None)
    run = runs.get(last_id) if last_id is not None else None
    return last_id, (run.get("status") if run else None)


class _Metrics:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.writes = Counter(
            "agent_gateway_archive_writes",
            "Archive transactions, by outcome (ok, failed: retried with backoff).",
            ["outcome"],
            registry=registry,
        )
        self.ok = self.writes.labels("ok")
        self.failed = self.writes.labels("failed")
        self.pending = Gauge(
            "agent_gateway_archive_pending",
            "Archive operations queued, not yet written.",
            registry=registry,
        )


class ArchiveWriter:
    def __init__(
        self,
        store: ArchiveStore,
        live: Backend,
        *,
        retry_max_seconds: float,
        registry: CollectorRegistry | None = None,
        on_written: Callable[[ConversationRef], None] | None = None,
    ) -> None:
        self._store = store
        self._live = live  # the live backend itself: reading it archives nothing
        self._retry_max = retry_max_seconds
        self._metrics = _Metrics(registry)
        self._on_written = on_written  # told each conversation written, once committed
        self._queue: deque[ConversationRef | ConversationDelete] = deque()
        self._queued: set[ConversationRef] = set()
        self._deleting: dict[ConversationRef, int] = {}
        self._deferred: dict[ConversationRef, asyncio.TimerHandle] = {}
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        #: The last write failed (the database is down or refusing): reads skip the archive.
        self.failing = False

    # --- hooks (synchronous: they only queue) --------------------------------------------
    def flush(self, ref: ConversationRef, *, defer: bool = False) -> None:
        """Write ``ref`` as the live backend holds it (soon, in order); ``defer``: in
        ``DEFER_SECONDS``, unless flushed without ``defer`` meanwhile."""
        if defer:
            if ref not in self._queued and ref not in self._deferred:
                loop = asyncio.get_running_loop()
                self._deferred[ref] = loop.call_later(DEFER_SECONDS, self._undefer, ref)
                self._idle.clear()
                self._set_pending()
            return
        timer = self._deferred.pop(ref, None)
        if timer is not None:
            timer.cancel()
        if ref not in self._queued:
            self._queued.add(ref)
            self._push(ref)

    def _undefer(self, ref: ConversationRef) -> None:
        if self._deferred.pop(ref, None) is not None:
            self.flush(ref)

    def delete(self, ref: ConversationRef, session_id: str | None) -> None:
        """Remove ``ref`` from the archive (``session_id``: the incarnation that was live)."""
        self._queued.discard(ref)  # a later flush (a new incarnation) goes after the delete
        timer = self._deferred.pop(ref, None)
        if timer is not None:
            timer.cancel()
        self._deleting[ref] = self._deleting.get(ref, 0) + 1
        self._push(ConversationDelete(ref, session_id, time.time() * 1000))

    def is_deleting(self, ref: ConversationRef) -> bool:
        """A delete of ``ref`` is queued and not written yet (its archive reads as absent)."""
        return ref in self._deleting

    def _push(self, operation: ConversationRef | ConversationDelete) -> None:
        self._queue.append(operation)
        self._set_pending()
        self._idle.clear()
        self._wake.set()

    def _set_pending(self) -> None:
        self._metrics.pending.set(len(self._queue) + len(self._deferred))

    # --- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="archive-writer")

    async def wait_idle(self, within: float) -> bool:
        """Wait until everything queued is written; False when ``within`` s passed first."""
        try:
            await asyncio.wait_for(self._idle.wait(), within)
        except TimeoutError:
            return False
        return True

    async def close(self, grace: float) -> None:
        """Write what is queued or deferred (for up to ``grace`` s), then stop."""
        for ref in list(self._deferred):
            self.flush(ref)
        if not await self.wait_idle(grace):
            logger.warning("archive: %d operation(s) not written at shutdown", len(self._queue))
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    # --- the task ------------------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            if not self._queue:
                if not self._deferred:
                    self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                # What is flushed meanwhile joins this batch: a short run's start and end, and
                # the runs of many conversations, share one write and one transaction.
                await asyncio.sleep(LINGER_SECONDS)
                continue
            batch: list[ConversationWrite | ConversationDelete] = []
            while self._queue and len(batch) < BATCH:
                operation = self._queue.popleft()
                if isinstance(operation, ConversationDelete):
                    batch.append(operation)
                    continue
                self._queued.discard(operation)
                try:
                    write = await self._gather(operation)
                except Exception as exc:  # the live backend is unavailable: try again later
                    logger.warning("archive: cannot read %s: %s", operation.key, exc)
                    self._requeue_later(operation)
                    continue
                if write is not None:
                    batch.append(write)
            await self._write(batch)
            for written in batch:
                if isinstance(written, ConversationDelete):
                    left = self._deleting.get(written.ref, 1) - 1
                    if left <= 0:
                        self._deleting.pop(written.ref, None)
                    else:
                        self._deleting[written.ref] = left
            self._set_pending()

    def _requeue_later(self, ref: ConversationRef) -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(self._retry_max, self.flush, ref)

    async def _consistent_snapshot(self, ref: ConversationRef) -> Snapshot | None:
        """The live snapshot with a meta that was current while its state was read.

        A live backend may read the meta before the state (Redis: two round trips), so a
        snapshot can pair a run's ended state with the meta saved at its start. The meta is
        read again after the snapshot: unchanged, the pair was current at once, and the write's
        version (events reduced, ``updated_at``) describes both halves; changed, the snapshot is
        taken again. After ``_GATHER_TRIES`` the last one is used: the meta keeps changing, and
        each change flushes this conversation again."""
        snapshot: Snapshot | None = None
        for _ in range(_GATHER_TRIES):
            snapshot = await self._live.snapshot(ref)
            if snapshot is None:  # deleted (its delete is queued) or forgotten
                return None
            meta = await self._live.get_meta(ref)
            if meta is None:
                return None
            if meta is snapshot.meta or meta == snapshot.meta:
                return snapshot
        return snapshot

    async def _gather(self, ref: ConversationRef) -> ConversationWrite | None:
        snapshot = await self._consistent_snapshot(ref)
        if snapshot is None:
            return None
        meta, state = snapshot.meta, snapshot.state
        last_id, last_status = _last_run(state, meta)
        return ConversationWrite(
            ref=ref,
            session_id=meta.session_id,
            title=meta.title,
            created_at=meta.created_at,
            updated_at=meta.updated_at,
            last_run_id=last_id,
            last_run_status=last_status,
            meta_json=orjson.dumps(meta.to_dict()).decode(),
            state_json=orjson.dumps(state).decode(),
            extensions_json=orjson.dumps(snapshot.extensions).decode(),
            cursor=snapshot.cursor,
            event_count=len(state.get("processedEventIds", ())),
        )

    async def _write(self, batch: list[ConversationWrite | ConversationDelete]) -> None:
        if not batch:
            return
        delay = _FIRST_RETRY_SECONDS
        while True:
            try:
                await self._store.apply(batch, time.time() * 1000)
            except Exception as exc:
                self.failing = True
                self._metrics.failed.inc()
                logger.warning(
                    "archive write of %d operation(s) failed (%s); retrying in %.1f s",
                    len(batch),
                    describe_error(exc),
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._retry_max)
                continue
            self.failing = False
            self._metrics.ok.inc()
            if self._on_written is not None:
                for operation in batch:
                    if isinstance(operation, ConversationWrite):
                        self._on_written(operation.ref)
            return
