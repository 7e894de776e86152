"""An owner rides out a short Redis outage until its lease's own deadline, and not beyond.

:class:`FencedWriter` retries an append that failed because Redis was unreachable, in order,
without writing a batch twice when an attempt landed but its reply was lost; past the lease
deadline it gives up (``Fenced``) for good. A batch is written by the caller that opened it;
cancelling that caller neither loses nor strands what joined the batch. :class:`LeaseKeeper`
tolerates failed renewals until the deadline, then reports the lease lost without renewing it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from redis.exceptions import ClusterDownError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError

from app.backends.redis.claims import Token
from app.backends.redis.eventlog import (
    KIND_EVENT,
    RETRY_INTERVAL,
    Fenced,
    FencedWriter,
    Pending,
    SnapshotWrite,
)
from app.backends.redis.keys import ConversationKeys
from app.backends.redis.lease import LeaseKeeper
from tests.support import eventually

KEYS = ConversationKeys("t", "c1")


class FlakyLog:
    """An EventLog stand-in: a list as the stream; ``down`` makes calls fail like a dead Redis.

    ``lose_reply`` makes the next append land and then fail as if the connection dropped."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, str, bytes]] = []
        self.down = False
        #: What a call raises while ``down``.
        self.refusal: Exception = RedisConnectionError("Connection refused")
        self.lose_reply = False
        self.calls = 0
        self.redis = self

    async def append(self, keys: ConversationKeys, token: str, items: Any, **_: Any) -> list[str]:
        self.calls += 1
        if self.down:
            raise self.refusal
        ids = []
        for item in items:
            ids.append(f"{len(self.entries) + 1}-0")
            self.entries.append((ids[-1], item.kind, item.data))
        if self.lose_reply:
            self.lose_reply = False
            raise RedisConnectionError("Connection reset by peer")
        return ids

    async def append_when_packed(
        self,
        keys: ConversationKeys,
        token: str,
        close: Any,
        nonce: str,
        *,
        fresh: bool = False,
        prev: str = "",
    ) -> list[str]:
        await asyncio.sleep(0)  # packed a loop turn later, as ScriptPipeline packs it
        items, release, snapshot = close()
        return await self.append(keys, token, items, release=release, snapshot=snapshot)

    def submit_append(
        self,
        keys: ConversationKeys,
        token: str,
        close: Any,
        nonce: str,
        *,
        fresh: bool = False,
        prev: str = "",
    ) -> asyncio.Future[list[str]]:
        """The append as the script pipeline's call: its reply, a future (not awaited)."""
        return asyncio.ensure_future(self.append_when_packed(keys, token, close, nonce))

    def submit_append_then(
        self,
        keys: ConversationKeys,
        token: str,
        close: Any,
        nonce: str,
        then: Any,
        *,
        fresh: bool = False,
        prev: str = "",
    ) -> None:
        """The pipeline's ``call_then``: the raw reply (ids, or the error object) to ``then``."""

        def told(reply: asyncio.Future[list[str]]) -> None:
            then(reply.exception() or reply.result())

        self.submit_append(keys, token, close, nonce).add_done_callback(told)

    async def xrevrange(self, name: str, count: int) -> list[tuple[bytes, dict[bytes, bytes]]]:
        if self.down:
            raise self.refusal
        tail = self.entries[-count:][::-1]
        return [(i.encode(), {b"k": k.encode(), b"d": d}) for i, k, d in tail]


def _item(n: int) -> Pending:
    return Pending(KIND_EVENT, f'{{"n":{n}}}'.encode(), "message.delta", "r1")


async def _outage(log: FlakyLog, seconds: float) -> None:
    log.down = True
    await asyncio.sleep(seconds)
    log.down = False


async def test_appends_during_a_short_outage_land_in_order() -> None:
    log = FlakyLog()
    writer = FencedWriter(log, KEYS, "1|a|r1", deadline=lambda: time.monotonic() + 10)  # type: ignore[arg-type]
    await writer.append([_item(0)])
    outage = asyncio.create_task(_outage(log, 0.5))
    await asyncio.sleep(0)
    results = await asyncio.gather(*(writer.append([_item(n)]) for n in range(1, 6)))
    await outage
    assert [d for _, _, d in log.entries] == [_item(n).data for n in range(6)]
    assert [ids[0] for ids in results] == [f"{n}-0" for n in range(2, 7)]
    assert log.calls > 2  # it really failed and was retried


@pytest.mark.parametrize(
    "refusal",
    [
        ClusterDownError("CLUSTERDOWN The cluster is down"),
        TryAgainError("TRYAGAIN Multiple keys request during rehashing of slot"),
    ],
)
async def test_appends_refused_by_a_cluster_failing_over_land_in_order(refusal: Exception) -> None:
    """A Redis Cluster answers CLUSTERDOWN for every slot from a master's failure until its
    replica is promoted: the owner rides it out as an outage (the soak's master kills ended
    runs ``provider_error`` when it did not), awaited appends and those not waited for alike."""
    log = FlakyLog()
    log.refusal = refusal
    writer = FencedWriter(log, KEYS, "1|a|r1", deadline=lambda: time.monotonic() + 10)  # type: ignore[arg-type]
    await writer.append([_item(0)])
    log.down = True
    outcome = _soon(writer, _item(1))
    results = asyncio.gather(*(writer.append([_item(n)]) for n in range(2, 5)))
    await eventually(lambda: writer.retried >= 3, what="the refused appends retried")
    log.down = False
    assert await asyncio.wait_for(outcome, 5) == (["2-0"], None)
    assert [ids[0] for ids in await asyncio.wait_for(results, 5)] == ["3-0", "4-0", "5-0"]
    assert [d for _, _, d in log.entries] == [_item(n).data for n in range(5)]


async def test_a_retried_append_whose_reply_was_lost_is_not_written_twice() -> None:
    log = FlakyLog()
    writer = FencedWriter(log, KEYS, "1|a|r1", deadline=lambda: time.monotonic() + 10)  # type: ignore[arg-type]
    log.lose_reply = True
    ids = await writer.append([_item(0), _item(1)])
    assert ids == ["1-0", "2-0"]
    assert len(log.entries) == 2
    await writer.append([_item(2)])
    assert [d for _, _, d in log.entries] == [_item(n).data for n in range(3)]


async def test_past_the_lease_deadline_the_writer_gives_up_for_good() -> None:
    log = FlakyLog()
    deadline = time.monotonic() + 0.4
    writer = FencedWriter(log, KEYS, "1|a|r1", deadline=lambda: deadline)  # type: ignore[arg-type]
    log.down = True
    with pytest.raises(Fenced):  # a bound: retried without end, it would hang here
        await asyncio.wait_for(writer.append([_item(0)]), 10)
    # Retried until the next retry would fall past the deadline, not given up before.
    assert time.monotonic() + RETRY_INTERVAL >= deadline
    log.down = False
    with pytest.raises(Fenced):  # Redis is back, but this owner no longer writes
        await writer.append([_item(1)])
    assert log.entries == []


async def test_without_a_deadline_a_failed_append_raises_at_once() -> None:
    log = FlakyLog()
    writer = FencedWriter(log, KEYS, "")  # type: ignore[arg-type]
    log.down = True
    with pytest.raises(RedisConnectionError):
        await writer.append([_item(0)])
    assert log.calls == 1


class GatedLog(FlakyLog):
    """FlakyLog whose appends wait for ``gate`` (one in flight as long as it is closed)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.sent: list[list[bytes]] = []

    async def append(self, keys: ConversationKeys, token: str, items: Any, **kw: Any) -> list[str]:
        self.sent.append([item.data for item in items])
        await self.gate.wait()
        return await super().append(keys, token, items, **kw)


async def _one_in_flight() -> tuple[GatedLog, FencedWriter, asyncio.Task[list[str]]]:
    """A writer on a gated log whose first append (item 0) is in flight, held at the gate."""
    log = GatedLog()
    writer = FencedWriter(log, KEYS, "1|a|r1", deadline=lambda: time.monotonic() + 10)  # type: ignore[arg-type]
    first = asyncio.create_task(writer.append([_item(0)]))
    await eventually(lambda: len(log.sent) == 1, what="the first append in flight")
    return log, writer, first


async def test_appends_behind_one_in_flight_go_in_one_write_after_it_even_if_it_is_cancelled() -> (
    None
):
    log, writer, first = await _one_in_flight()
    behind = [asyncio.create_task(writer.append([_item(n)])) for n in (1, 2)]
    await eventually(lambda: all(not t.done() for t in behind) and len(log.sent) == 1)
    first.cancel()  # its caller gives up: the appends behind it are not held up
    with pytest.raises(asyncio.CancelledError):
        await first
    log.gate.set()
    ids = await asyncio.wait_for(asyncio.gather(*behind), 5)
    assert log.sent[1:] == [[_item(1).data, _item(2).data]]  # one write, in order
    assert [d for _, _, d in log.entries][-2:] == [_item(1).data, _item(2).data]
    assert ids[0][0] < ids[1][0]
    # The writer goes on: a lone append later is one write of its own.
    assert await writer.append([_item(3)]) == [f"{len(log.entries)}-0"]
    assert log.sent[-1] == [_item(3).data]


async def test_a_leader_cancelled_before_its_write_hands_its_batch_on() -> None:
    """The caller that opened a batch writes it in its own task; cancelled while it waits
    behind the batch in flight, the batch (with what joined it) is still written, once."""
    log, writer, first = await _one_in_flight()
    leader = asyncio.create_task(writer.append([_item(1)]))
    joiner = asyncio.create_task(writer.append([_item(2)]))

    def joined() -> bool:  # the leader's batch, not sent yet, holds the joiner's item too
        queued = writer._queue
        return queued is not None and len(queued.items) == 2

    await eventually(joined, what="the joiner in the leader's batch")
    assert len(log.sent) == 1
    leader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leader
    log.gate.set()
    assert await asyncio.wait_for(first, 5) == ["1-0"]
    assert await asyncio.wait_for(joiner, 5) == ["3-0"]
    assert log.sent == [[_item(0).data], [_item(1).data, _item(2).data]]
    assert [d for _, _, d in log.entries] == [_item(n).data for n in range(3)]


async def test_a_handed_on_batch_keeps_its_place_before_the_batches_after_it() -> None:
    """A batch opened with a snapshot takes no joiners, so the next append opens a batch of its
    own that waits behind it; its leader cancelled, the batch is still written first."""
    log, writer, first = await _one_in_flight()
    snap = SnapshotWrite(b"{}", b"{}")
    leader = asyncio.create_task(writer.append([_item(1)], snapshot=snap))
    after = asyncio.create_task(writer.append([_item(2)]))
    await eventually(lambda: writer._queue is not None, what="the batch after it opened")
    leader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leader
    log.gate.set()
    assert await asyncio.wait_for(after, 5) == ["3-0"]
    assert await asyncio.wait_for(first, 5) == ["1-0"]
    assert log.sent == [[_item(0).data], [_item(1).data], [_item(2).data]]
    assert [d for _, _, d in log.entries] == [_item(n).data for n in range(3)]


async def test_a_leader_cancelled_mid_write_fails_its_joiners_instead_of_hanging() -> None:
    """Cut off mid-write, the batch may or may not have landed: what joined it is told so
    with a connection error (its run then reloads its state), never left waiting."""
    log = GatedLog()
    writer = FencedWriter(log, KEYS, "1|a|r1", deadline=lambda: time.monotonic() + 10)  # type: ignore[arg-type]
    leader = asyncio.create_task(writer.append([_item(0)]))
    joiner = asyncio.create_task(writer.append([_item(1)]))  # joins during the leader's turn
    await eventually(lambda: len(log.sent) == 1, what="the batch in flight")
    assert log.sent == [[_item(0).data, _item(1).data]]
    leader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leader
    with pytest.raises(RedisConnectionError):
        await asyncio.wait_for(joiner, 5)
    log.gate.set()
    # The writer goes on with the next append.
    assert await asyncio.wait_for(writer.append([_item(2)]), 5) == [f"{len(log.entries)}-0"]


class FlakyOwnership:
    """Ownership stand-in: ``renew`` fails while ``down``; counts renewals and failures."""

    def __init__(self, ttl_ms: int) -> None:
        self.lease_ttl_ms = ttl_ms
        self.down = False
        self.renewed = 0
        self.failed = 0

    async def renew(self, keys: ConversationKeys, token: Token) -> bool:
        if self.down:
            self.failed += 1
            raise RedisConnectionError("Connection refused")
        self.renewed += 1
        return True

    async def mark(self, keys: ConversationKeys) -> None:
        if self.down:
            raise RedisConnectionError("Connection refused")


async def test_keeper_tolerates_failed_renewals_until_the_deadline() -> None:
    """A 3 s lease renewed every second: Redis down for two failed renewals (retried every
    0.1 s, the deadline ~2.85 s after the last grant), then back: renewed, and still held past
    the deadline it had while Redis was down."""
    own = FlakyOwnership(3000)
    lost = asyncio.Event()
    keeper = LeaseKeeper(own, KEYS, Token("1|a|r1"), lost)  # type: ignore[arg-type]
    keeper.start()
    try:
        await eventually(lambda: own.renewed >= 1, what="a first renewal")
        own.down = True
        first = keeper.deadline()
        await eventually(lambda: own.failed >= 2 or lost.is_set(), what="two failed renewals")
        assert not lost.is_set()
        own.down = False
        before = own.renewed
        # Retried quickly once Redis answered again (before the lease lapsed: not lost below).
        await eventually(lambda: own.renewed > before, what="a renewal")
        assert keeper.deadline() > first
        await eventually(lambda: time.monotonic() > first, what="past the first deadline")
        assert not lost.is_set()
    finally:
        await keeper.stop()


async def test_keeper_reports_the_lease_lost_at_its_deadline() -> None:
    own = FlakyOwnership(600)
    lost = asyncio.Event()
    keeper = LeaseKeeper(own, KEYS, Token("1|a|r1"), lost)  # type: ignore[arg-type]
    own.down = True
    keeper.start()
    try:
        await asyncio.wait_for(lost.wait(), 10)  # a bound: the deadline is 0.57 s away
        assert time.monotonic() >= keeper.deadline()
        own.down = False
        renewed = own.renewed
        # The keeper has stopped for good: a lapsed lease is never renewed by its old owner.
        await eventually(lambda: keeper._task is not None and keeper._task.done())
        assert own.renewed == renewed == 0
    finally:
        await keeper.stop()


class HangingOwnership(FlakyOwnership):
    """Renewals that never answer (a Redis unreachable without a connection reset)."""

    async def renew(self, keys: ConversationKeys, token: Token) -> bool:
        await asyncio.sleep(3600)
        return True


async def test_a_hanging_renewal_does_not_outlive_the_deadline() -> None:
    own = HangingOwnership(600)
    lost = asyncio.Event()
    keeper = LeaseKeeper(own, KEYS, Token("1|a|r1"), lost)  # type: ignore[arg-type]
    keeper.start()
    try:
        await asyncio.wait_for(lost.wait(), 10)  # the deadline, not the renewal's hour
        assert time.monotonic() >= keeper.deadline()
    finally:
        await keeper.stop()


# --- append_soon: the same write, its outcome handed to a callback ---------------------------

Outcome = tuple[list[str] | None, Exception | None]


def _soon(writer: FencedWriter, item: Pending) -> asyncio.Future[Outcome]:
    """``writer.append_soon([item])``; its outcome, as the callback got it."""
    outcome: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
    writer.append_soon([item], None, lambda ids, error: outcome.set_result((ids, error)))
    return outcome


async def test_an_append_not_waited_for_lands_after_an_outage_once_and_in_order() -> None:
    """The write fails on the connection, then is retried as ``append`` retries (once the log
    is back), its reply lost once: written once, its ids to the callback; an append made
    meanwhile waits behind it."""
    log = FlakyLog()
    writer = FencedWriter(log, KEYS, "1|a|r1", deadline=lambda: time.monotonic() + 10)  # type: ignore[arg-type]
    assert writer.idle()
    log.down = True
    outcome = _soon(writer, _item(0))
    assert not writer.idle()  # in flight: the next append waits behind it
    after = asyncio.create_task(writer.append([_item(1)]))
    await eventually(lambda: bool(writer._flushes), what="the failed send retried in a task")
    log.lose_reply = True
    log.down = False
    assert await asyncio.wait_for(outcome, 5) == (["1-0"], None)
    assert await asyncio.wait_for(after, 5) == ["2-0"]
    assert [d for _, _, d in log.entries] == [_item(0).data, _item(1).data]
    assert writer.idle()


async def test_an_append_not_waited_for_past_the_deadline_hands_over_fenced() -> None:
    log = FlakyLog()
    deadline = time.monotonic() + 0.4
    writer = FencedWriter(log, KEYS, "1|a|r1", deadline=lambda: deadline)  # type: ignore[arg-type]
    log.down = True
    ids, error = await asyncio.wait_for(_soon(writer, _item(0)), 5)
    assert ids is None and isinstance(error, Fenced)
    assert not writer.idle()  # given up for good
    log.down = False
    with pytest.raises(Fenced):
        await writer.append([_item(1)])
    assert log.entries == []


async def test_an_append_not_waited_for_takes_joiners_until_it_is_packed() -> None:
    """Packed a loop turn later (as the script pipeline packs): an append made before that
    joins its batch, one write, each caller its own ids."""
    log = FlakyLog()
    writer = FencedWriter(log, KEYS, "1|a|r1", deadline=lambda: time.monotonic() + 10)  # type: ignore[arg-type]
    outcome = _soon(writer, _item(0))
    joined = asyncio.create_task(writer.append([_item(1)]))
    assert await asyncio.wait_for(outcome, 5) == (["1-0"], None)
    assert await asyncio.wait_for(joined, 5) == ["2-0"]
    assert log.calls == 1


async def test_an_append_not_waited_for_whose_retry_is_cancelled_tells_its_caller() -> None:
    log = FlakyLog()
    writer = FencedWriter(log, KEYS, "1|a|r1", deadline=lambda: time.monotonic() + 10)  # type: ignore[arg-type]
    log.down = True
    outcome = _soon(writer, _item(0))
    await eventually(lambda: bool(writer._flushes), what="the failed send retried in a task")
    for task in list(writer._flushes):
        task.cancel()
    ids, error = await asyncio.wait_for(outcome, 5)
    assert ids is None and isinstance(error, RedisConnectionError)
