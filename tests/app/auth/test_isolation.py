"""Isolation matrix (http-api.md "Auth"): two principals × every route.

Alice owns conversation ``shared`` with a run waiting on an approval and on an app tool. Bob
addresses the same key on every route and must get exactly what a never-used key gives him
(404 on state, the empty snapshot on events/WS, ``aborted: false`` on abort, …), and nothing he
does changes Alice's conversation. Then Alice succeeds on every route.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest
import websockets

from tests.app.support.gateway_server import RunningGateway, StartGateway, make_settings
from tests.app.support.helpers import collect_sse, start_run, wait_state
from tests.app.support.scripted_provider import ScriptedProvider

ALICE, BOB = "tok-alice-7f3a", "tok-bob-91c2"
KEY, FRESH = "shared", "never-used"


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _normalise(body: Any, key: str) -> Any:
    """A body with the conversation key replaced, so two keys' answers compare equal."""
    return orjson.loads(orjson.dumps(body).replace(key.encode(), b"<key>"))


async def _snapshot_frame(gw: RunningGateway, token: str, key: str) -> dict[str, Any]:
    async with gw.client(headers=_auth(token)) as client:
        frames = await collect_sse(
            client, f"/v1/conversations/{key}/events", stop=lambda f: len(f) >= 1
        )
    assert frames[0].event == "snapshot"
    body: dict[str, Any] = orjson.loads(frames[0].data)
    return body


async def _ws_first(gw: RunningGateway, query: str, key: str) -> dict[str, Any]:
    async with websockets.connect(f"{gw.ws_url}/v1/conversations/{key}/ws{query}") as ws:
        first: dict[str, Any] = orjson.loads(await ws.recv())
    return first


def _routes(run_id: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    """(method, path under the conversation, json body) of every non-streaming route."""
    return [
        ("GET", "/state", None),
        ("POST", "/abort", {}),
        ("POST", "/abort", {"runId": run_id}),
        ("POST", "/reload", {}),
        ("POST", "/approvals/a1", {"decision": "approved"}),
        ("POST", "/tools/t1/result", {"result": {"ok": True}}),
        ("POST", "/tools/t1/retry", None),
        ("GET", f"/runs/{run_id}", None),
        ("GET", f"/runs/{run_id}/wait?timeout=0.05", None),
        ("PATCH", "", {"title": "hijacked"}),
    ]


async def _call(
    client: httpx.AsyncClient, method: str, key: str, path: str, body: dict[str, Any] | None
) -> httpx.Response:
    return await client.request(method, f"/v1/conversations/{key}{path}", json=body)


@pytest.fixture
async def gw(start_gateway: StartGateway) -> RunningGateway:
    settings = make_settings(auth={"mode": "bearer", "tokens": {ALICE: "alice", BOB: "bob"}})
    return await start_gateway(settings, providers={"demo": ScriptedProvider()})


def _waiting(state: dict[str, Any]) -> bool:
    """Alice's run waits: its approval is requested and its app tool handed over (running),
    the last events of its script (each may be its own write, so seen one after the other)."""
    agent = state["agentState"]
    tools = [tool["status"] for tool in agent.get("toolCalls", {}).values()]
    return "a1" in str(agent.get("approvals", {})) and tools == ["running"]


async def test_other_principal_sees_a_never_used_key_on_every_route(gw: RunningGateway) -> None:
    async with gw.client(headers=_auth(ALICE)) as alice, gw.client(headers=_auth(BOB)) as bob:
        accepted = await start_run(alice, KEY, "apptool:t1 approval:a1")
        run_id = accepted["runId"]
        before = await wait_state(alice, KEY, _waiting)
        assert before["activeRunId"] == run_id

        for method, path, body in _routes(run_id):
            other = await _call(bob, method, KEY, path, body)
            fresh = await _call(bob, method, FRESH, path, body)
            assert other.status_code == fresh.status_code, (method, path, other.text)
            assert other.status_code != 500
            if other.content or fresh.content:
                assert _normalise(other.json(), KEY) == _normalise(fresh.json(), FRESH), path
            assert other.headers.get("retry-after") == fresh.headers.get("retry-after")

        # Streams: the empty snapshot, exactly like a never-used key.
        other_snapshot = await _snapshot_frame(gw, BOB, KEY)
        fresh_snapshot = await _snapshot_frame(gw, BOB, FRESH)
        assert _normalise(other_snapshot, KEY) == _normalise(fresh_snapshot, FRESH)
        assert other_snapshot["activeRunId"] is None and other_snapshot["messages"] == []
        other_ws = await _ws_first(gw, f"?access_token={BOB}", KEY)
        fresh_ws = await _ws_first(gw, f"?access_token={BOB}", FRESH)
        assert _normalise(other_ws, KEY) == _normalise(fresh_ws, FRESH)
        assert other_ws["type"] == "snapshot" and other_ws["activeRunId"] is None

        # WebSocket ops on the other's key answer like on a never-used key.
        for key in (KEY, FRESH):
            url = f"{gw.ws_url}/v1/conversations/{key}/ws?access_token={BOB}"
            async with websockets.connect(url) as ws:
                assert orjson.loads(await ws.recv())["type"] == "snapshot"
                answers = []
                for op in (
                    {"op": "abort"},
                    {"op": "abort", "runId": run_id},
                    {"op": "approve", "approvalId": "a1", "decision": "approved"},
                    {"op": "tool_result", "toolCallId": "t1", "result": 1},
                    {"op": "reload"},
                ):
                    await ws.send(orjson.dumps(op).decode())
                    answers.append(orjson.loads(await ws.recv()))
            if key == KEY:
                other_ops = answers
        assert other_ops == answers
        assert other_ops[0] == {"type": "ack", "op": "abort", "aborted": False}

        # DELETE answers 204 for both and deletes nothing of Alice's; the listing omits it.
        assert (await bob.delete(f"/v1/conversations/{KEY}")).status_code == 204
        listing = (await bob.get("/v1/conversations")).json()
        assert KEY not in [c["conversationKey"] for c in listing["conversations"]]

        after = (await alice.get(f"/v1/conversations/{KEY}/state")).json()
        assert after["activeRunId"] == run_id
        assert after["agentState"] == before["agentState"]
        assert after.get("title") == before.get("title")
        alice_list = (await alice.get("/v1/conversations")).json()["conversations"]
        assert [c["conversationKey"] for c in alice_list] == [KEY]
        assert alice_list[0]["title"] != "hijacked"

        # Bob's own run under the same key is his own conversation (another session).
        mine = await start_run(bob, KEY, "text:1")
        assert mine["sessionId"] != accepted["sessionId"]
        state = (await alice.get(f"/v1/conversations/{KEY}/state")).json()
        assert state["activeRunId"] == run_id


async def test_owner_succeeds_on_every_route(gw: RunningGateway) -> None:
    async with gw.client(headers=_auth(ALICE)) as alice:
        run_id = (await start_run(alice, KEY, "apptool:t1 approval:a1"))["runId"]
        await wait_state(alice, KEY, lambda s: "a1" in str(s["agentState"].get("approvals", {})))
        assert (await alice.get(f"/v1/conversations/{KEY}/state")).status_code == 200
        snapshot = await _snapshot_frame(gw, ALICE, KEY)
        assert snapshot["activeRunId"] == run_id
        ws_first = await _ws_first(gw, f"?access_token={ALICE}", KEY)
        assert ws_first["activeRunId"] == run_id
        assert (await alice.get(f"/v1/conversations/{KEY}/runs/{run_id}")).status_code == 200
        patched = await alice.patch(f"/v1/conversations/{KEY}", json={"title": "mine"})
        assert patched.status_code == 200 and patched.json()["title"] == "mine"
        tool = await alice.post(f"/v1/conversations/{KEY}/tools/t1/result", json={"result": 1})
        assert tool.status_code == 202, tool.text
        approval = await alice.post(
            f"/v1/conversations/{KEY}/approvals/a1", json={"decision": "approved"}
        )
        assert approval.status_code == 202, approval.text
        aborted = await alice.post(f"/v1/conversations/{KEY}/abort", json={})
        assert aborted.status_code in (200, 202)
        await wait_state(alice, KEY, lambda s: s["activeRunId"] is None)
        reload = await alice.post(f"/v1/conversations/{KEY}/reload", json={})
        assert reload.status_code == 202, reload.text
        waited = await alice.get(
            f"/v1/conversations/{KEY}/runs/{reload.json()['runId']}/wait?timeout=0.2"
        )
        assert waited.status_code == 200
        assert (await alice.delete(f"/v1/conversations/{KEY}")).status_code == 204
        assert (await alice.get(f"/v1/conversations/{KEY}/state")).status_code == 404


ROUTES_NEEDING_AUTH = [
    ("GET", "/v1/conversations"),
    ("GET", "/v1/providers"),
    ("GET", "/metrics"),
    ("POST", "/v1/conversations/c1/runs"),
    ("POST", "/v1/conversations/c1/abort"),
    ("POST", "/v1/conversations/c1/reload"),
    ("GET", "/v1/conversations/c1/events"),
    ("GET", "/v1/conversations/c1/state"),
    ("POST", "/v1/conversations/c1/approvals/a1"),
    ("POST", "/v1/conversations/c1/tools/t1/result"),
    ("POST", "/v1/conversations/c1/tools/t1/retry"),
    ("DELETE", "/v1/conversations/c1"),
    ("PATCH", "/v1/conversations/c1"),
    ("GET", "/v1/conversations/c1/runs/r1"),
    ("GET", "/v1/conversations/c1/runs/r1/wait"),
]


@pytest.mark.parametrize(
    "headers",
    [
        {},
        _auth("wrong"),
        {"Authorization": "Bearer"},
        {"Authorization": f"Basic {ALICE}"},
        _auth(ALICE + "x"),
    ],
)
async def test_every_route_but_healthz_needs_a_valid_token(
    gw: RunningGateway, headers: dict[str, str]
) -> None:
    async with gw.client(headers=headers) as client:
        for method, path in ROUTES_NEEDING_AUTH:
            kwargs: dict[str, Any] = {}
            if method in ("POST", "PATCH"):
                kwargs["json"] = {"input": {"prompt": "x"}, "title": "t", "decision": "approved"}
            response = await client.request(method, path, **kwargs)
            assert response.status_code == 401, (method, path, response.text)
            assert response.json()["error"]["code"] == "unauthorized"
            assert ALICE not in response.text and BOB not in response.text
        assert (await client.get("/healthz")).status_code == 200
        # Probes carry no token: readiness is public and says only ok / not ready.
        ready = await client.get("/readyz", headers=headers)
        assert ready.status_code == 200 and ready.json() == {"status": "ok"}
        assert (await client.get("/v1/conversations?access_token=nope")).status_code == 401


async def test_a_wrong_token_is_a_401_whatever_the_body(gw: RunningGateway) -> None:
    """Checked before the body is read: not JSON (else 415) or too large (else 413)."""
    too_large = b"{" + b" " * gw.gateway.settings.gateway.max_body_bytes + b"}"
    bodies = [(b"not json", "text/plain"), (too_large, "application/json")]
    async with gw.client(headers=_auth("wrong")) as client:
        for method, path in ROUTES_NEEDING_AUTH:
            if method not in ("POST", "PATCH"):
                continue
            for body, media in bodies:
                headers = {"content-type": media}
                response = await client.request(method, path, content=body, headers=headers)
                assert response.status_code == 401, (method, path, media, response.text)
                assert response.json()["error"]["code"] == "unauthorized"


async def test_access_token_query_is_accepted_for_sse(gw: RunningGateway) -> None:
    async with gw.client() as client:
        frames = await collect_sse(
            client, f"/v1/conversations/{KEY}/events?access_token={ALICE}", stop=lambda f: True
        )
    assert frames[0].event == "snapshot"


@pytest.mark.parametrize("query", ["", "?access_token=wrong", f"?access_token={ALICE}z"])
async def test_websocket_closes_1008_on_a_bad_token(gw: RunningGateway, query: str) -> None:
    url = f"{gw.ws_url}/v1/conversations/{KEY}/ws{query}"
    async with websockets.connect(url) as ws:
        error = orjson.loads(await ws.recv())
        assert error == {
            "type": "error",
            "code": "unauthorized",
            "message": "Missing or invalid bearer token.",
        }
        with pytest.raises(websockets.exceptions.ConnectionClosed) as closed:
            await ws.recv()
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1008, "unauthorized")


async def test_websocket_bad_header_token_closes_1008(gw: RunningGateway) -> None:
    url = f"{gw.ws_url}/v1/conversations/{KEY}/ws?access_token={ALICE}"
    # A wrong header token is refused even when a valid ?access_token= is present: the
    # header wins (one credential per request).
    async with websockets.connect(url, additional_headers=_auth("wrong")) as ws:
        assert orjson.loads(await ws.recv())["code"] == "unauthorized"
        with pytest.raises(websockets.exceptions.ConnectionClosed) as closed:
            await ws.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


async def test_websocket_with_a_header_token_works(gw: RunningGateway) -> None:
    url = f"{gw.ws_url}/v1/conversations/{KEY}/ws"
    async with websockets.connect(url, additional_headers=_auth(BOB)) as ws:
        first = orjson.loads(await ws.recv())
    assert first["type"] == "snapshot"
