"""Script calls sent together (``app.backends.redis.script_batch``) against a private Redis,
and the steps of a run start that use them: each call answers as alone and takes effect once,
also after Redis lost its scripts; a new conversation is created, listed and touched in one
round trip and its start reads no head; two stream slots are taken or refused together."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from app.backends import EMPTY_CURSOR, ConversationRef
from app.backends.redis import RedisBackend, create_redis_backend
from app.backends.redis.limits import RedisLimits
from app.backends.redis.script_batch import call_together
from tests.app.backends.redis.test_costs import command_calls, settings_for
from tests.app.support.backend_contract import meta
from tests.app.support.gateway_server import launch
from tests.app.support.helpers import start_run
from tests.app.support.redis_support import PrivateRedis, private_redis
from tests.app.support.scripted_provider import ScriptedProvider

pytestmark = pytest.mark.slow  # a redis-server of its own (SCRIPT FLUSH, command counts)

COUNT = "return redis.call('INCR', KEYS[1])"
FAIL = "return redis.error_reply('ERR refused by the script')"


@asynccontextmanager
async def counted_round_trips(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Callable[[], int]]:
    """``redis``'s writes to the server (one per round trip), counted from here on (its
    command mux's included)."""
    # the class its connections have (redis-py leaves get_connection unannotated)
    probe = await redis.connection_pool.get_connection()  # type: ignore[no-untyped-call]
    await redis.connection_pool.release(probe)
    sent = [0]
    original = type(probe).send_packed_command

    async def counting(self: Any, command: Any, check_health: bool = True) -> None:
        sent[0] += 1
        await original(self, command, check_health)

    monkeypatch.setattr(type(probe), "send_packed_command", counting)
    mux = getattr(redis, "mux", None)  # writes on its socket itself: counted by its own count
    start = 0 if mux is None else mux.round_trips
    yield lambda: sent[0] + (0 if mux is None else mux.round_trips - start)


@asynccontextmanager
async def redis_backend(server: PrivateRedis, **gateway: Any) -> AsyncIterator[RedisBackend]:
    backend = create_redis_backend(settings_for(server, **gateway))
    await backend.start()
    try:
        yield backend
    finally:
        await backend.close()


async def test_calls_answer_in_order_in_one_round_trip_and_once_each_after_a_script_flush(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with private_redis() as server:
        redis = Redis.from_url(server.url)
        try:
            count = redis.register_script(COUNT)
            async with counted_round_trips(redis, monkeypatch) as round_trips:
                await count(keys=["warm"])  # loaded: the next calls find it
                before = round_trips()
                replies = await call_together(redis, [(count, ["a"], []), (count, ["b"], [])])
                assert replies == [1, 1]
                assert round_trips() - before == 1

            await redis.script_flush()  # as after a Redis restart
            await redis.config_resetstat()
            replies = await call_together(redis, [(count, ["a"], []), (count, ["b"], [])])
            assert replies == [2, 2]  # each ran once: NOSCRIPT means it did not run
            assert [int(v) for v in await redis.mget("a", "b") if v is not None] == [2, 2]
            assert (await command_calls(redis)).get("script|load", 0) >= 1
        finally:
            await redis.aclose()


async def test_an_error_reply_is_raised_and_the_other_calls_still_ran() -> None:
    with private_redis() as server:
        redis = Redis.from_url(server.url)
        try:
            count, fail = redis.register_script(COUNT), redis.register_script(FAIL)
            with pytest.raises(ResponseError, match="refused by the script"):
                await call_together(redis, [(count, ["a"], []), (fail, ["b"], [])])
            assert int(await redis.get("a") or 0) == 1
        finally:
            await redis.aclose()


@pytest.mark.parametrize("flushed", [False, True], ids=["scripts-loaded", "after-script-flush"])
async def test_a_new_conversation_is_created_listed_and_touched_in_one_round_trip(
    flushed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    with private_redis() as server:
        async with redis_backend(server, conversation_ttl_seconds=600) as backend:
            ref = ConversationRef("alice", "fresh")
            assert await backend.create_conversation(ConversationRef("alice", "warm"), meta())
            if flushed:
                await backend.redis.script_flush()
            async with counted_round_trips(backend.redis, monkeypatch) as round_trips:
                assert await backend.create_conversation(ref, meta())
                if not flushed:
                    assert round_trips() == 1
            assert not await backend.create_conversation(ref, meta())  # exists: not again
            listed = [key for key, _ in await backend.list_conversations("alice")]
            assert sorted(listed) == ["fresh", "warm"]
            ttl_ms = await backend.redis.pttl(backend.keys(ref).meta)
            assert 590_000 < ttl_ms <= 600_000  # its idle expiry is set, also when created late


@pytest.mark.only_backend("redis", reason="a private Redis of its own")
async def test_a_new_conversations_start_answers_the_empty_cursor_without_reading_the_head(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    heads: list[str] = []
    head_cursor = RedisBackend.head_cursor

    async def counting(self: RedisBackend, ref: ConversationRef) -> str:
        heads.append(ref.key)
        return await head_cursor(self, ref)

    monkeypatch.setattr(RedisBackend, "head_cursor", counting)
    with private_redis() as server:
        gateway = await launch(settings_for(server), providers={"demo": ScriptedProvider()})
        try:
            async with gateway.client(timeout=30) as client:
                accepted = await start_run(client, "new", "text:3")
                asked_at_creation = list(heads)
                waited = await client.get(f"/v1/conversations/new/runs/{accepted['runId']}/wait")
                heads.clear()
                again = await start_run(client, "new", "text:1")  # it exists now
                state = (await client.get("/v1/conversations/new/state")).json()
        finally:
            await gateway.stop()
    assert waited.status_code == 200
    assert accepted["cursor"] == EMPTY_CURSOR  # before every event of the new log
    assert asked_at_creation == []
    assert heads == ["new"]  # an existing conversation's start still reads its head
    assert again["cursor"] not in (EMPTY_CURSOR, "")
    assert state["agentState"]["runs"][accepted["runId"]]["status"] == "completed"


async def _zcard(redis: Redis, key: str) -> int:
    return int(await redis.zcard(key))


@pytest.mark.parametrize(
    ("per_conversation", "per_principal", "refused"),
    [(1, 5, "conversation"), (5, 1, "principal"), (1, 1, "principal")],
)
async def test_two_stream_slots_are_taken_together_or_neither_is_held(
    per_conversation: int, per_principal: int, refused: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The principal's slot and the conversation's are taken in one round trip; refused, the
    one that was taken is given back (the principal's refusal named first, as before)."""
    with private_redis() as server:
        redis = Redis.from_url(server.url)
        try:
            limits = RedisLimits(redis, "agwt", slot_ttl_ms=60_000)
            ref = ConversationRef("alice", "c1")
            mine, conv = limits._principal_key("subs", "alice"), limits._conversation_key(ref)
            first, _ = await limits.take_subscriber(ref, per_conversation, per_principal)
            assert first is not None
            async with counted_round_trips(redis, monkeypatch) as round_trips:
                token, why = await limits.take_subscriber(ref, per_conversation, per_principal)
                assert (token, why) == (None, refused)
                # Both slots asked at once; the one taken (if any) given back.
                assert round_trips() == (1 if per_conversation == per_principal else 2)
            assert (await _zcard(redis, mine), await _zcard(redis, conv)) == (1, 1)
            full = await limits.subscribers_full(ref, per_conversation, per_principal)
            assert full == ("conversation" if per_conversation == 1 else "principal")

            await limits.free_subscriber(first)
            assert (await _zcard(redis, mine), await _zcard(redis, conv)) == (0, 0)
            async with counted_round_trips(redis, monkeypatch) as round_trips:
                token, why = await limits.take_subscriber(ref, per_conversation, per_principal)
                assert token is not None and why is None
                assert round_trips() == 1
                assert await limits.subscribers_full(ref, 5, 5) is None
                assert round_trips() == 2
            assert (await _zcard(redis, mine), await _zcard(redis, conv)) == (1, 1)
        finally:
            await redis.aclose()
