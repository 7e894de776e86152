"""The Redis backend: several gateway instances serve one conversation, nothing is lost.

- Log: one Redis Stream per conversation (:mod:`.eventlog`); cursor = ``"<incarnation>.<id>"``.
- State: the run owner keeps the live :class:`AgentStore` and persists ``state + cursor`` every
  ``snapshot_every`` events and at run end; any other instance rebuilds it from the snapshot plus
  the stream tail (and keeps a small cache of such replicas, advanced by the tail).
- Runs: a claim is a fenced lease (:mod:`.ownership`); aborts and commands from any instance
  reach the owner through a flag/list it polls plus a pub/sub wake-up (:mod:`.control`).
- Lost owner: a run record whose lease expired is taken over under a new fencing token and ended
  with ``run.failed`` ``gateway_instance_lost`` (:mod:`.lost_owner`); any instance that reads the
  conversation, subscribes to it or claims it notices.
- Outages: every Redis error becomes ``503 backend_unavailable``; the client reconnects; readers
  resume from the last id they saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

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
from app.backends.redis.control import Control, ControlBus, OwnerInbox
from app.backends.redis.eventlog import (
    KIND_EVENT,
    KIND_EXTENSION,
    ZERO_ID,
    Entry,
    EventLog,
    Fenced,
    FencedWriter,
    Pending,
    SnapshotWrite,
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
from app.backends.redis.lost_owner import lost_run_events
from app.backends.redis.ownership import LeaseKeeper, Ownership, Token
from app.backends.redis.scripts import CREATE, SAVE_META
from app.backends.redis.tasks import stop_task
from app.errors import ApiError
from app.ids import new_token
from core import AgentStore
from providers.contract import Command

__all__ = ["RedisBackend", "RunFenced"]

log = logging.getLogger("app.backends.redis")

AbortReason = Literal["aborted", "interrupted", "shutdown"]
TAIL_PAGE = 1000


class RunFenced(Exception):
    """This instance lost the run it owned (another instance took it over)."""


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@contextlib.contextmanager
def _unavailable() -> Iterator[None]:
    """Map Redis (and socket) failures to the registry's 503 ``backend_unavailable``."""
    try:
        yield
    except (RedisError, OSError) as exc:
        if isinstance(exc, RedisError) and not isinstance(
            exc, (RedisConnectionError, RedisTimeoutError)
        ):
            log.warning("redis error: %s", exc)
        raise ApiError(503, "backend_unavailable", "The backend is unavailable.") from exc


def _cursor(inc: str, stream_id: str) -> str:
    return EMPTY_CURSOR if stream_id == ZERO_ID else f"{inc}.{stream_id}"


def _parse_cursor(cursor: str) -> tuple[str | None, str] | None:
    """``(incarnation, stream id)``; ``(None, 0-0)`` for the empty cursor; None if malformed."""
    if cursor == EMPTY_CURSOR:
        return None, ZERO_ID
    inc, dot, sid = cursor.rpartition(".")
    ms, dash, seq = sid.partition("-")
    if not dot or not inc or not dash or not ms.isdigit() or not seq.isdigit():
        return None
    return inc, sid


#: A second command for a target already in flight (on any instance) is refused like this.
_IN_FLIGHT: dict[str, tuple[str, str]] = {
    "approval.resolve": ("approval_already_resolved", "Approval {} is resolved."),
    "tool.submit_result": ("tool_not_awaiting_result", "Tool call {} awaits no result."),
    "tool.retry": ("tool_not_retryable", "Tool call {} cannot be retried."),
}


def _command_target(command: Command) -> str:
    for name in ("approvalId", "toolCallId"):
        value = command.payload.get(name)
        if isinstance(value, str):
            return value
    return ""


def _stored(stream_id: str, item: Pending) -> Entry:
    return Entry(stream_id, item.kind, item.data, item.type, item.run_id)


@dataclass(slots=True)
class _State:
    """A conversation's reduced state at ``stream_id``, with its extensions."""

    inc: str
    store: AgentStore
    extensions: dict[str, Any]
    stream_id: str = ZERO_ID

    def fold(self, entries: list[Entry]) -> None:
        for entry in entries:
            if entry.kind == KIND_EVENT:
                self.store.dispatch(orjson.loads(entry.data))
            elif entry.kind == KIND_EXTENSION:
                item = orjson.loads(entry.data)
                self.extensions[item["key"]] = item["value"]
            self.stream_id = entry.id

    def snapshot_write(self) -> SnapshotWrite:
        return SnapshotWrite(
            orjson.dumps(self.store.get_snapshot()),
            orjson.dumps(self.extensions),
            self.stream_id,
        )


@dataclass(slots=True)
class _Owned:
    """A run this instance owns."""

    keys: ConversationKeys
    token: Token
    control: RunControl
    writer: FencedWriter
    state: _State
    keeper: LeaseKeeper
    inbox: OwnerInbox
    lost: asyncio.Event
    since_snapshot: int = 0
    fenced: bool = False
    dirty: bool = False
    watch: asyncio.Task[None] | None = field(default=None)


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
        self.ttl_ms = (
            None
            if conversation_ttl_seconds is None
            else max(1, int(conversation_ttl_seconds * 1000))
        )
        self.log = EventLog(redis, event_log_max_len)
        self.ownership = Ownership(redis, self.instance_id, self.lease_ttl_ms)
        self.control = Control(redis)
        self.bus = ControlBus(redis)
        self.hub = ReaderHub(
            redis,
            self.log,
            window=reader_window,
            tick=self._tick,
            tick_seconds=min(1.0, max(0.05, lease_ttl_seconds / 4)),
        )
        self._create = redis.register_script(CREATE)
        self._save_meta = redis.register_script(SAVE_META)
        self._owned: dict[str, _Owned] = {}
        self._replicas: OrderedDict[str, _State] = OrderedDict()
        self._replica_cap = replica_cache
        self._locks: dict[str, list[Any]] = {}
        self._bg: set[asyncio.Task[None]] = set()
        self._sweeper: asyncio.Task[None] | None = None

    # --- helpers -------------------------------------------------------------------------
    def keys(self, ref: ConversationRef) -> ConversationKeys:
        return ConversationKeys(self.prefix, conversation_tag(ref.principal, ref.key))

    @contextlib.asynccontextmanager
    async def _lock(self, tag: str) -> AsyncIterator[None]:
        """One state loader/writer per conversation in this process; dropped when unused."""
        entry = self._locks.get(tag)
        if entry is None:
            entry = self._locks[tag] = [asyncio.Lock(), 0]
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0 and self._locks.get(tag) is entry:
                del self._locks[tag]

    async def _touch(self, keys: ConversationKeys) -> None:
        """Refresh the idle expiry of the conversation's data (``conversation_ttl_seconds``)."""
        if self.ttl_ms is None:
            return
        async with self.redis.pipeline(transaction=False) as pipe:
            for key in (keys.meta, keys.log, keys.snap, keys.fence):
                pipe.pexpire(key, self.ttl_ms)
            await pipe.execute()

    def _touch_later(self, keys: ConversationKeys) -> None:
        if self.ttl_ms is not None:
            self._spawn(self._touch_quietly(keys))

    async def _touch_quietly(self, keys: ConversationKeys) -> None:
        with contextlib.suppress(RedisError, OSError):
            await self._touch(keys)

    def _remember(self, tag: str, state: _State) -> None:
        self._replicas[tag] = state
        self._replicas.move_to_end(tag)
        while len(self._replicas) > self._replica_cap:
            self._replicas.popitem(last=False)

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    # --- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        await self.bus.start()
        self._sweeper = asyncio.create_task(self._sweep_forever(), name="redis-lost-owners")

    async def _sweep_forever(self) -> None:
        """Find runs whose owner vanished even when no instance looks at the conversation."""
        interval = max(0.25, self.lease_ttl_ms / 2000)
        while True:
            await asyncio.sleep(interval)
            try:
                await self.sweep()
            except (RedisError, OSError) as exc:
                log.debug("lost-owner sweep skipped: %s", exc)
            except Exception:
                log.exception("lost-owner sweep failed")

    async def sweep(self) -> None:
        for tag in await self.ownership.lapsed(self.prefix):
            keys = ConversationKeys(self.prefix, tag)
            token, alive = await self.ownership.holder(keys)
            if token is None:
                await self.ownership.unmark(keys)
            elif not alive and tag not in self._owned:
                await self._reap(keys, token)

    async def close(self) -> None:
        await stop_task(self._sweeper)
        self._sweeper = None
        for owned in list(self._owned.values()):
            await self._stop_owned(owned)
        self._owned.clear()
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
        with _unavailable():
            created = await self._create(
                keys=[keys.meta], args=[new_token(6), orjson.dumps(meta.to_dict())]
            )
            if created:
                await self.redis.hset(principal_index_key(ref.principal, self.prefix), ref.key, 1)
                await self._touch(keys)
        return bool(created)

    async def get_meta(self, ref: ConversationRef) -> ConversationMeta | None:
        with _unavailable():
            raw = await self.redis.hget(self.keys(ref).meta, "meta")
        return None if raw is None else ConversationMeta.from_dict(orjson.loads(raw))

    async def save_meta(self, ref: ConversationRef, meta: ConversationMeta) -> None:
        keys = self.keys(ref)
        with _unavailable():
            await self._save_meta(keys=[keys.meta], args=[orjson.dumps(meta.to_dict())])

    async def delete(self, ref: ConversationRef) -> bool:
        keys = self.keys(ref)
        with _unavailable():
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.delete(keys.meta)
                pipe.delete(*keys.all_keys())
                pipe.hdel(principal_index_key(ref.principal, self.prefix), ref.key)
                existed, _, _ = await pipe.execute()
        self._replicas.pop(keys.tag, None)
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
        with _unavailable():
            names = [_s(k) for k in await self.redis.hkeys(index)]
            if not names:
                return []
            async with self.redis.pipeline(transaction=False) as pipe:
                for name in names:
                    pipe.hget(self.keys(ConversationRef(principal, name)).meta, "meta")
                metas = await pipe.execute()
        out: list[tuple[str, ConversationMeta]] = []
        stale: list[str] = []
        for name, raw in zip(names, metas, strict=True):
            if raw is None:
                stale.append(name)  # expired (conversation_ttl_seconds)
            else:
                out.append((name, ConversationMeta.from_dict(orjson.loads(raw))))
        if stale:
            with contextlib.suppress(RedisError, OSError):
                await self.redis.hdel(index, *stale)
        return out

    # --- state ---------------------------------------------------------------------------
    async def _read_tail(self, keys: ConversationKeys, state: _State) -> bool:
        """Fold every entry after ``state.stream_id``; False when the tail was trimmed."""
        while True:
            entries = await self.log.read_after(keys, state.stream_id, count=TAIL_PAGE)
            if entries is None:
                return False
            state.fold(entries)
            if len(entries) < TAIL_PAGE:
                return True

    async def _load(self, keys: ConversationKeys, inc: str) -> _State:
        """The conversation's state: the cached replica advanced by the stream tail, or the
        stored snapshot plus the tail."""
        cached = self._replicas.get(keys.tag)
        if cached is not None and cached.inc == inc and await self._read_tail(keys, cached):
            self._replicas.move_to_end(keys.tag)
            return cached
        snap = await self.redis.hgetall(keys.snap)
        if snap:
            state = _State(
                inc,
                AgentStore(orjson.loads(snap[b"state"]), mode="record"),
                orjson.loads(snap.get(b"ext") or b"{}"),
                _s(snap[b"cursor"]),
            )
        else:
            state = _State(inc, AgentStore(mode="record"), {})
        if not await self._read_tail(keys, state):
            log.warning(
                "conversation %s: snapshot older than the retained log; snapshot_every should "
                "be below event_log_max_len",
                keys.tag,
            )
            state.fold(await self.log.read_after(keys, ZERO_ID, count=10**9) or [])
        self._remember(keys.tag, state)
        return state

    async def snapshot(self, ref: ConversationRef) -> Snapshot | None:
        keys = self.keys(ref)
        owned = self._owned.get(keys.tag)
        with _unavailable():
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.hmget(keys.meta, "inc", "meta")
                pipe.get(keys.run)
                pipe.exists(keys.lease)
                (inc, raw_meta), run, alive = await pipe.execute()
            if inc is None or raw_meta is None:
                return None
            meta = ConversationMeta.from_dict(orjson.loads(raw_meta))
            if owned is not None and not owned.fenced and not owned.dirty:
                state = owned.state
            else:
                if run is not None and not alive:
                    await self._reap(keys, Token(_s(run)))
                async with self._lock(keys.tag):
                    state = await self._load(keys, _s(inc))
        return Snapshot(
            state=state.store.get_snapshot(),
            cursor=_cursor(state.inc, state.stream_id),
            extensions=dict(state.extensions),
            meta=meta,
        )

    # --- log -----------------------------------------------------------------------------
    def _entry(self, inc: str, entry: Entry) -> LogEntry:
        cached = entry.cache
        if isinstance(cached, LogEntry) and cached.cursor.startswith(inc + "."):
            return cached
        kind: Literal["event", "extension"] = "event" if entry.kind == KIND_EVENT else "extension"
        made = LogEntry(
            _cursor(inc, entry.id), kind, entry.data, entry.type or None, entry.run_id or None
        )
        entry.cache = made
        return made

    async def _owner_append(self, owned: _Owned, item: Pending) -> str:
        snap = None
        owned.since_snapshot += 1
        if owned.since_snapshot >= self.snapshot_every:
            owned.since_snapshot = 0
            snap = owned.state.snapshot_write()
        try:
            ids = await owned.writer.append([item], snapshot=snap)
        except Fenced:
            self._fence(owned)
            raise RunFenced(owned.token.run_id) from None
        except BaseException:
            # The local state may be ahead of the log now (or not, if the append landed):
            # rebuild it from Redis before the next append.
            owned.dirty = True
            raise
        owned.state.stream_id = ids[0]
        if snap is not None:
            self._touch_later(owned.keys)
        return ids[0]

    async def _live_owned(self, keys: ConversationKeys) -> _Owned | None:
        """Our run's record for the conversation (state rebuilt if an append failed)."""
        owned = self._owned.get(keys.tag)
        if owned is None:
            return None
        if owned.fenced:
            raise RunFenced(owned.token.run_id)
        if owned.dirty:
            async with self._lock(keys.tag):
                if owned.dirty:
                    inc = await self.redis.hget(keys.meta, "inc")
                    self._replicas.pop(keys.tag, None)
                    owned.state = await self._load(keys, _s(inc) if inc else owned.state.inc)
                    self._replicas.pop(keys.tag, None)
                    owned.dirty = False
        return owned

    async def _free_append(self, keys: ConversationKeys, item: Pending, fold: Any) -> LogEntry:
        """Append outside a run of ours (no run may be active): fenced by the empty token."""
        async with self._lock(keys.tag):
            inc = await self.redis.hget(keys.meta, "inc")
            if inc is None:
                raise KeyError(f"conversation {keys.tag} does not exist")
            state = await self._load(keys, _s(inc))
            fold(state)
            snap = state.snapshot_write()
            try:
                ids = await self.log.append(keys, "", [item], snapshot=snap)
            except Fenced:
                self._replicas.pop(keys.tag, None)
                raise RunFenced("another instance owns the active run") from None
            except BaseException:
                self._replicas.pop(keys.tag, None)
                raise
            state.stream_id = ids[0]
            return self._entry(
                state.inc, Entry(ids[0], item.kind, item.data, item.type, item.run_id)
            )

    async def append_event(self, ref: ConversationRef, event: dict[str, Any]) -> LogEntry:
        keys = self.keys(ref)
        item = Pending(
            KIND_EVENT, orjson.dumps(event), str(event.get("type", "")), str(event.get("runId", ""))
        )
        with _unavailable():
            owned = await self._live_owned(keys)
            if owned is None:
                return await self._free_append(keys, item, lambda s: s.store.dispatch(event))
            owned.state.store.dispatch(event)
            stream_id = await self._owner_append(owned, item)
        return self._entry(
            owned.state.inc, Entry(stream_id, item.kind, item.data, item.type, item.run_id)
        )

    async def append_extension(self, ref: ConversationRef, key: str, value: Any) -> LogEntry:
        keys = self.keys(ref)
        item = Pending(KIND_EXTENSION, orjson.dumps({"key": key, "value": value}))

        def fold(state: _State) -> None:
            state.extensions[key] = value

        with _unavailable():
            owned = await self._live_owned(keys)
            if owned is None:
                return await self._free_append(keys, item, fold)
            fold(owned.state)
            stream_id = await self._owner_append(owned, item)
        return self._entry(owned.state.inc, _stored(stream_id, item))

    async def head_cursor(self, ref: ConversationRef) -> str:
        keys = self.keys(ref)
        with _unavailable():
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.hget(keys.meta, "inc")
                pipe.xrevrange(keys.log, count=1)
                inc, last = await pipe.execute()
        if inc is None or not last:
            return EMPTY_CURSOR
        return _cursor(_s(inc), _s(last[0][0]))

    async def _incarnation(self, reader: LogReader, keys: ConversationKeys) -> str | None:
        if not reader.inc_known:
            inc = await self.redis.hget(keys.meta, "inc")
            reader.inc = None if inc is None else _s(inc)
            reader.inc_known = True
        return reader.inc

    async def _read_once(
        self, reader: LogReader, keys: ConversationKeys, after: str, limit: int
    ) -> ReadResult:
        parsed = _parse_cursor(after)
        if parsed is None:
            return ReadResult("unknown")
        want_inc, sid = parsed
        inc = await self._incarnation(reader, keys)
        if inc is None:  # not created as far as we know: it may have been since
            reader.inc_known = False
            inc = await self._incarnation(reader, keys)
        if want_inc is not None and want_inc != inc:
            reader.inc_known = False  # maybe created or re-created since: look again
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
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, wait)
        with _unavailable():
            reader = await self.hub.acquire(keys)
            try:
                while True:
                    signal = reader.signal
                    result = await self._read_once(reader, keys, after, limit)
                    remaining = deadline - loop.time()
                    if result.entries or result.status != "ok" or remaining <= 0:
                        return result
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(signal.wait(), remaining)
                    if loop.time() >= deadline:
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
            await self._reap(keys, Token(_s(run)))

    # --- runs ----------------------------------------------------------------------------
    async def _reap(self, keys: ConversationKeys, holder: Token) -> None:
        """End the run of a lost owner under a new fencing token."""
        if holder.instance == self.instance_id and keys.tag in self._owned:
            return  # ours and alive: the lease keeper renews it
        token = await self.ownership.takeover(keys, holder)
        if token is None:
            return  # its owner is alive after all, or another instance got there first
        started = time.monotonic()
        async with self._lock(keys.tag):
            inc = await self.redis.hget(keys.meta, "inc")
            events: list[dict[str, Any]] = []
            state: _State | None = None
            if inc is not None:
                self._replicas.pop(keys.tag, None)
                state = await self._load(keys, _s(inc))
                events = lost_run_events(state.store.get_snapshot(), holder.run_id)
                for event in events:
                    state.store.dispatch(event)
            items = [Pending(KIND_EVENT, orjson.dumps(e), e["type"], e["runId"]) for e in events]
            try:
                ids = await self.log.append(
                    keys,
                    token.raw,
                    items,
                    release=True,
                    snapshot=state.snapshot_write() if state is not None else None,
                )
            except Fenced:
                self._replicas.pop(keys.tag, None)
                return
            if state is not None and ids:
                state.stream_id = ids[-1]
            await self.ownership.unmark(keys)
        log.warning(
            "run %s lost its owner %s; ended by %s (%d events, %.0f ms)",
            holder.run_id,
            holder.instance,
            self.instance_id,
            len(events),
            (time.monotonic() - started) * 1000,
        )

    async def _holder(self, keys: ConversationKeys) -> Token | None:
        """The live holder of the run slot; a lost one is reaped first (then None)."""
        token, alive = await self.ownership.holder(keys)
        if token is not None and not alive and keys.tag not in self._owned:
            await self._reap(keys, token)
            token, _ = await self.ownership.holder(keys)
        return token

    def _fence(self, owned: _Owned) -> None:
        if not owned.fenced:
            owned.fenced = True
            log.warning("run %s: this instance lost ownership", owned.token.run_id)
            owned.control.abort("shutdown")

    async def _watch_lease(self, owned: _Owned) -> None:
        await owned.lost.wait()
        self._fence(owned)

    async def claim_run(self, ref: ConversationRef, control: RunControl) -> bool:
        keys = self.keys(ref)
        with _unavailable():
            claim = await self.ownership.claim(keys, control.run_id)
            if claim.status == "lost":
                await self._reap(keys, claim.token)
                claim = await self.ownership.claim(keys, control.run_id)
            if claim.status != "ok":
                return False
            token = claim.token
            try:
                await self.ownership.mark(keys)
                inc = await self.redis.hget(keys.meta, "inc")
                async with self._lock(keys.tag):
                    state = await self._load(keys, _s(inc) if inc is not None else new_token(6))
                    self._replicas.pop(keys.tag, None)  # the owner's copy is the live one
            except BaseException:
                with contextlib.suppress(Exception):
                    await self.ownership.release(keys, token)
                raise
        lost = asyncio.Event()

        async def on_command(raw: bytes) -> None:
            data = orjson.loads(raw)
            control.deliver(Command(data["type"], data.get("payload") or {}))

        owned = _Owned(
            keys=keys,
            token=token,
            control=control,
            writer=FencedWriter(self.log, keys, token.raw),
            state=state,
            keeper=LeaseKeeper(self.ownership, keys, token, lost),
            inbox=OwnerInbox(
                self.redis,
                self.bus,
                keys,
                control.run_id,
                on_abort=lambda reason: control.abort(reason),  # type: ignore[arg-type]
                on_command=on_command,
                poll_interval=self.poll_interval,
            ),
            lost=lost,
        )
        self._owned[keys.tag] = owned
        owned.keeper.start()
        owned.inbox.start()
        owned.watch = asyncio.create_task(self._watch_lease(owned))
        return True

    async def _stop_owned(self, owned: _Owned) -> None:
        await owned.keeper.stop()
        await owned.inbox.stop()
        if owned.watch is not None:
            owned.watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await owned.watch

    async def release_run(self, ref: ConversationRef, run_id: str) -> None:
        keys = self.keys(ref)
        owned = self._owned.get(keys.tag)
        if owned is None or owned.token.run_id != run_id:
            return
        del self._owned[keys.tag]
        await self._stop_owned(owned)
        if owned.fenced:
            return
        with _unavailable():
            if owned.dirty:
                self._owned[keys.tag] = owned
                try:
                    await self._live_owned(keys)
                finally:
                    self._owned.pop(keys.tag, None)
            try:
                await owned.writer.append([], release=True, snapshot=owned.state.snapshot_write())
            except Fenced:
                return
            await self.ownership.unmark(keys)
            await self._touch(keys)
        self._remember(keys.tag, owned.state)

    async def active_run(self, ref: ConversationRef) -> str | None:
        with _unavailable():
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
            owned.control.abort(reason)  # ours: no round trip needed to reach the run
            return owned.token.run_id
        with _unavailable():
            if await self._holder(keys) is None:
                return None
            return await self.control.abort(keys, run_id, reason)

    async def send_command(self, ref: ConversationRef, run_id: str, command: Command) -> bool:
        keys = self.keys(ref)
        owned = self._owned.get(keys.tag)
        local = owned is not None and not owned.fenced and owned.token.run_id == run_id
        target = _command_target(command)
        body = None
        if not local:
            body = orjson.dumps({"type": command.type, "payload": dict(command.payload)})
        with _unavailable():
            status = await self.control.command(keys, run_id, body, target)
        if status == 2:
            code, message = _IN_FLIGHT.get(command.type, ("run_not_running", "Already sent."))
            raise ApiError(409, code, message.format(target))
        if status == 1 and local:
            assert owned is not None
            owned.control.deliver(command)
        return status == 1

    # --- idempotency ---------------------------------------------------------------------
    async def idempotency_get(self, scope: str) -> IdempotencyRecord | None:
        with _unavailable():
            raw = await self.redis.get(idempotency_key(scope, self.prefix))
        if raw is None:
            return None
        data = orjson.loads(raw)
        return IdempotencyRecord(data["fingerprint"], data["status"], data["body"])

    async def idempotency_put(self, scope: str, record: IdempotencyRecord, ttl: float) -> bool:
        body = orjson.dumps(
            {"fingerprint": record.fingerprint, "status": record.status, "body": record.body}
        )
        with _unavailable():
            stored = await self.redis.set(
                idempotency_key(scope, self.prefix), body, nx=True, px=max(1, int(ttl * 1000))
            )
        return bool(stored)
