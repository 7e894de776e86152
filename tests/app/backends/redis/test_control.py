"""One poll per instance: the bus reads the abort flags and command lists of all its runs."""

from __future__ import annotations

import time
from typing import Any

import orjson
from redis.asyncio import Redis

from app.backends.redis.claims import Ownership
from app.backends.redis.control import ABORT_FLAG_TTL_MS, Control, ControlBus, OwnerInbox
from app.backends.redis.keys import ConversationKeys
from tests.app.support.redis_support import prefix, redis
from tests.support import eventually, eventually_async

__all__ = ["prefix", "redis"]  # fixtures


def keys_for(prefix: str, key: str) -> ConversationKeys:
    return ConversationKeys.for_conversation("alice", key, prefix=prefix)


class Seen:
    def __init__(self) -> None:
        self.aborts: list[str] = []
        self.commands: list[bytes] = []

    async def on_command(self, raw: bytes) -> None:
        self.commands.append(raw)


async def test_one_poll_covers_every_run_and_finds_an_abort_without_its_wake_up(
    redis: Redis, prefix: str
) -> None:
    """Flags and commands written with no pub/sub message (lost) reach their owners through
    the bus's shared poll; the idle rounds are one call each, whatever the number of runs."""
    own = Ownership(redis, "inst-a", lease_ttl_ms=5000)
    bus = ControlBus(redis, poll_interval=0.1)
    await bus.start()
    convs = [keys_for(prefix, f"k{i}") for i in range(5)]
    seen = [Seen() for _ in convs]
    inboxes = []
    for i, (k, s) in enumerate(zip(convs, seen, strict=True)):
        await own.claim(k, f"run_{i}")
        inboxes.append(
            OwnerInbox(redis, bus, k, f"run_{i}", on_abort=s.aborts.append, on_command=s.on_command)
        )
    for inbox in inboxes:
        inbox.start()
    try:
        polls = bus.polls
        await eventually(lambda: bus.polls >= polls + 3, what="three idle poll rounds")
        # Written behind the owner's back, as if the wake-up message were lost.
        await redis.set(convs[1].abort, "run_1|interrupted", px=ABORT_FLAG_TTL_MS)
        await redis.rpush(convs[3].cmd, orjson.dumps({"i": 1}), orjson.dumps({"i": 2}))
        await redis.set(convs[4].abort, "run_other|aborted", px=ABORT_FLAG_TTL_MS)
        await eventually(lambda: seen[1].aborts == ["interrupted"], what="run_1 aborted")
        await eventually(lambda: len(seen[3].commands) == 2, what="run_3 got its commands")
        assert [orjson.loads(c)["i"] for c in seen[3].commands] == [1, 2]
        assert not await redis.exists(convs[3].cmd)  # handed over once
        polls = bus.polls
        await eventually(lambda: bus.polls >= polls + 2, what="two more rounds")
        assert seen[1].aborts == ["interrupted"]  # once
        assert seen[4].aborts == []  # another run's abort
        assert all(not s.aborts and not s.commands for s in (seen[0], seen[2]))
    finally:
        for inbox in inboxes:
            await inbox.stop()
        await bus.stop()


async def test_an_abort_from_another_instance_reaches_the_owner_through_the_shared_bus(
    redis: Redis, prefix: str
) -> None:
    own = Ownership(redis, "inst-a", lease_ttl_ms=5000)
    other = Control(redis)  # another instance's sending side
    bus = ControlBus(redis, poll_interval=60.0)  # only the pub/sub wake-up can be this fast
    await bus.start()
    a, b = keys_for(prefix, "a"), keys_for(prefix, "b")
    await own.claim(a, "run_a")
    await own.claim(b, "run_b")
    sa, sb = Seen(), Seen()
    ia = OwnerInbox(redis, bus, a, "run_a", on_abort=sa.aborts.append, on_command=sa.on_command)
    ib = OwnerInbox(redis, bus, b, "run_b", on_abort=sb.aborts.append, on_command=sb.on_command)
    ia.start()
    ib.start()
    try:
        await eventually(lambda: bus.polls >= 1, what="the first poll of the new inboxes")

        async def subscribed() -> bool:
            counts: Any = await redis.pubsub_numsub(b.ctl)
            return bool(counts) and int(counts[0][1]) >= 1

        await eventually_async(subscribed, what="b's channel is subscribed")
        t0 = time.monotonic()
        assert await other.abort(b, None, "aborted") == "run_b"
        await eventually(lambda: sb.aborts == ["aborted"], what="b aborted")
        assert time.monotonic() - t0 < 10  # the wake-up, not the 60 s poll
        assert sa.aborts == []
    finally:
        await ia.stop()
        await ib.stop()
        await bus.stop()
