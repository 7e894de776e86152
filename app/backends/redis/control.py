"""Control from any instance to the run's owner: abort and commands.

Abort = an abort flag the owner polls + a pub/sub wake-up; commands = a list the owner pops +
the same wake-up. Pub/sub only makes delivery fast: losing a message (reconnect, slow consumer)
delays the owner by at most one poll interval, it never loses the abort or the command.

:class:`ControlBus` is the one pub/sub connection of an instance; each locally owned run
registers its conversation's channel there while it runs (:class:`OwnerInbox`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from redis.asyncio import Redis

from app.backends.redis.keys import ConversationKeys
from app.backends.redis.scripts import ABORT, COMMAND, END, ENDED
from app.backends.redis.tasks import stop_task

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

    async def abort(self, keys: ConversationKeys, run_id: str | None, reason: str) -> str | None:
        """Request cancellation of ``run_id`` (default: the active run); its id, or None."""
        res = await self._abort(
            keys=[keys.run, keys.abort, keys.lease],
            args=[run_id or "", reason, ABORT_FLAG_TTL_MS, keys.ctl],
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
            args=[run_id, command or b"", keys.ctl, target],
        )
        return int(res)


class ControlBus:
    """One pub/sub connection per instance; reconnects and re-subscribes on its own."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._handlers: dict[str, set[Wake]] = {}
        self._pubsub: Any = None
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self._stopping = False

    async def start(self) -> None:
        self._stopping = False
        self._task = asyncio.create_task(self._loop(), name="redis-control-bus")

    async def stop(self) -> None:
        self._stopping = True
        task, self._task = self._task, None
        await stop_task(task)  # the loop also checks ``_stopping``
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

    async def _sync(self, subscribed: set[str]) -> None:
        wanted = set(self._handlers)
        new, old = wanted - subscribed, subscribed - wanted
        if new:
            await self._pubsub.subscribe(*new)
        if old:
            await self._pubsub.unsubscribe(*old)
        subscribed.clear()
        subscribed.update(wanted)

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
                    msg = await self._pubsub.get_message(timeout=0.05)  # new channels wait <= this
                    if msg and msg.get("type") == "message":
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

    ``on_abort(reason)`` is called once; ``on_command(json bytes)`` for every command, in order.
    Pub/sub wake-ups make it immediate; a poll every ``poll_interval`` makes it certain.
    """

    def __init__(
        self,
        redis: Redis,
        bus: ControlBus | None,
        keys: ConversationKeys,
        run_id: str,
        on_abort: Callable[[str], None],
        on_command: Callable[[bytes], Awaitable[None]],
        poll_interval: float = 0.1,
    ) -> None:
        self.redis = redis
        self._bus = bus
        self._keys = keys
        self._run_id = run_id
        self._on_abort = on_abort
        self._on_command = on_command
        self._poll = poll_interval
        self._wake = asyncio.Event()
        self._aborted = False
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    def _wakeup(self, _msg: str) -> None:
        self._wake.set()

    def start(self) -> None:
        if self._bus is not None:
            self._bus.add(self._keys.ctl, self._wakeup)
        self._task = asyncio.create_task(self._loop(), name=f"inbox-{self._run_id}")

    async def stop(self) -> None:
        if self._bus is not None:
            self._bus.remove(self._keys.ctl, self._wakeup)
        self._stopping = True
        task, self._task = self._task, None
        await stop_task(task)

    async def check(self) -> None:
        """One poll: the abort flag, then every queued command."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.get(self._keys.abort)
            pipe.lrange(self._keys.cmd, 0, -1)
            pipe.delete(self._keys.cmd)
            flag, commands, _ = await pipe.execute()
        if flag and not self._aborted:
            run_id, _, reason = _s(flag).partition("|")
            if run_id == self._run_id and reason != ENDED:
                self._aborted = True
                self._on_abort(reason or "aborted")
        for raw in commands or ():
            await self._on_command(bytes(raw))

    async def _loop(self) -> None:
        while not self._stopping:
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("inbox poll for run %s failed: %s", self._run_id, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._poll)
            self._wake.clear()


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
