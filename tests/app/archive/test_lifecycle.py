"""The archive across restarts: listing (paginated, newest first, titles), isolation between
principals, DELETE, retention, and a database that is down while runs complete."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from tests.app.archive.support import (
    SERVE_PROCESSES_ON_MEMORY,
    Database,
    ServeProcess,
    config_toml,
    run_turn,
    wait_for,
)
from tests.providers.support.mock_upstreams import MockUpstream, openai_frames

pytestmark = SERVE_PROCESSES_ON_MEMORY


@pytest.fixture
async def gateway(database: Database, upstream: MockUpstream) -> AsyncIterator[ServeProcess]:
    process = ServeProcess(
        config_toml(database.url, upstream.url, retention_days=1, retention_interval_seconds=0.2)
    )
    await process.start()
    yield process
    process.close()


async def _archived(database: Database, key: str) -> list[tuple[object, ...]]:
    return await database.query(
        "SELECT last_run_status FROM archived_conversations WHERE conversation_key = $1", key
    )


async def test_listing_paginates_newest_first_and_principals_are_isolated(
    gateway: ServeProcess, upstream: MockUpstream
) -> None:
    keys = [f"c{index}" for index in range(5)]
    upstream.responses += [openai_frames(text="ok") for _ in range(6)]
    async with gateway.client("alice") as alice, gateway.client("bob") as bob:
        for key in keys:
            await run_turn(alice, key, f"title {key}")
        await run_turn(bob, "secret", "bob's")
    await gateway.restart()
    async with gateway.client("alice") as alice, gateway.client("bob") as bob:
        seen: list[dict[str, object]] = []
        cursor = None
        while True:
            params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
            page = (await alice.get("/v1/conversations", params=params)).json()
            assert len(page["conversations"]) <= 2
            seen += page["conversations"]
            cursor = page["nextCursor"]
            if cursor is None:
                break
        assert [item["conversationKey"] for item in seen] == keys[::-1]
        assert [item["title"] for item in seen] == [f"title {key}" for key in keys[::-1]]
        assert {item["lastRunStatus"] for item in seen} == {"completed"}
        listed = (await bob.get("/v1/conversations")).json()["conversations"]
        assert [item["conversationKey"] for item in listed] == ["secret"]
        assert (await alice.get("/v1/conversations/secret/state")).status_code == 404
        run_id = listed[0]["lastRunId"]
        assert (await alice.get(f"/v1/conversations/secret/runs/{run_id}")).status_code == 404
        assert (await bob.get(f"/v1/conversations/secret/runs/{run_id}")).status_code == 200
        assert (await bob.get("/v1/conversations/secret/state")).status_code == 200
        assert (await bob.get("/v1/conversations/c0/state")).status_code == 404


async def test_delete_then_restart_leaves_nothing(
    gateway: ServeProcess, upstream: MockUpstream, database: Database
) -> None:
    upstream.responses += [openai_frames(text="ok"), openai_frames(text="ok")]
    async with gateway.client() as client:
        await run_turn(client, "gone", "forget me")
        await run_turn(client, "kept", "keep me")
        await wait_for(lambda: _has(database, "gone"), what="the archive write")
        assert (await client.delete("/v1/conversations/gone")).status_code == 204
        assert (await client.get("/v1/conversations/gone/state")).status_code == 404
    await gateway.restart()
    async with gateway.client() as client:
        assert (await client.get("/v1/conversations/gone/state")).status_code == 404
        listed = (await client.get("/v1/conversations")).json()["conversations"]
        assert [item["conversationKey"] for item in listed] == ["kept"]
    assert await _archived(database, "gone") == []
    # A conversation the archive alone holds (not restored since the restart) is deleted too.
    async with gateway.client() as client:
        assert (await client.delete("/v1/conversations/kept")).status_code == 204
        assert (await client.get("/v1/conversations/kept/state")).status_code == 404
    await gateway.restart()
    async with gateway.client() as client:
        assert (await client.get("/v1/conversations/kept/state")).status_code == 404
        assert (await client.get("/v1/conversations")).json()["conversations"] == []
    assert await _archived(database, "kept") == []


async def _has(database: Database, key: str) -> bool:
    return await _archived(database, key) == [("completed",)]


async def test_retention_drops_idle_conversations(
    gateway: ServeProcess, upstream: MockUpstream, database: Database
) -> None:
    upstream.responses += [openai_frames(text="ok"), openai_frames(text="ok")]
    async with gateway.client() as client:
        await run_turn(client, "old", "long ago")
        await run_turn(client, "new", "today")
    gateway.stop()  # every write done
    ten_days_ago = (time.time() - 10 * 86400) * 1000
    await database.query(
        "UPDATE archived_conversations SET updated_at = $1 WHERE conversation_key = $2",
        ten_days_ago,
        "old",
    )
    await gateway.start()  # a fresh process: "old" lives only in the archive

    async def dropped() -> bool:
        return await _archived(database, "old") == []

    await wait_for(dropped, what="retention")
    async with gateway.client() as client:
        assert (await client.get("/v1/conversations/old/state")).status_code == 404
        assert (await client.get("/v1/conversations/new/state")).status_code == 200
    assert await _archived(database, "new") == [("completed",)]


async def test_a_database_down_while_runs_complete(
    gateway: ServeProcess, upstream: MockUpstream, database: Database
) -> None:
    upstream.responses += [openai_frames(text=f"answer {index}") for index in range(3)]
    async with database.down():
        async with gateway.client() as client:
            started = time.monotonic()
            for index in range(3):
                events = await run_turn(client, f"down{index}", f"question {index}")
                assert events[-1]["type"] == "run.completed"
            assert time.monotonic() - started < 10  # never held up by the archive
        metrics = await _metrics(gateway)
        assert 'agent_gateway_archive_writes_total{outcome="failed"}' in metrics

    async def caught_up() -> bool:
        for index in range(3):
            if await _archived(database, f"down{index}") != [("completed",)]:
                return False
        return True

    await wait_for(caught_up, within=60, what="the archive catching up")
    await gateway.restart()
    async with gateway.client() as client:
        state = (await client.get("/v1/conversations/down2/state")).json()
        assert state["agentState"]["runs"]


async def _metrics(gateway: ServeProcess) -> str:
    async with gateway.client() as client:
        return (await client.get("/metrics")).text
