"""What a restarted gateway process (memory live backend) reads from the archive besides
``…/state`` and run records: the snapshot frame of ``events`` (SSE) and ``ws``, a ``reload``
(the archived last input and provider), and the conversation limit, which counts live
conversations only."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
import websockets
from httpx_sse import aconnect_sse

from tests.app.archive.support import (
    SERVE_PROCESSES_ON_MEMORY,
    TOKENS,
    Database,
    ServeProcess,
    config_toml,
    run_turn,
    without_cursor,
)
from tests.providers.support.mock_upstreams import MockUpstream, openai_frames

pytestmark = SERVE_PROCESSES_ON_MEMORY


@pytest.fixture
async def gateway(database: Database, upstream: MockUpstream) -> AsyncIterator[ServeProcess]:
    config = config_toml(database.url, upstream.url)
    process = ServeProcess(config + "\n[limits]\nmax_conversations_per_principal = 1\n")
    await process.start()
    yield process
    process.close()


async def sse_snapshot(gateway: ServeProcess, key: str, principal: str) -> dict[str, Any]:
    """The first frame of ``GET …/events`` (the stream is closed after it)."""
    async with (
        gateway.client(principal) as client,
        aconnect_sse(client, "GET", f"/v1/conversations/{key}/events") as source,
    ):
        assert source.response.status_code == 200
        async for sse in source.aiter_sse():
            assert sse.event == "snapshot", sse
            return dict(orjson.loads(sse.data))
    raise AssertionError("the stream ended before its snapshot frame")


async def ws_snapshot(gateway: ServeProcess, key: str) -> dict[str, Any]:
    url = f"ws://127.0.0.1:{gateway.port}/v1/conversations/{key}/ws"
    headers = {"Authorization": f"Bearer {TOKENS['alice']}"}
    async with websockets.connect(url, additional_headers=headers) as ws:
        first = dict(orjson.loads(await ws.recv()))
    assert first.pop("type") == "snapshot", first
    return first


async def test_snapshot_frames_and_a_reload_after_a_restart_come_from_the_archive(
    gateway: ServeProcess, upstream: MockUpstream
) -> None:
    upstream.responses.append(openai_frames(text="Paris."))
    async with gateway.client() as client:
        first = await run_turn(client, "trip", "Capital of France?")
        state = without_cursor((await client.get("/v1/conversations/trip/state")).json())
    assert state["messages"]

    await gateway.restart()

    assert without_cursor(await sse_snapshot(gateway, "trip", "alice")) == state
    assert without_cursor(await ws_snapshot(gateway, "trip")) == state
    # Another principal's stream of the same key is the empty snapshot: nothing leaks.
    other = await sse_snapshot(gateway, "trip", "bob")
    assert other["messages"] == [] and other["agentState"]["runs"] == {}

    upstream.responses.append(openai_frames(text="Paris, again."))
    async with gateway.client() as client:
        reloaded = await client.post("/v1/conversations/trip/reload", json={})
        assert reloaded.status_code == 202, reloaded.text
        run_id = reloaded.json()["runId"]
        waited = await client.get(
            f"/v1/conversations/trip/runs/{run_id}/wait", params={"timeout": 30}
        )
        assert waited.json()["status"] == "completed", waited.text
        after = (await client.get("/v1/conversations/trip/state")).json()
    assert reloaded.json()["sessionId"] == first[0]["sessionId"]
    request = upstream.requests[-1]
    assert request["model"] == "mock-model"  # the archived last provider
    users = [m["content"] for m in request["messages"] if m["role"] == "user"]
    assert users[-1] == "Capital of France?"  # the archived last input
    assert len(after["agentState"]["runs"]) == 2
    assert len(after["agentState"]["sessions"]) == 1


async def test_archived_conversations_do_not_count_toward_the_conversation_limit(
    gateway: ServeProcess, upstream: MockUpstream
) -> None:
    upstream.responses += [openai_frames(text="ok") for _ in range(3)]
    async with gateway.client() as client:
        await run_turn(client, "archived", "before the restart")
        refused = await client.post(
            "/v1/conversations/second/runs", json={"input": {"prompt": "x"}}
        )
        assert refused.status_code == 429, refused.text  # the live one counts (limit 1)
    await gateway.restart()  # "archived" lives only in the archive now
    async with gateway.client() as client:
        await run_turn(client, "fresh", "after the restart")
        refused = await client.post("/v1/conversations/third/runs", json={"input": {"prompt": "x"}})
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "too_many_conversations"
