"""The archive with the Redis live backend: two gateway processes on one Redis (a key prefix of
the test's own) share one archive. A conversation continued on either instance stays one
conversation, also after Redis forgot it (its keys deleted, as a TTL expiry or a flush does)
and when both instances restore it at once. A run whose instance died is archived with its end
(``gateway_instance_lost``) by the instance that ended it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from app.backends.redis.keys import conversation_tag
from tests.app.archive.support import (
    Database,
    ServeProcess,
    config_toml,
    run_turn,
    wait_for,
    without_cursor,
)
from tests.app.support.redis_support import SHARED_REDIS_URL, shared_redis, unique_prefix
from tests.app.support.webhook_support import Receiver, serve_receiver
from tests.providers.support.mock_upstreams import STALL, MockUpstream, openai_frames

pytestmark = [
    pytest.mark.slow,
    pytest.mark.only_backend(
        "redis", reason="two agent-gateway processes on one Redis live backend, with the archive"
    ),
]


class Cluster:
    def __init__(self, redis: Redis, prefix: str, a: ServeProcess, b: ServeProcess) -> None:
        self.redis, self.prefix, self.a, self.b = redis, prefix, a, b

    async def forget(self, principal: str, key: str) -> int:
        """Delete every Redis key of the conversation; how many there were."""
        tag = conversation_tag(principal, key)
        keys = [k async for k in self.redis.scan_iter(match=f"{self.prefix}:{{{tag}}}:*")]
        assert keys
        return int(await self.redis.delete(*keys))

    async def live_meta(self, principal: str, key: str) -> dict[str, Any] | None:
        """The conversation's meta as Redis holds it."""
        tag = conversation_tag(principal, key)
        raw = await self.redis.hget(f"{self.prefix}:{{{tag}}}:meta", "meta")
        return None if raw is None else dict(orjson.loads(raw))


@pytest.fixture
async def cluster(database: Database, upstream: MockUpstream) -> AsyncIterator[Cluster]:
    prefix = unique_prefix()
    gateway = {"backend": "redis", "redis_url": SHARED_REDIS_URL, "multitask": "enqueue"}
    config = config_toml(database.url, upstream.url, gateway)
    async with shared_redis(prefix) as redis:
        a, b = ServeProcess(config, prefix), ServeProcess(config, prefix)
        try:
            await asyncio.gather(a.start(), b.start())  # both migrate at once: one does
            yield Cluster(redis, prefix, a, b)
        finally:
            a.close()
            b.close()


def echo(body: dict[str, Any]) -> list[str]:
    """The upstream answers ``re: <the last user message>``."""
    prompt = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
    return openai_frames(text=f"re: {prompt}")


def history(request: dict[str, Any]) -> list[tuple[str, str]]:
    return [(m["role"], m.get("content")) for m in request["messages"] if m["role"] != "system"]


async def views(clients: list[httpx.AsyncClient], key: str, run_id: str) -> list[Any]:
    """State (cursors aside), the run record and the list, as each instance answers them."""
    out = []
    for client in clients:
        state = await client.get(f"/v1/conversations/{key}/state")
        run = await client.get(f"/v1/conversations/{key}/runs/{run_id}")
        listed = await client.get("/v1/conversations")
        assert (state.status_code, run.status_code, listed.status_code) == (200, 200, 200)
        out.append((without_cursor(state.json()), run.json(), listed.json()))
    return out


async def archived_last_run(database: Database, key: str) -> tuple[Any, ...] | None:
    rows = await database.query(
        "SELECT last_run_id, last_run_status, meta FROM archived_conversations"
        " WHERE conversation_key = $1",
        key,
    )
    return (*rows[0][:2], orjson.loads(rows[0][2])) if rows else None


async def settled(
    cluster: Cluster, database: Database, client: httpx.AsyncClient, key: str, run_id: str
) -> None:
    """Until the run's end is saved live (its stream ends before the meta saved after it) and
    archived: the archive holds the live meta, with the run completed."""
    record = (await client.get(f"/v1/conversations/{key}/runs/{run_id}")).json()
    assert record["status"] == "completed", record

    async def done() -> bool:
        live = await cluster.live_meta("alice", key)
        if live is None or live["lastRunId"] != run_id or live["updatedAt"] < record["updatedAt"]:
            return False
        return await archived_last_run(database, key) == (run_id, "completed", live)

    await wait_for(done, what=f"the end of {run_id} saved and archived")


async def test_turns_alternate_between_instances_and_survive_redis_forgetting(
    cluster: Cluster, upstream: MockUpstream, database: Database
) -> None:
    upstream.responses += [echo] * 4
    async with cluster.a.client() as a, cluster.b.client() as b:
        first = await run_turn(a, "trip", "one")
        second = await run_turn(b, "trip", "two")
        session = first[0]["sessionId"]
        assert second[0]["sessionId"] == session
        assert "session.started" not in [e["type"] for e in second]
        run2 = second[0]["runId"]
        await settled(cluster, database, b, "trip", run2)
        before = await views([a, b], "trip", run2)
        assert before[0] == before[1]
        assert len(before[0][0]["agentState"]["runs"]) == 2

        assert await cluster.forget("alice", "trip") > 0  # Redis forgot it (TTL, flush)

        assert await views([a, b], "trip", run2) == before  # read from the archive
        third = await run_turn(b, "trip", "three")
        fourth = await run_turn(a, "trip", "four")
        for events in (third, fourth):
            assert {e["sessionId"] for e in events} == {session}
            assert "session.started" not in [e["type"] for e in events]
        assert history(upstream.requests[-1]) == [
            ("user", "one"),
            ("assistant", "re: one"),
            ("user", "two"),
            ("assistant", "re: two"),
            ("user", "three"),
            ("assistant", "re: three"),
            ("user", "four"),
        ]
        run4 = fourth[0]["runId"]
        await settled(cluster, database, a, "trip", run4)
        after = await views([a, b], "trip", run4)
        assert after[0] == after[1]
        state = after[0][0]
        assert len(state["agentState"]["runs"]) == 4
        assert [m["message"]["role"] for m in state["messages"]] == ["user", "assistant"] * 4
        assert [c["conversationKey"] for c in after[0][2]["conversations"]] == ["trip"]


async def test_two_instances_restoring_at_once_make_one_conversation(
    cluster: Cluster, upstream: MockUpstream, database: Database
) -> None:
    upstream.responses += [echo] * 4
    async with cluster.a.client() as a, cluster.b.client() as b:
        first = await run_turn(a, "race", "one")
        second = await run_turn(b, "race", "two")
        session = first[0]["sessionId"]
        await settled(cluster, database, b, "race", second[0]["runId"])
        await cluster.forget("alice", "race")

        body = {"input": {"prompt": "again"}}
        answers = await asyncio.gather(
            a.post("/v1/conversations/race/runs", json=body),
            b.post("/v1/conversations/race/runs", json=body),
        )
        assert [r.status_code for r in answers] == [202, 202], [r.text for r in answers]
        assert {r.json()["sessionId"] for r in answers} == {session}
        for answer, client in zip(answers, (a, b), strict=True):
            waited = await client.get(
                f"/v1/conversations/race/runs/{answer.json()['runId']}/wait",
                params={"timeout": 30},
            )
            assert waited.json()["status"] == "completed", waited.text
        states = [(await c.get("/v1/conversations/race/state")).json() for c in (a, b)]
    assert without_cursor(states[0]) == without_cursor(states[1])
    state = states[0]
    assert len(state["agentState"]["runs"]) == 4
    assert [m["message"]["role"] for m in state["messages"]] == ["user", "assistant"] * 4
    assert len(state["agentState"]["sessions"]) == 1
    # The later of the two runs saw both earlier turns once, and the other new turn.
    assert history(upstream.requests[-1]) == [
        ("user", "one"),
        ("assistant", "re: one"),
        ("user", "two"),
        ("assistant", "re: two"),
        ("user", "again"),
        ("assistant", "re: again"),
        ("user", "again"),
    ]


async def test_a_run_ended_gateway_instance_lost_runs_the_run_end_hooks(
    database: Database, upstream: MockUpstream
) -> None:
    """A kills its instance mid-run; B ends the run ``gateway_instance_lost`` and runs the same
    run-end hooks as an owner: the webhook is sent and the archive holds the run's end."""
    upstream.responses.append([STALL])  # the run lasts until its owner is gone
    prefix = unique_prefix()
    gateway = {"backend": "redis", "redis_url": SHARED_REDIS_URL, "lease_ttl_seconds": 1.0}
    async with serve_receiver(Receiver()) as receiver, shared_redis(prefix):
        config = config_toml(database.url, upstream.url, gateway)
        config += f'\n[webhooks]\nurl = "{receiver.url}"\nsecret = "whsec-test"\n'
        a, b = ServeProcess(config, prefix), ServeProcess(config, prefix)
        try:
            await asyncio.gather(a.start(), b.start())
            async with a.client() as ca, b.client() as cb:
                answer = await ca.post(
                    "/v1/conversations/lost/runs", json={"input": {"prompt": "hi"}}
                )
                assert answer.status_code == 202, answer.text
                run_id = answer.json()["runId"]

                async def archived_running() -> bool:  # A's deferred write of the run's start
                    row = await archived_last_run(database, "lost")
                    return row is not None and row[:2] == (run_id, "running")

                await wait_for(archived_running, what="the run archived as started")
                a.kill()
                await receiver.wait_acknowledged(1, within=30)

                async def archived_lost() -> bool:
                    row = await archived_last_run(database, "lost")
                    return row is not None and row[:2] == (run_id, "failed")

                await wait_for(archived_lost, what="the lost run's end archived")
                record = (await cb.get(f"/v1/conversations/lost/runs/{run_id}")).json()
        finally:
            a.close()
            b.close()
    hook = receiver.acknowledged[0]
    assert (hook["type"], hook["run"]["runId"]) == ("run.failed", run_id)
    assert hook["run"]["error"]["code"] == "gateway_instance_lost"
    assert len(receiver.attempts) == 1
    (state,) = await database.query(
        "SELECT state FROM archived_conversations WHERE conversation_key = $1", "lost"
    )
    archived = orjson.loads(state[0])["runs"][run_id]
    assert archived["status"] == record["status"] == "failed"
    assert archived["error"]["code"] == "gateway_instance_lost"
