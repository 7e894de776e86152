"""A run this instance owns: its fenced writer, live state, lease keeper and inbox."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

from app.backends.base import RunControl
from app.backends.redis.claims import Token
from app.backends.redis.control import OwnerInbox
from app.backends.redis.errors import RunFenced
from app.backends.redis.eventlog import ZERO_ID, Fenced, FencedWriter, Pending, SnapshotWrite
from app.backends.redis.keys import ConversationKeys
from app.backends.redis.lease import LeaseKeeper
from app.backends.redis.state import ConversationState

__all__ = ["OwnedRun"]

log = logging.getLogger("app.backends.redis")
#: Snapshots written with appends are at least this far apart (unless retention requires one).
SNAPSHOT_SECONDS = 1.0


@dataclass(slots=True)
class OwnedRun:
    keys: ConversationKeys
    token: Token
    control: RunControl
    writer: FencedWriter
    #: The live state: every append of the run is reduced here first (the one writer).
    state: ConversationState
    keeper: LeaseKeeper
    inbox: OwnerInbox
    lost: asyncio.Event
    since_snapshot: int = 0
    #: ``time.monotonic()`` of the last snapshot written with an append.
    snapshot_at: float = 0.0
    #: Another instance took the run over (or the conversation was deleted): no more writes.
    fenced: bool = False
    #: An append failed: the state may be ahead of the log; rebuild it before the next one.
    dirty: bool = False
    #: ``writer.retried`` as of the last check that the log still holds what the state is at.
    retries_checked: int = 0
    #: Appends reduced into ``state`` whose stream write has not returned yet: meanwhile
    #: ``state`` is ahead of ``state.stream_id`` (not a snapshot to serve with that cursor).
    appending: int = 0
    #: release_run is handing the slot back: another instance may write from now on.
    released: bool = False
    watch: asyncio.Task[None] | None = field(default=None)
    #: The conversation's meta as read by the claim, for the first snapshot after it (the
    #: run's start): one round trip less per run. Dropped by a save of the meta here.
    start_meta: bytes | None = None
    #: ``writer.broken`` as of the last look at the conversation's new epoch (``RedisAppends``).
    broken_checked: int = 0

    def __post_init__(self) -> None:
        # The run's first batch must follow the log as its claim read it: nobody else writes.
        if not self.writer.last_id and self.state.stream_id != ZERO_ID:
            self.writer.last_id = self.state.stream_id

    def start(self) -> None:
        self.keeper.start()
        self.inbox.start()
        self.watch = asyncio.create_task(self._watch_lease())

    async def _watch_lease(self) -> None:
        await self.lost.wait()
        self.fence()

    def fence(self) -> None:
        """We lost the run: stop it here (its upstream is closed); the new owner ended it."""
        if not self.fenced:
            self.fenced = True
            log.warning("run %s: this instance lost ownership", self.token.run_id)
            self.control.abort("shutdown")

    def snapshot_due(self, n: int, snapshot_every: int, retained: int) -> SnapshotWrite | None:
        """The state's snapshot to write with the next append of ``n`` items, if one is due.

        A snapshot costs the whole state (a long answer's text), so one per ``snapshot_every``
        events would make a long run quadratic: the state is snapshotted with a batch once
        ``snapshot_every`` events are logged since the last one *and* ``SNAPSHOT_SECONDS``
        passed, or at once when half the log's retention (``retained``) is reached, so a
        snapshot plus the retained log always rebuilds the state.
        """
        self.since_snapshot += n
        if self.since_snapshot < max(1, retained // 2) and (
            self.since_snapshot < snapshot_every
            or time.monotonic() - self.snapshot_at < SNAPSHOT_SECONDS
        ):
            return None
        self.since_snapshot = 0
        self.snapshot_at = time.monotonic()
        return self.state.snapshot_write()

    def failed(self, error: Exception) -> Exception:
        """What an append's ``error`` means to the run: fenced (another instance owns it) is
        :class:`RunFenced`; anything else leaves the state possibly ahead of the log."""
        if isinstance(error, Fenced):
            self.fence()
            return RunFenced(self.token.run_id)
        self.dirty = True
        return error

    async def append(
        self, items: list[Pending], snapshot_every: int, retained: int
    ) -> tuple[list[str], bool]:
        """Append items already reduced into ``state``, in one write; (their ids, snapshotted).
        The snapshot goes with it when :meth:`snapshot_due`."""
        snap = self.snapshot_due(len(items), snapshot_every, retained)
        self.appending += 1
        try:
            ids = await self.writer.append(items, snapshot=snap)
        except Fenced as exc:
            raise self.failed(exc) from None
        except BaseException:
            # The state may be ahead of the log now (or not, if the append landed).
            self.dirty = True
            raise
        finally:
            self.appending -= 1
        if ids:
            self.state.stream_id = ids[-1]
        return ids, snap is not None

    async def stop(self) -> None:
        await self.keeper.stop()
        await self.inbox.stop()
        if self.watch is not None:
            self.watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.watch
            self.watch = None
