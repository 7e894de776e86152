"""A backend that passes every operation to another: the base of every wrapper.

The one place, besides the interface (:mod:`app.backends.roles`) and the two backends, that
names each operation: a wrapper subclasses :class:`DelegatingBackend` and writes only the
operations it adds to (the archive's hooks), or makes its own from
:func:`backend_operations` once, when its module loads (the metrics' timing of every
coroutine operation).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from app.backends.base import Backend
from app.backends.limit_store import LimitStore
from app.backends.types import (
    AcceptedAnswer,
    AppendDone,
    ConversationMeta,
    ConversationRef,
    IdempotencyRecord,
    LogEntry,
    LogItem,
    QueuedRun,
    ReadResult,
    ReadSink,
    RunAdopter,
    RunControl,
    Snapshot,
)
from app.backends.webhook_outbox import LostRunListener, WebhookOutbox
from core.runs import AbortReason
from providers.contract import Command

__all__ = ["DelegatingBackend", "backend_operations"]


@cache
def backend_operations() -> Mapping[str, bool]:
    """Every operation of :class:`Backend` by name (those of its roles), True for a coroutine."""
    return {
        name: inspect.iscoroutinefunction(value)
        for role in reversed(Backend.__mro__)
        if role.__module__ == "app.backends.roles"
        for name, value in vars(role).items()
        if callable(value) and not name.startswith("_")
    }


class DelegatingBackend(Backend):
    """Every operation of ``inner``, unchanged; a subclass overrides the ones it adds to."""

    def __init__(self, inner: Backend) -> None:
        self._inner = inner

    @property
    def inner(self) -> Backend:
        return self._inner

    @property
    def inline_appends(self) -> bool:  # type: ignore[override]
        return self._inner.inline_appends

    @property
    def appends_wait(self) -> bool:  # type: ignore[override]
        return self._inner.appends_wait

    # --- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        await self._inner.start()

    async def close(self) -> None:
        await self._inner.close()

    async def ping(self) -> bool:
        return await self._inner.ping()

    # --- conversations -------------------------------------------------------------------
    async def create_conversation(self, ref: ConversationRef, meta: ConversationMeta) -> bool:
        return await self._inner.create_conversation(ref, meta)

    async def reserve_conversation(self, ref: ConversationRef, limit: int) -> bool:
        return await self._inner.reserve_conversation(ref, limit)

    def limit_store(self) -> LimitStore | None:
        return self._inner.limit_store()

    async def restore_conversation(
        self,
        ref: ConversationRef,
        meta: ConversationMeta,
        state: dict[str, Any],
        extensions: dict[str, Any],
    ) -> bool:
        return await self._inner.restore_conversation(ref, meta, state, extensions)

    async def get_meta(self, ref: ConversationRef) -> ConversationMeta | None:
        return await self._inner.get_meta(ref)

    async def save_meta(
        self, ref: ConversationRef, meta: ConversationMeta, *, keep_title: bool = False
    ) -> None:
        await self._inner.save_meta(ref, meta, keep_title=keep_title)

    async def delete(self, ref: ConversationRef) -> bool:
        return await self._inner.delete(ref)

    async def list_conversations(self, principal: str) -> list[tuple[str, ConversationMeta]]:
        return await self._inner.list_conversations(principal)

    # --- log and state -------------------------------------------------------------------
    async def append_event(self, ref: ConversationRef, event: dict[str, Any]) -> LogEntry:
        return await self._inner.append_event(ref, event)

    async def append_extension(self, ref: ConversationRef, key: str, value: Any) -> LogEntry:
        return await self._inner.append_extension(ref, key, value)

    async def append_batch(self, ref: ConversationRef, items: Sequence[LogItem]) -> list[LogEntry]:
        return await self._inner.append_batch(ref, items)

    def append_soon(self, ref: ConversationRef, items: Sequence[LogItem], done: AppendDone) -> bool:
        # Not passed on: a subclass that adds to ``append_batch`` would be skipped by it. One
        # that passes it on does what it adds in ``done`` (``ArchivingBackend``).
        return False

    async def snapshot(self, ref: ConversationRef) -> Snapshot | None:
        return await self._inner.snapshot(ref)

    async def run_issues(self, ref: ConversationRef, run_id: str) -> list[dict[str, Any]]:
        return await self._inner.run_issues(ref, run_id)

    async def head_cursor(self, ref: ConversationRef) -> str:
        return await self._inner.head_cursor(ref)

    async def read(
        self,
        ref: ConversationRef,
        after: str,
        *,
        limit: int,
        wait: float,
        sink: ReadSink | None = None,
    ) -> ReadResult:
        return await self._inner.read(ref, after, limit=limit, wait=wait, sink=sink)

    def wake_readers(self) -> None:
        self._inner.wake_readers()

    # --- runs ----------------------------------------------------------------------------
    async def claim_run(
        self, ref: ConversationRef, control: RunControl, answer: AcceptedAnswer | None = None
    ) -> bool:
        return await self._inner.claim_run(ref, control, answer)

    async def release_run(self, ref: ConversationRef, run_id: str) -> None:
        await self._inner.release_run(ref, run_id)

    async def active_run(self, ref: ConversationRef) -> str | None:
        return await self._inner.active_run(ref)

    async def request_abort(
        self, ref: ConversationRef, run_id: str | None, reason: AbortReason = "aborted"
    ) -> str | None:
        return await self._inner.request_abort(ref, run_id, reason)

    async def end_run(self, ref: ConversationRef, run_id: str) -> str | None:
        return await self._inner.end_run(ref, run_id)

    async def wait_run_slot(self, ref: ConversationRef, wait: float) -> None:
        await self._inner.wait_run_slot(ref, wait)

    async def send_command(self, ref: ConversationRef, run_id: str, command: Command) -> bool:
        return await self._inner.send_command(ref, run_id, command)

    # --- the queue of enqueued runs --------------------------------------------------------
    async def enqueue_run(
        self,
        ref: ConversationRef,
        run: QueuedRun,
        *,
        limit: int | None,
        interrupt: bool = False,
        answer: AcceptedAnswer | None = None,
    ) -> bool:
        return await self._inner.enqueue_run(
            ref, run, limit=limit, interrupt=interrupt, answer=answer
        )

    async def drop_run(self, ref: ConversationRef, run_id: str) -> bool:
        return await self._inner.drop_run(ref, run_id)

    def run_dropped(self, ref: ConversationRef, run_id: str) -> bool:
        return self._inner.run_dropped(ref, run_id)

    async def queued_runs(self, ref: ConversationRef) -> int:
        return await self._inner.queued_runs(ref)

    async def is_queued(self, ref: ConversationRef, run_id: str) -> bool:
        return await self._inner.is_queued(ref, run_id)

    def on_adopted_runs(self, adopter: RunAdopter) -> None:
        self._inner.on_adopted_runs(adopter)

    # --- idempotency ---------------------------------------------------------------------
    async def idempotency_get(self, scope: str) -> IdempotencyRecord | None:
        return await self._inner.idempotency_get(scope)

    async def idempotency_put(self, scope: str, record: IdempotencyRecord, ttl: float) -> bool:
        return await self._inner.idempotency_put(scope, record, ttl)

    async def idempotency_refresh(self, scope: str, ttl: float) -> bool:
        return await self._inner.idempotency_refresh(scope, ttl)

    async def accepted_answer(self, ref: ConversationRef, scope: str) -> IdempotencyRecord | None:
        return await self._inner.accepted_answer(ref, scope)

    # --- webhooks ------------------------------------------------------------------------
    def webhook_outbox(self) -> WebhookOutbox | None:
        return self._inner.webhook_outbox()

    def watch_lost_runs(self, listener: LostRunListener) -> None:
        self._inner.watch_lost_runs(listener)
