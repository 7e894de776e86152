"""What a client can and cannot reach: no SSRF, CORS off by default, tokens, no secret leaks."""

from __future__ import annotations

import asyncio
import hmac
import io
import logging
from pathlib import Path
from typing import Any

import orjson
import pytest
import websockets

from app.auth.tokens import TokenTable, bearer_token
from app.config import ConfigError, load_settings
from app.observability.logs import configure_logging
from tests.app.support.gateway_server import StartGateway, make_settings
from tests.app.support.helpers import collect_sse, start_run, wait_state
from tests.app.support.security_upstream import serve_upstream
from tests.support import free_port

API_KEY = "sk-live-9d8c7b6a5f4e3d2c1b0a"
URL_KEY = "AIzaSyQueryKey123456789"
TOKEN = "bearer-tok-0f1e2d3c4b5a"
HOSTILE_INPUT: dict[str, Any] = {
    "prompt": "hi",
    "url": "http://169.254.169.254/latest/meta-data/",
    "baseUrl": "http://evil.invalid/",
    "headers": {"X-Evil": "1", "Host": "evil.invalid", "Authorization": "Bearer stolen"},
    "params": {
        "url": "http://evil.invalid/x",
        "base_url": "http://evil.invalid/",
        "headers": {"X-Evil": "2"},
        "extra_headers": {"X-Evil": "3"},
    },
}


@pytest.mark.parametrize("kind", ["openai-chat", "agent-event"])
async def test_client_input_never_reaches_the_request_line_or_headers(
    start_gateway: StartGateway, kind: str
) -> None:
    async with serve_upstream() as upstream:
        path = "/openai/v1/chat/completions" if kind == "openai-chat" else "/events/run"
        settings = make_settings(
            gateway={"default_provider": "up"},
            providers={
                "up": {
                    "kind": kind,
                    "url": upstream.url(path),
                    "model": "m",
                    "headers": {"Authorization": f"Bearer {API_KEY}"},
                }
            },
        )
        gw = await start_gateway(settings)
        async with gw.client() as client:
            # A provider is picked by name only: a URL as the name is an unknown provider.
            for name in ("http://evil.invalid/", upstream.url("/openai"), "../up"):
                answer = await client.post(
                    "/v1/conversations/c1/runs", json={"input": {"prompt": "x"}, "provider": name}
                )
                assert answer.status_code in (404, 422), answer.text
                if answer.status_code == 404:
                    assert answer.json()["error"]["code"] == "unknown_provider"
            assert upstream.requests == []
            await start_run(client, "c1", "x", input=HOSTILE_INPUT)
            await wait_state(client, "c1", lambda s: s["activeRunId"] is None)
            providers = (await client.get("/v1/providers")).text
    assert len(upstream.requests) == 1
    request = upstream.requests[0]
    assert request.request_line == f"POST {path} HTTP/1.1"
    headers = request.headers
    assert headers["host"] == f"127.0.0.1:{upstream.port}"
    assert headers["authorization"] == f"Bearer {API_KEY}"
    assert "x-evil" not in headers
    assert not any("evil" in value or "stolen" in value for value in headers.values())
    assert not any("169.254" in value for value in headers.values())
    # /v1/providers never shows URLs or headers.
    assert str(upstream.port) not in providers and API_KEY not in providers


async def test_cors_off_by_default(start_gateway: StartGateway) -> None:
    gw = await start_gateway(make_settings())
    async with gw.client() as client:
        preflight = await client.options(
            "/v1/conversations/c1/runs",
            headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
        )
        simple = await client.get("/v1/providers", headers={"Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in preflight.headers
    assert preflight.status_code >= 400
    assert "access-control-allow-origin" not in simple.headers


async def test_cors_only_for_listed_origins(start_gateway: StartGateway) -> None:
    gw = await start_gateway(make_settings(gateway={"cors_origins": ["https://app.example"]}))
    async with gw.client() as client:
        allowed = await client.options(
            "/v1/conversations/c1/runs",
            headers={"Origin": "https://app.example", "Access-Control-Request-Method": "POST"},
        )
        other = await client.options(
            "/v1/conversations/c1/runs",
            headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
        )
        simple = await client.get("/v1/providers", headers={"Origin": "https://evil.example"})
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == "https://app.example"
    assert other.headers.get("access-control-allow-origin") != "https://evil.example"
    assert "access-control-allow-origin" not in simple.headers


def test_tokens_file_and_inline_tokens(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text('[tokens]\n"file-tok" = "carol"\n"shared-tok" = "from-file"\n')
    config = tmp_path / "gateway.toml"
    config.write_text(
        f'[auth]\nmode = "bearer"\ntokens_file = "{tokens}"\n'
        'tokens = { "shared-tok" = "inline", "inline-tok" = "dave" }\n'
    )
    settings = load_settings(config)
    assert settings.auth.tokens == {
        "file-tok": "carol",
        "shared-tok": "inline",
        "inline-tok": "dave",
    }
    flat = tmp_path / "flat.toml"
    flat.write_text('"t1" = "erin"\n')
    config.write_text(f'[auth]\nmode = "bearer"\ntokens_file = "{flat}"\n')
    assert load_settings(config).auth.tokens == {"t1": "erin"}
    for bad in ('"t1" = 3\n', "not toml [", '"" = "x"\n'):
        flat.write_text(bad)
        with pytest.raises(ConfigError, match="auth"):
            load_settings(config)
    config.write_text(f'[auth]\ntokens_file = "{tmp_path / "missing.toml"}"\n')
    with pytest.raises(ConfigError, match="cannot read tokens file"):
        load_settings(config)


def test_token_table_lookup() -> None:
    table = TokenTable({"alpha": "a", "beta": "b"})
    assert table.lookup("alpha") == "a" and table.lookup("beta") == "b"
    for wrong in (None, "", "alph", "alphaa", "ALPHA", "bet\x00a", "ålpha"):
        assert table.lookup(wrong) is None
    assert bearer_token("Bearer  abc ", None) == "abc"
    assert bearer_token("bearer abc", "q") == "abc"
    assert bearer_token("Basic abc", "q") == "q"
    assert bearer_token("", None) is None


def test_token_lookup_compares_every_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """No early exit: the digest comparison runs once per known token, match or not."""
    calls: list[int] = []
    table = TokenTable({f"tok{i}": f"p{i}" for i in range(5)})
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append(1)
        return bool(real(a, b))

    monkeypatch.setattr(hmac, "compare_digest", counting)
    assert table.lookup("tok0") == "p0"
    first = len(calls)
    assert table.lookup("nope") is None
    assert first == 5 and len(calls) == 10


async def test_secrets_never_leak(start_gateway: StartGateway, monkeypatch: Any) -> None:
    """Provider keys (header and URL query) and bearer tokens: not in logs, events, state,
    error bodies, metrics, listings or the OpenAPI document."""
    monkeypatch.setenv("LEAK_TEST_KEY", API_KEY)
    buf = io.StringIO()
    handler = configure_logging("json", level=logging.DEBUG, stream=buf)
    dead_port = free_port()
    try:
        async with serve_upstream() as upstream:
            settings = make_settings(
                gateway={"default_provider": "up"},
                auth={"mode": "bearer", "tokens": {TOKEN: "alice"}},
                providers={
                    "up": {
                        "kind": "openai-chat",
                        "url": upstream.url("/openai/v1/chat/completions"),
                        "model": "m",
                        "headers": {"Authorization": "Bearer ${LEAK_TEST_KEY}"},
                    },
                    "dead": {
                        "kind": "openai-chat",
                        "url": f"http://127.0.0.1:{dead_port}/v1/chat?key={URL_KEY}",
                        "model": "m",
                        "headers": {"x-api-key": "${LEAK_TEST_KEY}"},
                    },
                },
            )
            gw = await start_gateway(settings)
            bodies: list[str] = []
            async with gw.client(headers={"Authorization": f"Bearer {TOKEN}"}) as client:
                await start_run(client, "c1", "hello")
                await wait_state(client, "c1", lambda s: s["activeRunId"] is None)
                await start_run(client, "c2", "hello", provider="dead")
                await wait_state(client, "c2", lambda s: s["activeRunId"] is None)
                for path in (
                    "/v1/conversations/c1/state",
                    "/v1/conversations/c2/state",
                    "/v1/conversations",
                    "/v1/providers",
                    "/metrics",
                    "/openapi.json",
                ):
                    bodies.append((await client.get(path)).text)
                frames = await collect_sse(
                    client,
                    f"/v1/conversations/c2/events?since=&access_token={TOKEN}",
                    stop=lambda f: len(f) >= 1,
                )
                bodies.extend(f.data for f in frames)
                state2 = (await client.get("/v1/conversations/c2/state")).json()
                run_id = state2["agentState"]["runs"] and next(iter(state2["agentState"]["runs"]))
                bodies.append((await client.get(f"/v1/conversations/c2/runs/{run_id}")).text)
                for wrong in (f"Bearer {TOKEN}x", f"Bearer {API_KEY}"):
                    bad = await client.get("/v1/providers", headers={"Authorization": wrong})
                    assert bad.status_code == 401
                    bodies.append(bad.text)
            url = f"{gw.ws_url}/v1/conversations/c2/ws?access_token={TOKEN}"
            async with websockets.connect(url) as ws:
                bodies.append(str(await ws.recv()))
                await ws.send(orjson.dumps({"op": "nope"}).decode())
                bodies.append(str(await ws.recv()))
            failed = [
                r for r in state2["agentState"]["runs"].values() if r.get("status") == "failed"
            ]
            assert failed and failed[0]["error"]["code"] == "upstream_connect_error"
            await gw.stop()
            await asyncio.sleep(0)
    finally:
        logging.getLogger().removeHandler(handler)
    logs = buf.getvalue()
    assert "/v1/conversations/c2/events" in logs  # the access lines were captured
    everything = logs + "\n".join(bodies)
    for secret in (API_KEY, URL_KEY, TOKEN):
        assert secret not in everything, secret
