"""Control from any instance to the run's owner: abort and commands, both sides.

The requester's side is :class:`RedisRunSignals` (the backend's ``RunSignals`` role): straight
to a run this instance owns, else through Redis; an abort of a queued run marks its ticket
cancelled (it ends in its turn); ``end_run`` is the owner's side of the abort race (END
script). The owner's side is :class:`OwnerInbox`, which calls the run's ``RunControl.abort``.

Abort = an abort flag the owner polls + a pub/sub wake-up; commands = a list the owner pops +
the same wake-up. Pub/sub only makes delivery fast: losing a message (reconnect, slow consumer)
delays the owner by at most one poll interval, it never loses the abort or the command.

:class:`ControlBus` is the one pub/sub connection of an instance and its one poller: each
locally owned run registers its conversation's channel and its inbox there while it runs
(:class:`OwnerInbox`), and every ``poll_interval`` one ``POLL`` script call reads the flags and
command lists of all of them (at 100 runs: 10 calls/s, not 1,000); a wake-up polls only the
woken runs, at once.

On a Redis Cluster the wake-ups are sharded (``SPUBLISH`` / ``SSUBSCRIBE``: the channel shares
its conversation's slot, so a message reaches only that shard), and the ``POLL`` is one call per
conversation (a script's keys share one slot), all sent in one pipeline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

import orjson
from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from app.backends.redis.cluster import is_cluster, publish_command
from app.backends.redis.errors import unavailable
from app.backends.redis.keys import ConversationKeys
from app.backends.redis.role import RedisRole
from app.backends.redis.script_batch import ScriptCall, call_together
from app.backends.redis.scripts import ABORT, COMMAND, END, ENDED, POLL
from app.backends.roles import RunSignals
from app.backends.types import ConversationRef
from app.errors import BY_CODE
from app.tasks import stop_task
from core.runs import AbortReason
from providers.contract import Command

log = logging.getLogger(__name__)

ABORT_FLAG_TTL_MS = 3_600_000
Wake = Callable[[str], None]


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Control:
    """The sending side (any instance)."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._abort = redis.register_script(ABORT)
        self._end = redis.register_script(END)
        self._command = redis.register_script(COMMAND)
        self._publish = publish_command(redis)

    async def abort(self, keys: ConversationKeys, run_id: str | None, reason: str) -> str | None:
        """Request cancellation of ``run_id`` (default: the active run); its id, or None."""
        res = await self._abort(
            keys=[keys.run, keys.abort, keys.lease],
            args=[run_id or "", reason, ABORT_FLAG_TTL_MS, keys.ctl, self._publish],
        )
        return _s(res) if res else None

    async def end(self, keys: ConversationKeys, run_id: str) -> str | None:
        """The owner decides its run's end: the reason of an abort already requested, else
        None (and later aborts of the run answer None)."""
        res = await self._end(keys=[keys.abort], args=[run_id, ABORT_FLAG_TTL_MS])
        return _s(res) if res else None

    async def command(
        self, keys: ConversationKeys, run_id: str, command: bytes | None, target: str = ""
    ) -> int:
        """Queue ``command`` (JSON; None: only mark ``target``) for the owner of ``run_id``.

        1 queued, 0 the run is not active, 2 ``target`` already has a command in flight.
        """
        res = await self._command(
            keys=[keys.run, keys.cmd, keys.inflight],
            args=[run_id, command or b"", keys.ctl, target, self._publish],
        )
        return int(res)


class ControlBus:
    """One pub/sub connection per instance (reconnects and re-subscribes on its own) and the
    one poller of the inboxes of the runs it owns."""

    def __init__(self, redis: Redis, poll_interval: float = 0.1) -> None:
        self.redis = redis
        self.poll_interval = poll_interval
        self._handlers: dict[str, set[Wake]] = {}
        self._pubsub: Any = None
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self._stopping = False
        self._poll = redis.register_script(POLL)
        #: A cluster: shard channels (``SSUBSCRIBE``, each on the node owning its slot).
        self._sharded = is_cluster(redis)
        self._inboxes: set[OwnerInbox] = set()
        #: Inboxes to poll at once (new, or woken by pub/sub), before the next full poll.
        self._due: set[OwnerInbox] = set()
        self._kick = asyncio.Event()
        self._poller: asyncio.Task[None] | None = None
        #: Poll calls made (one per round of inboxes), for tests.
        self.polls = 0

    async def start(self) -> None:
        self._stopping = False
        self._task = asyncio.create_task(self._loop(), name="redis-control-bus")
        self._poller = asyncio.create_task(self._poll_loop(), name="redis-control-poll")

    async def stop(self) -> None:
        self._stopping = True
        task, self._task = self._task, None
        await stop_task(task)  # the loop also checks ``_stopping``
        poller, self._poller = self._poller, None
        await stop_task(poller)
        if self._pubsub is not None:
            with contextlib.suppress(Exception):
                await self._pubsub.aclose()
            self._pubsub = None

    def add(self, channel: str, wake: Wake) -> None:
        self._handlers.setdefault(channel, set()).add(wake)
        self._changed.set()

    def remove(self, channel: str, wake: Wake) -> None:
        handlers = self._handlers.get(channel)
        if handlers is not None:
            handlers.discard(wake)
            if not handlers:
                del self._handlers[channel]
        self._changed.set()

    def watch(self, inbox: OwnerInbox) -> None:
        """Poll ``inbox`` from now on (the first time at once) until :meth:`unwatch`."""
        self._inboxes.add(inbox)
        self.wake(inbox)

    def unwatch(self, inbox: OwnerInbox) -> None:
        self._inboxes.discard(inbox)
        self._due.discard(inbox)

    def wake(self, inbox: OwnerInbox) -> None:
        """Poll ``inbox`` at once (its pub/sub wake-up)."""
        if inbox in self._inboxes:
            self._due.add(inbox)
            self._kick.set()

    async def _poll_loop(self) -> None:
        loop = asyncio.get_running_loop()
        next_full = loop.time()
        while not self._stopping:
            if loop.time() >= next_full:
                batch, next_full = list(self._inboxes), loop.time() + self.poll_interval
            else:
                batch = list(self._due)
            self._due.clear()
            if batch:
                try:
                    await poll_inboxes(self._poll, batch)
                    self.polls += 1
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the next poll retries; commands stay queued
                    log.warning("inbox poll of %d runs failed: %s", len(batch), exc)
            if not self._due:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._kick.wait(), max(0.0, next_full - loop.time()))
            self._kick.clear()

    async def _sync(self, subscribed: set[str]) -> None:
        wanted = set(self._handlers)
        new, old = wanted - subscribed, subscribed - wanted
        # A cluster: shard channels, each subscribed on the node owning its slot.
        subscribe = self._pubsub.ssubscribe if self._sharded else self._pubsub.subscribe
        unsubscribe = self._pubsub.sunsubscribe if self._sharded else self._pubsub.unsubscribe
        if new:
            await subscribe(*new)
        if old:
            await unsubscribe(*old)
        subscribed.clear()
        subscribed.update(wanted)

    async def _next_message(self) -> Any:
        """The next wake-up, if one comes soon (new channels wait at most this long)."""
        if self._sharded:
            # Polls every node holding one of our shard channels; a channel whose slot moved
            # (MOVED, failover) is subscribed again on its new node by redis-py.
            return await self._pubsub.get_sharded_message(
                ignore_subscribe_messages=True, timeout=0.05
            )
        return await self._pubsub.get_message(timeout=0.05)

    async def _loop(self) -> None:
        while not self._stopping:
            subscribed: set[str] = set()
            try:
                self._pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
                while not self._stopping:
                    if self._changed.is_set() or not subscribed:
                        self._changed.clear()
                        await self._sync(subscribed)
                    if not subscribed:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(self._changed.wait(), 1.0)
                        continue
                    msg = await self._next_message()
                    if msg and msg.get("type") in ("message", "smessage"):
                        channel = _s(msg["channel"])
                        for wake in list(self._handlers.get(channel, ())):
                            wake(_s(msg["data"]))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # connection lost: owners keep polling meanwhile
                log.warning("control bus: %s; reconnecting", exc)
                with contextlib.suppress(Exception):
                    await self._pubsub.aclose()
                await asyncio.sleep(0.5)


class OwnerInbox:
    """What the owner of one run listens to: the abort flag and the command list.

    ``on_abort(reason)`` (the run's ``RunControl.abort``) is called once;
    ``on_command(json bytes)`` for every command, in order.
    Pub/sub wake-ups make it immediate; a poll every ``poll_interval`` makes it certain. With a
    bus, the bus polls it together with the instance's other runs (``poll_interval`` is the
    bus's); without one, it polls on its own.
    """

    def __init__(
        self,
        redis: Redis,
        bus: ControlBus | None,
        keys: ConversationKeys,
        run_id: str,
        on_abort: Callable[[AbortReason], object],
        on_command: Callable[[bytes], Awaitable[None]],
        poll_interval: float = 0.1,
    ) -> None:
        self.redis = redis
        self._bus = bus
        self._keys = keys
        self.run_id = run_id
        self._on_abort = on_abort
        self._on_command = on_command
        self._poll = poll_interval
        self._wake = asyncio.Event()
        self._aborted = False
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._script = redis.register_script(POLL) if bus is None else None

    @property
    def poll_keys(self) -> tuple[str, str]:
        return self._keys.abort, self._keys.cmd

    def _wakeup(self, _msg: str) -> None:
        if self._bus is not None:
            self._bus.wake(self)
        else:
            self._wake.set()

    def start(self) -> None:
        if self._bus is not None:
            self._bus.add(self._keys.ctl, self._wakeup)
            self._bus.watch(self)
        else:
            self._task = asyncio.create_task(self._loop(), name=f"inbox-{self.run_id}")

    async def stop(self) -> None:
        self._stopping = True
        if self._bus is not None:
            self._bus.remove(self._keys.ctl, self._wakeup)
            self._bus.unwatch(self)
        task, self._task = self._task, None
        await stop_task(task)

    async def check(self) -> None:
        """One poll of this inbox alone: the abort flag, then every queued command."""
        script = self._script or self.redis.register_script(POLL)
        await poll_inboxes(script, [self])

    async def handle(self, flag: Any, commands: Sequence[Any]) -> None:
        """What one poll found: the abort flag (``b''`` none), then the queued commands."""
        if self._stopping:
            return
        if flag and not self._aborted:
            run_id, _, reason = _s(flag).partition("|")
            if run_id == self.run_id and reason != ENDED:
                self._aborted = True
                self._on_abort(cast(AbortReason, reason or "aborted"))
        for raw in commands or ():
            await self._on_command(bytes(raw))

    async def _loop(self) -> None:
        while not self._stopping:
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("inbox poll for run %s failed: %s", self.run_id, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._poll)
            self._wake.clear()


async def poll_inboxes(script: AsyncScript, inboxes: Sequence[OwnerInbox]) -> None:
    """One ``POLL`` call over ``inboxes``; each handles what it found (a failing handler does
    not keep the others from theirs)."""
    reply: list[Any]
    if is_cluster(script.registered_client):
        # One call per conversation (a script's keys share one slot), sent together: each
        # node gets its calls in parallel, one round trip.
        calls: list[ScriptCall] = [(script, inbox.poll_keys, ()) for inbox in inboxes]
        replies = await call_together(cast(Redis, script.registered_client), calls)
        reply = [part for one in replies for part in one]
    else:
        keys = [key for inbox in inboxes for key in inbox.poll_keys]
        reply = await script(keys=keys)
    for n, inbox in enumerate(inboxes):
        try:
            await inbox.handle(reply[2 * n], reply[2 * n + 1])
        except Exception:
            log.exception("inbox of run %s failed to handle its poll", inbox.run_id)


#: A second command for a target already in flight (on any instance) is refused like this.
IN_FLIGHT_REFUSALS: dict[str, tuple[str, str]] = {
    "approval.resolve": ("approval_already_resolved", "Approval {} is resolved."),
    "tool.submit_result": ("tool_not_awaiting_result", "Tool call {} awaits no result."),
    "tool.retry": ("tool_not_retryable", "Tool call {} cannot be retried."),
}


def command_target(payload: Mapping[str, Any]) -> str:
    """The approval or tool call a command is about ('' when none)."""
    for name in ("approvalId", "toolCallId"):
        value = payload.get(name)
        if isinstance(value, str):
            return value
    return ""


class RedisRunSignals(RedisRole, RunSignals):
    async def request_abort(
        self,
        ref: ConversationRef,
        run_id: str | None,
        reason: AbortReason = "aborted",
    ) -> str | None:
        i = self._i
        keys = i.keys(ref)
        owned = i.owned.get(keys.tag)
        if owned is not None and not owned.fenced and run_id in (None, owned.token.run_id):
            # Ours: no round trip needed to reach the run (None once its end is decided).
            return owned.token.run_id if owned.control.abort(reason) else None
        with unavailable():
            aborted = None
            if await i.holder(keys) is not None:
                aborted = await i.control.abort(keys, run_id, reason)
            if aborted is None and run_id is not None:
                # A queued run (of any instance) is cancelled: it logs that in its turn.
                if await i.queue.cancel(keys, run_id, reason):
                    return run_id
            return aborted

    async def end_run(self, ref: ConversationRef, run_id: str) -> str | None:
        with unavailable():
            return await self._i.control.end(self._i.keys(ref), run_id)

    async def send_command(self, ref: ConversationRef, run_id: str, command: Command) -> bool:
        i = self._i
        keys = i.keys(ref)
        owned = i.owned.get(keys.tag)
        local = owned is not None and not owned.fenced and owned.token.run_id == run_id
        target = command_target(command.payload)
        body = None
        if not local:
            body = orjson.dumps({"type": command.type, "payload": dict(command.payload)})
        with unavailable():
            status = await i.control.command(keys, run_id, body, target)
        if status == 2:
            code, message = IN_FLIGHT_REFUSALS.get(command.type, ("run_not_running", "{}"))
            raise BY_CODE[code](message.format(target))
        if status == 1 and owned is not None and local:
            owned.control.deliver(command)
        return status == 1
