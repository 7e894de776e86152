"""Every ``[limits]`` key (http-api.md "Configuration") is enforced, each with its error code."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest
import websockets

from app.api.errors import error_headers
from app.backends import ConversationRef
from app.errors import GatewayError
from app.runs.limits import (
    WS_FRAME_SLACK,
    RunRateLimiter,
    SubscriberLimits,
    cap_artifact,
    ws_max_size,
)
from tests.app.support.gateway_server import RunningGateway, StartGateway, make_settings
from tests.app.support.helpers import collect_sse, start_run, wait_state
from tests.app.support.scripted_provider import ScriptedProvider
from tests.app.support.security_upstream import serve_upstream
from tests.support import eventually

TOKENS = {"tok-a": "alice", "tok-b": "bob"}


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _gateway(
    start_gateway: StartGateway, limits: dict[str, Any], **sections: Any
) -> RunningGateway:
    settings = make_settings(auth={"mode": "bearer", "tokens": TOKENS}, limits=limits, **sections)
    return await start_gateway(settings, providers={"demo": ScriptedProvider()})


def _error(response: httpx.Response) -> str:
    code: str = response.json()["error"]["code"]
    return code


async def test_body_over_max_body_bytes_is_413_declared_or_streamed(
    start_gateway: StartGateway,
) -> None:
    gw = await _gateway(start_gateway, {}, gateway={"max_body_bytes": 200})
    body = orjson.dumps({"input": {"prompt": "x" * 400}})
    async with gw.client(headers=_auth("tok-a")) as client:
        declared = await client.post(
            "/v1/conversations/c/runs", content=body, headers={"content-type": "application/json"}
        )
        assert declared.status_code == 413 and _error(declared) == "payload_too_large"

        async def chunks() -> Any:  # no content-length: counted while reading
            for i in range(0, len(body), 50):
                yield body[i : i + 50]

        streamed = await client.post(
            "/v1/conversations/c/runs",
            content=chunks(),
            headers={"content-type": "application/json"},
        )
        assert streamed.status_code == 413 and _error(streamed) == "payload_too_large"
        assert (await client.get("/v1/conversations/c/state")).status_code == 404


async def test_input_over_max_input_bytes_is_413(start_gateway: StartGateway) -> None:
    gw = await _gateway(start_gateway, {"max_input_bytes": 100})
    async with gw.client(headers=_auth("tok-a")) as client:
        big = await client.post("/v1/conversations/c/runs", json={"input": {"prompt": "y" * 200}})
        assert big.status_code == 413 and _error(big) == "payload_too_large"
        assert (await client.get("/v1/conversations/c/state")).status_code == 404
        await start_run(client, "c", "text:1")  # a small input passes


async def test_conversations_per_principal(start_gateway: StartGateway) -> None:
    gw = await _gateway(start_gateway, {"max_conversations_per_principal": 2})
    async with gw.client(headers=_auth("tok-a")) as alice, gw.client(headers=_auth("tok-b")) as bob:
        await start_run(alice, "c1", "text:1")
        await start_run(alice, "c2", "text:1")
        refused = await alice.post("/v1/conversations/c3/runs", json={"input": {"prompt": "x"}})
        assert refused.status_code == 429, refused.text
        assert _error(refused) == "too_many_conversations"
        assert refused.headers["retry-after"].isdigit()
        assert (await alice.get("/v1/conversations/c3/state")).status_code == 404
        await wait_state(alice, "c1", lambda s: s["activeRunId"] is None)
        await start_run(alice, "c1", "text:1")  # an existing conversation is not a new one
        await start_run(bob, "c3", "text:1")  # another principal has its own budget
        assert (await alice.delete("/v1/conversations/c2")).status_code == 204
        await start_run(alice, "c3", "text:1")  # a deleted one frees its place


async def test_runs_per_minute_per_principal(start_gateway: StartGateway) -> None:
    gw = await _gateway(start_gateway, {"runs_per_minute_per_principal": 2})
    async with gw.client(headers=_auth("tok-a")) as alice, gw.client(headers=_auth("tok-b")) as bob:
        await start_run(alice, "c1", "text:1")
        await start_run(alice, "c2", "text:1")
        limited = await alice.post("/v1/conversations/c3/runs", json={"input": {"prompt": "x"}})
        assert limited.status_code == 429 and _error(limited) == "rate_limited"
        assert 1 <= int(limited.headers["retry-after"]) <= 60
        reload = await alice.post("/v1/conversations/c1/reload", json={})
        assert reload.status_code == 429 and _error(reload) == "rate_limited"
        await start_run(bob, "c1", "text:1")  # per principal
        url = f"{gw.ws_url}/v1/conversations/c4/ws?access_token=tok-a"
        async with websockets.connect(url) as ws:
            assert orjson.loads(await ws.recv())["type"] == "snapshot"
            await ws.send(orjson.dumps({"op": "request", "input": {"prompt": "x"}}).decode())
            frame = orjson.loads(await ws.recv())
            assert (frame["type"], frame["code"], frame["op"]) == (
                "error",
                "rate_limited",
                "request",
            )


def test_rate_limiter_window_slides() -> None:
    now = [0.0]
    limiter = RunRateLimiter(2, clock=lambda: now[0])
    limiter.check("p")
    limiter.record("p")
    now[0] = 30.0
    limiter.record("p")
    with pytest.raises(GatewayError) as refused:
        limiter.check("p")
    assert error_headers(refused.value)["Retry-After"] == "30"
    now[0] = 60.0  # the first run left the window
    limiter.check("p")
    limiter.record("p")
    with pytest.raises(GatewayError):
        limiter.check("p")
    limiter.check("q")


async def test_subscribers_per_conversation(start_gateway: StartGateway) -> None:
    gw = await _gateway(start_gateway, {"max_subscribers_per_conversation": 1})
    path = "/v1/conversations/c1/events"
    async with gw.client(headers=_auth("tok-a")) as alice, gw.client(headers=_auth("tok-b")) as bob:
        async with alice.stream("GET", path) as first:
            assert first.status_code == 200
            second = await alice.get(path)
            assert second.status_code == 429 and _error(second) == "too_many_subscribers"
            assert second.headers["retry-after"] == "1"
            streamed = await alice.post(
                "/v1/conversations/c1/runs?stream=true", json={"input": {"prompt": "x"}}
            )
            assert streamed.status_code == 429
            assert (await alice.get("/v1/conversations/c1/state")).status_code == 404  # no run
            url = f"{gw.ws_url}/v1/conversations/c1/ws?access_token=tok-a"
            async with websockets.connect(url) as ws:
                frame = orjson.loads(await ws.recv())
                assert frame["code"] == "too_many_subscribers"
                with pytest.raises(websockets.exceptions.ConnectionClosed) as closed:
                    await ws.recv()
                assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
            frames = await collect_sse(bob, path, stop=lambda f: True)  # bob's own c1
            assert frames[0].event == "snapshot"
        # The slot is free again once the first subscriber left.
        streams = gw.gateway.runs.limits.open_streams
        await eventually(lambda: not streams, what="the first subscriber's slot is freed")
        frames = await collect_sse(alice, path, stop=lambda f: True)
        assert frames[0].event == "snapshot"


async def test_subscribers_per_principal(start_gateway: StartGateway) -> None:
    gw = await _gateway(start_gateway, {"max_subscribers_per_principal": 2})
    async with gw.client(headers=_auth("tok-a")) as alice:
        url = f"{gw.ws_url}/v1/conversations/c1/ws?access_token=tok-a"
        async with (
            websockets.connect(url) as ws,
            alice.stream("GET", "/v1/conversations/c2/events"),
        ):
            assert orjson.loads(await ws.recv())["type"] == "snapshot"
            third = await alice.get("/v1/conversations/c3/events")
            assert third.status_code == 429 and _error(third) == "too_many_subscribers"
        async with gw.client(headers=_auth("tok-b")) as bob:
            frames = await collect_sse(bob, "/v1/conversations/c3/events", stop=lambda f: True)
            assert frames[0].event == "snapshot"


def test_subscriber_counters_release() -> None:
    limits = SubscriberLimits(per_conversation=1, per_principal=5)
    ref = ConversationRef("p", "k")
    with limits.hold(ref), pytest.raises(GatewayError):
        limits.acquire(ref)
    assert not limits.by_conversation and not limits.by_principal


async def test_ws_frame_over_max_ws_frame_bytes(start_gateway: StartGateway) -> None:
    gw = await _gateway(start_gateway, {"max_ws_frame_bytes": 256})
    url = f"{gw.ws_url}/v1/conversations/c1/ws?access_token=tok-a"
    async with websockets.connect(url) as ws:
        assert orjson.loads(await ws.recv())["type"] == "snapshot"
        big = {"op": "request", "input": {"prompt": "z" * 400}}
        await ws.send(orjson.dumps(big).decode())
        frame = orjson.loads(await ws.recv())
        assert (frame["type"], frame["code"]) == ("error", "payload_too_large")
        await ws.send(orjson.dumps({"op": "request", "input": {"prompt": "text:1"}}).decode())
        while (frame := orjson.loads(await ws.recv()))["type"] != "ack":
            pass
        assert frame["op"] == "request"  # the socket survived the oversized frame


async def _native_run(
    start_gateway: StartGateway,
    limits: dict[str, Any],
    script: list[Any],
    path: str = "/events",
    key: str = "c1",
) -> dict[str, Any]:
    """One run of ``script`` on a gateway of its own (on Redis: the test's key prefix, so a
    second call in one test needs another ``key``); -> the conversation's state at its end."""
    async with serve_upstream() as upstream:
        upstream.script = script
        settings = make_settings(
            limits=limits,
            gateway={"default_provider": "native"},
            providers={"native": {"kind": "agent-event", "url": upstream.url(path)}},
        )
        gw = await start_gateway(settings)
        async with gw.client() as client:
            await start_run(client, key, "go")
            return await wait_state(
                client, key, lambda s: s["activeRunId"] is None and bool(s["agentState"]["runs"])
            )


def _run_error(state: dict[str, Any]) -> dict[str, Any] | None:
    run = next(iter(state["agentState"]["runs"].values()))
    error: dict[str, Any] | None = run.get("error")
    return error


async def test_upstream_event_over_limit_fails_the_run(start_gateway: StartGateway) -> None:
    script = [
        ("message.started", {"messageId": "m1", "role": "assistant"}),
        ("message.delta", {"messageId": "m1", "delta": "q" * 5000}),
        ("message.completed", {"messageId": "m1"}),
    ]
    state = await _native_run(start_gateway, {"max_upstream_event_bytes": 2048}, script)
    run = next(iter(state["agentState"]["runs"].values()))
    assert run["status"] == "failed"
    error = _run_error(state)
    assert error is not None and error["code"] == "upstream_event_too_large"
    assert all(m["status"] != "streaming" for m in state["agentState"]["messages"].values())


async def test_artifact_content_is_capped_with_a_marker(start_gateway: StartGateway) -> None:
    script = [
        ("artifact.created", {"artifactId": "a1", "name": "big.txt", "content": "é" * 3000}),
        ("artifact.updated", {"artifactId": "a1", "content": {"rows": list(range(2000))}}),
        ("artifact.completed", {"artifactId": "a1"}),
        ("artifact.created", {"artifactId": "a2", "name": "small", "content": "tiny"}),
        ("artifact.completed", {"artifactId": "a2"}),
    ]
    state = await _native_run(start_gateway, {"max_inline_artifact_bytes": 1000}, script)
    artifacts = state["agentState"]["artifacts"]
    (big,) = [a for a in artifacts.values() if a["name"] == "big.txt"]
    (small,) = [a for a in artifacts.values() if a["name"] == "small"]
    assert isinstance(big["content"], str) and len(big["content"].encode()) <= 1000
    assert big["content"].startswith("[0,1,2,") or big["content"].startswith('{"rows":[0,1')
    marker = big["meta"]["truncated"]
    assert marker["field"] == "content" and marker["originalBytes"] > 1000
    assert marker["keptBytes"] <= 1000
    assert small["content"] == "tiny" and "truncated" not in (small.get("meta") or {})
    assert _run_error(state) is None


def test_cap_artifact_keeps_whole_characters_and_other_events() -> None:
    event: dict[str, Any] = {
        "type": "artifact.created",
        "payload": {"artifactId": "a", "content": "é" * 10},
    }
    capped = cap_artifact(event, 5)
    assert capped["payload"]["content"] == "éé"
    assert capped["meta"]["truncated"] == {"field": "content", "originalBytes": 20, "keptBytes": 4}
    assert event["payload"]["content"] == "é" * 10  # the input is not mutated
    delta = {"type": "message.delta", "payload": {"messageId": "m", "delta": "x" * 100}}
    assert cap_artifact(delta, 5) is delta
    assert cap_artifact(event, 20) is event


async def test_unstorable_json_is_422_not_500(start_gateway: StartGateway) -> None:
    """Found by schemathesis: integers beyond 64 bits (and lone surrogates) in a body."""
    gw = await _gateway(start_gateway, {})
    huge = 2**70
    async with gw.client(headers=_auth("tok-a")) as client:
        for body in (
            b'{"input": {"prompt": "x", "n": %d}}' % huge,
            b'{"input": {"prompt": "\\ud800"}}',
        ):
            answer = await client.post(
                "/v1/conversations/c0/runs",
                content=body,
                headers={"content-type": "application/json"},
            )
            assert answer.status_code == 422 and _error(answer) == "invalid_request"
        not_utf8 = await client.patch(
            "/v1/conversations/c0",
            content=b'{"title": "\xff\xfe"}',
            headers={"content-type": "application/json"},
        )
        assert not_utf8.status_code == 422 and _error(not_utf8) == "invalid_request"
        await start_run(client, "c1", "apptool:t1 approval:a1")
        await wait_state(client, "c1", lambda s: "a1" in str(s["agentState"]["approvals"]))
        tool = await client.post(
            "/v1/conversations/c1/tools/t1/result", json={"result": {"n": huge}}
        )
        assert tool.status_code == 422 and _error(tool) == "invalid_request"
        approval = await client.post(
            "/v1/conversations/c1/approvals/a1", json={"decision": "approved", "data": [huge]}
        )
        assert approval.status_code == 422 and _error(approval) == "invalid_request"
        url = f"{gw.ws_url}/v1/conversations/c2/ws?access_token=tok-a"
        async with websockets.connect(url) as ws:
            assert orjson.loads(await ws.recv())["type"] == "snapshot"
            await ws.send(f'{{"op": "request", "input": {{"n": {huge}}}}}')
            # orjson reads a huge integer as a float: the request is either accepted as such
            # or refused as invalid, never a crash or a silent close.
            while (frame := orjson.loads(await ws.recv()))["type"] not in ("ack", "error"):
                pass
            assert frame.get("code", "invalid_request") == "invalid_request"
        # The waiting run is untouched and still answers a valid result.
        ok = await client.post("/v1/conversations/c1/tools/t1/result", json={"result": 1})
        assert ok.status_code == 202, ok.text


async def test_ws_frame_far_over_the_limit_is_refused_before_buffering(
    start_gateway: StartGateway,
) -> None:
    """The server caps WebSocket messages at the limit plus a slack (uvicorn: 16 MiB)."""
    gw = await _gateway(start_gateway, {"max_ws_frame_bytes": 1024})
    assert gw.server.config.ws_max_size == ws_max_size(1024) == 1024 + WS_FRAME_SLACK
    url = f"{gw.ws_url}/v1/conversations/c1/ws?access_token=tok-a"
    async with websockets.connect(url, max_size=None) as ws:
        assert orjson.loads(await ws.recv())["type"] == "snapshot"
        await ws.send("x" * (ws_max_size(1024) + 1))
        with pytest.raises(websockets.exceptions.ConnectionClosed) as closed:
            while True:
                await ws.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009


async def test_huge_numbers_from_a_native_upstream_never_break_serialization(
    start_gateway: StartGateway,
) -> None:
    """Integers beyond 64 bits (and beyond double range) in a native upstream's events: the
    run ends with one terminal and state, events and listings still serialize."""
    script = [
        ("message.started", {"messageId": "m1", "role": "assistant"}, {"timestamp": 2**70}),
        ("message.delta", {"messageId": "m1", "delta": "x"}, {"meta": {"n": 2**80}}),
        ("artifact.created", {"artifactId": "a1", "name": "n", "content": {"big": 2**90}}),
        ("artifact.completed", {"artifactId": "a1"}),
        ("message.completed", {"messageId": "m1"}),
    ]
    state = await _native_run(start_gateway, {}, script)
    assert _run_error(state) is None
    (artifact,) = state["agentState"]["artifacts"].values()
    assert artifact["content"] == {"big": float(2**90)}  # read as a double, like JSON.parse
    beyond = [("message.started", {"messageId": "m1", "role": "assistant"}, {"timestamp": 10**400})]
    state = await _native_run(start_gateway, {}, beyond, key="c2")
    error = _run_error(state)
    assert error is not None and error["code"] == "upstream_malformed_chunk"
