"""``GET /v1/conversations`` (newest first, cursor pagination, last run status, isRequesting)
and ``PATCH /v1/conversations/{key}`` (title kept in the snapshot's meta, not an event)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.app.support.cluster_support import cluster
from tests.app.support.gateway_server import RunningGateway, StartGateway, make_settings
from tests.app.support.helpers import start_run, wait_state
from tests.app.support.scripted_provider import ScriptedProvider

FIELDS = {
    "conversationKey",
    "title",
    "createdAt",
    "updatedAt",
    "lastRunId",
    "lastRunStatus",
    "isRequesting",
}


def code(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


@pytest.fixture
def provider() -> ScriptedProvider:
    return ScriptedProvider()


@pytest.fixture
async def gw(start_gateway: StartGateway, provider: ScriptedProvider) -> RunningGateway:
    return await start_gateway(make_settings(), providers={"demo": provider})


async def finished(client: httpx.AsyncClient, key: str, prompt: str) -> dict[str, Any]:
    run = await start_run(client, key, prompt)
    await wait_state(client, key, lambda s: not s["isRequesting"])
    return run


async def all_pages(client: httpx.AsyncClient, limit: int) -> list[list[dict[str, Any]]]:
    pages: list[list[dict[str, Any]]] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": limit}
        if cursor is not None:
            params["cursor"] = cursor
        response = await client.get("/v1/conversations", params=params)
        assert response.status_code == 200, response.text
        body = response.json()
        assert set(body) == {"conversations", "nextCursor"}
        pages.append(body["conversations"])
        cursor = body["nextCursor"]
        if cursor is None:
            return pages


async def test_newest_first_with_fields_and_cursor_pagination(gw: RunningGateway) -> None:
    async with gw.client() as client:
        keys = [f"c{i}" for i in range(5)]
        for key in keys:
            await finished(client, key, f"text:1 hello {key}")
            await asyncio.sleep(0.005)
        await finished(client, "c1", "text:1")  # c1 becomes the most recently updated
        pages = await all_pages(client, 2)
        assert [len(page) for page in pages] == [2, 2, 1]
        listed = [item for page in pages for item in page]
        assert [c["conversationKey"] for c in listed] == ["c1", "c4", "c3", "c2", "c0"]
        assert all(set(item) == FIELDS for item in listed)
        updated = [c["updatedAt"] for c in listed]
        assert updated == sorted(updated, reverse=True)
        first = listed[-1]
        assert first["title"] == "text:1 hello c0"
        assert first["createdAt"] <= first["updatedAt"]
        assert (first["lastRunStatus"], first["isRequesting"]) == ("completed", False)
        whole = (await client.get("/v1/conversations")).json()
        assert whole["conversations"] == listed and whole["nextCursor"] is None


async def test_last_run_status_and_is_requesting(gw: RunningGateway) -> None:
    async with gw.client() as client:
        failed = await finished(client, "broken", "boom")
        running = await start_run(client, "busy", "sleep:10")
        await wait_state(client, "busy", lambda s: s["isRequesting"])
        items = {
            c["conversationKey"]: c
            for c in (await client.get("/v1/conversations")).json()["conversations"]
        }
        assert items["broken"]["lastRunId"] == failed["runId"]
        assert (items["broken"]["lastRunStatus"], items["broken"]["isRequesting"]) == (
            "failed",
            False,
        )
        assert items["busy"]["lastRunId"] == running["runId"]
        assert (items["busy"]["lastRunStatus"], items["busy"]["isRequesting"]) == (
            "running",
            True,
        )
        await client.post("/v1/conversations/busy/abort", json={})
        await wait_state(client, "busy", lambda s: not s["isRequesting"])
        items = {
            c["conversationKey"]: c
            for c in (await client.get("/v1/conversations")).json()["conversations"]
        }
        assert items["busy"]["lastRunStatus"] == "cancelled"


async def test_patch_title_is_meta_not_an_event(
    gw: RunningGateway, provider: ScriptedProvider
) -> None:
    async with gw.client() as client:
        await finished(client, "t1", "text:1 the first question")
        before = (await client.get("/v1/conversations/t1/state")).json()
        patched = await client.patch("/v1/conversations/t1", json={"title": "Renamed"})
        assert patched.status_code == 200
        assert patched.json()["title"] == "Renamed"
        after = (await client.get("/v1/conversations/t1/state")).json()
        assert after["cursor"] == before["cursor"]  # no event was appended
        assert after["agentState"] == before["agentState"]
        listed = (await client.get("/v1/conversations")).json()["conversations"]
        assert listed[0]["title"] == "Renamed"
        await finished(client, "t1", "text:1 another question")  # a new run keeps the title
        listed = (await client.get("/v1/conversations")).json()["conversations"]
        assert listed[0]["title"] == "Renamed"
        await start_run(client, "t1", "gate:hold")  # set while a run runs: kept after its end
        assert (await client.patch("/v1/conversations/t1", json={"title": "Live"})).is_success
        provider.gates["hold"].set()
        await wait_state(client, "t1", lambda s: not s["isRequesting"])
        listed = (await client.get("/v1/conversations")).json()["conversations"]
        assert listed[0]["title"] == "Live"
        missing = await client.patch("/v1/conversations/none", json={"title": "x"})
        assert code(missing) == (404, "conversation_not_found")
        bad = await client.patch("/v1/conversations/t1", json={"title": 5})
        assert code(bad) == (422, "invalid_request")


async def test_bad_cursor_and_limit_are_422(gw: RunningGateway) -> None:
    async with gw.client() as client:
        for params in ({"cursor": "%%%"}, {"cursor": "bm90IGpzb24"}, {"limit": 0}, {"limit": 1000}):
            response = await client.get("/v1/conversations", params=params)
            assert code(response) == (422, "invalid_request"), params


@pytest.mark.only_backend("redis", reason="a listing across gateway processes sharing one Redis")
async def test_listing_across_instances_on_redis() -> None:
    async with cluster() as (a, b):
        async with (
            httpx.AsyncClient(base_url=a.url, timeout=20) as ca,
            httpx.AsyncClient(base_url=b.url, timeout=20) as cb,
        ):
            await finished(ca, "r1", "text:1 one")
            await finished(ca, "r2", "text:1 two")
            await finished(ca, "r1", "text:1 again")  # r1 updated last
            busy = await start_run(ca, "r3", "sleep:10")
            await wait_state(cb, "r3", lambda s: s["isRequesting"])
            pages = await all_pages(cb, 2)
            listed = [item for page in pages for item in page]
            assert [c["conversationKey"] for c in listed] == ["r3", "r1", "r2"]
            assert listed[0]["lastRunId"] == busy["runId"] and listed[0]["isRequesting"]
            assert listed[1]["lastRunStatus"] == "completed"
            patched = await cb.patch("/v1/conversations/r2", json={"title": "from B"})
            assert patched.status_code == 200
            on_a = (await ca.get("/v1/conversations")).json()["conversations"]
            assert {c["conversationKey"]: c["title"] for c in on_a}["r2"] == "from B"
            await ca.post("/v1/conversations/r3/abort", json={})
