"""The conversation's event log as one Redis Stream: fenced appends, ranged reads, gap checks.

An entry has the fields ``k`` (kind: ``x`` an extension value; absent, read as ``e``, for an
AgentEvent), ``d`` (its JSON, serialized once by the writer), ``t`` (event type) and ``r`` (run
id), so readers build frames without parsing the JSON. The stream id is the log position; the
backend wraps it with the conversation's incarnation into the opaque cursor.

Appends go through :class:`FencedWriter`: concurrent appends of one owner are coalesced into a
single ``EVALSHA``, and the script rejects the batch with ``FENCED`` when the writer's token no
longer owns the run. The ``EVALSHA`` calls of different conversations that are ready together
share one pipelined round trip (:class:`.script_pipeline.ScriptPipeline`), each with its own
reply or error.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import os
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import ClusterDownError, ResponseError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.backends.redis.cluster import is_cluster
from app.backends.redis.cluster_scripts import ClusterScriptPipeline
from app.backends.redis.keys import ConversationKeys
from app.backends.redis.scripts import APPEND
from app.compat.redis_fast import ScriptPipeline, pack_append_args, uses_fast_paths

KIND_EVENT = "e"
KIND_EXTENSION = "x"
ZERO_ID = "0-0"
APPROXIMATE_TRIM_FROM = 1000
#: Pause between two attempts of an append that failed because Redis was unreachable.
RETRY_INTERVAL = 0.1
#: Failures after which an append may be retried (the batch may or may not have landed); on a
#: cluster also the refusals of a failover (CLUSTERDOWN while a failed master's slots have no
#: master yet, which every node answers for every slot by default; TRYAGAIN): nothing written.
TRANSIENT = (RedisConnectionError, RedisTimeoutError, OSError, ClusterDownError, TryAgainError)

log = logging.getLogger("app.backends.redis")

#: Batch nonces: a random prefix per process and a counter (``secrets`` per batch was a
#: ``getrandom`` call per append); unique per batch, which is all the append script compares.
_nonce_prefix = secrets.token_hex(8)
_nonces = itertools.count()


def _new_nonce_prefix() -> None:
    global _nonce_prefix, _nonces
    _nonce_prefix, _nonces = secrets.token_hex(8), itertools.count()


os.register_at_fork(after_in_child=_new_nonce_prefix)  # a forked worker is another writer


def new_nonce() -> str:
    """A nonce no other batch of any instance carries."""
    return f"{_nonce_prefix}{next(_nonces):x}"


class Fenced(Exception):
    """The writer's fencing token no longer owns the run: nothing was appended."""


def parse_id(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Entry:
    """One stream entry; ``cache`` holds the LogEntry built from it (its frames) once, for the
    conversation incarnation ``inc`` ('' while none is built)."""

    __slots__ = ("cache", "data", "id", "inc", "kind", "run_id", "type")

    def __init__(self, id: str, kind: str, data: bytes, type: str = "", run_id: str = "") -> None:
        self.id = id
        self.kind = kind
        self.data = data
        self.type = type
        self.run_id = run_id
        self.inc = ""
        self.cache: Any = None


class Pending(NamedTuple):
    """An entry to append. A tuple, built once per logged event: a frozen dataclass's ``__init__``
    (one ``object.__setattr__`` per field) costs more (BENCHMARKS.md, "Costs behind the code's
    shortcuts")."""

    kind: str
    data: bytes
    type: str = ""
    run_id: str = ""


@dataclass(frozen=True, slots=True)
class SnapshotWrite:
    """A snapshot to store with an append: state and extensions JSON, reflecting the batch."""

    state: bytes
    extensions: bytes
    #: The cursor to record when the append has no entries (else: the last new id).
    cursor: str = ZERO_ID


#: Closes a batch to joiners and answers what to write: items, release, snapshot.
CloseBatch = Callable[[], tuple[Sequence[Pending], bool, SnapshotWrite | None]]


@dataclass(slots=True)
class _Batch:
    items: list[Pending] = field(default_factory=list)
    release: bool = False
    snapshot: SnapshotWrite | None = None
    done: asyncio.Future[list[str]] | None = None
    #: Packed for its write: from then on it takes no joiners, may have landed, and can no
    #: longer be handed on.
    sent: bool = False


def entries_from_reply(reply: Sequence[Any]) -> list[Entry]:
    out: list[Entry] = []
    for raw_id, fields in reply:
        if not isinstance(fields, dict):  # RESP2 flat list
            fields = dict(zip(fields[::2], fields[1::2], strict=True))
        out.append(
            Entry(
                _s(raw_id),
                _s(fields.get(b"k", b"e")),
                bytes(fields.get(b"d", b"")),
                _s(fields.get(b"t", b"")),
                _s(fields.get(b"r", b"")),
            )
        )
    return out


#: The append script's last argument: the batch's first send, or one that may repeat it.
FRESH = "1"
LOOK = "0"


def _looked_for(args: Sequence[Any]) -> list[Any]:
    """The append's arguments for a send that may repeat an earlier one: the script looks
    for the batch's nonce before writing."""
    return [*args[:-1], LOOK]


@functools.lru_cache(maxsize=4096)
def _append_keys(keys: ConversationKeys) -> tuple[str, ...]:
    """The keys the append script takes, built once per conversation (every append names them)."""
    return (
        keys.run,
        keys.log,
        keys.lease,
        keys.snap,
        keys.abort,
        keys.cmd,
        keys.inflight,
        keys.meta,
    )


def _info_dict(info: Any) -> dict[str, Any]:
    if isinstance(info, dict):
        return {_s(k): v for k, v in info.items()}
    return {_s(info[i]): info[i + 1] for i in range(0, len(info), 2)}


class EventLog:
    """Appends and reads of one Redis client over any conversation's stream."""

    def __init__(
        self, redis: Redis, max_len: int, *, wait_replicas: int = 0, wait_timeout_ms: int = 1000
    ) -> None:
        self.redis = redis
        self.max_len = max_len
        # One more than the retention: the oldest entry kept is the cursor just before the
        # ``max_len`` resumable ones. Large logs trim approximately (whole radix-tree nodes,
        # cheap); small ones exactly, so retention stays observable.
        keep = max_len + 1
        self._maxlen_arg = f"~{keep}" if keep >= APPROXIMATE_TRIM_FROM else f"={keep}"
        script = redis.register_script(APPEND)
        #: A cluster's appends take redis-py's cluster pipeline (one slot per call, calls to
        #: several shards in parallel); ``wait_replicas`` applies there (``WAIT`` per node).
        self._append: ScriptPipeline | ClusterScriptPipeline = (
            ClusterScriptPipeline(
                redis, script, wait_replicas=wait_replicas, wait_timeout_ms=wait_timeout_ms
            )
            if is_cluster(redis)
            else ScriptPipeline(
                redis, script, pack_args=pack_append_args, fast=uses_fast_paths(redis)
            )
        )

    async def append(
        self,
        keys: ConversationKeys,
        token: str,
        items: Sequence[Pending],
        *,
        release: bool = False,
        snapshot: SnapshotWrite | None = None,
        nonce: str | None = None,
    ) -> list[str]:
        """Append ``items`` atomically under ``token`` ('' = only while no run is active).

        ``nonce`` names the batch (a fresh one by default): the script sent again with the same
        nonce, as a client-side retry after a lost reply does, answers the ids and writes nothing.
        """
        fresh = nonce is None  # a nonce of the caller's may have been sent before
        return await self.append_when_packed(
            keys,
            token,
            lambda: (items, release, snapshot),
            new_nonce() if nonce is None else nonce,
            fresh=fresh,
        )

    async def append_when_packed(
        self,
        keys: ConversationKeys,
        token: str,
        close: CloseBatch,
        nonce: str,
        *,
        fresh: bool = False,
        prev: str = "",
    ) -> list[str]:
        """:meth:`append` of the batch ``close`` answers (items, release, snapshot) when the
        call is packed into its pipeline: until then the batch can still take more.
        ``fresh``: the first send of the batch ``nonce`` names (the script then does not look
        for it in the log; a resend by redis-py's path still does). ``prev``: the id the
        writer's last batch ended at ('' = none): a first new id not after it gives the
        conversation's incarnation a new epoch (the log lost entries: ``scripts.APPEND``)."""

        reply = self.submit_append(keys, token, close, nonce, fresh=fresh, prev=prev)
        try:
            await reply
        except ResponseError:
            pass  # raised by appended_ids, as the writer raises it
        return self.appended_ids(reply, token)

    def submit_append(
        self,
        keys: ConversationKeys,
        token: str,
        close: CloseBatch,
        nonce: str,
        *,
        fresh: bool = False,
        prev: str = "",
    ) -> asyncio.Future[Any]:
        """:meth:`append_when_packed`'s script call, not awaited: its reply, for
        :meth:`appended_ids`."""
        args = self._packed_args(token, close, nonce, fresh, prev)
        return self._append.call(_append_keys(keys), args, _looked_for)

    def submit_append_then(
        self,
        keys: ConversationKeys,
        token: str,
        close: CloseBatch,
        nonce: str,
        then: Callable[[Any], None],
        *,
        fresh: bool = False,
        prev: str = "",
    ) -> None:
        """:meth:`submit_append` with its raw reply handed to ``then`` when it is read (the
        reply, or the error as an exception object), for :meth:`ids_of`."""
        args = self._packed_args(token, close, nonce, fresh, prev)
        self._append.call_then(_append_keys(keys), args, _looked_for, then)

    def _packed_args(
        self, token: str, close: CloseBatch, nonce: str, fresh: bool, prev: str = ""
    ) -> Callable[[], list[Any]]:
        """The script's arguments of the batch ``close`` answers, built when the call is
        packed (until then the batch can still take more)."""

        def args() -> list[Any]:
            items, release, snapshot = close()
            return self._args(token, items, release, snapshot, nonce, fresh, prev)

        return args

    @staticmethod
    def appended_ids(reply: asyncio.Future[Any], token: str) -> list[str]:
        """The stream ids of a settled :meth:`submit_append` (its error raised: ``Fenced`` for
        a token that no longer owns the run; ``CancelledError`` for a call withdrawn)."""
        # exception() raises CancelledError for a withdrawn call, as result() does.
        return EventLog.ids_of(reply.exception() or reply.result(), token)

    @staticmethod
    def ids_of(reply: Any, token: str) -> list[str]:
        """:meth:`appended_ids` of a raw reply of :meth:`submit_append_then`."""
        if isinstance(reply, BaseException):
            if isinstance(reply, ResponseError):
                raise _fenced(reply, token) from None
            raise reply
        return _ids(reply)

    def _args(
        self,
        token: str,
        items: Sequence[Pending],
        release: bool,
        snapshot: SnapshotWrite | None,
        nonce: str,
        fresh: bool = False,
        prev: str = "",
    ) -> list[Any]:
        args: list[Any] = [
            token,
            self._maxlen_arg,
            "1" if release else "0",
            snapshot.state if snapshot is not None else b"",
            snapshot.extensions if snapshot is not None else b"",
            snapshot.cursor if snapshot is not None else ZERO_ID,
            len(items),
        ]
        args += itertools.chain.from_iterable(items)  # (kind, data, type, run id) each
        args.append(nonce)
        args.append(prev)
        args.append(FRESH if fresh else LOOK)
        return args

    async def aclose(self) -> None:
        """Hand back the connection the appends hold (before the client's pool closes)."""
        await self._append.aclose()

    async def read_after(
        self, keys: ConversationKeys, after: str, count: int = 1000
    ) -> list[Entry] | None:
        """Up to ``count`` entries strictly after ``after``; ``None`` when the log no longer
        holds ``after`` and everything after it (some entries were trimmed, or lost by a Redis
        restarted from an AOF that missed its last writes), so the caller sends a snapshot."""
        async with self.redis.pipeline(transaction=False) as pipe:
            self.read_after_in(pipe, keys, after, count)
            rng, info = await pipe.execute(raise_on_error=False)
        return self.read_after_reply(after, rng, info)

    @staticmethod
    def read_after_in(pipe: Pipeline, keys: ConversationKeys, after: str, count: int) -> None:
        """:meth:`read_after` as two commands of ``pipe`` (executed with
        ``raise_on_error=False``); their replies go to :meth:`read_after_reply`."""
        # From ``after`` itself (one entry more): its absence tells a lost position.
        if after == ZERO_ID:
            pipe.xrange(keys.log, min="-", count=count)
        else:
            pipe.xrange(keys.log, min=after, count=count + 1)
        pipe.execute_command("XINFO", "STREAM", keys.log)

    @staticmethod
    def read_after_reply(after: str, rng: Any, info: Any) -> list[Entry] | None:
        """:meth:`read_after`'s answer from the replies of :meth:`read_after_in`."""
        for reply in (rng, info):
            if isinstance(reply, Exception):
                # Its traceback holds the frames that hold the reply list that holds it: a
                # cycle per read of a log not created yet (each new conversation's first
                # claim), left for a full collection to find. Raised again, it gets a new one.
                reply.__traceback__ = None
        if isinstance(rng, Exception):
            raise rng
        entries = entries_from_reply(rng)
        if after != ZERO_ID:
            if not entries or parse_id(entries[0].id) != parse_id(after):
                return None  # ``after`` is not an entry of this log (any more)
            del entries[0]
        if isinstance(info, Exception):
            if "no such key" in str(info).lower():
                return entries  # no stream yet: nothing was trimmed
            raise info
        fields = _info_dict(info)
        if int(fields.get("entries-added", 0)) > int(fields.get("length", 0)):
            # Something was trimmed. The first retained entry is kept only as the position
            # before the retained window; a cursor below it may have lost what followed it.
            first = _s(fields.get("recorded-first-entry-id") or ZERO_ID)
            if parse_id(after) < parse_id(first):
                return None
        return entries

    async def last_id(self, keys: ConversationKeys) -> str:
        """The newest stream id (``0-0`` for an empty or missing log)."""
        res = await self.redis.xrevrange(keys.log, count=1)
        return entries_from_reply(res)[0].id if res else ZERO_ID


def _ids(res: Any) -> list[str]:
    return [x.decode() if type(x) is bytes else str(x) for x in res]


def _fenced(exc: ResponseError, token: str) -> Exception:
    """The append script's error as the writer raises it (``FENCED``: :class:`Fenced`)."""
    return Fenced(token) if "FENCED" in str(exc) else exc


#: Told how an ``append_soon`` ended: ``(ids, None)`` or ``(None, error)``.
Settled = Callable[[list[str] | None, Exception | None], None]


async def _settled(outcome: asyncio.Future[list[str]]) -> None:
    """Wait until ``outcome`` is set, whatever it is (a failure is its batch's callers')."""
    try:
        await asyncio.shield(outcome)
    except Exception:
        pass


class FencedWriter:
    """Coalesces concurrent appends of one owner into one script call per round trip.

    With ``deadline`` (a ``time.monotonic()`` value until which the owner's lease is surely
    valid), an append that fails because Redis is unreachable is retried, in order (later
    batches wait behind it), until that deadline: before each new attempt the log's tail is
    checked so a batch that landed (its reply lost) is not written twice. Past the deadline the
    writer gives up for good: that append and every later one raise :class:`Fenced`.
    """

    def __init__(
        self,
        log: EventLog,
        keys: ConversationKeys,
        token: str,
        deadline: Callable[[], float] | None = None,
    ) -> None:
        self._log = log
        self._keys = keys
        self.token = token
        self._deadline = deadline
        self._given_up = False
        self._queue: _Batch | None = None
        #: The newest batch's outcome: the next batch is written once it is settled.
        self._last: asyncio.Future[list[str]] | None = None
        self._flushes: set[asyncio.Future[None]] = set()
        #: Counts the writes retried because Redis was unreachable: a Redis that restarted
        #: meanwhile may have lost the newest entries (see ``RedisAppends``).
        self.retried = 0
        #: The id the last batch that landed ended at ('' = none yet): sent with the next
        #: batch, whose first id must follow it (else the log lost entries: a new epoch).
        self.last_id = ""
        #: Counts the batches whose first id did not follow ``last_id``: the log had lost
        #: entries, and the append gave the conversation's incarnation a new epoch.
        self.broken = 0

    async def append(
        self,
        items: Sequence[Pending],
        *,
        release: bool = False,
        snapshot: SnapshotWrite | None = None,
    ) -> list[str]:
        """Append (batched with concurrent callers); returns this call's stream ids.

        Without a batch to join, the caller opens one and writes it in its own task (no flush task,
        which costs CPU per append: BENCHMARKS.md, "Costs behind the code's shortcuts") once the
        batch before it is settled. It takes joiners until its script call is packed into a pipeline
        (``ScriptPipeline``: the loop turn after this one at the earliest, later while the pipeline
        before it is on the wire), so it is sent with no turn of its own: a slow stream's delta,
        appended alone, reached its subscribers one loop iteration later when the batch waited a
        turn to be joined."""
        batch = self._queue
        if batch is not None:  # a batch not sent yet: join it
            start = len(batch.items)
            batch.items.extend(items)
            batch.release = batch.release or release
            if snapshot is not None:
                batch.snapshot = snapshot
            if snapshot is not None or release:
                # The snapshot reflects exactly the items so far: later appends start a new one.
                self._queue = None
            assert batch.done is not None
            ids = await asyncio.shield(batch.done)
            return ids[start : start + len(items)]
        done: asyncio.Future[list[str]] = asyncio.get_running_loop().create_future()
        batch = _Batch(list(items), release, snapshot, done)
        before, self._last = self._last, done  # batches are written in the order they opened
        if snapshot is None and not release:
            self._queue = batch
        try:
            # Not a method of its own: every append of a run passes through each frame of
            # the chain that awaits it, once to send and once for the reply.
            ids = await self._write_in_turn(batch, before)
        except asyncio.CancelledError:
            self._hand_off(batch, before)
            raise
        return ids[: len(items)]

    def idle(self) -> bool:
        """No batch is open or in flight, and the writer has not given up: an append now is
        sent at once (:meth:`append_soon` may write it)."""
        last = self._last
        return self._queue is None and (last is None or last.done()) and not self._given_up

    def append_soon(
        self, items: Sequence[Pending], snapshot: SnapshotWrite | None, settled: Settled
    ) -> None:
        """:meth:`append` on an :meth:`idle` writer, not waited for: ``settled(ids, None)``
        or ``settled(None, error)`` is called once, as its reply is read, with what
        :meth:`append` would have returned or raised (a lost connection retried the same way,
        in a task then). Appends made meanwhile join the batch or wait behind it as usual."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[list[str]] = loop.create_future()
        batch = _Batch(list(items), False, snapshot, done)
        self._last = done
        if snapshot is None:
            self._queue = batch
        nonce = new_nonce()
        self._log.submit_append_then(
            self._keys,
            self.token,
            functools.partial(self._close, batch),
            nonce,
            functools.partial(self._soon_replied, batch, nonce, len(items), settled),
            fresh=True,
            prev=self.last_id,
        )

    def _soon_replied(
        self, batch: _Batch, nonce: str, n: int, settled: Settled, reply: Any
    ) -> None:
        if self._queue is batch:  # failed before it was packed: nothing more joins it
            self._queue = None
        try:
            ids = EventLog.ids_of(reply, self.token)
        except asyncio.CancelledError:  # withdrawn (the pipeline closed): it may have landed
            self._soon_failed(batch, settled, RedisConnectionError("the append was withdrawn"))
        except TRANSIENT as exc:
            if self._deadline is None:
                self._soon_failed(batch, settled, exc)
                return
            self.retried += 1
            task = asyncio.get_running_loop().create_task(
                self._soon_again(batch, nonce, n, settled, exc)
            )
            self._flushes.add(task)
            task.add_done_callback(self._flushes.discard)
        except Exception as exc:
            self._soon_failed(batch, settled, exc)
        else:
            self._soon_landed(batch, settled, ids, n)

    async def _soon_again(
        self, batch: _Batch, nonce: str, n: int, settled: Settled, failed: Exception
    ) -> None:
        """An :meth:`append_soon` whose send failed on the connection: retried as
        :meth:`append` retries, in this task."""
        try:
            ids = await self._write(batch, nonce, failed)
        except asyncio.CancelledError:  # its caller is told, never left waiting
            error = RedisConnectionError("the append's retry was cancelled")
            self._soon_failed(batch, settled, error)
            raise
        except Exception as exc:
            self._soon_failed(batch, settled, exc)
            return
        self._soon_landed(batch, settled, ids, n)

    def _soon_landed(self, batch: _Batch, settled: Settled, ids: list[str], n: int) -> None:
        """The batch's ids to its joiners, and the opener's first ``n`` to ``settled``."""
        assert batch.done is not None
        self._follows(ids)
        batch.done.set_result(ids)
        settled(ids[:n], None)

    @staticmethod
    def _soon_failed(batch: _Batch, settled: Settled, error: Exception) -> None:
        assert batch.done is not None
        batch.done.set_exception(error)
        batch.done.exception()  # retrieved here for the loop; the joiners get it too
        settled(None, error)

    async def _write_in_turn(
        self, batch: _Batch, before: asyncio.Future[list[str]] | None
    ) -> list[str]:
        """Write ``batch`` once the batch before it is settled; its outcome is its joiners'."""
        assert batch.done is not None
        if before is not None and not before.done():
            await _settled(before)
        try:
            ids = await self._write(batch)
        except Exception as exc:
            if self._queue is batch:  # failed before it was packed: nothing more joins it
                self._queue = None
            batch.done.set_exception(exc)
            batch.done.exception()  # retrieved here for the loop; the joiners get it too
            raise
        batch.done.set_result(ids)
        return ids

    def _close(self, batch: _Batch) -> tuple[list[Pending], bool, SnapshotWrite | None]:
        """``batch`` is packed for its write: no more joiners."""
        if self._queue is batch:
            self._queue = None
        batch.sent = True
        return batch.items, batch.release, batch.snapshot

    def _hand_off(self, batch: _Batch, before: asyncio.Future[list[str]] | None) -> None:
        """The leader was cancelled: a batch not sent yet is written by a task of its own, in
        its place (its joiners still get their ids; the batches after it still wait for it);
        one cut off mid-write may or may not have landed, which its joiners are told as a
        connection error (their run reloads its state)."""
        if self._queue is batch:
            self._queue = None
        assert batch.done is not None
        if batch.sent:
            batch.done.set_exception(RedisConnectionError("the append's writer was cancelled"))
            batch.done.exception()
            return
        task = asyncio.get_running_loop().create_task(self._flush(batch, before))
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def _flush(self, batch: _Batch, before: asyncio.Future[list[str]] | None) -> None:
        with contextlib.suppress(Exception):  # the outcome is in ``batch.done``, for its joiners
            await self._write_in_turn(batch, before)

    async def _write(
        self, batch: _Batch, nonce: str | None = None, failed: Exception | None = None
    ) -> list[str]:
        """Write ``batch``; ``failed``: its first send (``nonce``'s) failed so, to retry."""
        if self._given_up:
            raise Fenced(self.token)
        attempt = 0
        if nonce is None:
            nonce = new_nonce()  # one per batch, so every retry of it is recognised
        close = functools.partial(self._close, batch)
        while True:
            try:
                if failed is not None:  # handled as this loop's own first attempt
                    error, failed = failed, None
                    raise error
                if attempt and batch.sent and batch.items:
                    landed = await self._landed(batch.items)
                    if landed is not None:
                        self._follows(landed)
                        return landed
                ids = await self._log.append_when_packed(
                    self._keys, self.token, close, nonce, fresh=not attempt, prev=self.last_id
                )
                self._follows(ids)
                return ids
            except TRANSIENT as exc:
                if self._deadline is None:
                    raise
                if time.monotonic() + RETRY_INTERVAL >= self._deadline():
                    self._given_up = True
                    log.warning("append of %s given up at its lease deadline: %s", self.token, exc)
                    raise Fenced(self.token) from exc
                attempt += 1
                self.retried += 1
                await asyncio.sleep(RETRY_INTERVAL)

    def _follows(self, ids: list[str]) -> None:
        """A batch landed at ``ids``: the next one must follow it; one not after the last
        is counted in :attr:`broken`."""
        if not ids:
            return
        if self.last_id and parse_id(ids[0]) <= parse_id(self.last_id):
            self.broken += 1
        self.last_id = ids[-1]

    async def _landed(self, items: Sequence[Pending]) -> list[str] | None:
        """The ids of ``items`` if they are the log's last entries (an earlier attempt landed)."""
        reply = await self._log.redis.xrevrange(self._keys.log, count=len(items))
        tail = entries_from_reply(reply or [])[::-1]
        if len(tail) != len(items):
            return None
        for entry, item in zip(tail, items, strict=True):
            if entry.kind != item.kind or entry.data != item.data:
                return None
        return [entry.id for entry in tail]
