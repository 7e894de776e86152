"""The durable webhook outbox: one Redis Stream per key prefix, read by a consumer group.

``P:webhooks`` holds one entry per webhook not yet delivered (fields ``i`` delivery id, ``e``
event, ``r`` run id, ``b`` body, ``c`` unix seconds of the run's end). Every instance with
webhooks on is a consumer of the group ``webhooks`` (named by its instance id): it reads new
entries with ``XREADGROUP``, and an entry stays in its pending list until it is done (delivered
or given up), then ``XACK`` + ``XDEL`` (the stream only holds what is undelivered; ``MAXLEN ~``
bounds it besides). A failed attempt keeps the entry pending here and it is retried after its
backoff. The holder refreshes the idle time of what it holds every ``claim_idle``/3
(``XCLAIM … JUSTID``); an entry idle for ``claim_idle`` belongs to a dead instance and is taken
over by whichever instance's ``XAUTOCLAIM`` finds it first, which delivers it with the same body
and delivery id. A graceful close hands its entries back at once (idle set to ``claim_idle``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from app.backends.due_queue import DueQueue
from app.backends.webhook_outbox import OutboxEntry
from app.tasks import stop_task

__all__ = ["GROUP", "RedisWebhookOutbox", "outbox_key"]

log = logging.getLogger("app.webhooks")
GROUP = "webhooks"
#: Entries one instance holds at most (being attempted or waiting for their retry).
CAPACITY = 256
#: A failing Redis is retried after this long (the loops never end on an error).
ERROR_PAUSE_SECONDS = 0.5
#: Consumers of killed instances (nothing pending after the takeover) are removed from the
#: group once idle this long (a live one reads every second), checked this often.
DEAD_CONSUMER_IDLE_MS = 3_600_000
CLEANUP_EVERY_SECONDS = 600.0


def outbox_key(prefix: str) -> str:
    return f"{prefix}:webhooks"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisWebhookOutbox:
    def __init__(
        self,
        redis: Redis,
        prefix: str,
        consumer: str,
        *,
        claim_idle_seconds: float,
        max_len: int = 100_000,
        block_seconds: float = 1.0,
        capacity: int = CAPACITY,
    ) -> None:
        self.redis = redis
        self.key = outbox_key(prefix)
        self.consumer = consumer
        self.claim_idle_ms = max(100, int(claim_idle_seconds * 1000))
        self.max_len = max_len
        self.block_ms = max(10, int(block_seconds * 1000))
        self.capacity = capacity
        #: What this instance holds, by stream id (in its pending list, refreshed by the keeper).
        self._held: dict[str, OutboxEntry] = {}
        self._due: DueQueue[OutboxEntry] = DueQueue()
        self._room = asyncio.Event()
        self._room.set()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self._next_cleanup = time.monotonic() + CLEANUP_EVERY_SECONDS

    # --- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        if self._tasks:
            return
        self._stopping = False
        self._tasks = [
            asyncio.create_task(self._fetch_forever(), name="webhook-outbox-fetch"),
            asyncio.create_task(self._keep_forever(), name="webhook-outbox-keep"),
        ]

    async def drain(self, grace: float) -> None:
        return None  # durable: what this instance holds is handed back at close

    async def close(self) -> None:
        self._stopping = True
        for task in self._tasks:
            await stop_task(task)
        self._tasks = []
        with contextlib.suppress(RedisError, OSError):
            await self._hand_back()

    async def _hand_back(self) -> None:
        """Make what we hold claimable at once by the other instances (idle = claim_idle)."""
        held: list[Any] = list(self._held)
        self._held = {}
        if held:
            await self.redis.xclaim(
                self.key,
                GROUP,
                self.consumer,
                min_idle_time=0,
                message_ids=held,
                idle=self.claim_idle_ms,
                justid=True,
            )
            return
        info = await self.redis.xinfo_consumers(self.key, GROUP)
        ours = [c for c in info if _text(c.get("name")) == self.consumer]
        if ours and int(ours[0].get("pending", 0)) == 0:
            await self.redis.xgroup_delconsumer(self.key, GROUP, self.consumer)

    # --- the outbox ----------------------------------------------------------------------
    async def put(self, entry: OutboxEntry) -> None:
        fields: dict[Any, Any] = {
            "i": entry.delivery_id,
            "e": entry.event,
            "r": entry.run_id,
            "b": entry.body,
            "c": repr(entry.created),
        }
        await self.redis.xadd(self.key, fields, maxlen=self.max_len, approximate=True)

    async def take(self) -> OutboxEntry:
        while True:
            entry = await self._due.pop()
            if entry.handle in self._held:  # else another instance took it over meanwhile
                return entry

    async def later(self, entry: OutboxEntry, delay: float) -> None:
        if entry.handle in self._held:
            self._due.push(entry, time.monotonic() + delay)

    async def done(self, entry: OutboxEntry) -> None:
        self._release(entry.handle)
        for attempt in range(3):
            try:
                async with self.redis.pipeline(transaction=True) as pipe:
                    pipe.xack(self.key, GROUP, entry.handle)
                    pipe.xdel(self.key, entry.handle)
                    await pipe.execute()
                return
            except (RedisError, OSError) as exc:
                if attempt == 2:  # still pending: it is taken over after claim_idle (again)
                    log.info("webhook %s not acknowledged in Redis: %r", entry.delivery_id, exc)
                    return
                await asyncio.sleep(ERROR_PAUSE_SECONDS)

    async def pending(self) -> int:
        return int(await self.redis.xlen(self.key))

    # --- holding entries -----------------------------------------------------------------
    async def _hold(self, stream_id: Any, fields: dict[Any, Any]) -> OutboxEntry | None:
        """Hold a stream entry (due at once); None when held already or malformed (dropped)."""
        handle = _text(stream_id)
        if handle in self._held:
            return None
        try:
            entry = OutboxEntry(
                delivery_id=_text(fields[b"i"]),
                event=_text(fields[b"e"]),
                run_id=_text(fields[b"r"]),
                body=bytes(fields[b"b"]),
                created=float(fields[b"c"]),
                handle=handle,
            )
        except (KeyError, ValueError, TypeError):
            log.warning("webhook outbox entry %s is malformed: dropped", handle)
            await self.done(OutboxEntry("", "", "", b"", 0.0, handle))
            return None
        self._held[handle] = entry
        if len(self._held) >= self.capacity:
            self._room.clear()
        self._due.push(entry)
        return entry

    def _release(self, handle: str) -> None:
        self._held.pop(handle, None)
        if len(self._held) < self.capacity:
            self._room.set()

    async def _ensure_group(self) -> None:
        try:
            await self.redis.xgroup_create(self.key, GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def _fetch_forever(self) -> None:
        """New entries (``>``), as many as there is room for."""
        while not self._stopping:
            try:
                await self._room.wait()
                room = self.capacity - len(self._held)
                reply: Any = await self.redis.xreadgroup(
                    GROUP, self.consumer, {self.key: ">"}, count=min(32, room), block=self.block_ms
                )
                for _stream, entries in reply or ():
                    for stream_id, fields in entries:
                        await self._hold(stream_id, fields)
            except ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    log.warning("webhook outbox read failed: %s", exc)
                    await asyncio.sleep(ERROR_PAUSE_SECONDS)
                    continue
                with contextlib.suppress(RedisError, OSError):
                    await self._ensure_group()
            except (RedisError, OSError) as exc:
                log.debug("webhook outbox read skipped: %r", exc)
                await asyncio.sleep(ERROR_PAUSE_SECONDS)

    async def _keep_forever(self) -> None:
        """Every claim_idle/3: refresh what we hold, take over what a dead instance held."""
        while not self._stopping:
            await asyncio.sleep(self.claim_idle_ms / 3000)
            try:
                await self._refresh()
                await self._take_over()
                if time.monotonic() >= self._next_cleanup:
                    self._next_cleanup = time.monotonic() + CLEANUP_EVERY_SECONDS
                    await self._forget_dead_consumers()
            except ResponseError as exc:
                if "NOGROUP" in str(exc):
                    with contextlib.suppress(RedisError, OSError):
                        await self._ensure_group()
                else:
                    log.warning("webhook outbox upkeep failed: %s", exc)
            except (RedisError, OSError) as exc:
                log.debug("webhook outbox upkeep skipped: %r", exc)

    async def _refresh(self) -> None:
        """Reset the idle time of our entries; forget those another instance took over."""
        if not self._held:
            return
        held = sorted(self._held, key=lambda h: tuple(int(p) for p in h.split("-")))
        ours = await self.redis.xpending_range(
            self.key,
            GROUP,
            min=held[0],
            max=held[-1],
            count=len(held) + 1000,
            consumername=self.consumer,
        )
        mine = {_text(item["message_id"]) for item in ours}
        for handle in held:
            if handle not in mine and handle in self._held:
                log.info(
                    "webhook %s was taken over by another instance", self._held[handle].delivery_id
                )
                self._release(handle)
        kept: list[Any] = [h for h in held if h in mine and h in self._held]
        if kept:
            await self.redis.xclaim(
                self.key, GROUP, self.consumer, min_idle_time=0, message_ids=kept, justid=True
            )

    async def _forget_dead_consumers(self) -> None:
        for consumer in await self.redis.xinfo_consumers(self.key, GROUP):
            name = _text(consumer.get("name"))
            idle = int(consumer.get("idle", 0))
            if (
                name != self.consumer
                and not consumer.get("pending")
                and idle > DEAD_CONSUMER_IDLE_MS
            ):
                await self.redis.xgroup_delconsumer(self.key, GROUP, name)

    async def _take_over(self) -> None:
        """Entries idle for claim_idle: their instance died (or handed them back)."""
        start: Any = "0-0"
        while len(self._held) < self.capacity:
            room = self.capacity - len(self._held)
            reply = await self.redis.xautoclaim(
                self.key,
                GROUP,
                self.consumer,
                min_idle_time=self.claim_idle_ms,
                start_id=start,
                count=min(32, room),
            )
            start, entries = reply[0], reply[1]
            trimmed = reply[2] if len(reply) > 2 else []
            for stream_id, fields in entries:
                entry = await self._hold(stream_id, fields)
                if entry is not None:
                    log.info("webhook %s taken over from a lost instance", entry.delivery_id)
            if trimmed:
                log.warning(
                    "%d webhook deliveries were trimmed from the outbox (MAXLEN %d) undelivered",
                    len(trimmed),
                    self.max_len,
                )
            if _text(start) == "0-0":
                return
