"""The Redis backend: several gateway instances serve one conversation, nothing is lost.

- Log: one Redis Stream per conversation (:mod:`.eventlog`), cursors in :mod:`.cursors`.
- State: the run owner keeps the live store (:mod:`.owner`) and persists ``state + cursor``
  every ``snapshot_every`` events and at run end; any other instance rebuilds it from the
  snapshot plus the stream tail (:mod:`.state`).
- Runs: a claim is a fenced lease (:mod:`.ownership`); aborts and commands from any instance
  reach the owner through a flag/list it polls plus a pub/sub wake-up (:mod:`.control`).
- Lost owner: a run record whose lease expired is taken over under a new fencing token and ended
  with ``run.failed`` ``gateway_instance_lost`` (:mod:`.reaper`).
- Reads: one log reader per conversation per instance fans out to local subscribers
  (:mod:`.fanout`).
- Enqueued runs: a cluster-wide FIFO of tickets orders the claims of the run slot
  (:mod:`.queue`).
- Outages: every Redis error becomes ``503 backend_unavailable`` (:mod:`.errors`); the client
  reconnects; readers resume from the last id they saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Callable
from typing import Any, Literal, cast

import orjson
from redis.asyncio import Redis
from redis.exceptions import RedisError

from app.api.errors import ApiError
from app.backends.base import (
    EMPTY_CURSOR,
    Backend,
    ConversationMeta,
    ConversationRef,
    IdempotencyRecord,
    LogEntry,
    ReadResult,
    RunControl,
    Snapshot,
)
from app.backends.redis.claims import LeaseKeeper, Ownership, Token
from app.backends.redis.control import (
    IN_FLIGHT_REFUSALS,
    Control,
    ControlBus,
    OwnerInbox,
    command_target,
)
from app.backends.redis.cursors import make_cursor, parse_cursor
from app.backends.redis.errors import RunFenced, unavailable
from app.backends.redis.eventlog import (
    KIND_EVENT,
    KIND_EXTENSION,
    Entry,
    EventLog,
    Fenced,
    FencedWriter,
    Pending,
    parse_id,
)
from app.backends.redis.fanout import LogReader, ReaderHub
from app.backends.redis.keys import (
    DEFAULT_PREFIX,
    ConversationKeys,
    conversation_tag,
    idempotency_key,
    principal_index_key,
)
from app.backends.redis.limits import (
    RESERVE_CONVERSATION,
    RESERVED_PREFIX,
    RedisLimits,
    reservation_fresh,
)
from app.backends.redis.owned_run import OwnedRun
from app.backends.redis.queue import RunQueue, TicketKeeper
from app.backends.redis.reaper import Reaper
from app.backends.redis.scripts import CREATE, SAVE_META
from app.backends.redis.state import ConversationState, StateCache
from app.backends.redis.tasks import stop_task
from app.ids import new_token
from providers.contract import Command

__all__ = ["RedisBackend", "RunFenced"]

AbortReason = Literal["aborted", "interrupted", "shutdown"]
Fold = Callable[[ConversationState], None]


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _stored(stream_id: str, item: Pending) -> Entry:
    return Entry(stream_id, item.kind, item.data, item.type, item.run_id)


class RedisBackend(Backend):
    def __init__(
        self,
        redis: Redis,
        *,
        event_log_max_len: int = 10000,
        snapshot_every: int = 200,
        lease_ttl_seconds: float = 10.0,
        key_prefix: str = DEFAULT_PREFIX,
        instance_id: str | None = None,
        poll_interval: float = 0.1,
        replica_cache: int = 1024,
        reader_window: int = 1024,
        conversation_ttl_seconds: float | None = None,
    ) -> None:
        self.redis = redis
        self.prefix = key_prefix
        self.instance_id = instance_id or f"{socket.gethostname()}-{os.getpid()}-{new_token(4)}"
        self.snapshot_every = snapshot_every
        self.lease_ttl_ms = max(1, int(lease_ttl_seconds * 1000))
        self.poll_interval = poll_interval
        ttl = conversation_ttl_seconds
        self.ttl_ms = None if ttl is None else max(1, int(ttl * 1000))
        self.log = EventLog(redis, event_log_max_len)
        self.ownership = Ownership(redis, self.instance_id, self.lease_ttl_ms)
        self.control = Control(redis)
        self.queue = RunQueue(redis, self.instance_id, self.lease_ttl_ms)
        self.tickets = TicketKeeper(self.queue)
        #: (tag, run id) of our queued runs whose ticket was removed elsewhere (abort, delete).
        self._dropped: set[tuple[str, str]] = set()
        #: Runs of this instance waiting for a conversation's slot, by tag (``wait_run_slot``).
        self._slot_waiters: dict[str, set[asyncio.Event]] = {}
        self.bus = ControlBus(redis)
        self.states = StateCache(redis, self.log, replica_cache)
        self.reaper = Reaper(
            self.ownership, self.log, self.states, key_prefix, lambda tag: tag in self._owned
        )
        self.hub = ReaderHub(
            redis,
            self.log,
            window=reader_window,
            tick=self._tick,
            tick_seconds=min(1.0, max(0.05, lease_ttl_seconds / 4)),
        )
        self._create = redis.register_script(CREATE)
        self.limits = RedisLimits(redis, self.prefix, self.lease_ttl_ms)
        self._reserve = redis.register_script(RESERVE_CONVERSATION)
        self._save_meta = redis.register_script(SAVE_META)
        self._owned: dict[str, OwnedRun] = {}
        self._bg: set[asyncio.Task[None]] = set()
        self._sweeper: asyncio.Task[None] | None = None

    # --- helpers -------------------------------------------------------------------------
    def keys(self, ref: ConversationRef) -> ConversationKeys:
        return ConversationKeys(self.prefix, conversation_tag(ref.principal, ref.key))

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    async def _touch(self, keys: ConversationKeys) -> None:
        """Refresh the idle expiry of the conversation's data (``conversation_ttl_seconds``)."""
        if self.ttl_ms is None:
            return
        async with self.redis.pipeline(transaction=False) as pipe:
            for key in (keys.meta, keys.log, keys.snap, keys.fence):
                pipe.pexpire(key, self.ttl_ms)
            await pipe.execute()

    async def _touch_quietly(self, keys: ConversationKeys) -> None:
        with contextlib.suppress(RedisError, OSError):
            await self._touch(keys)

    # --- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        await self.bus.start()
        self.tickets.start()
        self.limits.start()
        interval = max(0.25, self.lease_ttl_ms / 2000)
        self._sweeper = asyncio.create_task(
            self.reaper.sweep_forever(interval), name="redis-lost-owners"
        )

    async def sweep(self) -> None:
        """One pass of the lost-owner sweep (also run every lease_ttl/2 in the background)."""
        await self.reaper.sweep()

    async def close(self) -> None:
        await stop_task(self._sweeper)
        self._sweeper = None
        for owned in list(self._owned.values()):
            await owned.stop()
        self._owned.clear()
        await self.tickets.stop()
        await self.limits.stop()
        await self.hub.close()
        await self.bus.stop()
        for task in list(self._bg):
            task.cancel()
        for task in list(self._bg):
            with contextlib.suppress(BaseException):
                await task
        with contextlib.suppress(Exception):
            await self.redis.aclose()

    async def ping(self) -> bool:
        try:
            return bool(await asyncio.wait_for(self.redis.ping(), timeout=1.0))
        except (RedisError, OSError, TimeoutError):
            return False

    # --- conversations -------------------------------------------------------------------
    async def create_conversation(self, ref: ConversationRef, meta: ConversationMeta) -> bool:
        keys = self.keys(ref)
        with unavailable():
            created = await self._create(
                keys=[keys.meta], args=[new_token(6), orjson.dumps(meta.to_dict())]
            )
            if created:
                await self.redis.hset(principal_index_key(ref.principal, self.prefix), ref.key, 1)
                await self._touch(keys)
        return bool(created)

    async def reserve_conversation(self, ref: ConversationRef, limit: int) -> bool:
        if await self.get_meta(ref) is not None:
            return True
        index = principal_index_key(ref.principal, self.prefix)
        await self.list_conversations(ref.principal)  # drops the expired from the index first
        with unavailable():
            reservation = f"{RESERVED_PREFIX}{int(time.time() * 1000)}"
            res = await self._reserve(keys=[index], args=[ref.key, limit, reservation])
        return bool(int(res))

    def limit_store(self) -> RedisLimits:
        return self.limits

    async def get_meta(self, ref: ConversationRef) -> ConversationMeta | None:
        with unavailable():
            raw = await self.redis.hget(self.keys(ref).meta, "meta")
        return None if raw is None else ConversationMeta.from_dict(orjson.loads(raw))

    async def save_meta(self, ref: ConversationRef, meta: ConversationMeta) -> None:
        keys = self.keys(ref)
        with unavailable():
            await self._save_meta(
                keys=[keys.meta], args=[orjson.dumps(meta.to_dict()), meta.session_id]
            )

    async def delete(self, ref: ConversationRef) -> bool:
        keys = self.keys(ref)
        with unavailable():
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.delete(keys.meta)
                # The abort flag stays (it expires by itself): the DELETE's abort of a run owned
                # by another instance must still reach that owner's next poll.
                pipe.delete(*(key for key in keys.all_keys() if key != keys.abort))
                pipe.hdel(principal_index_key(ref.principal, self.prefix), ref.key)
                existed, _, _ = await pipe.execute()
        self.states.forget(keys.tag)
        entry = self.tickets.tickets.get(keys.tag)
        if entry is not None:  # our queued runs of it will not start
            self._dropped.update((keys.tag, run_id) for run_id in entry[1])
            self.tickets.forget(keys)
        owned = self._owned.get(keys.tag)
        if owned is not None:  # its run record is gone: it can no longer append
            owned.fenced = True
        reader = self.hub.readers.get(keys.tag)
        if reader is not None:
            reader.inc, reader.inc_known = None, True
            reader.reset()
        return bool(existed)

    async def list_conversations(self, principal: str) -> list[tuple[str, ConversationMeta]]:
        index = principal_index_key(principal, self.prefix)
        with unavailable():
            listed = {_s(k): _s(v) for k, v in (await self.redis.hgetall(index)).items()}
            names = list(listed)
            if not names:
                return []
            async with self.redis.pipeline(transaction=False) as pipe:
                for name in names:
                    pipe.hget(self.keys(ConversationRef(principal, name)).meta, "meta")
                metas = await pipe.execute()
        out: list[tuple[str, ConversationMeta]] = []
        stale: list[str] = []
        now_ms = time.time() * 1000
        for name, raw in zip(names, metas, strict=True):
            if raw is None:
                if not reservation_fresh(listed[name], now_ms):  # being created: it counts
                    stale.append(name)  # expired (conversation_ttl_seconds)
            else:
                out.append((name, ConversationMeta.from_dict(orjson.loads(raw))))
        if stale:
            with contextlib.suppress(RedisError, OSError):
                await self.redis.hdel(index, *stale)
        return out

    # --- state ---------------------------------------------------------------------------
    async def snapshot(self, ref: ConversationRef) -> Snapshot | None:
        keys = self.keys(ref)
        owned = self._owned.get(keys.tag)
        with unavailable():
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.hmget(keys.meta, "inc", "meta")
                pipe.get(keys.run)
                pipe.exists(keys.lease)
                (inc, raw_meta), run, alive = await pipe.execute()
            if inc is None or raw_meta is None:
                return None
            meta = ConversationMeta.from_dict(orjson.loads(raw_meta))
            # The owner's live state, unless appends are in flight (it is ahead of its cursor)
            # or the slot is being handed back; else snapshot + log tail, cursor exact.
            stale = owned is None or owned.fenced or owned.dirty or owned.released
            if owned is not None and not stale and not owned.appending:
                state = owned.state
            else:
                if run is not None and not alive:
                    await self.reaper.reap(keys, Token(_s(run)))
                async with self.states.lock(keys.tag):
                    state = await self.states.load(keys, _s(inc))
        return Snapshot(
            state=state.store.get_snapshot(),
            cursor=make_cursor(state.inc, state.stream_id),
            extensions=dict(state.extensions),
            meta=meta,
        )

    # --- log: appends ----------------------------------------------------------------------
    def _entry(self, inc: str, entry: Entry) -> LogEntry:
        """The shared LogEntry of a stream entry (its frames are built once per instance)."""
        cached = entry.cache
        if isinstance(cached, LogEntry) and cached.cursor.startswith(inc + "."):
            return cached
        kind: Literal["event", "extension"] = "event" if entry.kind == KIND_EVENT else "extension"
        made = LogEntry(
            make_cursor(inc, entry.id), kind, entry.data, entry.type or None, entry.run_id or None
        )
        entry.cache = made
        return made

    async def _live_owned(self, keys: ConversationKeys) -> OwnedRun | None:
        """Our run's record for the conversation (its state rebuilt if an append failed)."""
        owned = self._owned.get(keys.tag)
        if owned is None:
            return None
        if owned.fenced:
            raise RunFenced(owned.token.run_id)
        if owned.dirty:
            async with self.states.lock(keys.tag):
                if owned.dirty:
                    inc = await self.redis.hget(keys.meta, "inc")
                    owned.state = await self.states.load_private(
                        keys, _s(inc) if inc else owned.state.inc
                    )
                    owned.dirty = False
        return owned

    async def _append(self, keys: ConversationKeys, item: Pending, fold: Fold) -> LogEntry:
        owned = await self._live_owned(keys)
        if owned is None:
            return await self._free_append(keys, item, fold)
        fold(owned.state)
        stream_id, snapshotted = await owned.append(item, self.snapshot_every)
        if snapshotted and self.ttl_ms is not None:
            self._spawn(self._touch_quietly(keys))
        return self._entry(owned.state.inc, _stored(stream_id, item))

    async def _free_append(self, keys: ConversationKeys, item: Pending, fold: Fold) -> LogEntry:
        """Append outside a run of ours (no run may be active): fenced by the empty token."""
        async with self.states.lock(keys.tag):
            inc = await self.redis.hget(keys.meta, "inc")
            if inc is None:
                raise KeyError(f"conversation {keys.tag} does not exist")
            state = await self.states.load(keys, _s(inc))
            fold(state)
            try:
                ids = await self.log.append(keys, "", [item], snapshot=state.snapshot_write())
            except Fenced:
                self.states.forget(keys.tag)
                raise RunFenced("another instance owns the active run") from None
            except BaseException:
                self.states.forget(keys.tag)
                raise
            state.stream_id = ids[0]
            return self._entry(state.inc, _stored(ids[0], item))

    async def append_event(self, ref: ConversationRef, event: dict[str, Any]) -> LogEntry:
        type_, run_id = str(event.get("type", "")), str(event.get("runId", ""))
        item = Pending(KIND_EVENT, orjson.dumps(event), type_, run_id)

        def fold(state: ConversationState) -> None:
            state.store.dispatch(event)

        with unavailable():
            return await self._append(self.keys(ref), item, fold)

    async def append_extension(self, ref: ConversationRef, key: str, value: Any) -> LogEntry:
        item = Pending(KIND_EXTENSION, orjson.dumps({"key": key, "value": value}))

        def fold(state: ConversationState) -> None:
            state.extensions[key] = value

        with unavailable():
            return await self._append(self.keys(ref), item, fold)

    # --- log: reads --------------------------------------------------------------------------
    async def head_cursor(self, ref: ConversationRef) -> str:
        keys = self.keys(ref)
        with unavailable():
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.hget(keys.meta, "inc")
                pipe.xrevrange(keys.log, count=1)
                inc, last = await pipe.execute()
        if inc is None or not last:
            return EMPTY_CURSOR
        return make_cursor(_s(inc), _s(last[0][0]))

    async def _incarnation(self, reader: LogReader, keys: ConversationKeys) -> str | None:
        if not reader.inc_known:
            inc = await self.redis.hget(keys.meta, "inc")
            reader.inc = None if inc is None else _s(inc)
            reader.inc_known = True
        return reader.inc

    async def _read_once(
        self, reader: LogReader, keys: ConversationKeys, after: str, limit: int
    ) -> ReadResult:
        parsed = parse_cursor(after)
        if parsed is None:
            return ReadResult("unknown")
        want_inc, sid = parsed
        inc = await self._incarnation(reader, keys)
        if inc is None:  # not created as far as we know: it may have been since
            reader.inc_known = False
            inc = await self._incarnation(reader, keys)
        if want_inc is not None and want_inc != inc:
            reader.inc_known = False  # maybe re-created since: look again
            inc = await self._incarnation(reader, keys)
            if want_inc != inc:
                return ReadResult("unknown")
        if inc is None:
            return ReadResult("ok" if want_inc is None else "unknown")
        position = parse_id(sid)
        if position > parse_id(reader.last_id):
            if position > parse_id(await self.log.last_id(keys)):
                return ReadResult("unknown")  # not a position of this log
            return ReadResult("ok")  # the reader will get there
        window = reader.window_after(position)
        if window is None:
            got = await self.log.read_after(keys, sid, count=limit)
            if got is None:
                return ReadResult("trimmed")
            window = got
        return ReadResult("ok", [self._entry(inc, e) for e in window[:limit]])

    async def read(
        self,
        ref: ConversationRef,
        after: str,
        *,
        limit: int,
        wait: float,
    ) -> ReadResult:
        keys = self.keys(ref)
        with unavailable():
            reader = await self.hub.acquire(keys)
            try:
                signal = reader.signal
                result = await self._read_once(reader, keys, after, limit)
                if result.entries or result.status != "ok" or wait <= 0:
                    return result
                # One wait, like the memory backend: new entries, a reset (delete) or
                # wake_readers() (shutdown) end it; the caller loops.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(signal.wait(), wait)
                return await self._read_once(reader, keys, after, limit)
            finally:
                self.hub.release(reader)

    def wake_readers(self) -> None:
        for reader in list(self.hub.readers.values()):
            reader.wake()

    async def _tick(self, keys: ConversationKeys) -> None:
        """Every reader tick: notice a re-created conversation and a lost run owner."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(keys.meta, "inc")
            pipe.get(keys.run)
            pipe.exists(keys.lease)
            inc, run, alive = await pipe.execute()
        reader = self.hub.readers.get(keys.tag)
        if reader is not None and reader.inc_known:
            current = None if inc is None else _s(inc)
            if current != reader.inc:
                reader.inc = current
                reader.reset()
        if run is not None and not alive:
            await self.reaper.reap(keys, Token(_s(run)))

    # --- runs ----------------------------------------------------------------------------
    async def _holder(self, keys: ConversationKeys) -> Token | None:
        """The live holder of the run slot; a lost one is reaped first (then None)."""
        token, alive = await self.ownership.holder(keys)
        if token is not None and not alive and keys.tag not in self._owned:
            await self.reaper.reap(keys, token)
            token, _ = await self.ownership.holder(keys)
        return token

    async def claim_run(self, ref: ConversationRef, control: RunControl) -> bool:
        keys = self.keys(ref)
        run_id = control.run_id
        ticketed = self.tickets.has(keys, run_id)
        with unavailable():
            # ownership.claim, ordered by the queue: a queued run only when it is first, a
            # run that was not queued only when nobody waits.
            claimed_at = time.monotonic()  # the lease is valid for its TTL from (at least) here
            claim = await self.queue.claim(keys, run_id, ticketed)
            if claim.status == "lost":
                await self.reaper.reap(keys, Token(claim.holder))
                claimed_at = time.monotonic()
                claim = await self.queue.claim(keys, run_id, ticketed)
            if claim.status == "gone":
                self.tickets.discard(keys, run_id)
                self._dropped.add((keys.tag, run_id))
            if claim.status != "ok":
                return False
            self.tickets.discard(keys, run_id)
            token = Token(claim.holder)
            try:
                await self.ownership.mark(keys)
                inc = await self.redis.hget(keys.meta, "inc")
                async with self.states.lock(keys.tag):
                    state = await self.states.load_private(
                        keys, _s(inc) if inc is not None else new_token(6)
                    )
            except BaseException:
                with contextlib.suppress(Exception):
                    await self.ownership.release(keys, token)
                raise

        async def on_command(raw: bytes) -> None:
            data = orjson.loads(raw)
            control.deliver(Command(data["type"], data.get("payload") or {}))

        def on_abort(reason: str) -> None:
            control.abort(reason)  # type: ignore[arg-type]

        lost = asyncio.Event()
        # Appends that fail while Redis is unreachable are retried until the lease's deadline.
        keeper = LeaseKeeper(self.ownership, keys, token, lost, granted_at=claimed_at)
        owned = OwnedRun(
            keys=keys,
            token=token,
            control=control,
            writer=FencedWriter(self.log, keys, token.raw, deadline=keeper.deadline),
            state=state,
            keeper=keeper,
            inbox=OwnerInbox(
                self.redis,
                self.bus,
                keys,
                control.run_id,
                on_abort=on_abort,
                on_command=on_command,
                poll_interval=self.poll_interval,
            ),
            lost=lost,
        )
        self._owned[keys.tag] = owned
        owned.start()
        if claim.cancelled:  # cancelled while it was queued: it ends at once, in its turn
            control.abort(cast(AbortReason, claim.cancelled))
        return True

    async def wait_run_slot(self, ref: ConversationRef, wait: float) -> None:
        keys = self.keys(ref)
        freed = asyncio.Event()

        def wake(_: str) -> None:
            freed.set()

        self.bus.add(keys.turn, wake)  # freed on another instance
        self._slot_waiters.setdefault(keys.tag, set()).add(freed)  # freed here
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(freed.wait(), wait)
        finally:
            self.bus.remove(keys.turn, wake)
            waiters = self._slot_waiters.get(keys.tag)
            if waiters is not None:
                waiters.discard(freed)
                if not waiters:
                    del self._slot_waiters[keys.tag]

    async def _slot_freed(self, keys: ConversationKeys) -> None:
        """Wake the runs waiting for this conversation's slot, here and on other instances."""
        for freed in self._slot_waiters.get(keys.tag, ()):
            freed.set()
        with contextlib.suppress(RedisError, OSError):  # else they wake on their timeout
            await self.redis.publish(keys.turn, "freed")

    async def release_run(self, ref: ConversationRef, run_id: str) -> None:
        keys = self.keys(ref)
        owned = self._owned.get(keys.tag)
        if owned is None or owned.token.run_id != run_id:
            return
        try:
            await self._release_owned(keys, owned)
        finally:
            await self._slot_freed(keys)

    async def _release_owned(self, keys: ConversationKeys, owned: OwnedRun) -> None:
        await owned.stop()
        owned.released = True  # snapshot() reads Redis from now on (others may append)
        try:
            if owned.fenced:
                return
            with unavailable():
                await self._live_owned(keys)  # rebuilt if an append failed
                try:
                    snapshot = owned.state.snapshot_write()
                    await owned.writer.append([], release=True, snapshot=snapshot)
                except Fenced:
                    return
                await self.ownership.unmark(keys)
                await self._touch(keys)
            self.states.remember(keys.tag, owned.state)
        finally:
            self._owned.pop(keys.tag, None)

    async def active_run(self, ref: ConversationRef) -> str | None:
        with unavailable():
            token = await self._holder(self.keys(ref))
        return None if token is None else token.run_id

    async def request_abort(
        self,
        ref: ConversationRef,
        run_id: str | None,
        reason: AbortReason = "aborted",
    ) -> str | None:
        keys = self.keys(ref)
        owned = self._owned.get(keys.tag)
        if owned is not None and not owned.fenced and run_id in (None, owned.token.run_id):
            # Ours: no round trip needed to reach the run (None once its end is decided).
            return owned.token.run_id if owned.control.abort(reason) else None
        with unavailable():
            aborted = None
            if await self._holder(keys) is not None:
                aborted = await self.control.abort(keys, run_id, reason)
            if aborted is None and run_id is not None:
                # A queued run (of any instance) is cancelled: it logs that in its turn.
                if await self.queue.cancel(keys, run_id, reason):
                    return run_id
            return aborted

    async def end_run(self, ref: ConversationRef, run_id: str) -> str | None:
        with unavailable():
            return await self.control.end(self.keys(ref), run_id)

    async def enqueue_run(
        self, ref: ConversationRef, run_id: str, *, limit: int | None, interrupt: bool = False
    ) -> bool:
        keys = self.keys(ref)
        with unavailable():
            queued = await self.queue.enqueue(keys, run_id, limit, interrupt)
        if queued:
            self.tickets.add(keys, run_id)
        return queued

    async def drop_run(self, ref: ConversationRef, run_id: str) -> bool:
        keys = self.keys(ref)
        self.tickets.discard(keys, run_id)  # no longer renewed: it lapses if Redis is down
        with unavailable():
            dropped = await self.queue.drop(keys, run_id)
        if dropped:  # the run after it may be first now
            await self._slot_freed(keys)
        return dropped

    async def is_queued(self, ref: ConversationRef, run_id: str) -> bool:
        keys = self.keys(ref)
        with unavailable():
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.zscore(keys.queue, run_id)
                pipe.get(keys.run)
                score, holder = await pipe.execute()
        return score is not None or (holder is not None and Token(_s(holder)).run_id == run_id)

    async def queued_runs(self, ref: ConversationRef) -> int:
        with unavailable():
            return await self.queue.count(self.keys(ref))

    def run_dropped(self, ref: ConversationRef, run_id: str) -> bool:
        item = (self.keys(ref).tag, run_id)
        if item in self._dropped:
            self._dropped.discard(item)
            return True
        return False

    async def send_command(self, ref: ConversationRef, run_id: str, command: Command) -> bool:
        keys = self.keys(ref)
        owned = self._owned.get(keys.tag)
        local = owned is not None and not owned.fenced and owned.token.run_id == run_id
        target = command_target(command.payload)
        body = None
        if not local:
            body = orjson.dumps({"type": command.type, "payload": dict(command.payload)})
        with unavailable():
            status = await self.control.command(keys, run_id, body, target)
        if status == 2:
            code, message = IN_FLIGHT_REFUSALS.get(command.type, ("run_not_running", "{}"))
            raise ApiError(409, code, message.format(target))
        if status == 1 and owned is not None and local:
            owned.control.deliver(command)
        return status == 1

    # --- idempotency ---------------------------------------------------------------------
    async def idempotency_get(self, scope: str) -> IdempotencyRecord | None:
        with unavailable():
            raw = await self.redis.get(idempotency_key(scope, self.prefix))
        if raw is None:
            return None
        data = orjson.loads(raw)
        return IdempotencyRecord(data["fingerprint"], data["status"], data["body"])

    async def idempotency_put(self, scope: str, record: IdempotencyRecord, ttl: float) -> bool:
        body = orjson.dumps(
            {"fingerprint": record.fingerprint, "status": record.status, "body": record.body}
        )
        with unavailable():
            stored = await self.redis.set(
                idempotency_key(scope, self.prefix), body, nx=True, px=max(1, int(ttl * 1000))
            )
        return bool(stored)
