"""The append script's calls on a Redis Cluster: one redis-py cluster pipeline per flush.

The cluster counterpart of :class:`app.compat.redis_fast.ScriptPipeline` (same interface), on
redis-py's public ``ClusterPipeline``: the calls made in one loop turn for one node go
together in one round trip, following ``MOVED`` / ``ASK`` and retrying through a failover.
Each node has its own lane with one pipeline in flight at a time, so the appends of a
conversation land in the order they were made, and a shard that fails over holds up only its
own conversations' appends.

Every send uses the arguments for a send that may repeat an earlier one (``again``): redis-py
may send a pipeline again after a lost reply, and the script then answers a batch it already
wrote without writing it twice.

``wait_replicas`` (``[gateway] redis_wait_replicas``): after its calls, each node the pipeline
wrote to also gets ``WAIT wait_replicas timeout`` on the same connection, so a call is answered
only once that many replicas have its writes, or the timeout passed (bounded: the append is
then answered all the same, and :attr:`ClusterScriptPipeline.unreplicated` counts it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError, RedisError

from app.append_calls import AppendCall, Args, Then, fail

__all__ = ["ClusterScriptPipeline"]

log = logging.getLogger(__name__)

#: Calls sent in one pipeline at most; the rest go in the next.
MAX_CALLS = 256


class _Lane:
    """The calls bound for one node: one pipeline of them in flight at a time."""

    __slots__ = ("flush_soon", "pending", "task")

    def __init__(self) -> None:
        self.pending: list[AppendCall] = []
        self.task: asyncio.Task[None] | None = None
        self.flush_soon: asyncio.Handle | None = None


class ClusterScriptPipeline:
    """Calls of one script by every run of an instance, sharing cluster round trips.

    One lane per node: a node that is down (its replica not promoted yet) holds up the calls
    bound for it, never those of the other shards."""

    def __init__(
        self,
        redis: Redis,
        script: AsyncScript,
        *,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 1000,
        max_calls: int = MAX_CALLS,
    ) -> None:
        self._redis: Any = redis
        self._script = script
        self._wait = wait_replicas
        self._wait_ms = wait_timeout_ms
        self._max = max(1, max_calls)
        self._lanes: dict[str, _Lane] = {}
        #: Round trips made (pipelines sent), for tests and benchmarks.
        self.round_trips = 0
        #: WAITs that came back with fewer replicas than asked (their timeout passed).
        self.unreplicated = 0

    def call(
        self,
        keys: Sequence[str | bytes],
        args: Args | Callable[[], Args],
        again: Callable[[Args], Args] | None = None,
    ) -> asyncio.Future[Any]:
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._submit(AppendCall(keys, args, done, again))
        return done

    def call_then(
        self,
        keys: Sequence[str | bytes],
        args: Args | Callable[[], Args],
        again: Callable[[Args], Args] | None,
        then: Then,
    ) -> None:
        self._submit(AppendCall(keys, args, None, again, then))

    def _lane_name(self, keys: Sequence[str | bytes]) -> str:
        """The node the call's slot is on, as far as the client knows ('' before it knows)."""
        if not keys:
            return ""
        try:
            return str(self._redis.get_node_from_key(keys[0]).name)
        except RedisError:  # slots not known yet (first use) or not covered (failover)
            return ""

    def _submit(self, call: AppendCall) -> None:
        name = self._lane_name(call.keys)
        lane = self._lanes.get(name)
        if lane is None:
            lane = self._lanes[name] = _Lane()
        lane.pending.append(call)
        if lane.task is None and lane.flush_soon is None:
            lane.flush_soon = asyncio.get_running_loop().call_soon(self._flush, lane)

    def _flush(self, lane: _Lane) -> None:
        lane.flush_soon = None
        if lane.task is None and lane.pending:
            lane.task = asyncio.get_running_loop().create_task(
                self._run(lane), name="redis-cluster-script-pipeline"
            )

    async def _run(self, lane: _Lane) -> None:
        try:
            while lane.pending:
                batch = [c for c in lane.pending[: self._max] if c.live()]
                del lane.pending[: self._max]
                if batch:
                    await self._send(batch)
        finally:
            lane.task = None

    async def _send(self, calls: list[AppendCall]) -> None:
        try:
            sent = [(c, c.packed_args(again=True)) for c in calls]
        except Exception as exc:
            fail(calls, exc)
            return
        try:
            replies = await self._execute(sent)
            missing = [n for n, r in enumerate(replies) if isinstance(r, NoScriptError)]
            for n in missing:  # a node restarted or failed over to a replica without it
                c, args = sent[n]
                try:
                    replies[n] = await self._script(keys=c.keys, args=args)
                except Exception as exc:
                    replies[n] = exc
        except asyncio.CancelledError:
            for c in calls:
                c.withdraw()
            raise
        except Exception as exc:
            fail(calls, exc)
            return
        for c, reply in zip(calls, replies, strict=True):
            c.answer(reply)

    async def _execute(self, sent: list[tuple[AppendCall, Args]]) -> list[Any]:
        sha = self._script.sha
        self.round_trips += 1
        if self._wait > 0:
            await self._redis.initialize()  # at once unless the slots are not known yet
        async with self._redis.pipeline(transaction=False) as pipe:
            nodes: dict[str, Any] = {}
            for c, args in sent:
                pipe.evalsha(sha, len(c.keys), *c.keys, *args)
                if self._wait > 0 and c.keys:
                    node = self._redis.get_node_from_key(c.keys[0])
                    nodes[node.name] = node
            for node in nodes.values():
                pipe.execute_command("WAIT", self._wait, self._wait_ms, target_nodes=node)
            replies: list[Any] = await pipe.execute(raise_on_error=False)
        for acked in replies[len(sent) :]:
            if isinstance(acked, int) and acked < self._wait:
                self.unreplicated += 1
                log.warning("WAIT: %d of %d replicas acknowledged an append", acked, self._wait)
        return replies[: len(sent)]

    async def aclose(self) -> None:
        lanes, self._lanes = list(self._lanes.values()), {}
        for lane in lanes:
            if lane.flush_soon is not None:
                lane.flush_soon.cancel()
                lane.flush_soon = None
            task, lane.task = lane.task, None
            if task is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            pending, lane.pending = lane.pending, []
            for c in pending:
                c.withdraw()
