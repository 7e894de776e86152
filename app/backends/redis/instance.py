"""What one gateway instance holds of the Redis backend, shared by every role implementation.

The client and the script wrappers, the runs this instance owns, its log readers, its queue
tickets and the state cache. The roles (:mod:`.conversations`, :mod:`.appends`, :mod:`.reads`,
:mod:`.snapshots`, :mod:`.run_slots`, :mod:`.control`, :mod:`.queued_runs`,
:mod:`.idempotency`) all act on one :class:`RedisInstance`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import time
from collections.abc import Coroutine
from typing import Any, Literal

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import RedisError

from app.backends.redis.adoption import Adoption
from app.backends.redis.claims import Ownership, Token
from app.backends.redis.cluster import is_cluster, publish_command
from app.backends.redis.control import Control, ControlBus
from app.backends.redis.cursors import make_cursor
from app.backends.redis.errors import RunFenced
from app.backends.redis.eventlog import KIND_EVENT, Entry, EventLog
from app.backends.redis.fanout import ReaderHub
from app.backends.redis.keys import ConversationKeys, conversation_tag
from app.backends.redis.limits import RESERVED_PREFIX, RedisLimits
from app.backends.redis.owned_run import OwnedRun
from app.backends.redis.queue import RunQueue
from app.backends.redis.reaper import Reaper
from app.backends.redis.state import StateCache
from app.backends.redis.tickets import TicketKeeper
from app.backends.types import ConversationRef, LogEntry
from app.ids import new_token

__all__ = ["RedisInstance", "text"]

log = logging.getLogger("app.backends.redis")

#: Readers whose tick commands share one pipeline (bounds one reply and the loop turn that
#: parses it (BENCHMARKS.md, "Costs behind the code's shortcuts")).
TICK_PIPELINE = 100
#: Conversations noted as created here and not claimed yet, at most (a hint: past it, the
#: notes start over and those claims read snapshot and log one after the other, as any).
CREATED_LIMIT = 10_000


def text(value: Any) -> str:
    """A Redis reply value as ``str``."""
    return value.decode() if isinstance(value, bytes) else str(value)


#: The tag of a conversation, cached: every read of every subscriber names its keys (a SHA-256 per
#: read was a visible share of a 500-subscriber fan-out's CPU: BENCHMARKS.md, "Costs behind the
#: code's shortcuts").
_tag = functools.lru_cache(maxsize=4096)(conversation_tag)


@functools.lru_cache(maxsize=4096)
def _keys(prefix: str, principal: str | None, key: str) -> ConversationKeys:
    return ConversationKeys(prefix, _tag(principal, key))


class RedisInstance:
    """One instance's Redis client, helpers and local records (owned runs, readers, tickets)."""

    def __init__(
        self,
        redis: Redis,
        *,
        event_log_max_len: int,
        snapshot_every: int,
        lease_ttl_seconds: float,
        key_prefix: str,
        instance_id: str | None,
        poll_interval: float,
        replica_cache: int,
        reader_window: int,
        conversation_ttl_seconds: float | None,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 1000,
    ) -> None:
        self.redis = redis
        #: ``SPUBLISH`` on a cluster (to the conversation's shard only), else ``PUBLISH``.
        self.publish = publish_command(redis)
        self.cluster = is_cluster(redis)
        self.prefix = key_prefix
        self.instance_id = instance_id or f"{socket.gethostname()}-{os.getpid()}-{new_token(4)}"
        self.snapshot_every = snapshot_every
        self.lease_ttl_ms = max(1, int(lease_ttl_seconds * 1000))
        self.poll_interval = poll_interval
        ttl = conversation_ttl_seconds
        self.ttl_ms = None if ttl is None else max(1, int(ttl * 1000))
        self.log = EventLog(
            redis, event_log_max_len, wait_replicas=wait_replicas, wait_timeout_ms=wait_timeout_ms
        )
        self.ownership = Ownership(redis, self.instance_id, self.lease_ttl_ms)
        self.control = Control(redis)
        self.queue = RunQueue(redis, self.instance_id, self.lease_ttl_ms, key_prefix)
        self.tickets = TicketKeeper(self.queue)
        #: Takes over the queued runs of dead instances (their tickets lapsed).
        self.adoption = Adoption(self.queue, self.tickets, key_prefix, self.slot_freed)
        #: (tag, run id) of our queued runs whose ticket was removed elsewhere (abort, delete)
        #: or adopted by another instance (it could not be renewed for a while).
        self.dropped: set[tuple[str, str]] = set()
        #: Runs of this instance waiting for a conversation's slot, by tag (``wait_run_slot``).
        self.slot_waiters: dict[str, set[asyncio.Event]] = {}
        #: The ``[limits]`` counters, shared by every instance.
        self.limits = RedisLimits(redis, self.prefix, self.lease_ttl_ms)
        self.bus = ControlBus(redis, poll_interval)
        self.states = StateCache(redis, self.log, replica_cache)
        #: The runs this instance owns, by conversation tag.
        self.owned: dict[str, OwnedRun] = {}
        #: Conversations created here whose first claim has not come yet (see
        #: :meth:`created_here`).
        self._created: set[str] = set()
        self.reaper = Reaper(
            self.ownership, self.log, self.states, key_prefix, lambda tag: tag in self.owned
        )
        self.hub = ReaderHub(
            redis,
            self.log,
            # A window holds up to 1.5x its size and Redis keeps at least ``max_len`` entries:
            # at most half of that, the window never serves an entry Redis trimmed (a cursor
            # there gets a snapshot from every instance, as from memory). 1024 by default.
            window=min(reader_window, max(1, event_log_max_len // 2)),
            tick=self._tick,
            tick_seconds=min(1.0, max(0.05, lease_ttl_seconds / 4)),
            owns=self._feeds_reader,
        )
        self._bg: set[asyncio.Task[None]] = set()

    def _feeds_reader(self, tag: str) -> bool:
        """Our run of ``tag`` is writing (the log reader is fed by its writer, not XREAD)."""
        owned = self.owned.get(tag)
        return owned is not None and not (owned.fenced or owned.released)

    def note_created(self, tag: str) -> None:
        """``tag`` was just created here: its first claim reads its log along with its snapshot
        (almost surely empty), one round trip less than reading the snapshot first."""
        if len(self._created) >= CREATED_LIMIT:  # created here and never claimed: start over
            self._created.clear()
        self._created.add(tag)

    def created_here(self, tag: str) -> bool:
        """Whether :meth:`note_created` noted ``tag`` (and forget it: asked by its claim)."""
        if tag in self._created:
            self._created.discard(tag)
            return True
        return False

    def keys(self, ref: ConversationRef) -> ConversationKeys:
        return _keys(self.prefix, ref.principal, ref.key)  # frozen: shared by every call

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` in the background (cancelled by :meth:`cancel_background`)."""
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    async def cancel_background(self) -> None:
        for task in list(self._bg):
            task.cancel()
        for task in list(self._bg):
            with contextlib.suppress(BaseException):
                await task

    async def slot_freed(self, keys: ConversationKeys) -> None:
        """Wake the runs waiting for this conversation's slot, here and on other instances."""
        for freed in self.slot_waiters.get(keys.tag, ()):
            freed.set()
        with contextlib.suppress(RedisError, OSError):  # else they wake on their timeout
            await self.redis.execute_command(self.publish, keys.turn, "freed")  # type: ignore[no-untyped-call]

    async def tidy_released(self, keys: ConversationKeys) -> None:
        """After our run released the slot, in one round trip, each step best effort (the sweep
        unmarks a slot without a holder): unmark it, refresh the data's idle expiry, and wake
        the runs waiting for the slot, here and on other instances."""
        for freed in self.slot_waiters.get(keys.tag, ()):
            freed.set()
        with contextlib.suppress(RedisError, OSError):
            async with self.redis.pipeline(transaction=False) as pipe:
                self.ownership.unmark_in(pipe, keys)
                self.touch_in(pipe, keys)
                pipe.execute_command(self.publish, keys.turn, "freed")
                await pipe.execute(raise_on_error=False)

    async def touch(self, keys: ConversationKeys, *, listed: tuple[str, str] | None = None) -> None:
        """Refresh the idle expiry of the conversation's data (``conversation_ttl_seconds``);
        ``listed`` (index, field): also list it in its principal's index, in the same round trip."""
        if self.ttl_ms is None and listed is None:
            return
        async with self.redis.pipeline(transaction=False) as pipe:
            self.touch_in(pipe, keys, listed=listed)
            await pipe.execute()

    def touch_in(
        self, pipe: Pipeline, keys: ConversationKeys, *, listed: tuple[str, str] | None = None
    ) -> None:
        """What :meth:`touch` sends, queued on ``pipe``."""
        if listed is not None:
            # On a cluster, written as a fresh reservation: the index's shard may apply this
            # before the conversation's shard creates its meta, and a listing in between must
            # count it (being created), not drop it as expired. Standalone, the pipeline
            # creates the meta first: listed as created, pruned as soon as it expires.
            value = f"{RESERVED_PREFIX}{int(time.time() * 1000)}" if self.cluster else 1
            pipe.hset(listed[0], listed[1], value)
        if self.ttl_ms is not None:
            for key in (keys.meta, keys.log, keys.snap, keys.fence):
                pipe.pexpire(key, self.ttl_ms)

    async def touch_quietly(self, keys: ConversationKeys) -> None:
        with contextlib.suppress(RedisError, OSError):
            await self.touch(keys)

    def log_entry(self, inc: str, entry: Entry) -> LogEntry:
        """The shared LogEntry of a stream entry (its frames are built once per instance)."""
        if entry.inc == inc:
            made: LogEntry = entry.cache
            return made
        kind: Literal["event", "extension"] = "event" if entry.kind == KIND_EVENT else "extension"
        made = LogEntry.of_logged(
            make_cursor(inc, entry.id).encode(),
            kind,
            entry.data,
            entry.type or None,
            entry.run_id or None,
        )
        entry.cache, entry.inc = made, inc
        return made

    async def holder(self, keys: ConversationKeys) -> Token | None:
        """The live holder of the run slot; a lost one is reaped first (then None)."""
        token, alive = await self.ownership.holder(keys)
        if token is not None and not alive and keys.tag not in self.owned:
            await self.reaper.reap(keys, token)
            token, _ = await self.ownership.holder(keys)
        return token

    async def live_owned(self, keys: ConversationKeys) -> OwnedRun | None:
        """Our run's record for the conversation (its state rebuilt if an append failed)."""
        owned = self.owned.get(keys.tag)
        if owned is None:
            return None
        if owned.fenced:
            raise RunFenced(owned.token.run_id)
        if owned.dirty:
            async with self.states.lock(keys.tag):
                if owned.dirty:
                    inc = await self.redis.hget(keys.meta, "inc")
                    owned.state = await self.states.load_private(
                        keys, text(inc) if inc else owned.state.inc
                    )
                    reader = self.hub.readers.get(keys.tag)
                    if reader is not None:  # fed by us: it may hold what Redis lost since
                        await reader.verify()
                    owned.dirty = False
        return owned

    async def _tick(self, all_keys: list[ConversationKeys]) -> None:
        """Every reader tick, for all readers at once: notice a re-created conversation and a
        lost run owner (three commands a reader, :data:`TICK_PIPELINE` readers a round trip),
        for every conversation whose run this instance does not own."""
        # A conversation whose run we own and write needs neither look: the run is ours and
        # alive, and a re-created conversation fences our next append (then it is looked at).
        # At C = 200 answers streaming here, that was 600 commands a second.
        all_keys = [keys for keys in all_keys if not self._feeds_reader(keys.tag)]
        for start in range(0, len(all_keys), TICK_PIPELINE):
            chunk = all_keys[start : start + TICK_PIPELINE]
            async with self.redis.pipeline(transaction=False) as pipe:
                for keys in chunk:
                    pipe.hget(keys.meta, "inc")
                    pipe.get(keys.run)
                    pipe.exists(keys.lease)
                replies = await pipe.execute()
            for n, keys in enumerate(chunk):
                inc, run, alive = replies[3 * n : 3 * n + 3]
                reader = self.hub.readers.get(keys.tag)
                if reader is not None and reader.inc_known:
                    reader.learn(None if inc is None else text(inc))
                if run is not None and not alive:
                    try:
                        await self.reaper.reap(keys, Token(text(run)))
                    except (RedisError, OSError) as exc:  # the next tick tries again
                        log.warning("reaping the lost run of %s: %s", keys.tag, exc)
