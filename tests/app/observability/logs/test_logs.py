"""Structured logs: one line per record, context fields, redaction of secrets and content."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.observability.logs import (
    Redactor,
    RequestContextMiddleware,
    collect_secrets,
    configure_logging,
    current_log_context,
    log_context,
    setup_logging,
)
from tests.app.support.gateway_server import StartGateway, make_settings
from tests.app.support.helpers import collect_sse, events_of, start_run, wait_state

SECRET = "sk-test-VERYSECRET-0123456789"
TOKEN = "tok-alice-4f2b9c"


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    buf = io.StringIO()
    handler = configure_logging("json", secrets=[SECRET, TOKEN], stream=buf)
    yield buf
    logging.getLogger().removeHandler(handler)


def lines(buf: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buf.getvalue().splitlines() if line.strip()]


def test_json_line_per_record_with_context(stream: io.StringIO) -> None:
    log = logging.getLogger("agent_gateway.test")
    with log_context(request_id="req1", conversation="c1", run_id="run_x", provider="demo"):
        log.info("run started", extra={"event_type": "run.started"})
        assert current_log_context()["run_id"] == "run_x"
    log.warning("outside")
    first, second = lines(stream)
    assert first["msg"] == "run started"
    assert first["level"] == "info"
    assert first["logger"] == "agent_gateway.test"
    assert (first["request_id"], first["conversation"], first["run_id"], first["provider"]) == (
        "req1",
        "c1",
        "run_x",
        "demo",
    )
    assert first["event_type"] == "run.started"
    assert "run_id" not in second
    assert current_log_context() == {}


def test_secrets_redacted_everywhere(stream: io.StringIO) -> None:
    log = logging.getLogger("agent_gateway.test")
    log.info("calling upstream with key %s", SECRET)
    log.info(
        "request",
        extra={
            "headers": {"Authorization": f"Bearer {SECRET}", "X-Trace": "ok"},
            "url": f"/v1/conversations/c1/events?access_token={TOKEN}&since=5",
            "api_key": "whatever-value",
        },
    )
    try:
        raise RuntimeError(f"upstream said 401 for Bearer {SECRET}")
    except RuntimeError:
        log.exception("boom")
    text = stream.getvalue()
    assert SECRET not in text
    assert TOKEN not in text
    assert "whatever-value" not in text
    records = lines(stream)
    assert records[1]["headers"]["Authorization"] == "[REDACTED]"
    assert records[1]["headers"]["X-Trace"] == "ok"
    assert "since=5" in records[1]["url"]
    assert "RuntimeError" in records[2]["exc"]


def test_content_omitted_unless_log_content() -> None:
    off = Redactor()
    on = Redactor(log_content=True)
    payload = {"messageId": "m1", "delta": "my private words", "role": "user"}
    assert off.value(payload) == {"messageId": "m1", "delta": "[content omitted]", "role": "user"}
    assert on.value(payload) == payload
    # secrets stay redacted even with log_content on
    assert on.value({"authorization": "Bearer abcdefgh"}) == {"authorization": "[REDACTED]"}
    assert "abcdefghij" not in on.text("Authorization: Bearer abcdefghij")


def test_text_format_one_line() -> None:
    buf = io.StringIO()
    handler = configure_logging("text", secrets=[SECRET], stream=buf)
    try:
        with log_context(run_id="run_1"):
            logging.getLogger("agent_gateway.t").info("hello %s", SECRET, extra={"n": 3})
    finally:
        logging.getLogger().removeHandler(handler)
    out = buf.getvalue()
    assert out.count("\n") == 1
    assert "run_id=run_1" in out and "n=3" in out and "hello [REDACTED]" in out
    assert SECRET not in out


@pytest.mark.parametrize(("log_stream", "to_stdout"), [(None, False), ("stdout", True)])
def test_log_stream_setting_picks_stderr_or_stdout(
    capsys: pytest.CaptureFixture[str], log_stream: str | None, to_stdout: bool
) -> None:
    """stderr by default; ``log_stream = "stdout"`` (the container image's setting) moves the
    JSON lines to stdout."""
    gateway = {} if log_stream is None else {"log_stream": log_stream}
    handler = setup_logging(make_settings(gateway=gateway))
    try:
        logging.getLogger("agent_gateway.t").warning("to the stream")
    finally:
        logging.getLogger().removeHandler(handler)
    out, err = capsys.readouterr()
    written, silent = (out, err) if to_stdout else (err, out)
    assert json.loads(written.strip().splitlines()[-1])["msg"] == "to the stream"
    assert "to the stream" not in silent


def test_collect_secrets_from_config_shapes() -> None:
    config = {
        "gateway": {"log_format": "json", "redis_url": "redis://:redispw99@127.0.0.1:6379/0"},
        "webhooks": {"url": "", "secret": "whsec-123456"},
        "auth": {"mode": "bearer", "tokens": {"token-a-secret": "alice"}},
        "providers": {
            "openai": {
                "kind": "openai-chat",
                "headers": {"Authorization": f"Bearer {SECRET}", "x-api-key": "anthropic-k3y"},
            }
        },
    }
    found = collect_secrets(config)
    for value in (
        "redispw99",
        "whsec-123456",
        "token-a-secret",
        SECRET,
        f"Bearer {SECRET}",
        "anthropic-k3y",
    ):
        assert value in found
    assert "alice" not in found
    assert "json" not in found


async def test_middleware_binds_request_id_and_logs_without_query(stream: io.StringIO) -> None:
    seen: dict[str, str] = {}

    async def handler(request: Request) -> JSONResponse:
        seen.update(current_log_context())
        logging.getLogger("agent_gateway.route").info("inside")
        await asyncio.sleep(0)
        return JSONResponse({"ok": True})

    app = Starlette(routes=[Route("/v1/conversations/{key}/events", handler)])
    wrapped = RequestContextMiddleware(app)
    transport = httpx.ASGITransport(app=wrapped)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        r = await client.get(f"/v1/conversations/conv-9/events?access_token={TOKEN}")
        r2 = await client.get("/v1/conversations/c/events", headers={"X-Request-ID": "abc-1"})
        r3 = await client.get("/v1/conversations/c/events", headers={"X-Request-ID": "bad id!"})
    assert r.status_code == 200
    assert seen["conversation"] == "conv-9" or seen["conversation"] == "c"
    assert r.headers["x-request-id"]
    assert r2.headers["x-request-id"] == "abc-1"
    assert r3.headers["x-request-id"] != "bad id!"
    records = lines(stream)
    inside = [rec for rec in records if rec["msg"] == "inside"]
    access = [rec for rec in records if rec["logger"] == "agent_gateway.access"]
    assert inside[0]["request_id"] == r.headers["x-request-id"]
    assert inside[0]["conversation"] == "conv-9"
    assert access[0]["status"] == 200 and access[0]["path"] == "/v1/conversations/conv-9/events"
    assert TOKEN not in stream.getvalue()


# -- a full gateway run with an upstream error: no secret in any log line -----------------------

API_KEY = "sk-live-UPSTREAMKEY-9f8e7d6c5b4a"
WEBHOOK = "whsec-gateway-77aa88bb"
PROMPT = "my-private-prompt-words"


def _upstream_app() -> Starlette:
    """An OpenAI-style upstream that echoes the caller's key in its errors (as real ones do)."""
    calls: list[int] = []

    async def completions(request: Request) -> Response:
        calls.append(1)
        auth = request.headers.get("authorization", "")
        if len(calls) == 1:
            message = f"Incorrect API key provided: {auth}"
            return JSONResponse({"error": {"message": message, "type": "auth"}}, 401)

        async def stream() -> AsyncIterator[bytes]:
            chunk = {"choices": [{"index": 0, "delta": {"content": "partial "}}]}
            yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
            error = {"error": {"message": f"key {auth} was revoked", "code": "revoked"}}
            yield b"data: " + json.dumps(error).encode() + b"\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])


@pytest.mark.parametrize("log_format", ["json", "text"])
async def test_no_secret_in_logs_across_a_run_with_upstream_errors(
    start_gateway: StartGateway, log_format: str
) -> None:
    buf = io.StringIO()
    handler = configure_logging(log_format, level=logging.DEBUG, stream=buf)
    upstream = uvicorn.Server(
        uvicorn.Config(_upstream_app(), host="127.0.0.1", port=0, log_level="warning")
    )
    upstream_task = asyncio.create_task(upstream.serve())
    try:
        while not upstream.started:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        port = upstream.servers[0].sockets[0].getsockname()[1]
        settings = make_settings(
            gateway={"default_provider": "openai"},
            auth={"mode": "bearer", "tokens": {TOKEN: "alice"}},
            webhooks={"secret": WEBHOOK},
            providers={
                "openai": {
                    "kind": "openai-chat",
                    "url": f"http://127.0.0.1:{port}/v1/chat/completions",
                    "model": "gpt-test",
                    "headers": {"Authorization": f"Bearer {API_KEY}"},
                }
            },
        )
        gw = await start_gateway(settings)
        key = "secret-test"
        async with gw.client(headers={"Authorization": f"Bearer {TOKEN}"}) as client:
            stream = asyncio.create_task(
                collect_sse(
                    client,
                    f"/v1/conversations/{key}/events?access_token={TOKEN}",
                    stop=lambda frames: (
                        sum(e["type"] == "run.failed" for e in events_of(frames)) == 2
                    ),
                )
            )
            for _ in range(2):
                await start_run(client, key, PROMPT)
                await wait_state(client, key, lambda s: not s["isRequesting"])
            frames = await asyncio.wait_for(stream, 10)
            bad = await client.get("/v1/providers", headers={"Authorization": "Bearer wrong-x1y2"})
            metrics = (await client.get("/metrics")).text
        assert bad.status_code == 401
        failures = [e for e in events_of(frames) if e["type"] == "run.failed"]
        assert [f["payload"]["error"]["code"] for f in failures] == [
            "upstream_http_error",
            "upstream_error",
        ]
        assert 'code="upstream_http_error",provider="openai"' in metrics
    finally:
        await gw.stop()
        upstream.should_exit = True
        await upstream_task
        logging.getLogger().removeHandler(handler)
    out = buf.getvalue()
    assert out, "nothing was logged"
    # the upstream's echo of the key reached a log line (run failed, error_message) ...
    assert "was revoked" in out
    # ... and no secret, nor the prompt, is in any line
    for secret in (API_KEY, TOKEN, WEBHOOK, PROMPT):
        assert secret not in out, secret
    # the records carry their context
    if log_format == "json":
        records = lines(buf)
        ended = [
            r
            for r in records
            if r.get("logger") == "agent_gateway.runs" and r["msg"] == "run failed"
        ]
        assert len(ended) == 2
        assert {r["provider"] for r in ended} == {"openai"}
        assert all(r["conversation"] == key and r["run_id"].startswith("run_") for r in ended)
        assert all("request_id" in r for r in ended)
        assert [r["error_code"] for r in ended] == ["upstream_http_error", "upstream_error"]
        access = [r for r in records if r.get("logger") == "agent_gateway.access"]
        assert any(r["path"].endswith("/events") for r in access)
    else:
        assert "run failed" in out and "provider=openai" in out
