"""The SERVER span of a request is made inside the gateway's ASGI app, and the SSE stream's
pushed writes (the server's own ``send``, past the app's) still happen with tracing on."""

from __future__ import annotations

import pytest

from tests.app.streams.push_support import follow_a_gated_run
from tests.app.support.gateway_server import StartGateway, make_settings
from tests.app.support.scripted_provider import ScriptedProvider
from tests.app.telemetry.otlp_receiver import OtlpReceiver
from tests.app.telemetry.trees import one


async def test_sse_frames_are_pushed_with_tracing_on_and_the_stream_has_its_span(
    receiver: OtlpReceiver, start_gateway: StartGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = ScriptedProvider()
    gw = await start_gateway(
        make_settings(telemetry={"enabled": True}), providers={"demo": provider}
    )
    # Every event once, in order, and the deltas after the gates really pushed (at least two
    # writes by the appending side, each made once the subscriber's read waited at the head).
    pushed = await follow_a_gated_run(gw, provider, monkeypatch)
    await gw.stop()
    spans = receiver.wait_for(lambda found: any(s.name == "invoke_agent demo" for s in found))
    stream = one(spans, "GET /v1/conversations/{conversationKey}/events")
    assert stream.kind == "SERVER" and stream.attributes["http.response.status_code"] == 200
    assert stream.attributes["http.route"] == "/v1/conversations/{conversationKey}/events"
    run_span = one(spans, "invoke_agent demo")
    assert run_span.attributes["agent_gateway.run.id"] == pushed.run["runId"]
    assert [link[:2] for link in stream.links] == [(run_span.trace_id, run_span.span_id)]
