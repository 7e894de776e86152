"""The embedded memory backend: one process, conversations in a dict, logs in deques.

Retention keeps the last ``event_log_max_len`` entries per conversation; conversations idle
longer than ``conversation_ttl_seconds`` are dropped, and beyond ``max_conversations`` the least
recently used idle ones are evicted. A conversation whose run slot is taken is never evicted.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from functools import partial
from itertools import islice
from typing import Any

from app.backends.base import Backend
from app.backends.sinks import offer
from app.backends.types import (
    EMPTY_CURSOR,
    AcceptedAnswer,
    ConversationMeta,
    ConversationRef,
    FrozenEntry,
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
from app.backends.webhook_outbox import LostRunListener
from app.ids import new_token
from core.runs import AbortReason
from core.store import AgentStore
from providers.contract import Command

__all__ = ["MemoryBackend"]


class _Notifier:
    """Wakes every reader waiting on one conversation: each waits on a future of its own.

    One timer for all of them, not one per wait: it fires at the earliest deadline of the
    waits registered since it was armed and ends every wait then (early for some: an empty
    read, and the reader waits again). It outlives the wake-ups of ``notify``, so a follower
    at 50 deltas/s, waiting again after each delivery, arms no timer per delta (a
    ``call_later`` and its cancel per wait were a visible share of the follower's CPU:
    BENCHMARKS.md, "Costs behind the code's shortcuts").
    """

    __slots__ = ("deadline", "timer", "waiters")

    def __init__(self) -> None:
        #: Each waiting reader's future, with its sink when it gave one (FIFO wake-ups).
        self.waiters: dict[asyncio.Future[None], _Sinking | None] = {}
        self.timer: asyncio.TimerHandle | None = None
        self.deadline = float("inf")

    def notify(self) -> None:
        # Hot path (every append): one set_result per waiting reader, no Event to replace.
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(None)
        self.waiters.clear()

    def appended(self, first_seq: int, entries: list[LogEntry]) -> None:
        """``entries`` (seqs from ``first_seq``) were logged: a reader waiting right before
        them whose sink takes them keeps waiting past them; every other reader is woken."""
        kept: dict[asyncio.Future[None], _Sinking | None] | None = None
        for waiter, sinking in self.waiters.items():
            if waiter.done():
                continue
            if sinking is not None and sinking.seq == first_seq - 1 and sinking.offer(entries):
                sinking.seq += len(entries)
                if kept is None:
                    kept = {}
                kept[waiter] = sinking
                continue
            waiter.set_result(None)
        self.waiters.clear()
        if kept:
            self.waiters.update(kept)

    def arm(
        self, loop: asyncio.AbstractEventLoop, deadline: float, expire: Callable[[], None]
    ) -> None:
        """Call ``expire`` at ``deadline`` instead of when the timer would have fired."""
        if self.timer is not None:
            self.timer.cancel()
        self.deadline = deadline
        self.timer = loop.call_at(deadline, expire)

    def cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
            self.deadline = float("inf")


class _Sinking:
    """A waiting reader's position and its sink (see ``EventReader.read``)."""

    __slots__ = ("seq", "sink")

    def __init__(self, seq: int, sink: ReadSink) -> None:
        self.seq = seq
        self.sink = sink

    def offer(self, entries: list[LogEntry]) -> bool:
        return offer(self.sink, entries)


class _Conversation:
    __slots__ = (
        "cold",
        "cursor_prefix",
        "extensions",
        "first_seq",
        "incarnation",
        "last_seq",
        "log",
        "meta",
        "store",
        "touched",
    )

    def __init__(self, meta: ConversationMeta, now: float) -> None:
        self.meta = meta
        self.incarnation = new_token(6)
        #: ``cursor(seq)`` is ``cursor_prefix`` + the seq, as bytes (the frames' ``id:``).
        self.cursor_prefix = f"{self.incarnation}-".encode()
        self.store = AgentStore(mode="record")
        #: The log is ``cold`` then ``log``: the entries of ended runs, frozen (tuples the
        #: collector no longer tracks: 157 of a 150-delta conversation's ~190 tracked objects
        #: were its entries, and a full collection walked every retained conversation's), then
        #: the entries since, as they were appended (what followers read and are handed).
        self.cold: deque[FrozenEntry] = deque()
        self.log: deque[LogEntry] = deque()
        self.first_seq = 1  # seq of the log's first entry (or of the next when it is empty)
        self.last_seq = 0
        self.extensions: dict[str, Any] = {}
        self.touched = now

    def cursor(self, seq: int) -> str:
        return EMPTY_CURSOR if seq == 0 else f"{self.incarnation}-{seq}"

    def parse(self, cursor: str) -> int | None:
        """The seq of ``cursor`` in this incarnation, or None when it is not one of ours."""
        if cursor == EMPTY_CURSOR:
            return 0
        incarnation, _, seq = cursor.rpartition("-")
        if incarnation != self.incarnation or not seq.isdigit():
            return None
        value = int(seq)
        return value if value <= self.last_seq else None


class MemoryBackend(Backend):
    inline_appends = True

    def __init__(
        self,
        *,
        event_log_max_len: int = 10000,
        max_conversations: int = 100000,
        conversation_ttl_seconds: float = 86400,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_len = event_log_max_len
        self._max_conversations = max_conversations
        self._ttl = conversation_ttl_seconds
        self._clock = clock
        self._conversations: OrderedDict[ConversationRef, _Conversation] = OrderedDict()
        #: Each principal's conversations, so the per-principal cap and the listing cost what the
        #: principal holds, not what the instance holds (BENCHMARKS.md, "Costs behind the code's
        #: shortcuts").
        self._by_principal: dict[str, dict[ConversationRef, None]] = {}
        self._notifiers: dict[ConversationRef, _Notifier] = {}
        self._runs: dict[ConversationRef, RunControl] = {}
        #: Set when the conversation's run slot is released (runs waiting for their turn).
        self._slot_waiters: dict[ConversationRef, asyncio.Event] = {}
        self._idempotency: dict[str, tuple[float, IdempotencyRecord]] = {}
        self._sweeper: asyncio.Task[None] | None = None

    # --- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep_forever())

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        self.wake_readers()

    async def ping(self) -> bool:
        return True

    async def _sweep_forever(self) -> None:
        interval = max(0.05, min(self._ttl / 4, 60.0))
        while True:
            await asyncio.sleep(interval)
            self.sweep()

    def sweep(self) -> None:
        """Drop expired idle conversations, then evict LRU idle ones beyond the cap."""
        now = self._clock()
        for ref, conv in list(self._conversations.items()):
            if ref not in self._runs and now - conv.touched > self._ttl:
                self._drop(ref)
        excess = len(self._conversations) - self._max_conversations
        if excess > 0:
            for ref in list(self._conversations):
                if excess <= 0:
                    break
                if ref not in self._runs:
                    self._drop(ref)
                    excess -= 1
        cutoff = time.time()
        for scope, (expires, _) in list(self._idempotency.items()):
            if expires < cutoff:
                del self._idempotency[scope]

    def _drop(self, ref: ConversationRef) -> None:
        if self._conversations.pop(ref, None) is not None:
            owned = self._by_principal[ref.principal]
            del owned[ref]
            if not owned:
                del self._by_principal[ref.principal]
            self._notify(ref)

    def _get(self, ref: ConversationRef) -> _Conversation | None:
        conv = self._conversations.get(ref)
        if conv is not None:
            conv.touched = self._clock()
            self._conversations.move_to_end(ref)
        return conv

    def _notify(self, ref: ConversationRef) -> None:
        notifier = self._notifiers.get(ref)
        if notifier is not None:
            notifier.notify()

    def _appended(self, ref: ConversationRef, first_seq: int, entries: list[LogEntry]) -> None:
        notifier = self._notifiers.get(ref)
        if notifier is not None:
            notifier.appended(first_seq, entries)

    # --- conversations -------------------------------------------------------------------
    async def create_conversation(self, ref: ConversationRef, meta: ConversationMeta) -> bool:
        if self._get(ref) is not None:
            return False
        self._conversations[ref] = _Conversation(meta, self._clock())
        self._by_principal.setdefault(ref.principal, {})[ref] = None
        if len(self._conversations) > self._max_conversations:
            self.sweep()
        return True

    async def restore_conversation(
        self,
        ref: ConversationRef,
        meta: ConversationMeta,
        state: dict[str, Any],
        extensions: dict[str, Any],
    ) -> bool:
        if not await self.create_conversation(ref, meta):
            return False
        conv = self._conversations[ref]  # nothing awaited since it was created
        conv.store = AgentStore(state, mode="record")
        conv.extensions = dict(extensions)
        return True

    async def get_meta(self, ref: ConversationRef) -> ConversationMeta | None:
        conv = self._get(ref)
        return None if conv is None else conv.meta

    async def save_meta(
        self, ref: ConversationRef, meta: ConversationMeta, *, keep_title: bool = False
    ) -> None:
        conv = self._get(ref)
        if conv is not None and conv.meta.session_id == meta.session_id:  # same incarnation
            if keep_title:
                meta.title = conv.meta.title
            conv.meta = meta

    async def delete(self, ref: ConversationRef) -> bool:
        existed = ref in self._conversations
        self._drop(ref)
        return existed

    async def reserve_conversation(self, ref: ConversationRef, limit: int) -> bool:
        # Nothing awaits between this count and the create_conversation that follows it.
        if ref in self._conversations:
            return True
        return len(self._by_principal.get(ref.principal, ())) < limit

    def limit_store(self) -> None:
        return None  # one instance: the gateway's in-process counters

    async def list_conversations(self, principal: str) -> list[tuple[str, ConversationMeta]]:
        owned = self._by_principal.get(principal, ())
        return [(ref.key, self._conversations[ref].meta) for ref in owned]

    # --- log and state -------------------------------------------------------------------
    def _append(self, ref: ConversationRef, conv: _Conversation, entry: LogEntry) -> LogEntry:
        self._log(conv, entry)
        self._appended(ref, conv.last_seq, [entry])
        return entry

    def _log(self, conv: _Conversation, entry: LogEntry) -> None:
        conv.log.append(entry)
        if len(conv.log) + len(conv.cold) > self._max_len:
            self._trim(conv, 1)

    def _log_all(self, conv: _Conversation, entries: list[LogEntry]) -> None:
        """``_log`` of each of ``entries``, in one ``extend`` and one trim."""
        log = conv.log
        log.extend(entries)
        excess = len(log) + len(conv.cold) - self._max_len
        if excess > 0:
            self._trim(conv, excess)

    @staticmethod
    def _trim(conv: _Conversation, excess: int) -> None:
        """Drop the ``excess`` oldest entries: the cold ones first."""
        conv.first_seq += excess
        cold = conv.cold
        from_cold = min(excess, len(cold))
        for _ in range(from_cold):
            cold.popleft()
        log = conv.log
        for _ in range(excess - from_cold):
            log.popleft()

    @staticmethod
    def _freeze(conv: _Conversation) -> None:
        """Move the live entries to the cold log (at a run's end: no follower is handed them
        any more). One at a time, so each frees its entry's memory for the next tuple."""
        log = conv.log
        cold = conv.cold
        freeze = LogEntry.frozen
        while log:
            cold.append(freeze(log.popleft()))

    def _require(self, ref: ConversationRef) -> _Conversation:
        conv = self._get(ref)
        if conv is None:
            raise KeyError(f"conversation {ref.key!r} does not exist")
        return conv

    async def append_event(self, ref: ConversationRef, event: dict[str, Any]) -> LogEntry:
        conv = self._require(ref)
        if event.get("sessionId") != conv.meta.session_id:  # a run of a deleted incarnation
            raise KeyError(f"conversation {ref.key!r} was deleted and created again")
        conv.store.dispatch(event)
        conv.last_seq += 1
        conv.meta.updated_at = time.time() * 1000
        return self._append(ref, conv, LogEntry.for_event(conv.cursor(conv.last_seq), event))

    async def append_extension(self, ref: ConversationRef, key: str, value: Any) -> LogEntry:
        conv = self._require(ref)
        conv.extensions[key] = value
        conv.last_seq += 1
        entry = LogEntry.for_extension(conv.cursor(conv.last_seq), key, value)
        return self._append(ref, conv, entry)

    async def append_batch(self, ref: ConversationRef, items: Sequence[LogItem]) -> list[LogEntry]:
        conv = self._require(ref)
        session_id = conv.meta.session_id
        for item in items:  # a loop, not any(<genexpr>): this runs once per upstream read
            if item.event is not None and item.event.get("sessionId") != session_id:
                # A run of a deleted incarnation: all or nothing, like append_event.
                raise KeyError(f"conversation {ref.key!r} was deleted and created again")
        out: list[LogEntry] = []
        dispatch = conv.store.dispatch
        prefix = conv.cursor_prefix
        for_event = LogEntry.for_event_at
        seq = conv.last_seq
        try:
            for item in items:
                seq += 1
                event = item.event
                if event is not None:
                    # An event the runner checked (protocol.md §6) is not validated twice.
                    dispatch(event, validated=item.checked)
                    out.append(for_event(b"%s%d" % (prefix, seq), event))
                else:
                    conv.extensions[item.key] = item.value
                    out.append(LogEntry.for_extension(conv.cursor(seq), item.key, item.value))
        finally:
            # What was reduced is logged, with no gap in the seqs, even when an item raised.
            if out:
                first_seq = conv.last_seq + 1
                conv.last_seq += len(out)
                self._log_all(conv, out)
                conv.meta.updated_at = time.time() * 1000
                self._appended(ref, first_seq, out)  # one wake-up for the whole batch
        return out

    async def snapshot(self, ref: ConversationRef) -> Snapshot | None:
        conv = self._get(ref)
        if conv is None:
            return None
        return Snapshot(
            state=conv.store.get_snapshot(),
            cursor=conv.cursor(conv.last_seq),
            extensions=dict(conv.extensions),
            meta=conv.meta,
        )

    async def run_issues(self, ref: ConversationRef, run_id: str) -> list[dict[str, Any]]:
        conv = self._get(ref)
        if conv is None:
            return []
        return [dict(issue) for issue in conv.store.issues() if issue["runId"] == run_id]

    async def head_cursor(self, ref: ConversationRef) -> str:
        conv = self._get(ref)
        return EMPTY_CURSOR if conv is None else conv.cursor(conv.last_seq)

    def _read_now(self, ref: ConversationRef, after: str, limit: int) -> ReadResult:
        conv = self._conversations.get(ref)
        if conv is None:
            return ReadResult("ok" if after == EMPTY_CURSOR else "unknown")
        seq = conv.parse(after)
        if seq is None:
            return ReadResult("unknown")
        return self._read_from(conv, seq, limit) or ReadResult("ok", [])

    @staticmethod
    def _read_from(conv: _Conversation, seq: int, limit: int) -> ReadResult | None:
        """``_read_now`` once the cursor is parsed: the entries after ``seq`` (or trimmed);
        None when there are none yet (a follower at the head: no result built to wait)."""
        if seq < conv.first_seq - 1:
            return ReadResult("trimmed")
        log = conv.log
        size = len(log)
        start = seq - conv.first_seq + 1 - len(conv.cold)  # in ``log``; < 0: in ``cold``
        stop = min(size, start + limit)
        if start < 0:
            return MemoryBackend._read_cold(conv, start, stop)
        if start >= stop:
            return None
        # A deque indexes in O(distance to its nearer end): slice from that end in C (a
        # follower reads the newest entries, next to the right end, hundreds of times per append).
        if stop < size - start:  # nearer the left end
            return ReadResult("ok", list(islice(log, start, stop)))
        entries = list(islice(reversed(log), size - stop, size - start))
        entries.reverse()
        return ReadResult("ok", entries)

    @staticmethod
    def _read_cold(conv: _Conversation, start: int, stop: int) -> ReadResult:
        """``_read_from`` starting in the cold log (``start`` < 0: counted from ``log[0]``):
        a replay, thawing each cold entry."""
        cold = conv.cold
        thaw = LogEntry.thaw
        entries = [thaw(frozen) for frozen in islice(cold, len(cold) + start, len(cold) + stop)]
        if stop > 0:
            entries.extend(islice(conv.log, stop))
        return ReadResult("ok", entries)

    async def read(
        self,
        ref: ConversationRef,
        after: str,
        *,
        limit: int,
        wait: float,
        sink: ReadSink | None = None,
    ) -> ReadResult:
        conv = self._conversations.get(ref)
        seq = None if conv is None else conv.parse(after)
        if conv is None or seq is None:
            result = self._read_now(ref, after, limit)
            if result.entries or result.status != "ok" or wait <= 0:
                return result
        else:
            found = self._read_from(conv, seq, limit)
            if found is not None or wait <= 0:
                return found or ReadResult("ok", [])
        notifier = self._notifiers.get(ref)
        if notifier is None:
            notifier = self._notifiers[ref] = _Notifier()
        # A future and the notifier's shared timer, not an Event and ``asyncio.timeout``: this
        # runs once per delivery per follower (the timeout's enter/exit showed in a capacity
        # run's profile: BENCHMARKS.md, "Costs behind the code's shortcuts").
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        sinking = None if sink is None or seq is None else _Sinking(seq, sink)
        notifier.waiters[waiter] = sinking
        deadline = loop.time() + wait
        if notifier.timer is None or deadline < notifier.deadline:  # else: it fires by then
            notifier.arm(loop, deadline, partial(self._expire, ref, notifier))
        try:
            await waiter
        finally:
            notifier.waiters.pop(waiter, None)
            # Woken by an append, the notifier (and its timer) stays for the next wait; a
            # reader that leaves otherwise (cancelled, timed out) leaves nothing behind.
            if not notifier.waiters and (waiter.cancelled() or notifier.timer is None):
                notifier.cancel_timer()
                if self._notifiers.get(ref) is notifier:
                    del self._notifiers[ref]
        if conv is not None and seq is not None and self._conversations.get(ref) is conv:
            # The same incarnation: ``after`` parses as before the wait (seqs only grow), so
            # the wake-up of each follower at each append skips the parse. Past what
            # the sink took, if it took any.
            if sinking is not None:
                seq = sinking.seq
            return self._read_from(conv, seq, limit) or ReadResult("ok", [])
        return self._read_now(ref, after, limit)

    def _expire(self, ref: ConversationRef, notifier: _Notifier) -> None:
        """``notifier``'s timer fired: end every wait on it and forget it (a reader that waits
        again gets a new one; one whose follower left is not kept)."""
        notifier.timer = None
        notifier.deadline = float("inf")
        notifier.notify()
        if self._notifiers.get(ref) is notifier:
            del self._notifiers[ref]

    def wake_readers(self) -> None:
        for notifier in list(self._notifiers.values()):
            notifier.notify()

    # --- runs ----------------------------------------------------------------------------
    async def claim_run(
        self, ref: ConversationRef, control: RunControl, answer: AcceptedAnswer | None = None
    ) -> bool:
        if ref in self._runs:
            return False
        self._runs[ref] = control
        return True

    async def release_run(self, ref: ConversationRef, run_id: str) -> None:
        control = self._runs.get(ref)
        if control is not None and control.run_id == run_id:
            del self._runs[ref]
            conv = self._conversations.get(ref)
            if conv is not None:
                self._freeze(conv)
            freed = self._slot_waiters.pop(ref, None)
            if freed is not None:
                freed.set()

    async def wait_run_slot(self, ref: ConversationRef, wait: float) -> None:
        if ref not in self._runs:
            return
        freed = self._slot_waiters.setdefault(ref, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(freed.wait(), wait)

    async def active_run(self, ref: ConversationRef) -> str | None:
        control = self._runs.get(ref)
        return None if control is None else control.run_id

    async def request_abort(
        self,
        ref: ConversationRef,
        run_id: str | None,
        reason: AbortReason = "aborted",
    ) -> str | None:
        control = self._runs.get(ref)
        if control is None or (run_id is not None and control.run_id != run_id):
            return None
        if not control.abort(reason):
            return None  # its end is already decided: too late to abort
        return control.run_id

    async def end_run(self, ref: ConversationRef, run_id: str) -> str | None:
        return None  # every abort reaches the run's control, which decides alone

    async def send_command(self, ref: ConversationRef, run_id: str, command: Command) -> bool:
        control = self._runs.get(ref)
        if control is None or control.run_id != run_id:
            return False
        control.deliver(command)
        return True

    # --- the queue of enqueued runs ----------------------------------------------------------
    # One instance: the RunManager's own per-conversation queue is the whole queue, so the
    # backend keeps none (every run may claim the slot; nothing is dropped elsewhere).
    async def enqueue_run(
        self,
        ref: ConversationRef,
        run: QueuedRun,
        *,
        limit: int | None,
        interrupt: bool = False,
        answer: AcceptedAnswer | None = None,
    ) -> bool:
        return True

    async def drop_run(self, ref: ConversationRef, run_id: str) -> bool:
        return False

    def run_dropped(self, ref: ConversationRef, run_id: str) -> bool:
        return False

    async def queued_runs(self, ref: ConversationRef) -> int:
        return 0

    async def is_queued(self, ref: ConversationRef, run_id: str) -> bool:
        return False

    def on_adopted_runs(self, adopter: RunAdopter) -> None:
        return None  # no other instance whose runs could be adopted

    # --- idempotency ---------------------------------------------------------------------
    async def idempotency_get(self, scope: str) -> IdempotencyRecord | None:
        item = self._idempotency.get(scope)
        if item is None or item[0] < time.time():
            return None
        return item[1]

    async def idempotency_put(self, scope: str, record: IdempotencyRecord, ttl: float) -> bool:
        if await self.idempotency_get(scope) is not None:
            return False
        self._idempotency[scope] = (time.time() + ttl, record)
        return True

    async def idempotency_refresh(self, scope: str, ttl: float) -> bool:
        item = self._idempotency.get(scope)
        if item is None or item[0] < time.time():
            return False
        self._idempotency[scope] = (time.time() + ttl, item[1])
        return True

    async def accepted_answer(self, ref: ConversationRef, scope: str) -> IdempotencyRecord | None:
        return None  # the answer is stored in this process, or the process is gone with it

    # --- webhooks ------------------------------------------------------------------------
    def webhook_outbox(self) -> None:
        return None  # one instance: the dispatcher's in-process queue

    def watch_lost_runs(self, listener: LostRunListener) -> None:
        return None  # one instance: a run never outlives its owner
