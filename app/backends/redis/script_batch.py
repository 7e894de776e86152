"""Several Lua script calls in one round trip: a plain pipeline of ``EVALSHA``.

redis-py's own pipeline loads the scripts it holds first (a ``SCRIPT EXISTS`` round trip every
time it runs). Here each call is a plain ``EVALSHA``; a call Redis answers ``NOSCRIPT`` (a
restarted or flushed Redis: none of its effects happened) is sent again alone through its
script, which loads it. Each reply is its call's; an error reply is raised.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

__all__ = ["ScriptCall", "call_together", "evalsha_in", "settle"]

#: A script, its keys and its arguments.
ScriptCall = tuple[AsyncScript, Sequence[str], Sequence[str | bytes | int]]


def evalsha_in(pipe: Any, call: ScriptCall) -> None:
    """Queue ``call`` on ``pipe`` as a plain ``EVALSHA`` (nothing to load first)."""
    script, keys, args = call
    pipe.evalsha(script.sha, len(keys), *keys, *args)


async def settle(call: ScriptCall, reply: Any) -> Any:
    """``call``'s reply as sent in a pipeline: sent again through its script on ``NOSCRIPT``;
    an error reply raised."""
    if isinstance(reply, NoScriptError):
        script, keys, args = call
        return await script(keys=keys, args=args)
    if isinstance(reply, Exception):
        raise reply
    return reply


async def call_together(redis: Redis, calls: Sequence[ScriptCall]) -> list[Any]:
    """The replies of ``calls``, sent in one round trip (in order)."""
    async with redis.pipeline(transaction=False) as pipe:
        for call in calls:
            evalsha_in(pipe, call)
        replies = await pipe.execute(raise_on_error=False)
    return [await settle(call, reply) for call, reply in zip(calls, replies, strict=True)]
