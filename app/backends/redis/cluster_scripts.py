"""The append script's calls on a Redis Cluster: one redis-py cluster pipeline per flush.

The cluster counterpart of :class:`app.compat.redis_fast.ScriptPipeline` (same interface), on
redis-py's public ``ClusterPipeline``: the calls made in one loop turn go together, and the
pipeline sends each node its calls in parallel (one round trip however many shards they
touch), following ``MOVED`` / ``ASK`` and retrying through a failover. One pipeline is in flight
at a time, so the appends of a conversation land in the order they were made.

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
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

__all__ = ["ClusterScriptPipeline"]

log = logging.getLogger(__name__)

Args = Sequence[str | bytes | int]
Then = Callable[[Any], None]
#: Calls sent in one pipeline at most; the rest go in the next.
MAX_CALLS = 256


@dataclass(slots=True)
class _Call:
    keys: Sequence[str | bytes]
    args: Args | Callable[[], Args]
    done: asyncio.Future[Any] | None
    again: Callable[[Args], Args] | None = None
    then: Then | None = None

    def send_args(self) -> Args:
        args = self.args
        if callable(args):
            args = self.args = args()
        return self.again(args) if self.again is not None else args

    def live(self) -> bool:
        return self.done is None or not self.done.done()

    def answer(self, reply: Any) -> None:
        if self.done is None:
            then, self.then = self.then, None
            if then is not None:
                try:
                    then(reply)
                except Exception as exc:
                    asyncio.get_running_loop().call_exception_handler(
                        {"message": "a script pipeline reply callback failed", "exception": exc}
                    )
            return
        if self.done.done():
            return
        if isinstance(reply, BaseException):
            self.done.set_exception(reply)
        else:
            self.done.set_result(reply)


class ClusterScriptPipeline:
    """Calls of one script by every run of an instance, sharing cluster round trips."""

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
        self._pending: list[_Call] = []
        self._task: asyncio.Task[None] | None = None
        self._flush_soon: asyncio.Handle | None = None
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
        self._submit(_Call(keys, args, done, again))
        return done

    def call_then(
        self,
        keys: Sequence[str | bytes],
        args: Args | Callable[[], Args],
        again: Callable[[Args], Args] | None,
        then: Then,
    ) -> None:
        self._submit(_Call(keys, args, None, again, then))

    def _submit(self, call: _Call) -> None:
        self._pending.append(call)
        if self._task is None and self._flush_soon is None:
            self._flush_soon = asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_soon = None
        if self._task is None and self._pending:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="redis-cluster-script-pipeline"
            )

    async def _run(self) -> None:
        try:
            while self._pending:
                batch = [c for c in self._pending[: self._max] if c.live()]
                del self._pending[: self._max]
                if batch:
                    await self._send(batch)
        finally:
            self._task = None

    async def _send(self, calls: list[_Call]) -> None:
        try:
            sent = [(c, c.send_args()) for c in calls]
        except Exception as exc:
            for c in calls:
                c.answer(exc)
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
                if c.done is not None:
                    c.done.cancel()
                else:
                    c.answer(asyncio.CancelledError())
            raise
        except Exception as exc:
            for c in calls:
                c.answer(exc)
            return
        for c, reply in zip(calls, replies, strict=True):
            c.answer(reply)

    async def _execute(self, sent: list[tuple[_Call, Args]]) -> list[Any]:
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
        if self._flush_soon is not None:
            self._flush_soon.cancel()
            self._flush_soon = None
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        pending, self._pending = self._pending, []
        for c in pending:
            if c.done is not None:
                c.done.cancel()
            else:
                c.answer(asyncio.CancelledError())
