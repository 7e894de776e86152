"""Calls of one Lua script by every run of an instance share round trips: one pipeline per flush.

Each call stays its own ``EVALSHA`` (its own keys, arguments and reply or error: a ``FENCED``
reply fails that call alone); only the round trip is shared. One pipeline is in flight at a
time and what is submitted meanwhile goes into the next one, so a lone call is sent at once
(no added wait) while under load the round trips stay about one per Redis latency instead of
one per call (at 100 answers x 50 deltas/s: ~5,000 appends/s in a few hundred pipelines).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError, ResponseError

__all__ = ["MAX_CALLS", "ScriptPipeline"]

#: Calls sent in one pipeline at most; the rest go in the next (bounds one reply's size).
MAX_CALLS = 256


@dataclass(slots=True)
class _Call:
    keys: Sequence[Any]
    args: Sequence[Any]
    done: asyncio.Future[Any]


class ScriptPipeline:
    def __init__(self, redis: Redis, script: AsyncScript, max_calls: int = MAX_CALLS) -> None:
        self._redis = redis
        self._script = script
        self._max = max(1, max_calls)
        self._pending: list[_Call] = []
        self._task: asyncio.Task[None] | None = None
        #: Round trips made (pipelines sent), for tests and benchmarks.
        self.round_trips = 0

    async def call(self, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """The script's reply to ``keys``/``args``; its error (``ResponseError``, a connection
        error of the whole pipeline) is raised to this caller only."""
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append(_Call(keys, args, done))
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="redis-script-pipeline")
        return await done

    async def _run(self) -> None:
        try:
            while self._pending:
                batch = self._pending[: self._max]
                del self._pending[: self._max]
                # A caller cancelled before its call was sent: nothing of it is written.
                live = [c for c in batch if not c.done.done()]
                if live:
                    await self._send(live)
        finally:
            self._task = None
            if self._pending:  # cancelled mid-flight (shutdown): later callers fail, not hang
                for c in self._pending:
                    c.done.cancel()
                self._pending.clear()

    async def _send(self, calls: list[_Call]) -> None:
        try:
            replies = await self._execute(calls)
            missing = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
            if missing:  # Redis restarted or flushed its scripts: none of these ran
                await self._redis.script_load(self._script.script)
                again = await self._execute([calls[i] for i in missing])
                for i, reply in zip(missing, again, strict=True):
                    replies[i] = reply
        except asyncio.CancelledError:
            for c in calls:
                c.done.cancel()
            raise
        except Exception as exc:
            for c in calls:
                if not c.done.done():
                    c.done.set_exception(exc)
            return
        for c, reply in zip(calls, replies, strict=True):
            if c.done.done():
                continue
            if isinstance(reply, Exception):
                c.done.set_exception(reply)
            else:
                c.done.set_result(reply)

    async def _execute(self, calls: list[_Call]) -> list[Any]:
        self.round_trips += 1
        if len(calls) == 1:  # a lone call (low load): a plain EVALSHA costs less than a pipeline
            (c,) = calls
            try:
                return [await self._script(keys=list(c.keys), args=list(c.args))]
            except ResponseError as exc:
                return [exc]
        sha = self._script.sha
        async with self._redis.pipeline(transaction=False) as pipe:
            for c in calls:
                pipe.evalsha(sha, len(c.keys), *c.keys, *c.args)
            return list(await pipe.execute(raise_on_error=False))
