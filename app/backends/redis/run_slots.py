"""The run slot on Redis: claimed in queue order as a fenced lease, released with a snapshot.

A claim starts the owner's machinery (:class:`.owned_run.OwnedRun`): the lease keeper, the
fenced writer and the inbox through which aborts and commands from any instance arrive.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import cast

import orjson
from redis.exceptions import RedisError

from app.backends.redis.claims import Token
from app.backends.redis.control import OwnerInbox
from app.backends.redis.errors import unavailable
from app.backends.redis.eventlog import ZERO_ID, Entry, Fenced, FencedWriter
from app.backends.redis.idempotency import remembered
from app.backends.redis.instance import text
from app.backends.redis.keys import ConversationKeys
from app.backends.redis.lease import LeaseKeeper
from app.backends.redis.owned_run import OwnedRun
from app.backends.redis.queue import OrderedClaim, Remembered
from app.backends.redis.role import RedisRole
from app.backends.redis.state import TAIL_PAGE
from app.backends.roles import RunSlots
from app.backends.types import AcceptedAnswer, ConversationRef, RunControl
from app.ids import new_token
from core.runs import AbortReason
from providers.contract import Command

__all__ = ["RedisRunSlots"]

#: How soon a release step that failed because Redis is unreachable is tried again.
RELEASE_RETRY_SECONDS = 0.1


class RedisRunSlots(RedisRole, RunSlots):
    async def _claim_indexed(
        self, keys: ConversationKeys, run_id: str, ticketed: bool, remember: Remembered | None
    ) -> OrderedClaim:
        """The claim, with the conversation marked in ``P:runs`` in the same round trip and sent
        ahead of it: an instance killed right after its claim landed leaves a run the reaper's
        sweep finds (an entry whose run was not claimed is dropped by the sweep). A mark that
        failed is made again with the claim's reads."""
        i = self._i
        _, claim = await asyncio.gather(
            i.ownership.mark(keys),
            i.queue.claim(keys, run_id, ticketed, remember),
            return_exceptions=True,
        )
        if isinstance(claim, BaseException):
            raise claim
        return claim

    async def claim_run(
        self, ref: ConversationRef, control: RunControl, answer: AcceptedAnswer | None = None
    ) -> bool:
        i = self._i
        keys = i.keys(ref)
        run_id = control.run_id
        ticketed = i.tickets.has(keys, run_id)
        remember = remembered(keys, answer)
        with unavailable():
            # ownership.claim, ordered by the queue: a queued run only when it is first, a
            # run that was not queued only when nobody waits.
            claimed_at = time.monotonic()  # the lease is valid for its TTL from (at least) here
            claim = await self._claim_indexed(keys, run_id, ticketed, remember)
            if claim.status == "lost":
                await i.reaper.reap(keys, Token(claim.holder))
                claimed_at = time.monotonic()
                claim = await i.queue.claim(keys, run_id, ticketed, remember)
            if claim.status in ("gone", "adopted"):  # not ours to start any more
                i.tickets.discard(keys, run_id)
                i.dropped.add((keys.tag, run_id))
            elif claim.status == "queued" and claim.lapsed:
                await i.adoption.adopt(keys)  # a dead instance's run is in the way: ours now
            if claim.status != "ok":
                return False
            i.tickets.discard(keys, run_id)
            token = Token(claim.holder)
            try:
                # One round trip: the run marked in the index, the incarnation and meta (the
                # run's start snapshot takes it), the snapshot, and for a conversation just
                # created here its log (read after the snapshot: nothing of the log it misses).
                log_read: list[Entry] | None = None
                async with i.redis.pipeline(transaction=False) as pipe:
                    i.ownership.mark_in(pipe, keys)
                    pipe.hmget(keys.meta, "inc", "meta")
                    pipe.hgetall(keys.snap)
                    fresh = i.created_here(keys.tag)
                    if fresh:
                        i.log.read_after_in(pipe, keys, ZERO_ID, TAIL_PAGE)
                    replies = await pipe.execute(raise_on_error=False)
                for reply in replies[:3]:
                    if isinstance(reply, Exception):
                        raise reply
                (inc, raw_meta), snap = replies[1], replies[2]
                if fresh:
                    with contextlib.suppress(RedisError):  # read again by load_private
                        log_read = i.log.read_after_reply(ZERO_ID, replies[3], replies[4])
                if inc is not None:
                    inc = text(inc)
                    i.hub.learn_incarnation(keys.tag, inc)
                async with i.states.lock(keys.tag):
                    state = await i.states.load_private(
                        keys, inc if inc is not None else new_token(6), snap, log_read
                    )
            except BaseException:
                # Not accepted after all: its answer goes with the claim (if the release fails,
                # the slot lapses and the reaper ends the run, so the answer stays true).
                forget = () if remember is None else (remember[0],)
                with contextlib.suppress(Exception):
                    await i.ownership.release(keys, token, *forget)
                raise

        async def on_command(raw: bytes) -> None:
            data = orjson.loads(raw)
            control.deliver(Command(data["type"], data.get("payload") or {}))

        lost = asyncio.Event()
        # Appends that fail while Redis is unreachable are retried until the lease's deadline.
        keeper = LeaseKeeper(i.ownership, keys, token, lost, granted_at=claimed_at)
        owned = OwnedRun(
            keys=keys,
            token=token,
            control=control,
            writer=FencedWriter(i.log, keys, token.raw, deadline=keeper.deadline),
            state=state,
            keeper=keeper,
            inbox=OwnerInbox(
                i.redis,
                i.bus,
                keys,
                control.run_id,
                on_abort=control.abort,
                on_command=on_command,
                poll_interval=i.poll_interval,
            ),
            lost=lost,
            start_meta=raw_meta,
        )
        i.owned[keys.tag] = owned
        owned.start()
        if claim.cancelled:  # cancelled while it was queued: it ends at once, in its turn
            control.abort(cast(AbortReason, claim.cancelled))
        return True

    async def wait_run_slot(self, ref: ConversationRef, wait: float) -> None:
        i = self._i
        keys = i.keys(ref)
        freed = asyncio.Event()

        def wake(_: str) -> None:
            freed.set()

        i.bus.add(keys.turn, wake)  # freed on another instance
        i.slot_waiters.setdefault(keys.tag, set()).add(freed)  # freed here
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(freed.wait(), wait)
        finally:
            i.bus.remove(keys.turn, wake)
            waiters = i.slot_waiters.get(keys.tag)
            if waiters is not None:
                waiters.discard(freed)
                if not waiters:
                    del i.slot_waiters[keys.tag]

    async def release_run(self, ref: ConversationRef, run_id: str) -> None:
        i = self._i
        keys = i.keys(ref)
        owned = i.owned.get(keys.tag)
        if owned is None or owned.token.run_id != run_id:
            return
        released = False
        try:
            released = await self._release_owned(keys, owned)
        finally:
            # Once the run is no longer ours here: a waiter woken now may claim the slot.
            if released:
                await i.tidy_released(keys)
            else:
                await i.slot_freed(keys)

    async def _release_owned(self, keys: ConversationKeys, owned: OwnedRun) -> bool:
        """Give the slot up; True when the release landed (the rest is tidying)."""
        i = self._i
        await owned.stop()
        owned.released = True  # snapshot() reads Redis from now on (others may append)
        try:
            if owned.fenced:
                return False
            with unavailable():
                await self._rebuilt(keys, owned)
                try:
                    snapshot = owned.state.snapshot_write()
                    await owned.writer.append([], release=True, snapshot=snapshot)
                except Fenced:
                    return False
            i.states.remember(keys.tag, owned.state)
            return True
        finally:
            i.owned.pop(keys.tag, None)
            reader = i.hub.readers.get(keys.tag)
            if reader is not None:
                reader.kick()  # others may write from now on: back to XREAD

    async def _rebuilt(self, keys: ConversationKeys, owned: OwnedRun) -> None:
        """The state rebuilt if an append failed; while Redis is unreachable, retried until
        the lease's deadline (like the release write itself), so a blip does not leave the
        slot held until the lease lapses."""
        while True:
            try:
                await self._i.live_owned(keys)
                return
            except (RedisError, OSError):
                if time.monotonic() >= owned.keeper.deadline():
                    raise
                await asyncio.sleep(RELEASE_RETRY_SECONDS)

    async def active_run(self, ref: ConversationRef) -> str | None:
        with unavailable():
            token = await self._i.holder(self._i.keys(ref))
        return None if token is None else token.run_id
