"""The SERVER span of a request is made inside the gateway's ASGI app, and the SSE stream's
pushed writes (the server's own ``send``, past the app's) still happen with tracing on."""

from __future__ import annotations

import asyncio

import pytest
from httpx_sse import ServerSentEvent

from app.backends import LogEntry
from app.streams import sse
from tests.app.support.gateway_server import StartGateway, make_settings
from tests.app.support.helpers import collect_sse, events_of, start_run, terminal
from tests.app.support.scripted_provider import ScriptedProvider
from tests.app.telemetry.otlp_receiver import OtlpReceiver
from tests.app.telemetry.trees import one
from tests.support import eventually


async def test_sse_frames_are_pushed_with_tracing_on_and_the_stream_has_its_span(
    receiver: OtlpReceiver, start_gateway: StartGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = ScriptedProvider()
    gw = await start_gateway(
        make_settings(telemetry={"enabled": True}), providers={"demo": provider}
    )
    pushes = 0
    original = sse._Pusher.__call__

    def counting(self: sse._Pusher, entries: list[LogEntry]) -> bool:
        nonlocal pushes
        done = original(self, entries)
        pushes += done
        return done

    monkeypatch.setattr(sse._Pusher, "__call__", counting)
    deltas_seen = 0

    def until_terminal(frames: list[ServerSentEvent]) -> bool:
        nonlocal deltas_seen
        deltas_seen = sum(b'"message.delta"' in f.data.encode() for f in frames)
        return terminal(frames)

    async with gw.client() as client:
        following = asyncio.Event()
        reader = asyncio.create_task(
            collect_sse(
                client, "/v1/conversations/c1/events", stop=until_terminal, first_frame=following
            )
        )
        await asyncio.wait_for(following.wait(), 10)
        run = await start_run(client, "c1", "text:1 gate:a text:1 gate:b text:1")
        for count, gate in ((1, "a"), (2, "b")):
            await eventually(lambda n=count: deltas_seen == n)  # type: ignore[misc]
            provider.gates[gate].set()  # the follower waits at the head: the next is pushed
        frames = await asyncio.wait_for(reader, 10)
    events = events_of(frames)
    assert [e["sequence"] for e in events] == list(range(len(events)))
    assert pushes >= 1
    await gw.stop()
    spans = receiver.wait_for(lambda found: any(s.name == "invoke_agent demo" for s in found))
    stream = one(spans, "GET /v1/conversations/{conversationKey}/events")
    assert stream.kind == "SERVER" and stream.attributes["http.response.status_code"] == 200
    assert stream.attributes["http.route"] == "/v1/conversations/{conversationKey}/events"
    run_span = one(spans, "invoke_agent demo")
    assert run_span.attributes["agent_gateway.run.id"] == run["runId"]
    assert [link[:2] for link in stream.links] == [(run_span.trace_id, run_span.span_id)]
