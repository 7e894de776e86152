"""A stream's span links to the runs whose end it delivered, but not to the run its own request
(``POST …/runs?stream=true``) accepted: that run's span is its child."""

from __future__ import annotations

import asyncio

from tests.app.support.gateway_server import StartGateway, make_settings
from tests.app.support.helpers import collect_sse, events_of, terminal
from tests.app.support.scripted_provider import ScriptedProvider
from tests.app.telemetry.otlp_receiver import OtlpReceiver
from tests.app.telemetry.trees import children, one

ROUTE = "POST /v1/conversations/{conversationKey}/runs"


async def test_the_run_a_streamed_start_accepted_is_its_child_not_a_link(
    receiver: OtlpReceiver, start_gateway: StartGateway
) -> None:
    gw = await start_gateway(
        make_settings(telemetry={"enabled": True}), providers={"demo": ScriptedProvider()}
    )
    async with gw.client() as client:
        frames = await asyncio.wait_for(
            collect_sse(
                client,
                "/v1/conversations/c1/runs?stream=true",
                method="POST",
                json={"input": {"prompt": "text:2"}},
                stop=terminal,
            ),
            10,
        )
    assert events_of(frames)[-1]["type"] == "run.completed"
    await gw.stop()
    spans = receiver.wait_for(lambda found: any(s.name == ROUTE for s in found))
    stream = one(spans, ROUTE)
    run_span = one(spans, "invoke_agent demo")
    assert stream.links == []
    assert run_span in children(spans, stream)
    assert run_span.attributes["agent_gateway.run.id"] == events_of(frames)[-1]["runId"]
