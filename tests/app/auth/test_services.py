"""Service principals: ``X-Act-As`` from a service token acts on another principal's
conversations (every use logged, never the token); from any other caller it is 403
``not_a_service``; and a normal token never reaches another principal's conversation through
the service-facing routes (runs, wait, listing, title, idempotency keys)."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import orjson
import pytest
import websockets
from websockets.exceptions import ConnectionClosed

from tests.app.support.gateway_server import RunningGateway, StartGateway, make_settings
from tests.app.support.helpers import collect_sse, start_run, wait_state
from tests.app.support.scripted_provider import ScriptedProvider

ALICE, BOB, OPS = "tok-alice-11aa", "tok-bob-22bb", "ops-token-33cc"
KEY = "c1"


def auth(token: str, act_as: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}"}
    if act_as is not None:
        headers["X-Act-As"] = act_as
    return headers


def code(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


async def gateway(start_gateway: StartGateway, services: list[str]) -> RunningGateway:
    tokens = {ALICE: "alice", BOB: "bob", OPS: "ops"}
    settings = make_settings(auth={"mode": "bearer", "tokens": tokens, "services": services})
    return await start_gateway(settings, providers={"demo": ScriptedProvider()})


@pytest.fixture
async def gw(start_gateway: StartGateway) -> RunningGateway:
    return await gateway(start_gateway, [OPS])


async def test_service_aborts_and_awaits_a_run_of_another_principal(
    gw: RunningGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="app.service_auth")
    async with (
        gw.client(headers=auth(ALICE)) as alice,
        gw.client(headers=auth(OPS, "alice")) as ops,
    ):
        run = await start_run(alice, KEY, "sleep:10")
        await wait_state(alice, KEY, lambda s: s["isRequesting"])
        base = f"/v1/conversations/{KEY}"
        state = await ops.get(f"{base}/state")
        assert state.status_code == 200 and state.json()["activeRunId"] == run["runId"]
        listing = (await ops.get("/v1/conversations")).json()["conversations"]
        assert [c["conversationKey"] for c in listing] == [KEY]
        record = await ops.get(f"{base}/runs/{run['runId']}")
        assert record.json()["status"] == "running"
        aborted = await ops.post(f"{base}/abort", json={"runId": run["runId"]})
        assert aborted.status_code == 202 and aborted.json()["aborted"] is True
        waited = await ops.get(f"{base}/runs/{run['runId']}/wait", params={"timeout": 5})
        assert waited.status_code == 200
        assert (waited.json()["status"], waited.json()["reason"]) == ("cancelled", "aborted")
        patched = await ops.patch(base, json={"title": "by ops"})
        assert patched.status_code == 200
        again = await ops.post(f"{base}/runs", json={"input": {"prompt": "text:1"}})
        assert again.status_code == 202
        frames = await collect_sse(ops, f"{base}/events", stop=lambda f: len(f) >= 1)
        assert orjson.loads(frames[0].data)["conversationKey"] == KEY
        # Alice sees what the service did in her own conversation; ops has none of its own.
        mine = await wait_state(alice, KEY, lambda s: not s["isRequesting"])
        assert len(mine["agentState"]["runs"]) == 2
        own = await ops.get(f"{base}/state", headers={"X-Act-As": ""})
        assert code(own) == (422, "invalid_request")
    async with gw.client(headers=auth(OPS)) as ops_itself:
        assert (await ops_itself.get(f"/v1/conversations/{KEY}/state")).status_code == 404
        assert (await ops_itself.get("/v1/conversations")).json()["conversations"] == []
    uses = [r for r in caplog.records if r.name == "app.service_auth"]
    assert len(uses) >= 8
    for use in uses:
        text = use.getMessage() + repr(use.__dict__)
        assert "ops" in use.getMessage() and "alice" in use.getMessage()
        assert OPS not in text and ALICE not in text


async def test_act_as_from_a_normal_token_is_403_not_a_service(gw: RunningGateway) -> None:
    async with gw.client(headers=auth(ALICE)) as alice:
        run = await start_run(alice, KEY, "sleep:10")
    base = f"/v1/conversations/{KEY}"
    routes: list[tuple[str, str, dict[str, Any] | None]] = [
        ("GET", f"{base}/state", None),
        ("GET", "/v1/conversations", None),
        ("POST", f"{base}/abort", {}),
        ("POST", f"{base}/runs", {"input": {"prompt": "x"}}),
        ("GET", f"{base}/runs/{run['runId']}", None),
        ("GET", f"{base}/runs/{run['runId']}/wait?timeout=0.1", None),
        ("PATCH", base, {"title": "x"}),
        ("GET", f"{base}/events", None),
        ("DELETE", base, None),
    ]
    async with gw.client(headers=auth(BOB, "alice")) as bob:
        for method, path, body in routes:
            response = await bob.request(method, path, json=body)
            assert code(response) == (403, "not_a_service"), (method, path)
            assert BOB not in response.text
    async with gw.client(headers=auth(ALICE)) as alice:
        state = await alice.get(f"{base}/state")
        assert state.json()["activeRunId"] == run["runId"]  # nothing reached it
        await alice.post(f"{base}/abort", json={})


async def test_act_as_with_auth_off_is_403(start_gateway: StartGateway) -> None:
    gw = await start_gateway(make_settings(), providers={"demo": ScriptedProvider()})
    async with gw.client(headers={"X-Act-As": "alice"}) as client:
        assert code(await client.get("/v1/conversations")) == (403, "not_a_service")


async def test_a_service_may_be_named_by_its_principal(start_gateway: StartGateway) -> None:
    gw = await gateway(start_gateway, ["ops"])
    async with gw.client(headers=auth(ALICE)) as alice:
        await start_run(alice, KEY, "text:1")
    async with gw.client(headers=auth(OPS, "alice")) as ops:
        assert (await ops.get(f"/v1/conversations/{KEY}/state")).status_code == 200
    async with gw.client(headers=auth(BOB, "alice")) as bob:
        assert code(await bob.get(f"/v1/conversations/{KEY}/state")) == (403, "not_a_service")


async def test_a_normal_token_never_reaches_another_principals_run(gw: RunningGateway) -> None:
    async with gw.client(headers=auth(ALICE)) as alice, gw.client(headers=auth(BOB)) as bob:
        base = f"/v1/conversations/{KEY}"
        body = {"input": {"prompt": "text:1"}}
        first = await alice.post(f"{base}/runs", json=body, headers={"Idempotency-Key": "k"})
        run_id = first.json()["runId"]
        await wait_state(alice, KEY, lambda s: not s["isRequesting"])
        assert code(await bob.get(f"{base}/runs/{run_id}")) == (404, "conversation_not_found")
        wait = await bob.get(f"{base}/runs/{run_id}/wait", params={"timeout": 0.1})
        assert code(wait) == (404, "conversation_not_found")
        assert code(await bob.patch(base, json={"title": "x"})) == (404, "conversation_not_found")
        assert (await bob.get("/v1/conversations")).json()["conversations"] == []
        # The same Idempotency-Key is Bob's own: his own run, never Alice's answer.
        mine = await bob.post(f"{base}/runs", json=body, headers={"Idempotency-Key": "k"})
        assert mine.status_code == 202 and mine.json()["runId"] != run_id
        assert mine.json()["sessionId"] != first.json()["sessionId"]


async def test_act_as_over_websocket(gw: RunningGateway) -> None:
    async with gw.client(headers=auth(ALICE)) as alice:
        run = await start_run(alice, KEY, "sleep:10")
        await wait_state(alice, KEY, lambda s: s["isRequesting"])
    url = f"{gw.ws_url}/v1/conversations/{KEY}/ws"
    async with websockets.connect(url, additional_headers=auth(OPS, "alice")) as ws:
        first = orjson.loads(await ws.recv())
        assert first["type"] == "snapshot" and first["activeRunId"] == run["runId"]
        await ws.send(orjson.dumps({"op": "abort"}).decode())
        seen: list[dict[str, Any]] = []
        while not any(f.get("op") == "abort" for f in seen):
            seen.append(orjson.loads(await ws.recv()))
        ack = next(f for f in seen if f.get("op") == "abort")
        assert ack["type"] == "ack" and ack["aborted"] is True
    async with websockets.connect(url, additional_headers=auth(BOB, "alice")) as ws:
        refused = orjson.loads(await ws.recv())
        assert (refused["type"], refused["code"]) == ("error", "not_a_service")
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
