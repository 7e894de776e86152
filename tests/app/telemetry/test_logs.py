"""JSON log lines carry the ``trace_id`` and ``span_id`` of the span they were written under:
the run's lines its ``invoke_agent`` span's, the access line its request's SERVER span's."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from app.observability.logs import configure_logging
from tests.app.support.gateway_server import StartGateway, make_settings
from tests.app.telemetry.otlp_receiver import OtlpReceiver
from tests.app.telemetry.trees import one
from tests.providers.support.mock_upstreams import openai_frames, serve_mock


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    buf = io.StringIO()
    handler = configure_logging("json", stream=buf)
    yield buf
    logging.getLogger().removeHandler(handler)


def lines(buf: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buf.getvalue().splitlines() if line.strip()]


async def test_log_lines_carry_the_ids_of_their_span(
    receiver: OtlpReceiver, start_gateway: StartGateway, stream: io.StringIO
) -> None:
    async with serve_mock([openai_frames(text="Hi.")]) as upstream:
        settings = make_settings(
            providers={"up": {"kind": "openai-chat", "url": upstream.url, "model": "m"}},
            gateway={"default_provider": "up"},
            telemetry={"enabled": True},
        )
        gw = await start_gateway(settings)
        async with gw.client() as client:
            accepted = await client.post(
                "/v1/conversations/k/runs", json={"input": {"prompt": "x"}}
            )
            run_id = accepted.json()["runId"]
            await client.get(f"/v1/conversations/k/runs/{run_id}/wait")
        await gw.stop()
    spans = receiver.wait_for(lambda found: any(s.name == "invoke_agent up" for s in found))
    run = one(spans, "invoke_agent up")
    request = one(spans, "POST /v1/conversations/{conversationKey}/runs")
    records = lines(stream)
    ended = [r for r in records if r.get("run_id") == run_id and r["msg"].startswith("run ")]
    assert ended, records
    assert {(r["trace_id"], r["span_id"]) for r in ended} == {(run.trace_id, run.span_id)}
    access = [r for r in records if r.get("path") == "/v1/conversations/k/runs"]
    assert access and all(
        (r["trace_id"], r["span_id"]) == (request.trace_id, request.span_id) for r in access
    ), access


async def test_without_telemetry_log_lines_have_no_trace_ids(
    start_gateway: StartGateway, stream: io.StringIO
) -> None:
    gw = await start_gateway(make_settings())
    async with gw.client() as client:
        accepted = await client.post("/v1/conversations/k/runs", json={"input": {"prompt": "x"}})
        await client.get(f"/v1/conversations/k/runs/{accepted.json()['runId']}/wait")
    records = lines(stream)
    assert any(r.get("run_id") for r in records)
    assert not any("trace_id" in r or "span_id" in r for r in records)
