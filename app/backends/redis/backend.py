"""The Redis backend: several gateway instances serve one conversation, nothing is lost.

A thin composition: each role of :class:`app.backends.base.Backend` is implemented in its own
module, all acting on one :class:`.instance.RedisInstance`. :class:`RedisBackend` inherits
every role (:class:`.instance.RedisRole`), so each operation is the role's own method, not a
forward; only what belongs to the whole backend (start, close, ping, the webhook outbox, the
lost-run listeners) is written here.

- Conversations and listing: :mod:`.conversations`; idempotency: :mod:`.idempotency`.
- Log: one Redis Stream per conversation (:mod:`.eventlog`), cursors in :mod:`.cursors`;
  appends in :mod:`.appends`, reads in :mod:`.reads` through one log reader per conversation
  per instance that fans out to local subscribers (:mod:`.fanout`).
- State: the run owner keeps the live store (:mod:`.owned_run`) and persists ``state + cursor``
  every ``snapshot_every`` events and at run end; any other instance rebuilds it from the
  snapshot plus the stream tail (:mod:`.state`, :mod:`.snapshots`).
- Runs: a claim is a fenced lease (:mod:`.run_slots`, :mod:`.claims`), renewed by
  :mod:`.lease`; aborts and commands from any instance reach the owner through a flag/list it
  polls plus a pub/sub wake-up (:mod:`.control`).
- Lost owner: a run record whose lease expired is taken over under a new fencing token and ended
  with ``run.failed`` ``gateway_instance_lost`` (:mod:`.reaper`, :mod:`.lost_run`).
- Enqueued runs: a cluster-wide FIFO of tickets, each stored with its run's request, orders
  the claims of the run slot (:mod:`.queued_runs`, :mod:`.queue`, :mod:`.tickets`); the
  tickets of a dead instance are adopted by a live one (:mod:`.adoption`).
- Webhooks: a durable outbox, one Stream per prefix read by a consumer group
  (:mod:`.webhook_outbox`); the reaper enqueues the webhook of the run it ends.
- Outages: every Redis error becomes ``503 backend_unavailable`` (:mod:`.errors`); the client
  reconnects; readers resume from the last id they saw.
"""

from __future__ import annotations

import asyncio
import contextlib

from redis.asyncio import Redis
from redis.exceptions import RedisError

from app.backends.base import Backend
from app.backends.redis.appends import RedisAppends
from app.backends.redis.control import RedisRunSignals
from app.backends.redis.conversations import RedisConversations
from app.backends.redis.errors import RunFenced
from app.backends.redis.idempotency import RedisIdempotency
from app.backends.redis.instance import RedisInstance
from app.backends.redis.keys import DEFAULT_PREFIX, ConversationKeys
from app.backends.redis.queued_runs import RedisQueuedRuns
from app.backends.redis.reads import RedisReads
from app.backends.redis.run_slots import RedisRunSlots
from app.backends.redis.snapshots import RedisSnapshots
from app.backends.redis.tasks import every
from app.backends.redis.webhook_outbox import RedisWebhookOutbox
from app.backends.types import ConversationRef
from app.backends.webhook_outbox import LostRunListener
from app.tasks import stop_task

__all__ = ["RedisBackend", "RunFenced"]


class RedisBackend(
    RedisConversations,
    RedisAppends,
    RedisReads,
    RedisSnapshots,
    RedisRunSlots,
    RedisRunSignals,
    RedisQueuedRuns,
    RedisIdempotency,
    Backend,
):
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
        wait_replicas: int = 0,
        wait_timeout_ms: int = 1000,
    ) -> None:
        i = self.instance = RedisInstance(
            redis,
            event_log_max_len=event_log_max_len,
            snapshot_every=snapshot_every,
            lease_ttl_seconds=lease_ttl_seconds,
            key_prefix=key_prefix,
            instance_id=instance_id,
            poll_interval=poll_interval,
            replica_cache=replica_cache,
            reader_window=reader_window,
            conversation_ttl_seconds=conversation_ttl_seconds,
            wait_replicas=wait_replicas,
            wait_timeout_ms=wait_timeout_ms,
        )
        super().__init__(i)  # every role acts on this one instance
        # The instance's parts, named here for operators, benchmarks and tests.
        self.redis, self.prefix, self.instance_id = i.redis, i.prefix, i.instance_id
        self.lease_ttl_ms = i.lease_ttl_ms
        self.log, self.ownership, self.control, self.queue = i.log, i.ownership, i.control, i.queue
        self.bus, self.states, self.reaper, self.hub = i.bus, i.states, i.reaper, i.hub
        self._owned = i.owned
        self._sweeper: asyncio.Task[None] | None = None
        self._outbox: RedisWebhookOutbox | None = None
        self._adopter: asyncio.Task[None] | None = None

    def keys(self, ref: ConversationRef) -> ConversationKeys:
        return self.instance.keys(ref)

    # --- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        i = self.instance
        await i.bus.start()
        i.tickets.start()
        i.limits.start()
        interval = max(0.25, i.lease_ttl_ms / 2000)
        self._sweeper = asyncio.create_task(
            every(interval, i.reaper.sweep, "lost-owner sweep"), name="redis-lost-owners"
        )
        self._adopter = asyncio.create_task(
            every(interval, i.adoption.sweep, "queued-run adoption sweep"),
            name="redis-queue-adoption",
        )

    async def sweep(self) -> None:
        """One pass of the lost-owner and adoption sweeps (also run every lease_ttl/2 in the
        background)."""
        await self.instance.reaper.sweep()
        await self.instance.adoption.sweep()

    async def close(self) -> None:
        i = self.instance
        await stop_task(self._sweeper)
        await stop_task(self._adopter)
        self._sweeper = self._adopter = None
        i.adoption.adopter = None
        for owned in list(i.owned.values()):
            await owned.stop()
        i.owned.clear()
        await i.tickets.stop()
        await i.limits.stop()
        await i.hub.close()
        await i.bus.stop()
        await i.cancel_background()
        with contextlib.suppress(Exception):
            await i.log.aclose()
        with contextlib.suppress(Exception):
            await i.redis.aclose()

    async def ping(self) -> bool:
        try:
            return bool(await asyncio.wait_for(self.instance.redis.ping(), timeout=1.0))
        except (RedisError, OSError, TimeoutError):
            return False

    # --- webhooks ------------------------------------------------------------------------
    def webhook_outbox(self) -> RedisWebhookOutbox:
        """The outbox of this prefix; an entry held by an instance silent for the lease TTL
        (a dead one) is taken over, like its runs."""
        if self._outbox is None:
            i = self.instance
            self._outbox = RedisWebhookOutbox(
                i.redis, i.prefix, i.instance_id, claim_idle_seconds=i.lease_ttl_ms / 1000
            )
        return self._outbox

    def watch_lost_runs(self, listener: LostRunListener) -> None:
        self.instance.reaper.lost_listeners.append(listener)
