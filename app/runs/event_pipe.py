"""A run's writer: its events go to the backend in batches, one write in flight at a time.

The runner hands the events of each upstream read over at once, without waiting for them to
be stored; whatever accumulates while the previous write is in flight is written next, in one
``append_batch`` (one Redis round trip, one wake-up of the readers). The buffer is bounded:
when ``max_pending`` items wait, the runner waits too, so the upstream is read no faster than
the backend accepts. A failed write ends the pipe: nothing more is written, and the error is
raised to the runner at its next ``put`` (and by ``close``).

A backend with ``inline_appends`` (memory, whose writes never suspend; Redis, one round trip)
is written inline, in the runner's task, when the previous read came at least
``INLINE_GAP_SECONDS`` before (or it is the first read after the run's start events, whose
round trip to the upstream came between: the time to first token) and no write is in flight: a
slow stream (50 deltas/s, one event per read) then costs no task and no task switch per read
(a visible share of a Redis gateway's CPU with many such streams). Reads that come faster go
through the drain task as above, which batches them (in-process at full speed, inline writes of
each read cost more per event; on Redis the next read would wait for each round trip; both in
(BENCHMARKS.md, "Costs behind the code's shortcuts")); so does, on Redis,
a read of more than ``INLINE_MAX_ITEMS`` events (a fast stream's, however long checking it
took). Same order and the same error reporting either way.

An inline write the backend can start without waiting (``append_soon``: Redis, when the run's
writer has nothing in flight) is not awaited at all: the runner goes back to its upstream, and
the reply's callback hands the entries on. ``flush`` and ``close`` wait for such writes too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from app.backends import Backend, ConversationRef, LogEntry
from app.backends.types import LogItem

__all__ = ["INLINE_GAP_SECONDS", "INLINE_MAX_ITEMS", "MAX_PENDING", "EventPipe"]

#: Items waiting (not yet handed to the backend) before the runner is made to wait. No more
#: than a follower takes in one read (``app.streams.follow.BATCH``), so a write never outruns
#: the local subscribers by more than one read each.
MAX_PENDING = 256

#: Loop time since the previous read below which a read is batched by the drain task, not
#: written inline (a stream at 50 deltas/s has 20 ms between reads; one at full speed, a few
#: hundredths of one).
INLINE_GAP_SECONDS = 0.001

#: On a backend whose appends wait for a round trip (Redis), a read of more events than this is
#: a fast stream's, however long its events took to check: it goes to the drain task, so the
#: next read is checked while this one's round trip is in flight. A read of hundreds of events
#: takes the runner longer than ``INLINE_GAP_SECONDS``: written inline, the runner then sat
#: idle for each round trip, a large share of a long answer's time on Redis (figure 6;
#: BENCHMARKS.md, "Costs behind the code's shortcuts").
#: A slow stream's read carries one to a few events, also on a loaded gateway.
INLINE_MAX_ITEMS = 16

OnLogged = Callable[[list[LogEntry]], None]


class EventPipe:
    def __init__(
        self,
        backend: Backend,
        ref: ConversationRef,
        on_logged: OnLogged,
        max_pending: int = MAX_PENDING,
    ) -> None:
        self._backend = backend
        self._ref = ref
        self._on_logged = on_logged
        self._max = max(1, max_pending)
        self._inline = backend.inline_appends
        self._waits = backend.appends_wait
        self._last_put = float("-inf")
        self._first = True
        self._items: list[LogItem] = []
        self._task: asyncio.Task[None] | None = None
        self._space = asyncio.Event()
        self._space.set()
        #: Writes started by ``append_soon`` whose callback has not come yet, and what
        #: ``flush``/``close`` wait on for them.
        self._soon = 0
        self._soon_settled: asyncio.Future[None] | None = None
        self.error: Exception | None = None

    async def put(self, item: LogItem) -> None:
        """Queue ``item`` (written soon, in order); waits while the buffer is full."""
        await self.put_all([item])

    async def put_all(self, items: list[LogItem]) -> None:
        """Queue ``items`` (written soon, in order, in as few batches as they fit); waits
        while the buffer is full."""
        if self.error is not None:
            raise self.error
        loop = asyncio.get_running_loop()
        first, self._first = self._first, False
        if self._inline:
            now = loop.time()
            inline = (
                self._task is None and not self._soon and now - self._last_put >= INLINE_GAP_SECONDS
            )
            if inline and self._waits and len(items) > INLINE_MAX_ITEMS:
                inline = False  # a fast stream's read: see INLINE_MAX_ITEMS
            self._last_put = now
        else:
            inline = False
        if inline:
            # Only a backend whose appends wait for a round trip starts one without waiting:
            # memory's are done before they return, and are not asked.
            started = self._start_soon(items) if self._waits else False
            if started is not False:
                # Started, not waited for (Redis, the writer idle): the reply's callback logs
                # it. The gap counts from now, the runner did not wait for the round trip
                # (after the run's start events, from nothing: see below). None: it failed
                # to start, reported as a failed inline write is.
                if first:
                    self._last_put = float("-inf")
                return
            try:
                entries = await self._backend.append_batch(self._ref, items)
            except Exception as exc:
                self.error = exc  # raised at the next put, like a failed drain
                return
            finally:
                # The gap is counted from the write's end: a read that waited for a round trip
                # (a fast stream) goes to the drain task, so reads and writes overlap again.
                # Not from the first put's (the run's start events): the upstream's first read
                # comes after its round trip, batched with nothing and awaited by the user.
                self._last_put = float("-inf") if first else loop.time()
            self._on_logged(entries)
            return
        self._items.extend(items)
        if self._task is None and not self._soon:  # else written when the write in flight ends
            self._task = asyncio.create_task(self._drain())
        if len(self._items) >= self._max:
            self._space.clear()
            await self._space.wait()
            if self.error is not None:
                raise self.error

    async def _drain(self) -> None:
        try:
            while self._items and self.error is None:
                if self._waits:
                    # One loop turn before the write: the producer runs beside the drain, and
                    # a stream that hands over one event per turn adds what it has ready, and
                    # a long answer takes far fewer append scripts (bounded by
                    # tests/app/backends/redis/test_costs.py). Memory's writes do not suspend:
                    # no turn there.
                    await asyncio.sleep(0)
                batch, self._items = self._items, []
                self._space.set()
                try:
                    entries = await self._backend.append_batch(self._ref, batch)
                except Exception as exc:
                    self.error = exc
                    break
                self._on_logged(entries)
                if self._items:
                    # Items came in while the write was in flight (it suspended: Redis). One
                    # more loop turn lets the producer add what it has ready, so the batches
                    # grow as the round trip gets shorter.
                    await asyncio.sleep(0)
        finally:
            self._items.clear()
            self._task = None
            self._space.set()

    def _soon_done(self, entries: list[LogEntry] | None, error: Exception | None) -> None:
        """An ``append_soon`` write ended (a loop callback): as the inline write's end. What
        was queued meanwhile is written next, from here, not waited for either (else by the
        drain task): under load, when round trips grow past the gap between reads, a slow
        stream's writes stay off the runner (a third of them went through the drain task at
        C = 200 on Redis)."""
        self._soon -= 1
        try:
            if entries is not None:
                self._on_logged(entries)
        except Exception as exc:  # as from the drain task: reported, nothing left hanging
            error = exc
        if error is not None and self.error is None:
            self.error = error  # raised at the next put, like a failed drain
        if self._items and self._task is None:
            if self.error is not None:
                self._items.clear()  # never written: the producer gets the error instead
            elif self._waits and len(self._items) > INLINE_MAX_ITEMS:
                # A fast stream's: the drain task writes it, a loop turn later, with what the
                # producer adds meanwhile. Written from here at once, the batches were smaller
                # and a long answer broke the bound of script calls in
                # tests/app/backends/redis/test_costs.py.
                self._task = asyncio.get_running_loop().create_task(self._drain())
            else:
                batch, self._items = self._items, []
                if self._start_soon(batch) is False:  # the drain task writes it (and frees
                    self._items = batch  # the buffer when it takes it)
                    self._task = asyncio.get_running_loop().create_task(self._drain())
            if self._task is None:
                self._space.set()
        if not self._soon and self._soon_settled is not None:
            self._soon_settled.set_result(None)
            self._soon_settled = None

    def _start_soon(self, items: list[LogItem]) -> bool | None:
        """``append_soon`` of ``items``: True started (counted in flight), False declined,
        None failed to start (the pipe's error now, as a failed write's)."""
        try:
            started = self._backend.append_soon(self._ref, items, self._soon_done)
        except Exception as exc:
            if self.error is None:
                self.error = exc
            return None
        if started:
            self._soon += 1
        return started

    async def _written(self) -> None:
        """Until no write is in flight: the drain task's, nor one started by ``append_soon``."""
        while self._task is not None or self._soon:
            if self._task is not None:
                await asyncio.shield(self._task)
                continue
            if self._soon_settled is None:
                self._soon_settled = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._soon_settled)

    async def flush(self) -> None:
        """Wait until everything queued is written; raise the write error if one failed."""
        await self._written()
        if self.error is not None:
            raise self.error

    async def close(self) -> None:
        """Wait for the writes in flight (errors are already reported through ``error``)."""
        await self._written()
