"""One log reader per conversation per instance, fanning out to local subscribers.

The reader blocks on ``XREAD`` from its own position (not while this instance's run owner feeds
it, nor while no read holds it) and keeps a bounded window of recent entries in memory; every
local subscriber follows that window from its own cursor, so a conversation costs at most one
Redis connection per instance, not one per subscriber. A subscriber whose
cursor is older than the window catches up with ranged reads (``XRANGE``); one whose cursor was
trimmed from Redis too gets :data:`GAP` (the caller answers with a snapshot, never a silent gap).
Everything a read hands out is shared by the instance's subscribers: the window's entries as
converted once (:meth:`LogReader.window_view`), and a catch-up read from Redis (one in flight
per conversation, its result kept for the other subscribers behind the window: see
:meth:`LogReader.older`), never one Redis call per subscriber.

The reader survives Redis outages: it retries with backoff and resumes from the last id it saw,
so nothing appended meanwhile is lost. The hub's ``tick`` (optional) is called every
``tick_seconds`` with the keys of all its readers, in one call: the backend uses it to notice
a lost run owner.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final, TypeVar, cast

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.backends.redis.cursors import same_incarnation
from app.backends.redis.eventlog import KIND_EVENT, Entry, EventLog, entries_from_reply, parse_id
from app.backends.redis.keys import ConversationKeys
from app.backends.sinks import offer
from app.backends.types import FrozenEntry, LogEntry, ReadSink
from app.tasks import stop_task
from core.runs import RUN_TERMINAL_TYPES

log = logging.getLogger(__name__)


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class _Gap:
    def __repr__(self) -> str:
        return "GAP"


#: Yielded by :meth:`LogReader.follow` when entries after the cursor are gone from Redis.
GAP: Final = _Gap()

Tick = Callable[[list[ConversationKeys]], Awaitable[None]]

#: A window entry of an ended run: ``Entry``'s fields, then the incarnation its LogEntry was
#: built for with that LogEntry's frame and data offset ("", b"", 0 when none was). A flat
#: tuple of atomic values: CPython stops tracking it at its first collection, so the entries a
#: window keeps once their run has ended cost a full collection nothing (kept as objects, each
#: event was two tracked ones, most of the gateway's tracked objects after a capacity step,
#: and a full collection took much longer than on the memory backend, which freezes its
#: log alike: BENCHMARKS.md, "Costs behind the code's shortcuts").
Frozen = tuple[str, str, bytes, str, str, str, bytes, int]
#: Entries' LogEntries as their writer built them, with the incarnation they are built for.
Made = tuple[str, list[LogEntry]]
_Entries = list[Entry]  # a cast's type, built once


def _freeze(entry: Entry) -> Frozen:
    if not entry.inc:
        return (entry.id, entry.kind, entry.data, entry.type, entry.run_id, "", b"", 0)
    sse, data_at, *_ = cast(LogEntry, entry.cache).frozen()
    return (entry.id, entry.kind, entry.data, entry.type, entry.run_id, entry.inc, sse, data_at)


def _thaw(item: Entry | Frozen) -> Entry:
    if isinstance(item, Entry):
        return item
    sid, kind, data, type_, run_id, inc, sse, data_at = item
    entry = Entry(sid, kind, data, type_, run_id)
    if inc:
        logged: FrozenEntry = (
            sse,
            data_at,
            "event" if kind == KIND_EVENT else "extension",
            type_ or None,
            run_id or None,
        )
        entry.inc, entry.cache = inc, LogEntry.thaw(logged)
    return entry


T = TypeVar("T")
#: Entries per ``XREAD``: a reader that is behind catches up this many at a time.
READ_COUNT = 500
#: Entries per catch-up read (``XRANGE``) for subscribers behind the window.
CATCH_UP_COUNT = 1000
#: How much longer than one blocking read a lingered-out reader is given to end by itself.
STOP_GRACE_MARGIN = 0.5


class SinkWait:
    """A waiting read's sink (``EventReader.read``): offered the window's entries pushed
    right after ``pos``, made as the read would make them (``tag``, ``make``); ``cursor`` is
    the cursor of the last entry it took (None: none yet)."""

    __slots__ = ("last", "make", "pos", "sink", "tag")

    def __init__(
        self, pos: tuple[int, int], sink: ReadSink, tag: object, make: Callable[[Entry], Any]
    ) -> None:
        self.pos = pos
        self.sink = sink
        self.tag = tag
        self.make = make
        #: The last entry the sink took (its cursor is read once, when the read wakes).
        self.last: LogEntry | None = None

    @property
    def cursor(self) -> str | None:
        return None if self.last is None else self.last.cursor


class LogReader:
    def __init__(
        self,
        redis: Redis,
        log_: EventLog,
        keys: ConversationKeys,
        *,
        window: int = 1024,
        block_ms: int = 1000,
        owner_local: Callable[[], bool] | None = None,
    ) -> None:
        self.redis = redis
        self.log = log_
        self.keys = keys
        #: True while this instance owns the conversation's run: its writer feeds the window
        #: (:meth:`feed`), the only writer while it owns the run, so no ``XREAD`` is needed.
        self._owner_local = owner_local or (lambda: False)
        #: A feed did not follow on from ``last_id``: read from Redis until one does.
        self._behind = False
        self._resume = asyncio.Event()
        self.window = window
        self.block_ms = block_ms
        #: The window: its first ``_frozen`` entries are frozen (their runs ended).
        self._entries: list[Entry | Frozen] = []
        self._frozen = 0
        self._ids: list[tuple[int, int]] = []
        self._base: tuple[int, int] = (0, 0)
        #: What :meth:`window_view` made of ``len(_made)`` entries of the window from
        #: ``_made_from`` (never a frozen one), for ``_made_tag`` (the backend's LogEntry of
        #: each, for one incarnation).
        self._made: list[Any] = []
        self._made_from = 0
        self._made_tag: object = None
        #: The last catch-up read: entries strictly after ``_older_after``, with their ids.
        self._older_after: tuple[int, int] = (0, 0)
        self._older: list[Entry] = []
        self._older_ids: list[tuple[int, int]] = []
        #: The catch-up read in flight (the other subscribers behind the window wait for it).
        self._fetch: asyncio.Future[list[Entry] | None] | None = None
        #: Counts window clears: a catch-up read that lands after one is not kept.
        self._generation = 0
        self._last_id = "0-0"
        #: ``parse_id(last_id)``, kept with it (compared on every read and feed).
        self.last_pos: tuple[int, int] = (0, 0)
        #: Made when first asked for (:attr:`signal`), dropped at each notification: most
        #: notifications have no one waiting on it.
        self._signal: asyncio.Event | None = None
        #: Counts notifications (new entries, reset, wake): a read that saw ``version`` before
        #: it looked at the window and finds nothing waits only while it is unchanged.
        self.version = 0
        #: The waiting reads (:meth:`wait`), each on a future of its own, with its sink.
        self._waiters: dict[asyncio.Future[None], SinkWait | None] = {}
        #: ``loop.time()`` when ``refs`` last dropped to 0 (the hub stops it a linger later).
        self.idle_since = 0.0
        #: Waiting with no ``XREAD`` because no read holds the reader (``refs`` 0, as while
        #: it lingers): it holds no pool connection. The next read kicks it (:meth:`hold`),
        #: and it reads on from ``last_id``.
        self.idle_paused = False
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.healthy = True
        self.refs = 0
        #: The conversation's incarnation as last seen (kept by the backend); None: none yet.
        self.inc: str | None = None
        self.inc_known = False
        #: The incarnation lookup in flight (shared by the reads that need it).
        self.inc_lookup: asyncio.Future[str | None] | None = None
        self._stopping = False
        #: Redis failed this reader's last read: check its position before reading on.
        self._unsure = False
        #: Positions Redis lost (restarted from an AOF that missed its last writes), as
        #: ``(after, upto]`` ranges: this reader had read them, the log no longer holds them.
        self.lost: list[tuple[tuple[int, int], tuple[int, int]]] = []

    @property
    def last_id(self) -> str:
        """The stream id of the newest entry this reader holds (or started after)."""
        return self._last_id

    @last_id.setter
    def last_id(self, value: str) -> None:
        self._last_id = value
        self.last_pos = parse_id(value)

    def launch(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"log-reader-{self.keys.tag}")

    async def ready(self) -> None:
        """Wait until the reader knows its starting position (or Redis failed to tell it)."""
        await self._ready.wait()

    @property
    def started(self) -> bool:
        """:meth:`ready` would return at once."""
        return self._ready.is_set()

    async def start(self) -> None:
        self.launch()
        await self.ready()

    async def stop(self, grace: float = 0.0) -> None:
        """Stop reading. ``grace``: first let a blocking read in flight end by itself (it
        does within ``block_ms``), for at most that long: a read cut off costs its connection
        (redis-py drops a connection whose reply it stopped reading; the next command
        connects again: one per conversation whose reader lingered out)."""
        self._stopping = True
        task = self._task
        try:
            if grace > 0 and task is not None and not task.done():
                self._resume.set()  # a reader fed by the local owner ends at once
                await asyncio.wait([task], timeout=grace)
        finally:
            await stop_task(task)
            self._task = None
            self._notify()

    @property
    def signal(self) -> asyncio.Event:
        """Set (and replaced) when new entries arrive; capture it before checking the window."""
        if self._signal is None:
            self._signal = asyncio.Event()
        return self._signal

    def wake(self) -> None:
        """Wake every local waiter (shutdown)."""
        self._notify()

    def reset(self) -> None:
        """Forget the window (the conversation was deleted): later cursors read from Redis."""
        self._clear_window(self.last_pos)
        self._notify()

    def _clear_window(self, base: tuple[int, int]) -> None:
        self._entries.clear()
        self._ids.clear()
        self._made.clear()
        self._frozen = self._made_from = 0
        self._older, self._older_ids = [], []
        self._generation += 1
        self._base = base

    def _notify(self, kept: dict[asyncio.Future[None], SinkWait | None] | None = None) -> None:
        """Wake every waiting read but those in ``kept`` (their sinks took the new entries)."""
        self.version += 1
        if self._signal is not None:
            self._signal.set()
            self._signal = None
        if self._waiters:
            for waiter in self._waiters:
                if not waiter.done() and (kept is None or waiter not in kept):
                    waiter.set_result(None)
            self._waiters.clear()
            if kept:
                self._waiters.update(kept)

    def _offer(
        self, after: tuple[int, int], count: int, made: Made | None
    ) -> dict[asyncio.Future[None], SinkWait | None] | None:
        """Offer the ``count`` entries just pushed after ``after`` to the sinks of the reads
        waiting right before them; the waits whose sinks took them. ``made``: those entries'
        LogEntries as their writer built them, for one incarnation (then not looked up)."""
        kept: dict[asyncio.Future[None], SinkWait | None] | None = None
        for waiter, sinking in self._waiters.items():
            if sinking is None or sinking.pos != after or waiter.done():
                continue
            if made is not None and sinking.tag == made[0]:
                entries: list[Any] | None = made[1]
            else:
                entries = self.window_view(after, count, sinking.tag, sinking.make)
            if not entries or not offer(sinking.sink, entries):
                continue
            sinking.pos = self.last_pos
            sinking.last = entries[-1]
            if kept is None:
                kept = {}
            kept[waiter] = sinking
        return kept

    async def wait(self, seen: int, seconds: float, sinking: SinkWait | None = None) -> None:
        """Return at the first notification after ``seen`` (a :attr:`version`), at once if
        there was one, or after ``seconds``.

        A future and a timer per wait, not an Event and ``asyncio.timeout``: this runs once
        per delivery per subscriber.
        """
        if self.version != seen:
            return
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters[waiter] = sinking
        timer = loop.call_later(seconds, _expire, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiters.pop(waiter, None)

    def feed(
        self,
        prev: str,
        batch: list[Entry],
        positions: list[tuple[int, int]] | None = None,
        made: Made | None = None,
    ) -> None:
        """Entries this instance's run owner just logged right after ``prev`` (``positions``:
        their parsed ids, when the writer has them; ``made``: their LogEntries as the writer
        built them, with the incarnation they are for).

        Pushed into the window when they follow on from what the reader holds (the frames
        built by the writer are then shared by every local subscriber, and a subscriber
        waiting at the head is handed the writer's list itself); else the reader catches up
        from Redis.
        """
        if not batch:
            return
        if parse_id(prev) > self.last_pos:
            self._behind = True
            self.kick()
            return
        self._behind = False
        self._push(batch, positions, made)

    def _start(self, last_id: str) -> None:
        """Start after ``last_id``, the log's end as read at start-up, unless the run writer
        fed at least that much meanwhile. A feed can come first: the reader is in the hub
        before that read answers, so a stream opened as its run starts is fed the run's first
        entries (only those of a new log: another feed finds the reader behind). Moving back
        to an older answer would read them from Redis again, and hold them twice."""
        position = parse_id(last_id)
        if position > self.last_pos:
            self._clear_window(position)  # anything fed is older: read from Redis if needed
            self.last_id = last_id

    def kick(self) -> None:
        """Let the reading loop look again (the owner went away, or a feed left a gap)."""
        self._resume.set()

    def _push(
        self,
        batch: list[Entry],
        positions: list[tuple[int, int]] | None = None,
        made: Made | None = None,
    ) -> None:
        last = self.last_pos
        ids = [parse_id(entry.id) for entry in batch] if positions is None else positions
        if ids[0] <= last:  # already fed by the local writer
            keep = [i for i, pos in enumerate(ids) if pos > last]
            if not keep:
                return
            batch = [batch[i] for i in keep]
            ids = [ids[i] for i in keep]
            made = None
        entries = self._entries
        if (
            made is not None
            and made[0] == self._made_tag
            and self._made_from + len(self._made) == len(entries)
        ):
            self._made.extend(made[1])  # window_view would make the same, one by one
        entries.extend(batch)
        self._ids.extend(ids)
        self._last_id, self.last_pos = batch[-1].id, ids[-1]
        excess = len(entries) - self.window
        if excess > self.window // 2:  # trim in chunks, keep the window
            self._base = self._ids[excess - 1]
            del entries[:excess]
            del self._ids[:excess]
            self._frozen = max(0, self._frozen - excess)
            if self._made_from >= excess:
                self._made_from -= excess
            else:
                del self._made[: excess - self._made_from]
                self._made_from = 0
        if not RUN_TERMINAL_TYPES.isdisjoint([entry.type for entry in batch]):
            self._freeze_before(len(entries) - len(batch))
        self._notify(self._offer(last, len(batch), made) if self._waiters else None)

    def _freeze_before(self, end: int) -> None:
        """A run ended in the entries from ``end`` on: freeze the window's entries before them
        (read again only by a follower that is behind, made again for it)."""
        if end <= self._frozen:
            return
        entries = self._entries
        for i in range(self._frozen, end):
            entries[i] = _freeze(cast(Entry, entries[i]))
        self._frozen = end
        if self._made_from < end:
            del self._made[: end - self._made_from]
            self._made_from = end

    async def _run(self) -> None:
        backoff = 0.05
        while not self._stopping:
            try:
                if not self._ready.is_set():
                    self._start(await self.log.last_id(self.keys))
                    self._ready.set()
                if self._owner_local() and not self._behind:
                    await self._pause()  # the owner's feeds come without it
                    continue
                if self.refs <= 0:
                    await self._pause(idle=True)
                    continue
                if self._unsure:
                    await self.verify()
                    self._unsure = False
                reply: Any = await self.redis.xread(
                    {self.keys.log: self.last_id}, count=READ_COUNT, block=self.block_ms
                )
                self.healthy = True
                backoff = 0.05
                for _stream, raw in reply or ():
                    batch = entries_from_reply(raw)
                    if len(batch) == READ_COUNT and await self._skipped(self.last_id):
                        self._restart_window(batch[0].id)
                    if batch:
                        self._push(batch)
            except asyncio.CancelledError:
                raise
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                if self.healthy:
                    log.warning("log reader %s: %s; retrying", self.keys.tag, exc)
                self.healthy = False
                self._unsure = True
                if not self._ready.is_set():
                    self._ready.set()  # start anyway: subscribers will catch up from Redis
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
            except Exception:
                log.exception("log reader %s failed; retrying", self.keys.tag)
                if not self._ready.is_set():
                    self._ready.set()
                await asyncio.sleep(0.5)

    async def verify(self) -> None:
        """Check that Redis still holds the newest entry this reader has (after Redis was
        unreachable: restarted from an AOF that missed its last writes, it lost the newest
        entries). If it does not, the window's entries after the newest entry Redis kept are
        forgotten and their cursors read as lost (:meth:`is_lost`); the reader goes on from
        that entry."""
        while True:
            held = self._last_id
            if held == "0-0":
                return
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.xrange(self.keys.log, min=held, max=held, count=1)
                pipe.xrevrange(self.keys.log, max=held, min="-", count=1)
                found, before = await pipe.execute()
            if self._last_id != held:
                continue  # fed meanwhile: check the new position
            if found:
                return
            # Entries appended since the restart come after ``held`` (their ids are later).
            end = entries_from_reply(before)[0].id if before else "0-0"
            end_pos = parse_id(end)
            self.lost.append((end_pos, self.last_pos))
            log.warning(
                "log reader %s: Redis lost the entries after %s up to %s",
                self.keys.tag,
                end,
                held,
            )
            self._clear_window(end_pos)
            self.last_id = end
            self._notify()
            return

    def learn(self, inc: str | None) -> None:
        """The conversation's incarnation as just read from Redis (the reader knew one).

        Another epoch of the same incarnation (:func:`.cursors.same_incarnation`): the log lost
        entries and new ones may carry their ids, so the reader reads it again from its start
        (:meth:`restart`). Another incarnation (deleted, created again): the window is
        forgotten (:meth:`reset`). Either way a cursor of the old one reads as unknown."""
        known = self.inc
        if inc == known:
            return
        if inc is not None and known is not None and same_incarnation(inc, known):
            self.restart(inc)
            return
        self.inc = inc
        self.reset()

    def restart(self, inc: str) -> None:
        """Read the log again from its start, as incarnation ``inc`` (a new epoch: the
        entries the window holds may be ones the log lost, under ids it gave to new ones)."""
        self.inc, self.inc_known = inc, True
        self.lost.clear()
        self._clear_window((0, 0))
        self.last_id = "0-0"
        self._behind = True  # a local owner's next feed does not follow on: read from Redis
        self.kick()
        self._notify()

    def is_lost(self, position: tuple[int, int]) -> bool:
        """``position`` was an entry of the log that Redis lost (see :meth:`verify`)."""
        return any(after < position <= upto for after, upto in self.lost)

    async def _pause(self, idle: bool = False) -> None:
        """Wait with no ``XREAD`` for a kick (a feed that left a gap, a read of a paused idle
        reader, a stop) or a block's time.

        ``idle``: no read holds the reader (its subscribers gone, lingering in case they come back).
        It blocked in ``XREAD`` all the same before, a pool connection each, read once a second:
        after a capacity step, a connection per answer held for seconds, and the next step connected
        more new ones per run and read several times the ``XREAD`` that it reads with this pause
        (BENCHMARKS.md, "Costs behind the code's shortcuts"). :meth:`hold` kicks it.
        """
        self.idle_paused = idle
        resume = self._resume
        resume.clear()
        # A timer that sets the event, not ``asyncio.wait_for``: that wraps the wait in a task and
        # cancels it at the timeout, once a second per paused reader (a visible share of a
        # start-heavy capacity step on Redis: BENCHMARKS.md, "Costs behind the code's shortcuts").
        timer = asyncio.get_running_loop().call_later(self.block_ms / 1000, resume.set)
        try:
            await resume.wait()
        finally:
            timer.cancel()
            self.idle_paused = False

    def hold(self) -> None:
        """Take a ref for a read (waking the reader if it paused for want of one)."""
        self.refs += 1
        if self.idle_paused:
            self.kick()

    async def _skipped(self, after: str) -> bool:
        """Entries after ``after`` were trimmed before this reader read them.

        Checked only when a read came back full (the reader is behind): ``XREAD`` from a
        trimmed position answers what is left, without saying that something is missing.
        """
        return await self.log.read_after(self.keys, after, count=1) is None

    def _restart_window(self, first: str) -> None:
        """The window restarts at ``first``: older cursors read from Redis (and see the gap)."""
        self._clear_window(parse_id(first))
        log.warning("log reader %s fell behind retention; cursors before %s", self.keys.tag, first)

    def window_after(self, cursor: tuple[int, int]) -> list[Entry] | None:
        """Entries after ``cursor`` from the window, or None when the window does not cover it."""
        if cursor < self._base:
            return None
        i = bisect.bisect_right(self._ids, cursor)
        if (i == 0 or self._ids[i - 1] != cursor) and cursor != self._base:
            return None  # not an entry: Redis tells whether it is one
        return [_thaw(entry) for entry in self._entries[i:]]

    def window_view(
        self, cursor: tuple[int, int], limit: int, tag: object, make: Callable[[Entry], T]
    ) -> list[T] | None:
        """Up to ``limit`` entries after ``cursor`` from the window, each as ``make`` made it.

        ``make`` runs once per window entry (per ``tag``), not once per read: hundreds of
        subscribers reading the same entries share what it made, and a read is one slice.
        None when the window does not cover ``cursor``.
        """
        if cursor < self._base:
            return None
        i = bisect.bisect_right(self._ids, cursor)
        if (i == 0 or self._ids[i - 1] != cursor) and cursor != self._base:
            return None  # not an entry of the window: Redis tells whether it is one of the log
        if tag != self._made_tag:
            self._made, self._made_tag, self._made_from = [], tag, self._frozen
        entries = self._entries
        stop = min(len(entries), i + limit)
        made, start = self._made, self._made_from
        if start + len(made) < stop:  # from ``_made_from`` on: never a frozen entry
            made.extend(map(make, cast(_Entries, entries[start + len(made) : stop])))
        if i >= start:
            return made[i - start : stop - start]
        # Entries of ended runs, for a follower that is behind: made for this read only.
        older = [make(_thaw(entry)) for entry in entries[i : min(start, stop)]]
        return older + made[: max(0, stop - start)]

    async def older(self, after: str, limit: int) -> list[Entry] | None:
        """Up to ``limit`` entries after ``after``, a cursor the window does not cover; None
        when Redis no longer holds them all (trimmed).

        One catch-up read (``CATCH_UP_COUNT`` entries) is in flight at a time; subscribers
        behind the window wait for it and are served from its result when it covers their
        cursor. Followers that fell behind together then read the same entries (decoded once)
        and end on the same cursor, so the next catch-up read serves them all again.
        """
        position = parse_id(after)
        while True:
            got = self._older_after_cursor(position, limit)
            if got is not None:
                return got
            fetch = self._fetch
            if fetch is None or fetch.done():
                break
            with contextlib.suppress(Exception):  # its own reader gets the error
                await asyncio.shield(fetch)
        fetch = self._fetch = asyncio.ensure_future(
            self.log.read_after(self.keys, after, count=max(limit, CATCH_UP_COUNT))
        )
        # Runs before any waiter resumes (callbacks run in the order they were added).
        generation = self._generation
        fetch.add_done_callback(lambda done: self._fetched(position, generation, done))
        entries = await asyncio.shield(fetch)
        return None if entries is None else entries[:limit]

    def _fetched(
        self, after: tuple[int, int], generation: int, fetch: asyncio.Future[list[Entry] | None]
    ) -> None:
        if self._fetch is fetch:
            self._fetch = None
        if fetch.cancelled() or fetch.exception() is not None or generation != self._generation:
            return  # failed (its reader raises), or the window was cleared meanwhile
        entries = fetch.result()
        if entries:
            self._older_after, self._older = after, entries
            self._older_ids = [parse_id(entry.id) for entry in entries]

    def _older_after_cursor(self, position: tuple[int, int], limit: int) -> list[Entry] | None:
        ids = self._older_ids
        if not ids or not self._older_after <= position < ids[-1]:
            return None
        i = bisect.bisect_right(ids, position)
        if (i == 0 or ids[i - 1] != position) and position != self._older_after:
            return None  # not an entry of the log: Redis tells (read_after)
        return self._older[i : i + limit]

    async def follow(self, after: str) -> AsyncIterator[list[Entry] | _Gap]:
        """Batches of entries strictly after ``after``, in order, forever (until cancelled).

        Yields :data:`GAP` and stops when the entries after ``after`` were trimmed.
        """
        cursor = after
        while True:
            signal = self.signal
            batch = self.window_after(parse_id(cursor))
            if batch is None:
                got = await self.log.read_after(self.keys, cursor, count=500)
                if got is None:
                    yield GAP
                    return
                if got:
                    cursor = got[-1].id
                    yield got
                    continue
                batch = []  # the reader is behind this cursor: wait for it
            if batch:
                cursor = batch[-1].id
                yield batch
                continue
            await signal.wait()


class ReaderHub:
    """The readers of one instance, created on first subscriber and stopped after the last."""

    def __init__(
        self,
        redis: Redis,
        log_: EventLog,
        *,
        window: int = 1024,
        linger_seconds: float = 5.0,
        tick: Tick | None = None,
        tick_seconds: float = 1.0,
        owns: Callable[[str], bool] | None = None,
    ) -> None:
        self.redis = redis
        self.log = log_
        self.window = window
        self._owns = owns
        self.linger = linger_seconds
        self._tick = tick
        self._tick_seconds = tick_seconds
        #: Calls ``tick`` for all readers while there are any (one call per tick, not one
        #: task and one round trip per reader, which cost a Redis gateway CPU in proportion to
        #: its readers: BENCHMARKS.md, "Costs behind the code's shortcuts").
        self._ticker: asyncio.Task[None] | None = None
        self._readers: dict[str, LogReader] = {}
        self._stoppers: dict[str, asyncio.TimerHandle] = {}
        self._lock = asyncio.Lock()
        self._bg: set[asyncio.Future[None]] = set()

    @property
    def readers(self) -> dict[str, LogReader]:
        return self._readers

    def learn_incarnation(self, tag: str, inc: str) -> None:
        """The conversation ``tag`` exists as incarnation ``inc`` (just read from Redis by a
        run's claim): a reader that knew of none has its followers' next read need no lookup
        (a run that starts a conversation wakes every follower waiting for it)."""
        reader = self._readers.get(tag)
        if reader is not None and reader.inc is None:
            reader.inc, reader.inc_known = inc, True

    def acquire_nowait(self, keys: ConversationKeys) -> LogReader | None:
        """:meth:`acquire` when the reader is running (else None): no lock, no coroutine.

        The common case, every read of every subscriber. A pending stop timer is left to
        fire: it finds the reader in use (or idle for less than the linger) and stops nothing.
        A stop waits for the lock and checks ``refs`` again, so taking a ref here is safe.
        """
        reader = self._readers.get(keys.tag)
        if reader is None or not reader.started:
            return None
        reader.hold()
        return reader

    async def acquire(self, keys: ConversationKeys) -> LogReader:
        reader = self.acquire_nowait(keys)
        if reader is not None:
            return reader
        async with self._lock:
            handle = self._stoppers.pop(keys.tag, None)
            if handle is not None:
                handle.cancel()
            reader = self._readers.get(keys.tag)
            if reader is None:
                reader = LogReader(
                    self.redis,
                    self.log,
                    keys,
                    window=self.window,
                    owner_local=self._owner_local(keys.tag),
                )
                reader.launch()
                self._readers[keys.tag] = reader
                if self._tick is not None and self._ticker is None:
                    self._ticker = asyncio.create_task(self._ticks(), name="reader-ticks")
            reader.hold()
        try:  # outside the hub's lock: a slow Redis delays this conversation only
            await reader.ready()
        except BaseException:
            self.release(reader)
            raise
        return reader

    async def _ticks(self) -> None:
        assert self._tick is not None
        try:
            while self._readers:
                await asyncio.sleep(self._tick_seconds)
                keys = [reader.keys for reader in self._readers.values()]
                if not keys:
                    break
                try:
                    await self._tick(keys)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.warning("reader tick of %d conversations: %s", len(keys), exc)
        finally:
            if self._ticker is asyncio.current_task():
                self._ticker = None

    def _owner_local(self, tag: str) -> Callable[[], bool] | None:
        owns = self._owns
        return None if owns is None else (lambda: owns(tag))

    def release(self, reader: LogReader) -> None:
        """Give back a ref; the reader stops once it went unused for ``linger`` seconds.

        One timer per idle period, not one per release (a subscriber releases after every
        read): a timer already pending is left to fire and looks at ``idle_since`` then.
        """
        reader.refs -= 1
        if reader.refs <= 0:
            loop = asyncio.get_running_loop()
            reader.idle_since = loop.time()
            tag = reader.keys.tag
            if tag not in self._stoppers:
                self._stoppers[tag] = loop.call_later(self.linger, self._linger_over, reader)

    def _linger_over(self, reader: LogReader) -> None:
        tag = reader.keys.tag
        self._stoppers.pop(tag, None)
        if reader.refs > 0 or self._readers.get(tag) is not reader:
            return  # in use (its last release arms a new timer), or gone already
        loop = asyncio.get_running_loop()
        left = reader.idle_since + self.linger - loop.time()
        if left > 0:  # used again meanwhile: idle for less than the linger
            self._stoppers[tag] = loop.call_later(left, self._linger_over, reader)
            return
        task = asyncio.ensure_future(self._stop_idle(reader))
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    async def _stop_idle(self, reader: LogReader) -> None:
        async with self._lock:
            if reader.refs > 0 or self._readers.get(reader.keys.tag) is not reader:
                return
            del self._readers[reader.keys.tag]
        # Outside the lock (a new reader of the conversation may start meanwhile): its
        # blocking read ends by itself, and its connection goes back to the pool.
        await reader.stop(grace=reader.block_ms / 1000 + STOP_GRACE_MARGIN)

    async def drop(self, keys: ConversationKeys) -> None:
        """Stop the conversation's reader now (conversation deleted)."""
        async with self._lock:
            handle = self._stoppers.pop(keys.tag, None)
            if handle is not None:
                handle.cancel()
            reader = self._readers.pop(keys.tag, None)
        if reader is not None:
            await reader.stop()

    async def close(self) -> None:
        async with self._lock:
            for handle in self._stoppers.values():
                handle.cancel()
            self._stoppers.clear()
            readers = list(self._readers.values())
            self._readers.clear()
        ticker, self._ticker = self._ticker, None
        await stop_task(ticker)
        for stopping in list(self._bg):  # readers lingering out: stopped now
            stopping.cancel()
        for reader in readers:
            await reader.stop()
        for stopping in list(self._bg):
            with contextlib.suppress(BaseException):
                await stopping

    async def subscribe(
        self, keys: ConversationKeys, after: str
    ) -> AsyncIterator[list[Entry] | _Gap]:
        """``follow`` with the reader's lifetime tied to the iteration."""
        reader = await self.acquire(keys)
        try:
            async for item in reader.follow(after):
                yield item
        finally:
            self.release(reader)
