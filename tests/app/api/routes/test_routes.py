"""Every route and error answer of http-api.md, against a real server on loopback."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.backends import ConversationRef
from tests.app.support.gateway_server import RunningGateway, StartGateway, make_settings
from tests.app.support.helpers import collect_sse, start_run, wait_state
from tests.app.support.scripted_provider import ScriptedProvider

KEY = "conv-1"


def error_of(response: Any) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    error: dict[str, Any] = body["error"]
    return error


@pytest.fixture
async def gw(start_gateway: StartGateway) -> RunningGateway:
    settings = make_settings(gateway={"max_body_bytes": 2048, "heartbeat_seconds": 1})
    return await start_gateway(settings, providers={"demo": ScriptedProvider()})


async def test_start_run_answers_202_with_the_documented_fields(gw: RunningGateway) -> None:
    async with gw.client() as client:
        answer = await start_run(client, KEY, "text:2")
        assert set(answer) == {
            "conversationKey",
            "runId",
            "sessionId",
            "provider",
            "cursor",
            "status",
        }
        assert answer["conversationKey"] == KEY
        assert answer["runId"].startswith("run_") and answer["sessionId"].startswith("ses_")
        assert (answer["provider"], answer["status"]) == ("demo", "started")
        state = await wait_state(client, KEY, lambda s: not s["isRequesting"])
        types = [m["message"]["role"] for m in state["messages"]]
        assert types == ["user", "assistant"]
        assert [m["status"] for m in state["messages"]] == ["local", "success"]
        assert state["messages"][1]["message"]["content"] == "w0 w1 "
        session = state["agentState"]["sessions"][answer["sessionId"]]
        assert session["title"] == "text:2"
        second = await start_run(client, KEY, "text:1")
        assert second["sessionId"] == answer["sessionId"]
        assert second["cursor"] == state["cursor"]


@pytest.mark.parametrize("key", ["bad key", "x" * 129, "a/b", "é"])
async def test_invalid_conversation_key_is_422(gw: RunningGateway, key: str) -> None:
    async with gw.client() as client:
        response = await client.post(
            f"/v1/conversations/{key}/runs", json={"input": {"prompt": "hi"}}
        )
        if key == "a/b":  # not a conversation route at all
            assert response.status_code == 404
            return
        assert response.status_code == 422
        assert error_of(response)["code"] == "invalid_request"
        state = await client.get(f"/v1/conversations/{key}/state")
        assert state.status_code == 422


async def test_key_of_128_allowed_characters_is_accepted(gw: RunningGateway) -> None:
    key = ("aZ09._:-" * 16)[:128]
    async with gw.client() as client:
        await start_run(client, key, "text:1")


async def test_unknown_provider_is_404(gw: RunningGateway) -> None:
    async with gw.client() as client:
        response = await client.post(
            f"/v1/conversations/{KEY}/runs", json={"input": {"prompt": "x"}, "provider": "nope"}
        )
        assert response.status_code == 404
        assert error_of(response)["code"] == "unknown_provider"
        assert (await client.get(f"/v1/conversations/{KEY}/state")).status_code == 404


async def test_malformed_json_and_schema_errors_are_422_with_details(gw: RunningGateway) -> None:
    async with gw.client() as client:
        url = f"/v1/conversations/{KEY}/runs"
        bad = await client.post(
            url, content=b'{"input": ', headers={"content-type": "application/json"}
        )
        assert bad.status_code == 422
        assert error_of(bad)["code"] == "invalid_request"
        assert error_of(bad)["details"]
        for body in (
            {},
            {"input": "text"},
            {"input": {"prompt": 3}},
            {"input": {}, "multitask": "x"},
        ):
            response = await client.post(url, json=body)
            assert response.status_code == 422, body
            error = error_of(response)
            assert error["code"] == "invalid_request"
            assert isinstance(error["details"], list) and error["details"]


async def test_body_over_the_limit_is_413(gw: RunningGateway) -> None:
    async with gw.client() as client:
        response = await client.post(
            f"/v1/conversations/{KEY}/runs", json={"input": {"prompt": "x" * 4000}}
        )
        assert response.status_code == 413
        assert error_of(response)["code"] == "payload_too_large"


async def test_wrong_content_type_is_415(gw: RunningGateway) -> None:
    async with gw.client() as client:
        response = await client.post(
            f"/v1/conversations/{KEY}/runs",
            content=b'{"input": {"prompt": "x"}}',
            headers={"content-type": "text/plain"},
        )
        assert response.status_code == 415
        assert error_of(response)["code"] == "unsupported_media_type"


async def test_state_delete_and_lifecycle(gw: RunningGateway) -> None:
    async with gw.client() as client:
        missing = await client.get(f"/v1/conversations/{KEY}/state")
        assert missing.status_code == 404
        assert error_of(missing)["code"] == "conversation_not_found"
        assert (await client.delete(f"/v1/conversations/{KEY}")).status_code == 204
        await start_run(client, KEY, "text:1")
        state = await wait_state(client, KEY, lambda s: not s["isRequesting"])
        assert state["activeRunId"] is None and state["conversationKey"] == KEY
        listing = (await client.get("/v1/conversations")).json()
        assert [c["conversationKey"] for c in listing["conversations"]] == [KEY]
        assert (await client.delete(f"/v1/conversations/{KEY}")).status_code == 204
        assert (await client.get(f"/v1/conversations/{KEY}/state")).status_code == 404


async def test_delete_aborts_the_active_run(gw: RunningGateway) -> None:
    async with gw.client() as client:
        await start_run(client, KEY, "text:1 sleep:30")
        await wait_state(client, KEY, lambda s: s["isRequesting"])
        response = await client.delete(f"/v1/conversations/{KEY}")
        assert response.status_code == 204
        assert (await client.get(f"/v1/conversations/{KEY}/state")).status_code == 404
        assert not gw.gateway.runs.is_busy(ConversationRef("anonymous", KEY))


async def test_abort_is_idempotent(gw: RunningGateway) -> None:
    async with gw.client() as client:
        url = f"/v1/conversations/{KEY}/abort"
        nothing = await client.post(url)
        assert (nothing.status_code, nothing.json()) == (200, {"aborted": False})
        run = await start_run(client, KEY, "text:1 sleep:30")
        await wait_state(client, KEY, lambda s: s["isRequesting"])
        first = await client.post(url, json={})
        assert first.status_code == 202
        assert first.json() == {"runId": run["runId"], "aborted": True}
        state = await wait_state(client, KEY, lambda s: not s["isRequesting"])
        assert state["agentState"]["runs"][run["runId"]]["status"] == "cancelled"
        assert state["agentState"]["runs"][run["runId"]]["reason"] == "aborted"
        again = await client.post(url, json={"runId": run["runId"]})
        assert (again.status_code, again.json()) == (200, {"aborted": False})
        other = await client.post(url, json={"runId": "run_unknown"})
        assert (other.status_code, other.json()) == (200, {"aborted": False})


async def test_reload_reuses_the_last_input_without_a_user_message(gw: RunningGateway) -> None:
    async with gw.client() as client:
        url = f"/v1/conversations/{KEY}/reload"
        none = await client.post(url)
        assert none.status_code == 404
        assert error_of(none)["code"] == "nothing_to_reload"
        first = await start_run(client, KEY, "text:2")
        await wait_state(client, KEY, lambda s: not s["isRequesting"])
        reload = await client.post(url)
        assert reload.status_code == 202
        answer = reload.json()
        assert answer["runId"] != first["runId"] and answer["status"] == "started"
        state = await wait_state(
            client,
            KEY,
            lambda s: s["agentState"]["runs"].get(answer["runId"], {}).get("status") == "completed",
        )
        run = state["agentState"]["runs"][answer["runId"]]
        assert run["input"] == {"prompt": "text:2"}
        roles = [(m["message"]["runId"], m["message"]["role"]) for m in state["messages"]]
        assert roles == [
            (first["runId"], "user"),
            (first["runId"], "assistant"),
            (answer["runId"], "assistant"),
        ]
        with_input = await client.post(url, json={"input": {"prompt": "text:1"}})
        assert with_input.status_code == 202
        bad = await client.post(url, json={"input": 5})
        assert bad.status_code == 422


async def test_history_reaches_the_provider(start_gateway: StartGateway) -> None:
    provider = ScriptedProvider()
    gw = await start_gateway(make_settings(), providers={"demo": provider})
    async with gw.client() as client:
        await start_run(client, KEY, "text:2")
        await wait_state(client, KEY, lambda s: not s["isRequesting"])
        await start_run(client, KEY, "text:1")
        await wait_state(
            client, KEY, lambda s: len(s["agentState"]["runs"]) == 2 and not s["isRequesting"]
        )
        assert provider.histories[0] == []
        assert provider.histories[1][:2] == [
            {"role": "user", "content": "text:2"},
            {"role": "assistant", "content": "w0 w1 "},
        ]
        explicit = [{"role": "user", "content": "given"}]
        await start_run(client, KEY, "text:1")
        await wait_state(client, KEY, lambda s: not s["isRequesting"])
        response = await client.post(
            f"/v1/conversations/{KEY}/runs",
            json={"input": {"prompt": "text:1", "messages": explicit}},
        )
        assert response.status_code == 202
        await wait_state(
            client, KEY, lambda s: len(s["agentState"]["runs"]) == 4 and not s["isRequesting"]
        )
        assert provider.histories[3] == explicit


async def test_providers_health_and_readiness(gw: RunningGateway) -> None:
    async with gw.client() as client:
        providers = (await client.get("/v1/providers")).json()["providers"]
        assert [p["name"] for p in providers] == ["demo"]
        demo = providers[0]
        assert demo["default"] is True and demo["kind"] == "local-demo"
        assert demo["transport"] == "async-iterable"
        assert "message.delta" in demo["capabilities"]["eventTypes"]
        assert "url" not in demo and "headers" not in demo
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        assert (await client.get("/readyz")).status_code == 200
        unknown = await client.get("/nope")
        assert unknown.status_code == 404 and error_of(unknown)["code"] == "not_found"


async def test_upstream_failure_is_an_event_not_an_http_error(gw: RunningGateway) -> None:
    async with gw.client() as client:
        run = await start_run(client, KEY, "text:1 boom")
        state = await wait_state(client, KEY, lambda s: not s["isRequesting"])
        failed = state["agentState"]["runs"][run["runId"]]
        assert failed["status"] == "failed"
        assert failed["error"]["code"] == "upstream_error"
        assert state["messages"][-1]["status"] == "error"


async def test_run_record_wait_and_title(start_gateway: StartGateway) -> None:
    provider = ScriptedProvider()
    gw = await start_gateway(make_settings(), providers={"demo": provider})
    async with gw.client() as client:
        base = f"/v1/conversations/{KEY}"
        assert error_of(await client.get(f"{base}/runs/run_x"))["code"] == "conversation_not_found"
        # The run holds until the test opens its gate (a sleep raced a loaded CI machine).
        run = await start_run(client, KEY, "text:1 gate:hold")
        record = (await client.get(f"{base}/runs/{run['runId']}")).json()
        assert record["runId"] == run["runId"] and record["sessionId"] == run["sessionId"]
        assert record["status"] == "running"  # started: the 202 came after its run.started
        early = await client.get(f"{base}/runs/{run['runId']}/wait", params={"timeout": 0.05})
        assert early.status_code == 200 and early.json()["status"] == "running"
        provider.gates["hold"].set()
        done = await client.get(f"{base}/runs/{run['runId']}/wait", params={"timeout": 10})
        assert done.json()["status"] == "completed"
        assert done.json()["input"] == {"prompt": "text:1 gate:hold"}
        missing = await client.get(f"{base}/runs/run_nope")
        assert (missing.status_code, error_of(missing)["code"]) == (404, "run_not_found")
        patched = await client.patch(base, json={"title": "Renamed"})
        assert patched.status_code == 200 and patched.json()["title"] == "Renamed"
        listing = (await client.get("/v1/conversations")).json()["conversations"]
        assert listing[0]["title"] == "Renamed"
        assert (await client.patch(base, json={"title": ""})).status_code == 422
        other = await client.patch("/v1/conversations/none", json={"title": "x"})
        assert error_of(other)["code"] == "conversation_not_found"


async def test_bearer_auth_and_principal_isolation(start_gateway: StartGateway) -> None:
    settings = make_settings(auth={"mode": "bearer", "tokens": {"ta": "alice", "tb": "bob"}})
    gw = await start_gateway(settings, providers={"demo": ScriptedProvider()})
    alice = {"Authorization": "Bearer ta"}
    bob = {"Authorization": "Bearer tb"}
    async with gw.client() as client:
        assert (await client.get("/healthz")).status_code == 200
        for headers in ({}, {"Authorization": "Bearer nope"}):
            denied = await client.get(f"/v1/conversations/{KEY}/state", headers=headers)
            assert (denied.status_code, error_of(denied)["code"]) == (401, "unauthorized")
        run = await client.post(
            f"/v1/conversations/{KEY}/runs", json={"input": {"prompt": "sleep:30"}}, headers=alice
        )
        assert run.status_code == 202
        state = await client.get(f"/v1/conversations/{KEY}/state", params={"access_token": "ta"})
        assert state.status_code == 200
        hidden = await client.get(f"/v1/conversations/{KEY}/state", headers=bob)
        assert error_of(hidden)["code"] == "conversation_not_found"
        abort = await client.post(f"/v1/conversations/{KEY}/abort", headers=bob)
        assert abort.json() == {"aborted": False}
        listing = (await client.get("/v1/conversations", headers=bob)).json()
        assert listing == {"conversations": [], "nextCursor": None}
        mine = await client.post(f"/v1/conversations/{KEY}/abort", headers=alice)
        assert mine.status_code == 202


async def test_delete_ends_open_streams(gw: RunningGateway) -> None:
    async with gw.client() as client:
        await start_run(client, KEY, "text:1")
        await wait_state(client, KEY, lambda s: not s["isRequesting"])
        following = asyncio.Event()
        reader = asyncio.create_task(
            collect_sse(client, f"/v1/conversations/{KEY}/events", first_frame=following)
        )
        await asyncio.wait_for(following.wait(), 10)
        assert (await client.delete(f"/v1/conversations/{KEY}")).status_code == 204
        frames = await asyncio.wait_for(reader, 5)
    assert [f.event for f in frames] == ["snapshot"]


async def test_idempotency_key_on_runs(gw: RunningGateway) -> None:
    async with gw.client() as client:
        url = f"/v1/conversations/{KEY}/runs"
        body = {"input": {"prompt": "text:1"}}
        first = await client.post(url, json=body, headers={"Idempotency-Key": "run-1"})
        again = await client.post(url, json=body, headers={"Idempotency-Key": "run-1"})
        assert first.status_code == again.status_code == 202
        assert again.json() == first.json()
        other = await client.post(
            url, json={"input": {"prompt": "text:2"}}, headers={"Idempotency-Key": "run-1"}
        )
        assert error_of(other)["code"] == "idempotency_key_reused"
        state = await wait_state(client, KEY, lambda s: not s["isRequesting"])
        assert list(state["agentState"]["runs"]) == [first.json()["runId"]]
        plain = await client.post(url, json=body)  # no key: a new run every time
        assert plain.json()["runId"] != first.json()["runId"]
