"""A backend that times every operation and counts its errors, delegating to the real one."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from app.backends.base import Backend
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
from core.runs import AbortReason
from providers.contract import Command

if TYPE_CHECKING:
    from prometheus_client.metrics import Counter, Histogram

    from app.backends.limit_store import LimitStore
    from app.backends.webhook_outbox import LostRunListener, WebhookOutbox
    from app.observability.metrics.registry import GatewayMetrics

__all__ = ["InstrumentedBackend"]

T = TypeVar("T")


class InstrumentedBackend(Backend):
    """Wraps a backend: every coroutine operation is timed and its errors are counted.

    ``read`` is a long poll (it waits for new entries), so only its errors are counted. The
    synchronous ``wake_readers``, ``run_dropped`` and ``on_adopted_runs`` are passed through.
    """

    def __init__(self, inner: Backend, metrics: GatewayMetrics, backend: str | None = None) -> None:
        self._inner = inner
        self._metrics = metrics
        #: ``memory`` / ``redis``: given, else from the class name (``RedisBackend`` -> redis).
        self._backend = metrics.backend_label(
            backend or type(inner).__name__.lower().removesuffix("backend")
        )
        #: op -> (errors counter, latency histogram or None): resolved once per operation.
        self._ops: dict[str, tuple[Counter, Histogram | None]] = {}
        #: ``append_batch``'s, once resolved (its hot path skips the dict).
        self._append_children: tuple[Counter, Histogram] | None = None

    @property
    def inner(self) -> Backend:
        return self._inner

    @property
    def inline_appends(self) -> bool:  # type: ignore[override]
        return self._inner.inline_appends

    @property
    def appends_wait(self) -> bool:  # type: ignore[override]
        return self._inner.appends_wait

    def _children(self, op: str, timed: bool) -> tuple[Counter, Histogram | None]:
        children = self._ops.get(op)
        if children is None:
            m = self._metrics
            labels = (self._backend, m.op_label(op))
            latency = m.backend_op_latency.labels(*labels) if timed else None
            children = self._ops[op] = (m.backend_op_errors.labels(*labels), latency)
        return children

    async def _call(self, op: str, call: Awaitable[T], *, timed: bool = True) -> T:
        errors, latency = self._children(op, timed)
        clock = self._metrics.clock
        start = clock()
        try:
            return await call
        except BaseException as exc:
            if isinstance(exc, Exception):  # a cancellation is not a backend error
                errors.inc()
            raise
        finally:
            if latency is not None:
                latency.observe(clock() - start)

    # --- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        await self._call("start", self._inner.start())

    async def close(self) -> None:
        await self._call("close", self._inner.close())

    async def ping(self) -> bool:
        return await self._call("ping", self._inner.ping())

    # --- conversations -------------------------------------------------------------------
    async def create_conversation(self, ref: ConversationRef, meta: ConversationMeta) -> bool:
        return await self._call("create_conversation", self._inner.create_conversation(ref, meta))

    async def restore_conversation(
        self,
        ref: ConversationRef,
        meta: ConversationMeta,
        state: dict[str, Any],
        extensions: dict[str, Any],
    ) -> bool:
        restored = self._inner.restore_conversation(ref, meta, state, extensions)
        return await self._call("restore_conversation", restored)

    async def get_meta(self, ref: ConversationRef) -> ConversationMeta | None:
        return await self._call("get_meta", self._inner.get_meta(ref))

    async def save_meta(
        self, ref: ConversationRef, meta: ConversationMeta, *, keep_title: bool = False
    ) -> None:
        await self._call("save_meta", self._inner.save_meta(ref, meta, keep_title=keep_title))

    async def delete(self, ref: ConversationRef) -> bool:
        return await self._call("delete", self._inner.delete(ref))

    async def list_conversations(self, principal: str) -> list[tuple[str, ConversationMeta]]:
        return await self._call("list_conversations", self._inner.list_conversations(principal))

    async def reserve_conversation(self, ref: ConversationRef, limit: int) -> bool:
        call = self._inner.reserve_conversation(ref, limit)
        return await self._call("reserve_conversation", call)

    def limit_store(self) -> LimitStore | None:
        return self._inner.limit_store()

    # --- log and state -------------------------------------------------------------------
    async def append_event(self, ref: ConversationRef, event: dict[str, Any]) -> LogEntry:
        return await self._call("append_event", self._inner.append_event(ref, event))

    async def append_extension(self, ref: ConversationRef, key: str, value: Any) -> LogEntry:
        return await self._call("append_extension", self._inner.append_extension(ref, key, value))

    async def append_batch(self, ref: ConversationRef, items: Sequence[LogItem]) -> list[LogEntry]:
        # ``_call`` inlined: this runs once per upstream read (once per delta at 50 deltas/s).
        # In a capacity profile the wrapper cost ~0.9x the memory append it wrapped; about
        # half of that is the histogram (kept), the rest its coroutine and op lookup (gone).
        children = self._append_children or self._append_metrics()
        clock = self._metrics.clock
        start = clock()
        try:
            return await self._inner.append_batch(ref, items)
        except Exception:  # a cancellation is not a backend error
            children[0].inc()
            raise
        finally:
            children[1].observe(clock() - start)

    def _append_metrics(self) -> tuple[Counter, Histogram]:
        errors, latency = self._children("append_batch", True)
        assert latency is not None  # timed
        self._append_children = (errors, latency)
        return errors, latency

    def append_soon(self, ref: ConversationRef, items: Sequence[LogItem], done: AppendDone) -> bool:
        children = self._append_children or self._append_metrics()
        clock = self._metrics.clock
        start = clock()

        def timed(entries: list[LogEntry] | None, error: Exception | None) -> None:
            # Counted as ``append_batch``: the same write, not waited for.
            if error is not None:
                children[0].inc()
            children[1].observe(clock() - start)
            done(entries, error)

        return self._inner.append_soon(ref, items, timed)

    async def snapshot(self, ref: ConversationRef) -> Snapshot | None:
        return await self._call("snapshot", self._inner.snapshot(ref))

    async def run_issues(self, ref: ConversationRef, run_id: str) -> list[dict[str, Any]]:
        return await self._call("run_issues", self._inner.run_issues(ref, run_id))

    async def head_cursor(self, ref: ConversationRef) -> str:
        return await self._call("head_cursor", self._inner.head_cursor(ref))

    async def read(
        self,
        ref: ConversationRef,
        after: str,
        *,
        limit: int,
        wait: float,
        sink: ReadSink | None = None,
    ) -> ReadResult:
        # Not through ``_call``: every follower reads once per delivery (hundreds per append
        # in a fan-out), and an untimed operation needs only its error count.
        try:
            return await self._inner.read(ref, after, limit=limit, wait=wait, sink=sink)
        except Exception:  # a cancellation is not a backend error
            self._children("read", False)[0].inc()
            raise

    def wake_readers(self) -> None:
        self._inner.wake_readers()

    # --- runs ----------------------------------------------------------------------------
    async def claim_run(
        self, ref: ConversationRef, control: RunControl, answer: AcceptedAnswer | None = None
    ) -> bool:
        return await self._call("claim_run", self._inner.claim_run(ref, control, answer))

    async def release_run(self, ref: ConversationRef, run_id: str) -> None:
        await self._call("release_run", self._inner.release_run(ref, run_id))

    async def active_run(self, ref: ConversationRef) -> str | None:
        return await self._call("active_run", self._inner.active_run(ref))

    async def wait_run_slot(self, ref: ConversationRef, wait: float) -> None:
        # A wait for a notification, like ``read``: only its errors are counted.
        await self._call("wait_run_slot", self._inner.wait_run_slot(ref, wait), timed=False)

    async def request_abort(
        self, ref: ConversationRef, run_id: str | None, reason: AbortReason = "aborted"
    ) -> str | None:
        return await self._call("request_abort", self._inner.request_abort(ref, run_id, reason))

    async def end_run(self, ref: ConversationRef, run_id: str) -> str | None:
        return await self._call("end_run", self._inner.end_run(ref, run_id))

    async def send_command(self, ref: ConversationRef, run_id: str, command: Command) -> bool:
        return await self._call("send_command", self._inner.send_command(ref, run_id, command))

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
        call = self._inner.enqueue_run(ref, run, limit=limit, interrupt=interrupt, answer=answer)
        return await self._call("enqueue_run", call)

    async def drop_run(self, ref: ConversationRef, run_id: str) -> bool:
        return await self._call("drop_run", self._inner.drop_run(ref, run_id))

    def run_dropped(self, ref: ConversationRef, run_id: str) -> bool:
        return self._inner.run_dropped(ref, run_id)

    async def queued_runs(self, ref: ConversationRef) -> int:
        return await self._call("queued_runs", self._inner.queued_runs(ref))

    async def is_queued(self, ref: ConversationRef, run_id: str) -> bool:
        return await self._call("is_queued", self._inner.is_queued(ref, run_id))

    def on_adopted_runs(self, adopter: RunAdopter) -> None:
        self._inner.on_adopted_runs(adopter)

    # --- idempotency ---------------------------------------------------------------------
    async def idempotency_get(self, scope: str) -> IdempotencyRecord | None:
        return await self._call("idempotency_get", self._inner.idempotency_get(scope))

    async def idempotency_put(self, scope: str, record: IdempotencyRecord, ttl: float) -> bool:
        return await self._call("idempotency_put", self._inner.idempotency_put(scope, record, ttl))

    async def idempotency_refresh(self, scope: str, ttl: float) -> bool:
        return await self._call("idempotency_refresh", self._inner.idempotency_refresh(scope, ttl))

    async def accepted_answer(self, ref: ConversationRef, scope: str) -> IdempotencyRecord | None:
        return await self._call("accepted_answer", self._inner.accepted_answer(ref, scope))

    # --- webhooks ------------------------------------------------------------------------
    def webhook_outbox(self) -> WebhookOutbox | None:
        return self._inner.webhook_outbox()

    def watch_lost_runs(self, listener: LostRunListener) -> None:
        self._inner.watch_lost_runs(listener)
