"""Runs per conversation: accept (multitask reject / interrupt / enqueue), execute, abort, drain.

One worker task per busy conversation takes queued runs in acceptance order (FIFO, also for
``interrupt``) and executes them one at a time; the run slot is claimed in the backend so aborts
and commands posted anywhere reach it. An interrupt or an abort never reorders or removes an
accepted run: it cancels it, and a run cancelled before it started still takes its turn, logging
its start, its user message and ``run.cancelled`` without reaching the upstream.

On Redis the queue is the backend's: a queued run is stored there with its request, and the
runs of an instance that died are adopted by this one (``on_adopted_runs``) and join the
conversation's queue at their place. A claim that fails because the backend is unreachable is
retried until it is back: an accepted run is never dropped by an outage.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from app import errors
from app.archive import Archive
from app.backends import EMPTY_CURSOR, Backend, ConversationMeta, ConversationRef
from app.backends.types import AcceptedAnswer, QueuedRun
from app.config import Settings
from app.ids import new_run_id, new_session_id
from app.observability.metrics import GatewayMetrics
from app.runs.catalog import ProviderCatalog
from app.runs.ending import RunEndHooks
from app.runs.execute import START_WAIT_SECONDS, ActiveRun, RunRequest, execute_run, title_of
from app.runs.limits import GatewayLimits, check_json_size
from app.runs.start_slots import StartSlots
from app.telemetry import Telemetry
from app.telemetry.run_ops import abort_span, current_context, current_traceparent

__all__ = ["AnswerOf", "RunManager", "Submission"]

logger = logging.getLogger("app.runs")
Multitask = Literal["reject", "interrupt", "enqueue"]
#: How long a run waiting for its turn waits for a "slot freed" notification before it tries
#: to claim again anyway.
SLOT_WAIT_FALLBACK_SECONDS = 2.0
#: A claim that failed because the backend is unreachable is retried after this, doubling up
#: to ``CLAIM_RETRY_MAX_SECONDS``, until the backend is back.
CLAIM_RETRY_FIRST_SECONDS = 0.1
CLAIM_RETRY_MAX_SECONDS = 2.0
Turn = Literal["claimed", "dropped", "later"]
#: Turns the 202 body of a run into the idempotent answer stored with its acceptance.
AnswerOf = Callable[[dict[str, Any]], AcceptedAnswer]


@dataclass(slots=True)
class _Slot:
    #: Accepted runs not started yet, in queue order; the first one is claiming its turn.
    queue: deque[RunRequest] = field(default_factory=deque)
    current: ActiveRun | None = None
    worker: asyncio.Task[None] | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: The backend run slot taken at submit for the next run (cluster-wide: one 202).
    claimed: ActiveRun | None = None
    #: Submits that held the lock so far: a meta read before one of them is read again.
    submits: int = 0


@dataclass(frozen=True, slots=True)
class _Read:
    """The conversation's meta read with a submit's first round trip, after ``submits``."""

    submits: int
    meta: ConversationMeta | None
    #: Whether the conversation was counted among its principal's (None: not asked).
    reserved: bool | None


async def _nothing() -> None:
    return None


async def _answer(value: bool, limit: int) -> bool:
    return value


@dataclass(frozen=True, slots=True)
class Submission:
    """The answer to an accepted run (the 202 body, plus the request for streaming)."""

    body: dict[str, Any]
    request: RunRequest


class RunManager:
    def __init__(
        self,
        backend: Backend,
        catalog: ProviderCatalog,
        settings: Settings,
        metrics: GatewayMetrics | None = None,
    ) -> None:
        self.backend = backend
        self.catalog = catalog
        self.settings = settings
        self.metrics = metrics
        self.shutting_down = False
        self._slots: dict[ConversationRef, _Slot] = {}
        #: Told (synchronously; must not block) of every run that ended on this instance.
        self.run_listeners: list[Callable[[ConversationRef, str], None]] = []
        #: Awaited when a run ended on this instance, before its slot is released: the
        #: run-end hooks (archive, webhooks) of app/runs/ending.py.
        self.run_end = RunEndHooks()
        #: Rate, conversation and subscriber limits of [limits] (app/runs/limits.py).
        self.limits = GatewayLimits(settings.limits, backend.limit_store())
        #: [archive]: a conversation the live backend forgot is restored from it to continue.
        self.archive: Archive | None = None
        #: Starts in progress at once (gateway.max_concurrent_starts): a start storm is worked
        #: through in turn, not interleaved with the deltas of the answers already streaming.
        self.start_slots = StartSlots(settings.gateway.max_concurrent_starts)
        #: [telemetry] (app/telemetry): runs are traced; None when off.
        self.telemetry: Telemetry | None = None
        if metrics is not None:
            metrics.watch_start_slots(lambda: self.start_slots)
        backend.on_adopted_runs(self._adopt)

    # --- queries -------------------------------------------------------------------------
    def active(self, ref: ConversationRef) -> ActiveRun | None:
        slot = self._slots.get(ref)
        return None if slot is None else slot.current

    def is_busy(self, ref: ConversationRef, excluding: str | None = None) -> bool:
        """A run of this conversation is running or queued (``excluding`` one run id)."""
        slot = self._slots.get(ref)
        if slot is None:
            return False
        if slot.queue:
            return True
        current = slot.current  # a run whose terminal is logged is only finishing up
        return current is not None and current.run_id != excluding and not current.ended

    def is_pending(self, ref: ConversationRef, run_id: str) -> bool:
        """``run_id`` is accepted here and waits in the queue (or is starting)."""
        slot = self._slots.get(ref)
        if slot is None:
            return False
        current = slot.current is not None and slot.current.run_id == run_id
        return current or any(request.run_id == run_id for request in slot.queue)

    def active_count(self) -> int:
        return sum(1 for slot in self._slots.values() if slot.current or slot.queue)

    # --- submit --------------------------------------------------------------------------
    async def submit(
        self,
        ref: ConversationRef,
        input: dict[str, Any] | None,
        provider: str | None,
        multitask: Multitask | None,
        *,
        reload: bool = False,
        answer_of: AnswerOf | None = None,
        before: Callable[[], Awaitable[None]] | None = None,
    ) -> Submission:
        """Accept a run (or refuse it with a ``GatewayError``). ``answer_of`` (a request with an
        ``Idempotency-Key``) turns the 202 body into the answer the backend stores in the
        step that accepts the run. ``before`` must succeed before the run is accepted (a
        stream's subscriber slot): it is awaited with the first round trip (the rate limit
        and the conversation's meta), at once."""
        self._refuse_if_draining()
        policy = multitask or self.settings.gateway.multitask
        if input is not None:  # HTTP and WebSocket alike: 413 / 422 before anything else
            check_json_size(input, self.settings.limits.max_input_bytes, "input")
        starts = self.start_slots
        await starts.acquire()
        try:
            self._refuse_if_draining()  # the drain may have begun while this start waited
            submission = await self._accept(ref, input, provider, policy, answer_of, before)
        except BaseException:
            starts.release()
            raise
        if submission.body["status"] == "started":  # its slot until its run.started is logged
            starts.release_when(submission.request.started, START_WAIT_SECONDS)
        else:
            starts.release()
        return submission

    def _refuse_if_draining(self) -> None:
        if self.shutting_down:
            raise errors.ShuttingDown("The gateway is shutting down.")

    async def _accept(
        self,
        ref: ConversationRef,
        input: dict[str, Any] | None,
        provider: str | None,
        policy: Multitask,
        answer_of: AnswerOf | None,
        before: Callable[[], Awaitable[None]] | None,
    ) -> Submission:
        slot = self._slots.setdefault(ref, _Slot())
        seen = slot.submits
        # At once (one round trip): 429 rate_limited, counted now (atomically) and given back
        # if the run is refused; ``before``; the meta, read again under the slot's lock if
        # another submit of this conversation took it meanwhile; with limits shared by the
        # instances (Redis), the conversation counted among its principal's in case it is new
        # (atomic there, and a no-op for a conversation counted already).
        limit = self.settings.limits.max_conversations_per_principal
        taken = await asyncio.gather(
            self.limits.take_run(ref.principal),
            _nothing() if before is None else before(),
            self.backend.get_meta(ref),
            _nothing()
            if self.limits.store is None
            else self.backend.reserve_conversation(ref, limit),
            return_exceptions=True,
        )
        ticket, ready, meta, reserved = taken
        outcomes = (ready, ticket, meta, reserved)
        failed = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
        if failed:
            self._forget_if_idle(ref, slot)
            if not isinstance(ticket, BaseException):
                with contextlib.suppress(Exception):
                    await self.limits.refund_run(ref.principal, ticket)
            raise failed[0]
        assert not isinstance(ticket, BaseException) and not isinstance(meta, BaseException)
        assert not isinstance(reserved, BaseException)
        read = _Read(seen, meta, reserved)
        try:
            return await self._submit(ref, slot, input, provider, policy, answer_of, read)
        except BaseException:
            self._forget_if_idle(ref, slot)  # a refused request leaves no slot behind
            with contextlib.suppress(Exception):
                await self.limits.refund_run(ref.principal, ticket)
            raise

    def _forget_if_idle(self, ref: ConversationRef, slot: _Slot) -> None:
        idle = slot.worker is None and not slot.queue and slot.current is None
        if idle and slot.claimed is None and not slot.lock.locked():
            if self._slots.get(ref) is slot:
                del self._slots[ref]

    async def _submit(
        self,
        ref: ConversationRef,
        slot: _Slot,
        input: dict[str, Any] | None,
        provider: str | None,
        policy: Multitask,
        answer_of: AnswerOf | None,
        read: _Read,
    ) -> Submission:
        async with slot.lock:
            fresh = slot.submits == read.submits
            slot.submits += 1
            meta = read.meta if fresh else await self.backend.get_meta(ref)
            meta_read = meta
            if meta is None and self.archive is not None:
                meta = await self.archive.restore(ref, self.backend)
            emit_user_message = True
            if input is None:  # reload without input: reuse the last one
                if meta is None or meta.last_input is None:
                    raise errors.NothingToReload("This conversation has no run.")
                input = meta.last_input
                emit_user_message = False
            name = provider or (meta.last_provider if meta else None) or self.catalog.default
            self.catalog.get(name)  # 404 unknown_provider
            created = False
            if meta is None:
                reserve = partial(self.backend.reserve_conversation, ref)
                if fresh and meta_read is None and read.reserved is not None:
                    reserve = partial(_answer, read.reserved)  # counted with the first reads
                await self.limits.check_new_conversation(ref, reserve)
                now = time.time() * 1000
                meta = ConversationMeta(
                    session_id=new_session_id(),
                    created_at=now,
                    updated_at=now,
                    title=title_of(input),
                )
                created = await self.backend.create_conversation(ref, meta)
                if not created:
                    meta = await self.backend.get_meta(ref) or meta  # created meanwhile elsewhere
            # Created here just now: its log is empty (no read needed). EMPTY_CURSOR stays a
            # position before this run even if another instance logged meanwhile.
            cursor = EMPTY_CURSOR if created else await self.backend.head_cursor(ref)
            # A run whose terminal is logged is only finishing up: the next one starts after it.
            busy = bool(slot.queue) or (slot.current is not None and not slot.current.ended)
            request = RunRequest(new_run_id(), input, name, emit_user_message)
            if self.telemetry is not None:  # its span's parent: this request's, on any instance
                request.trace = current_traceparent()
                request.parent = current_context()
            queued = QueuedRun(request.run_id, input, name, emit_user_message, trace=request.trace)
            session_id = meta.session_id

            def body(status: str) -> dict[str, Any]:
                return {
                    "conversationKey": ref.key,
                    "runId": request.run_id,
                    "sessionId": session_id,
                    "provider": name,
                    "cursor": cursor,
                    "status": status,
                }

            def answer(status: str) -> AcceptedAnswer | None:
                return None if answer_of is None else answer_of(body(status))

            if not busy and slot.current is None:
                # Take the backend's run slot now: the claim is atomic across instances, so
                # two instances never both accept (the worker runs under this claim).
                claimed = ActiveRun(request.run_id)
                if await self.backend.claim_run(ref, claimed, answer("started")):
                    slot.claimed = claimed
                elif not await self._finishing_elsewhere(ref):
                    busy = True
                else:  # it starts after the release elsewhere: queued like any run that waits
                    await self.backend.enqueue_run(
                        ref, queued, limit=None, answer=answer("started")
                    )
            status = "started"
            if busy and self.telemetry is not None:  # it waits its turn: a queue_wait event
                request.accepted_at = time.monotonic()
            if not busy:
                slot.queue.append(request)
            elif policy == "reject":
                raise errors.RunInProgress("A run is already in progress.")
            elif policy == "enqueue":
                limit = self.settings.gateway.enqueue_max  # here and, cluster-wide, in the backend
                if len(slot.queue) >= limit or not await self.backend.enqueue_run(
                    ref, queued, limit=limit, answer=answer("queued")
                ):
                    raise errors.QueueFull("Too many queued runs.", retry_after=1)
                slot.queue.append(request)
                status = "queued"
            else:  # interrupt: cancel the active run and every run accepted before this one
                # Locally first, before any await: the worker must not start an earlier run
                # un-cancelled while the backend (a Redis round trip) records the interrupt.
                for earlier in slot.queue:
                    earlier.cancelled = "interrupted"
                current = slot.current  # maybe still waiting for the slot: abort it here
                if current is not None and not current.ended:
                    current.abort("interrupted")
                await self.backend.enqueue_run(
                    ref, queued, limit=None, interrupt=True, answer=answer("started")
                )
                slot.queue.append(request)
                await self.backend.request_abort(ref, None, "interrupted")
            if slot.worker is None:
                slot.worker = asyncio.create_task(self._work(ref, slot))
        return Submission(body(status), request)

    async def _finishing_elsewhere(self, ref: ConversationRef) -> bool:
        """The slot is held (on another instance) by a run whose terminal is already logged,
        and no run waits: a new run is next, not refused. So is a slot released since the
        claim failed (the worker claims it in turn)."""
        holder = await self.backend.active_run(ref)
        if await self.backend.queued_runs(ref):
            return False
        if holder is None:
            return True
        snapshot = await self.backend.snapshot(ref)
        run = None if snapshot is None else snapshot.state.get("runs", {}).get(holder)
        return run is not None and run.get("status") != "running"

    async def _work(self, ref: ConversationRef, slot: _Slot) -> None:
        try:
            while slot.queue:
                request = slot.queue[0]  # it stays queued (abort, interrupt) until it claims
                active, slot.claimed = slot.claimed, None
                preclaimed = active is not None and active.run_id == request.run_id
                if active is not None and not preclaimed:
                    with contextlib.suppress(errors.GatewayError):  # else its lease lapses
                        await self.backend.release_run(ref, active.run_id)
                if active is None or not preclaimed:
                    active = ActiveRun(request.run_id)
                try:
                    turn: Turn = "claimed"
                    if not preclaimed:
                        turn = await self._claim_in_turn(ref, slot, request, active)
                    if turn == "later":
                        continue  # a run queued before it was adopted: that one goes first
                    if not _remove(slot.queue, request) and turn == "claimed":
                        # Dropped here while it claimed (shutdown, DELETE): it holds the slot
                        # and its ticket is spent, so it ends in its turn like a cancelled one.
                        active.abort("shutdown" if self.shutting_down else "aborted")
                    if turn == "dropped":
                        continue  # dropped from the queue elsewhere (abort, delete, adopted)
                    if request.cancelled is not None:  # it runs only to log its cancellation
                        active.abort(request.cancelled)
                    slot.current = active
                    try:
                        await execute_run(
                            self.backend,
                            self.catalog,
                            self.settings,
                            ref,
                            request,
                            active,
                            self.metrics,
                            self.telemetry,
                        )
                    finally:
                        self._run_ended(ref, request.run_id)
                        await self.run_end.owner_ended(ref, request.run_id)
                        await self.backend.release_run(ref, request.run_id)
                except Exception:
                    logger.exception("run %s could not be executed", request.run_id)
                    _remove(slot.queue, request)
                    with contextlib.suppress(Exception):  # never block the runs queued after it
                        await self.backend.drop_run(ref, request.run_id)
                finally:
                    if not _queued(slot.queue, request):
                        slot.current = None
                        request.finish()
        finally:
            if slot.claimed is not None:  # its request was dropped before it could start
                claimed, slot.claimed = slot.claimed, None
                with contextlib.suppress(Exception):
                    await self.backend.release_run(ref, claimed.run_id)
            slot.worker = None
            if not slot.queue and slot.current is None and not slot.lock.locked():
                self._slots.pop(ref, None)

    def _run_ended(self, ref: ConversationRef, run_id: str) -> None:
        for listener in self.run_listeners:
            try:
                listener(ref, run_id)
            except Exception:
                logger.exception("a run listener failed for run %s", run_id)

    async def _claim_in_turn(
        self, ref: ConversationRef, slot: _Slot, request: RunRequest, active: ActiveRun
    ) -> Turn:
        """Wait for the run slot: the active run and the runs queued before this one go first
        (cluster-wide on Redis). ``dropped`` when the run was dropped from the queue meanwhile,
        ``later`` when a run queued before it joined this queue (adopted from a dead instance).

        Between claims it waits for the backend to say the slot was freed; the timeout is
        only a slow fallback (a lost notification, a dead instance's lapsed ticket). While the
        backend is unreachable the claim is retried with a bounded backoff, never given up."""
        backoff = CLAIM_RETRY_FIRST_SECONDS
        while True:
            if not slot.queue or slot.queue[0] is not request:
                return "later" if _queued(slot.queue, request) else "dropped"
            try:
                claimed = await self.backend.claim_run(ref, active)
            except errors.GatewayError as exc:
                if exc.code != "backend_unavailable":
                    raise
                logger.warning(
                    "run %s: the backend is unavailable; claiming again in %.1f s",
                    request.run_id,
                    backoff,
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, CLAIM_RETRY_MAX_SECONDS)
                continue
            if claimed:
                return "claimed"
            if self.backend.run_dropped(ref, active.run_id):
                return "dropped"
            if slot.queue and slot.queue[0] is request:
                await self.backend.wait_run_slot(ref, SLOT_WAIT_FALLBACK_SECONDS)

    def _adopt(self, ref: ConversationRef, runs: Sequence[QueuedRun], order: Sequence[str]) -> bool:
        """Queued runs of a dead instance, adopted by this one: they join the conversation's
        queue at their place (``order``: the backend's queue, first to last)."""
        if self.shutting_down:
            return False
        slot = self._slots.setdefault(ref, _Slot())
        known = {request.run_id for request in slot.queue}
        if slot.current is not None:
            known.add(slot.current.run_id)
        for run in runs:
            if run.run_id not in known:
                request = RunRequest(run.run_id, run.input, run.provider, run.emit_user_message)
                request.cancelled = run.cancelled
                request.trace = run.trace
                slot.queue.append(request)
        # A run without a place (it holds the slot, or its ticket is gone) stays in front.
        place = {run_id: index for index, run_id in enumerate(order)}
        ordered = sorted(slot.queue, key=lambda request: place.get(request.run_id, -1))
        slot.queue.clear()
        slot.queue.extend(ordered)
        if slot.worker is None:
            slot.worker = asyncio.create_task(self._work(ref, slot))
        return True

    # --- abort ---------------------------------------------------------------------------
    async def abort(self, ref: ConversationRef, run_id: str | None) -> str | None:
        """Abort the active run (or ``run_id``); a queued ``run_id`` is cancelled and logs its
        cancellation in its turn. The backend reaches a run queued on another instance."""
        if self.telemetry is not None:  # an ``abort`` span linked to the run's span
            async with abort_span(self.telemetry, self.backend, ref, self._trace_of(ref, run_id)):
                return await self._abort(ref, run_id)
        return await self._abort(ref, run_id)

    def _trace_of(self, ref: ConversationRef, run_id: str | None) -> str | None:
        """The span of ``run_id`` (else the conversation's run) if it is traced here."""
        slot = self._slots.get(ref)
        if slot is None:
            return None
        current = slot.current
        if current is not None and current.trace is not None and run_id in (None, current.run_id):
            return current.trace.traceparent
        for request in slot.queue:
            if request.run_id == run_id:
                return request.trace
        return None

    async def _abort(self, ref: ConversationRef, run_id: str | None) -> str | None:
        slot = self._slots.get(ref)
        current = None if slot is None else slot.current
        if current is not None and current.ending and run_id in (None, current.run_id):
            return None  # its end is decided: nothing runs any more (it is finishing up)
        if slot is not None and run_id is not None:
            for request in slot.queue:
                if request.run_id == run_id:
                    request.cancelled = request.cancelled or "aborted"
                    await self.backend.request_abort(ref, run_id, "aborted")  # its ticket too
                    return run_id
            if current is not None and current.run_id == run_id:
                # Started here, maybe still waiting for the slot.
                if not current.abort("aborted"):
                    return None
                await self.backend.request_abort(ref, run_id, "aborted")
                return run_id
        return await self.backend.request_abort(ref, run_id, "aborted")

    async def wait_idle(self, ref: ConversationRef, wait: float) -> None:
        slot = self._slots.get(ref)
        if slot is not None and slot.worker is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(slot.worker), wait)

    async def cancel_all(self, ref: ConversationRef, wait: float) -> None:
        """Drop queued runs, abort the active one and wait for it to end (DELETE)."""
        slot = self._slots.get(ref)
        if slot is not None:
            for request in slot.queue:
                request.finish()
            slot.queue.clear()
        await self.backend.request_abort(ref, None, "aborted")
        await self.wait_idle(ref, wait)

    # --- shutdown ------------------------------------------------------------------------
    async def drain(self, grace: float) -> None:
        """Stop accepting runs; let active runs finish for ``grace`` s, then abort the rest."""
        self.shutting_down = True
        workers = [slot.worker for slot in self._slots.values() if slot.worker is not None]
        if not workers:
            return
        _, pending = await asyncio.wait(workers, timeout=grace)
        if not pending:
            return
        for ref, slot in list(self._slots.items()):
            slot.queue.clear()
            if slot.current is not None:
                await self.backend.request_abort(ref, slot.current.run_id, "shutdown")
        await asyncio.wait(pending, timeout=max(5.0, grace))


def _queued(queue: deque[RunRequest], request: RunRequest) -> bool:
    return any(item is request for item in queue)


def _remove(queue: deque[RunRequest], request: RunRequest) -> bool:
    """Remove ``request`` (by identity); False when it was not queued any more."""
    for index, item in enumerate(queue):
        if item is request:
            del queue[index]
            return True
    return False
