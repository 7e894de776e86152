"""Structured logs: one line per record, context fields, redaction of secrets and content."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from app.logs import (
    Redactor,
    RequestContextMiddleware,
    collect_secrets,
    configure_logging,
    current_log_context,
    log_context,
)

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
