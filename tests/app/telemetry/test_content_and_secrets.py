"""Never content unless ``capture_content``, never secrets: every exported span is scanned.

The gateway runs with bearer auth (a token in the ``Authorization`` header, another as an SSE
stream's ``?access_token=``), a provider whose API key is a configured header, a webhook
secret; a run streams to an SSE subscriber (the push path writes to the server's own ``send``:
it must still deliver every frame with tracing on), calls a tool, is answered, and a second run
is aborted. No secret appears in any span's name, attributes, events, links or resource; the
prompt and the tool's result appear only with ``capture_content = true``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.app.support.gateway_server import StartGateway, make_settings
from tests.app.support.helpers import collect_sse, events_of, wait_state
from tests.app.telemetry.otlp_receiver import OtlpReceiver, Span
from tests.providers.support.mock_upstreams import STALL, openai_frames, serve_mock

KEY = "secretive"
USER_TOKEN = "usertok-7f3a9c1e5b2d4f6a8c0e"
STREAM_TOKEN = "streamtok-1b3d5f7a9c2e4a6c8e0f"
API_KEY = "sk-upstream-9d8c7b6a5f4e3d2c1b0a"
WEBHOOK_SECRET = "whsec-0a1b2c3d4e5f6a7b8c9d"
PROMPT = "Tell me about the lighthouse at Alexandria"
TOOL_RESULT = "tool-output-zebra-quartz"


def scanned_text(span: Span) -> str:
    return repr((span.name, span.attributes, span.events, span.links, span.resource))


@pytest.mark.parametrize("capture", [False, True], ids=["no-content", "capture-content"])
async def test_no_exported_span_holds_a_secret_and_content_only_when_captured(
    receiver: OtlpReceiver,
    start_gateway: StartGateway,
    monkeypatch: pytest.MonkeyPatch,
    capture: bool,
) -> None:
    monkeypatch.setenv("WEBHOOK_SECRET", WEBHOOK_SECRET)
    first = openai_frames(tool_calls=[("call_1", "lookup", '{"q": "pharos"}')])
    async with serve_mock([first, openai_frames(text="It was tall."), [STALL]]) as upstream:
        settings = make_settings(
            providers={
                "up": {
                    "kind": "openai-chat",
                    "url": upstream.url,
                    "model": "m",
                    "headers": {"Authorization": f"Bearer {API_KEY}"},
                }
            },
            gateway={"default_provider": "up"},
            auth={"mode": "bearer", "tokens": {USER_TOKEN: "alice", STREAM_TOKEN: "alice"}},
            webhooks={"url": "http://127.0.0.1:9/hook"},
            telemetry={"enabled": True, "capture_content": capture},
        )
        gw = await start_gateway(settings)
        headers = {"Authorization": f"Bearer {USER_TOKEN}"}
        async with gw.client(headers=headers) as client, gw.client() as anonymous:
            first_frame = asyncio.Event()
            stream = asyncio.create_task(
                collect_sse(
                    anonymous,
                    f"/v1/conversations/{KEY}/events?access_token={STREAM_TOKEN}",
                    stop=lambda frames: any(
                        e["type"] == "run.completed" for e in events_of(frames[1:])
                    ),
                    first_frame=first_frame,
                )
            )
            await first_frame.wait()  # the snapshot: from here on it follows the log
            accepted = await client.post(
                f"/v1/conversations/{KEY}/runs", json={"input": {"prompt": PROMPT}}
            )
            assert accepted.status_code == 202, accepted.text
            await wait_state(
                client,
                KEY,
                lambda s: any(
                    t["status"] == "running" for t in s["agentState"]["toolCalls"].values()
                ),
            )
            answered = await client.post(
                f"/v1/conversations/{KEY}/tools/call_1/result", json={"result": TOOL_RESULT}
            )
            assert answered.status_code == 202
            frames = await asyncio.wait_for(stream, 10)
            pushed = [e["type"] for e in events_of(frames[1:])]
            assert (
                pushed[:2] == ["session.started", "run.started"] and pushed[-1] == "run.completed"
            )
            second = await client.post(
                f"/v1/conversations/{KEY}/runs", json={"input": {"prompt": "again"}}
            )
            assert second.json()["status"] == "started"  # its run.started is logged
            run_id = second.json()["runId"]
            aborted = await client.post(f"/v1/conversations/{KEY}/abort", json={"runId": run_id})
            assert aborted.json()["aborted"] is True
            record = await client.get(f"/v1/conversations/{KEY}/runs/{run_id}/wait")
            assert record.json()["status"] == "cancelled"
        await gw.stop()
        # The provider's key went upstream (the wire needs it), the spans never saw it.
        assert upstream.headers[0]["authorization"] == f"Bearer {API_KEY}"
    spans = receiver.wait_for(
        lambda found: len([s for s in found if s.name == "invoke_agent up"]) == 2
    )
    assert {"abort_run", "run_command tool.submit_result", "execute_tool lookup"} <= {
        span.name for span in spans
    }
    runs = sorted((s for s in spans if s.name == "invoke_agent up"), key=lambda s: s.start_ns)
    (abort,) = [s for s in spans if s.name == "abort_run"]
    (command,) = [s for s in spans if s.name == "run_command tool.submit_result"]
    assert [link[:2] for link in abort.links] == [(runs[1].trace_id, runs[1].span_id)]
    assert [link[:2] for link in command.links] == [(runs[0].trace_id, runs[0].span_id)]
    assert abort.attributes["agent_gateway.requested_by"] == "alice"
    (sse,) = [s for s in spans if s.name == "GET /v1/conversations/{conversationKey}/events"]
    assert [link[:2] for link in sse.links] == [(runs[0].trace_id, runs[0].span_id)]
    assert ("run.abort", {"agent_gateway.abort.reason": "aborted"}) in runs[1].events
    everything = "\n".join(scanned_text(span) for span in spans)
    for secret in (USER_TOKEN, STREAM_TOKEN, API_KEY, WEBHOOK_SECRET, "access_token"):
        assert secret not in everything
    for content in (PROMPT, TOOL_RESULT, "pharos"):
        assert (content in everything) is capture, content
    if capture:
        chat: list[Any] = [s for s in spans if s.kind == "CLIENT"]
        assert any(PROMPT in str(s.attributes.get("gen_ai.input.messages")) for s in chat)
