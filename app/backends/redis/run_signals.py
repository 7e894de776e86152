"""Aborts and commands on Redis: straight to a run this instance owns, else through Redis.

A signal for another instance's run goes through its abort flag / command list (polled by the
owner's inbox, woken by pub/sub, :mod:`.control`); an abort of a queued run marks its ticket
cancelled (it ends in its turn). ``end_run`` is the owner's side of the abort race (END script).
"""

from __future__ import annotations

import orjson

from app.backends.redis.control import IN_FLIGHT_REFUSALS, command_target
from app.backends.redis.errors import unavailable
from app.backends.redis.instance import RedisRole
from app.backends.roles import RunSignals
from app.backends.types import ConversationRef
from app.errors import BY_CODE
from core.runs import AbortReason
from providers.contract import Command

__all__ = ["RedisRunSignals"]


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
