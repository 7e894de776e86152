"""Conversations survive a restart of the gateway process (memory live backend) through the
archive, and a new run continues them: same session, earlier turns in the upstream history."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.app.archive.support import (
    SERVE_PROCESSES_ON_MEMORY,
    Database,
    ServeProcess,
    config_toml,
    run_turn,
    wait_for,
    without_cursor,
)
from tests.providers.support.mock_upstreams import MockUpstream, openai_frames

pytestmark = SERVE_PROCESSES_ON_MEMORY


@pytest.fixture
async def gateway(database: Database, upstream: MockUpstream) -> AsyncIterator[ServeProcess]:
    process = ServeProcess(config_toml(database.url, upstream.url))
    await process.start()
    yield process
    process.close()


async def test_two_turns_restart_then_a_third_continues_the_history(
    gateway: ServeProcess, upstream: MockUpstream
) -> None:
    upstream.responses += [openai_frames(text="Paris."), openai_frames(text="About 2.1 million.")]
    async with gateway.client() as client:
        first = await run_turn(client, "trip", "Capital of France?")
        second = await run_turn(client, "trip", "Its population?")
        state = (await client.get("/v1/conversations/trip/state")).json()
        run = (await client.get(f"/v1/conversations/trip/runs/{second[0]['runId']}")).json()
        listed = (await client.get("/v1/conversations")).json()
    session_id = first[0]["sessionId"]
    assert [e["type"] for e in first].count("session.started") == 1

    await gateway.restart()

    upstream.responses.append(openai_frames(text="Yes."))
    async with gateway.client() as client:
        assert without_cursor((await client.get("/v1/conversations/trip/state")).json()) == (
            without_cursor(state)
        )
        assert (await client.get(f"/v1/conversations/trip/runs/{second[0]['runId']}")).json() == run
        assert (await client.get("/v1/conversations")).json() == listed
        third = await run_turn(client, "trip", "Is it big?")
        after = (await client.get("/v1/conversations/trip/state")).json()

    assert {e["sessionId"] for e in third} == {session_id}
    assert "session.started" not in [e["type"] for e in third]
    messages = upstream.requests[-1]["messages"]
    contents = [(m["role"], m.get("content")) for m in messages if m["role"] != "system"]
    assert contents == [
        ("user", "Capital of France?"),
        ("assistant", "Paris."),
        ("user", "Its population?"),
        ("assistant", "About 2.1 million."),
        ("user", "Is it big?"),
    ]
    assert len(after["agentState"]["runs"]) == 3
    assert [m["message"]["role"] for m in after["messages"]] == ["user", "assistant"] * 3


async def test_a_run_archived_as_started_whose_end_never_came_reads_back_lost(
    gateway: ServeProcess, upstream: MockUpstream, database: Database
) -> None:
    upstream.responses.append(openai_frames(text="Paris."))
    frames = openai_frames(text="Half an ans")
    upstream.responses.append([*frames[:3], "\x00stall"])  # the upstream goes silent
    async with gateway.client() as client:
        await run_turn(client, "lost", "Capital of France?")
        accepted = (
            await client.post("/v1/conversations/lost/runs", json={"input": {"prompt": "More?"}})
        ).json()

    async def archived_running() -> bool:
        rows = await database.query(
            "SELECT last_run_id, last_run_status FROM archived_conversations"
            " WHERE conversation_key = 'lost'"
        )
        return rows == [(accepted["runId"], "running")]

    await wait_for(archived_running, what="the run archived as started")
    gateway.kill()  # the instance dies with the live data
    await gateway.start()
    upstream.responses.append(openai_frames(text="Again."))
    async with gateway.client() as client:
        answer = await client.get(f"/v1/conversations/lost/runs/{accepted['runId']}")
        record = answer.json()
        assert answer.status_code == 200, (record, gateway.output())
        assert record["status"] == "failed"
        assert record["error"]["code"] == "gateway_instance_lost"
        state = (await client.get("/v1/conversations/lost/state")).json()
        assert state["isRequesting"] is False and state["activeRunId"] is None
        third = await run_turn(client, "lost", "Try again")
        assert third[0]["sessionId"] == accepted["sessionId"]
        record = (await client.get(f"/v1/conversations/lost/runs/{accepted['runId']}")).json()
        assert record["error"]["code"] == "gateway_instance_lost"
