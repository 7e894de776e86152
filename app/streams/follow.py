"""Following a conversation's log from a cursor: the one fan-out loop of SSE and WebSocket.

Each subscriber keeps only its cursor and reads the shared log (ARCHITECTURE decisions 1–2):
no per-subscriber queue, frames serialized once per entry. An unknown or trimmed resume point
yields a fresh snapshot, never a gap; a deleted conversation ends the stream.

What a follower holds is bounded whatever the run's length: the batch it is sending (at most
``BATCH`` entries, which the log may trim meanwhile) and, once it fell behind the log, the
snapshot where the log resumes. A follower whose client is gone (``gone``) builds no snapshot:
a subscriber stalled through a long run and then closed would otherwise serialize the whole
conversation state for nobody.
"""

from __future__ import annotations

import asyncio
import operator
import traceback
import weakref
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.backends import EMPTY_CURSOR, ConversationRef, LogEntry
from app.telemetry.stream_links import StreamLinks
from core.runs import RUN_TERMINAL_TYPES

if TYPE_CHECKING:
    from app.gateway import Gateway

__all__ = ["Follow", "follow", "follow_batches", "linger_seconds"]

BATCH = 256
_event_type = operator.attrgetter("event_type")
#: Fan-out pacing (see :func:`linger_seconds`), in seconds.
LINGER_PER_FOLLOWER = 60e-6
LINGER_MIN = 0.001
LINGER_MAX = 0.03

#: Followers per conversation, per gateway (drives the pacing).
_followers: weakref.WeakKeyDictionary[Gateway, Counter[ConversationRef]] = (
    weakref.WeakKeyDictionary()
)


@dataclass(frozen=True, slots=True)
class Follow:
    """Where to start and when to stop."""

    #: The client's resume point (Last-Event-ID, ``?since=``, WS ``resume``).
    since: str | None = None
    #: Start here without a snapshot frame (``POST …/runs?stream=true``).
    start: str | None = None
    #: Close after the next run terminal when nothing else runs or waits (at once if idle).
    until_idle: bool = False
    #: Close after this run's terminal event.
    until_run: str | None = None
    #: The run this stream's own request accepted (``POST …/runs?stream=true``): its span is a
    #: child of the stream's span already, not linked (``app/telemetry/stream_links.py``).
    own_run: str | None = None


async def follow(
    gateway: Gateway, ref: ConversationRef, spec: Follow, gone: Gone | None = None
) -> AsyncIterator[LogEntry | dict[str, Any]]:
    """Yield snapshot objects (dicts) and log entries, in cursor order."""
    async for item in follow_batches(gateway, ref, spec, gone=gone):
        if isinstance(item, dict):
            yield item
        else:
            for entry in item:
                yield entry


def linger_seconds(followers: int) -> float:
    """How long a follower waits after a delivery before it reads again.

    Each read that finds new entries costs every follower one send (a syscall). With many
    followers of one conversation, reading at every append would spend the CPU on sends and
    let latency grow without bound; waiting ``followers × LINGER_PER_FOLLOWER`` (at most
    ``LINGER_MAX``) bounds the send rate while each delivery still carries everything logged
    since. Below ``LINGER_MIN`` (fewer than ~34 followers) there is no wait at all.
    """
    delay = followers * LINGER_PER_FOLLOWER
    return 0.0 if delay < LINGER_MIN else min(delay, LINGER_MAX)


async def _idle_now(gateway: Gateway, ref: ConversationRef) -> bool:
    """Nothing runs or waits, here or (several instances) in the backend's run slot and queue.

    A slot holder whose terminal is already logged (finishing up: metrics, meta, release) is
    not running: an ``untilIdle`` subscriber arriving then must not wait for a later run.
    """
    backend = gateway.backend
    if gateway.runs.is_busy(ref) or await backend.queued_runs(ref):
        return False
    holder = await backend.active_run(ref)
    if holder is None:
        return True
    snapshot = await backend.snapshot(ref)
    run = None if snapshot is None else snapshot.state.get("runs", {}).get(holder)
    return run is not None and run.get("status") != "running"


def _run_over(body: dict[str, Any], run_id: str | None) -> bool:
    """``run_id``'s terminal is in the snapshot ``body``."""
    if run_id is None:
        return False
    run = body["agentState"].get("runs", {}).get(run_id)
    return run is not None and run.get("status") != "running"


async def _run_ended(gateway: Gateway, ref: ConversationRef, run_id: str) -> bool:
    snapshot = await gateway.backend.snapshot(ref)
    run = None if snapshot is None else snapshot.state.get("runs", {}).get(run_id)
    return run is not None and run.get("status") != "running"


#: Writes a batch of entries now, without waiting; False when it cannot (nothing written).
Push = Callable[[list[LogEntry]], bool]
#: True once the subscriber's client is gone (its connection closed): the follower ends.
Gone = Callable[[], bool]


class _Sink:
    """What a follower waiting at the head lets its transport write from the appending task
    (``EventReader.read``'s sink): the batches the loop below would send as they are, with
    no run terminal (those decide when it stops) and no pacing. ``push`` returns False when
    it cannot write now (a paused transport): the follower is woken and sends them itself.

    Why: woken, a follower runs one loop iteration after the append, and on a busy loop each
    iteration is what a delta waits for. The minimal normalizer writes in the iteration after
    its upstream read, as the runner now does: the gateway's delivery latency came close to
    the normalizer's (BENCHMARKS.md, "Costs behind the code's shortcuts").
    """

    __slots__ = ("counts", "last", "push", "ref")

    def __init__(self, push: Push, counts: Counter[ConversationRef], ref: ConversationRef) -> None:
        self.push = push
        self.counts = counts
        self.ref = ref
        #: The last entry written since the follower began to wait (its cursor is read once,
        #: when the follower wakes, not at every write).
        self.last: LogEntry | None = None

    def __call__(self, entries: list[LogEntry]) -> bool:
        if linger_seconds(self.counts[self.ref]):
            return False
        if not RUN_TERMINAL_TYPES.isdisjoint(map(_event_type, entries)):
            return False
        if not self.push(entries):
            return False
        self.last = entries[-1]
        return True


async def follow_batches(
    gateway: Gateway,
    ref: ConversationRef,
    spec: Follow,
    push: Push | None = None,
    gone: Gone | None = None,
) -> AsyncIterator[list[LogEntry] | dict[str, Any]]:
    """Like :func:`follow`, with the log entries of one read as one non-empty list.

    A subscriber that is behind gets everything logged since its last read at once, so a
    transport can write it in one send (frames coalesced, never re-serialized). With
    ``push``, batches appended while it waits at the head may be written by ``push`` instead
    (see :class:`_Sink`): they are not yielded. With ``gone``, the stream ends instead of
    building a snapshot once ``gone()`` is true.

    A snapshot is handed over, not kept: while the transport sends it (slowly, for a reader
    that is behind), this generator holds neither the snapshot object nor its frame.
    """
    counts = _followers.get(gateway)
    if counts is None:
        counts = _followers[gateway] = Counter()
    counts[ref] += 1
    try:
        backend, runs = gateway.backend, gateway.runs
        wait = gateway.settings.gateway.heartbeat_seconds
        pending: list[LogEntry] = []
        if spec.start is not None:
            pos = spec.start
        elif (
            spec.since is not None
            and (probe := await backend.read(ref, spec.since, limit=BATCH, wait=0)).status == "ok"
        ):
            pos, pending = spec.since, probe.entries
        else:  # no resume point, or one no longer in the log
            if gone is not None and gone():
                return
            held = [await gateway.snapshot(ref)]
            pos, over = held[0]["cursor"], _run_over(held[0], spec.until_run)
            yield held.pop()
            if over:
                return  # the terminal it follows is inside the snapshot
        followed = pos != EMPTY_CURSOR
        stop_at_head = spec.until_idle and await _idle_now(gateway, ref)
        sink = None if push is None else _Sink(push, counts, ref)
        #: [telemetry]: the stream's span links to the runs whose end it delivers.
        links = None if gateway.telemetry is None else StreamLinks(backend, ref, spec.own_run)
        while True:
            if pending:
                entries, pending = pending, []
            else:
                idle = stop_at_head or gateway.closing.is_set()
                if sink is None or idle:
                    result = await backend.read(ref, pos, limit=BATCH, wait=0 if idle else wait)
                else:
                    sink.last = None
                    result = await backend.read(ref, pos, limit=BATCH, wait=wait, sink=sink)
                    if sink.last is not None:  # written by the sink while it waited
                        pos = sink.last.cursor
                        followed = True
                if result.status == "unknown" and followed:
                    return  # the conversation was deleted (or evicted)
                if result.status != "ok":
                    # Behind the log (trimmed) or past a reset: a snapshot where it resumes.
                    if gone is not None and gone():
                        return
                    held = [await gateway.snapshot(ref)]
                    pos, over = held[0]["cursor"], _run_over(held[0], spec.until_run)
                    yield held.pop()
                    if over:
                        return  # the terminal it follows is inside the snapshot
                    followed = pos != EMPTY_CURSOR
                    continue
                entries = result.entries
                if not entries:
                    if stop_at_head or gateway.closing.is_set():
                        return
                    if spec.until_run is not None and await _run_ended(
                        gateway, ref, spec.until_run
                    ):
                        return  # resumed after its terminal: nothing of it is left to send
                    continue
            if RUN_TERMINAL_TYPES.isdisjoint(map(_event_type, entries)):
                # The common case (no run ends in this batch): no per-entry work in Python.
                pos = entries[-1].cursor
                followed = True
                yield entries
                delay = linger_seconds(counts[ref])
                if delay:
                    await asyncio.sleep(delay)
                continue
            batch: list[LogEntry] = []
            for entry in entries:
                batch.append(entry)
                pos = entry.cursor
                followed = True
                if entry.is_run_terminal:
                    if links is not None:
                        await links.delivered(entry.run_id)
                    if spec.until_run is not None and entry.run_id == spec.until_run:
                        yield batch
                        return
                    if (
                        spec.until_idle
                        and not runs.is_busy(ref, excluding=entry.run_id)
                        and await backend.active_run(ref) in (None, entry.run_id)
                        and not await backend.queued_runs(ref)
                    ):
                        stop_at_head = True  # deliver what is already logged, then close
            yield batch
            delay = linger_seconds(counts[ref])
            if delay:
                await asyncio.sleep(delay)
    except asyncio.CancelledError as exc:
        # A follower ends by cancellation (its client went away). The cancelled task keeps
        # the error, whose traceback keeps the finished read frames' locals (the backend's
        # reader and its window): freed by reference counting once those frames are cleared,
        # not by the next full collection. Other errors keep their frames for whoever logs them.
        traceback.clear_frames(exc.__traceback__)
        raise
    finally:
        counts[ref] -= 1
        if counts[ref] <= 0:
            del counts[ref]
