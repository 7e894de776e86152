"""Round trips to Redis counted by the client calls a task makes: each command or pipeline the
counting task (and the tasks it starts, e.g. an ``asyncio.gather``) sends is one entry, and one
sent while another is waiting for its reply shares that round trip (its entry, joined with
``&``). The backend's own loops (polls, lease renewals, started before) are not counted.

For a count by the wire, every task included, see :mod:`tests.app.support.redis_proxy`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import pytest
from redis.asyncio.cluster import ClusterPipeline, RedisCluster

from app.compat.redis_fast.lean import LeanPipeline, LeanRedis

__all__ = ["round_trips"]

#: The window :func:`round_trips` counts, set in the counting task; the tasks it starts inherit it.
_COUNTING: ContextVar[object | None] = ContextVar("counting", default=None)


@contextmanager
def round_trips(monkeypatch: pytest.MonkeyPatch, *, cluster: bool = False) -> Iterator[list[str]]:
    """The entries of the round trips sent from here (through the standalone client, or with
    ``cluster`` through a cluster client, whose pipeline reaches its shards in parallel)."""
    window = object()
    sent: list[str] = []
    waiting = 0

    async def counted(name: str, call: Awaitable[Any]) -> Any:
        nonlocal waiting
        if _COUNTING.get() is not window:
            return await call
        if waiting and sent:
            sent[-1] += f"&{name}"
        else:
            sent.append(name)
        waiting += 1
        try:
            return await call
        finally:
            waiting -= 1

    token = _COUNTING.set(window)
    try:
        with monkeypatch.context() as m:
            if cluster:
                _count_cluster(m, counted)
            else:
                _count_standalone(m, counted)
            yield sent
    finally:
        _COUNTING.reset(token)


#: ``counted(name, call)``: the reply of ``call``, counted as the round trip ``name``.
Counted = Callable[[str, Awaitable[Any]], Awaitable[Any]]


def _count_standalone(m: pytest.MonkeyPatch, counted: Counted) -> None:
    command, pipeline = LeanRedis.execute_command, LeanPipeline.execute

    async def counted_command(self: LeanRedis, *args: Any, **options: Any) -> Any:
        return await counted(str(args[0]), command(self, *args, **options))

    async def counted_pipeline(self: LeanPipeline, raise_on_error: bool = True) -> list[Any]:
        names = "|".join(str(c[0][0]) for c in self.command_stack)
        replies: list[Any] = await counted(names, pipeline(self, raise_on_error))
        return replies

    m.setattr(LeanRedis, "execute_command", counted_command)
    m.setattr(LeanPipeline, "execute", counted_pipeline)


def _count_cluster(m: pytest.MonkeyPatch, counted: Counted) -> None:
    command, pipeline = RedisCluster.execute_command, ClusterPipeline.execute
    queue = ClusterPipeline.execute_command
    queued: dict[int, list[str]] = {}

    async def counted_command(self: RedisCluster, *args: Any, **options: Any) -> Any:
        return await counted(str(args[0]), command(self, *args, **options))

    def queued_command(self: ClusterPipeline, *args: Any, **options: Any) -> Any:
        queued.setdefault(id(self), []).append(str(args[0]))
        return queue(self, *args, **options)

    async def counted_pipeline(self: ClusterPipeline, *args: Any, **options: Any) -> Any:
        names = "|".join(queued.pop(id(self), []))
        return await counted(names, pipeline(self, *args, **options))

    m.setattr(RedisCluster, "execute_command", counted_command)
    m.setattr(ClusterPipeline, "execute_command", queued_command)
    m.setattr(ClusterPipeline, "execute", counted_pipeline)
