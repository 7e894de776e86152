"""The span tree of a run, exported over OTLP/HTTP to a loopback receiver, on both backends.

A run of each model API (OpenAI Chat, Anthropic Messages, OpenAI Responses), its first upstream
answer a recorded stream from ``tests/fixtures`` (reasoning where the recording has it, a tool
call, usage; for Anthropic, whose recordings have no message with both a thinking block and a
tool call, also a stream composed of two recordings, :func:`composed_anthropic_thinking_tool_use`),
the tool's result handed back by the app, then a second model call: the request's
SERVER span (continuing the caller's ``traceparent``) -> ``invoke_agent {provider}`` -> two
``chat {model}`` CLIENT spans and one ``execute_tool {name}``. Also: a failed upstream, and
sampling off.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.telemetry.attributes import conversation_id
from tests.app.support.gateway_server import RunningGateway, StartGateway, make_settings
from tests.app.support.helpers import collect_sse, events_of, terminal, wait_state
from tests.app.support.scripted_provider import ScriptedProvider
from tests.app.telemetry.otlp_receiver import OtlpReceiver
from tests.app.telemetry.trees import children, one, render
from tests.providers.support.mock_upstreams import (
    HttpStatus,
    anthropic_frames,
    openai_frames,
    responses_frames,
    serve_mock,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
KEY = "traced"
#: The caller's trace: the gateway's request span is its child.
CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
DONE = "data: [DONE]\n\n"


def data_frames(lines: list[str]) -> list[str]:
    return [f"data: {line}\n\n" for line in lines if line.strip()]


def chunk_lines(path: str) -> list[str]:
    return (FIXTURES / path).read_text(encoding="utf-8").splitlines()


def first_response(path: str) -> list[str]:
    """The first response of a file of several (up to its ``response.completed``)."""
    lines = chunk_lines(path)
    end = next(i for i, line in enumerate(lines) if '"type":"response.completed"' in line)
    return lines[: end + 1]


def composed_anthropic_thinking_tool_use() -> list[str]:
    """Composed, not recorded: one Anthropic Messages stream with a thinking block, a tool call
    and usage, in the block order of ``UPSTREAM-FORMATS.md`` ("Ordering"). Its ``message_start``
    and thinking block (``thinking_delta`` x N, ``signature_delta``) are the first 15 lines of
    the real ``anthropic-clear-thinking.1.chunks.txt``; then the real ``tool_use_response.txt``
    from its first ``content_block_start`` on (a text block, a ``tool_use`` with
    ``input_json_delta``, ``message_delta`` with ``stop_reason: tool_use`` and usage,
    ``message_stop``), its block indices moved up by one. As SSE frames (``event:``, ``data:``)."""
    frames = []
    for line in chunk_lines("anthropic/anthropic-clear-thinking.1.chunks.txt")[:15]:
        frames.append(f"event: {orjson.loads(line)['type']}\ndata: {line}\n\n")
    assert frames[-1].startswith("event: content_block_stop")
    recorded = (FIXTURES / "anthropic/tool_use_response.txt").read_text(encoding="utf-8")
    for frame in recorded.split("\n\n"):
        data = next((x[6:] for x in frame.splitlines() if x.startswith("data: ")), None)
        if data is None:
            continue
        event = orjson.loads(data)
        if event["type"] == "message_start":
            continue
        if "index" in event:
            event["index"] += 1
        frames.append(f"event: {event['type']}\ndata: {orjson.dumps(event).decode()}\n\n")
    return frames


#: The thinking of the composed stream (its ``thinking_delta`` pieces, joined).
COMPOSED_THINKING = "".join(
    orjson.loads(line)["delta"].get("thinking", "")
    for line in chunk_lines("anthropic/anthropic-clear-thinking.1.chunks.txt")[:15]
    if '"thinking_delta"' in line
)


@dataclass(frozen=True)
class Case:
    kind: str
    first: list[str]
    second: list[str]
    response_model: str
    response_id: str
    finish_reasons: list[str]
    input_tokens: int
    output_tokens: int
    tool: str
    provider_name: str
    #: The reasoning the run's events carry (its deltas joined); None: the stream has none.
    reasoning: str | None = None


CASES = {
    "openai-chat": Case(
        "openai-chat",
        [
            *data_frames(chunk_lines("openai-chat/deepseek-tool-call.chunks.txt")),
            "data: [DONE]\n\n",
        ],
        openai_frames(text="Done."),
        "deepseek-reasoner",
        "cca85624-4056-401f-b220-d77601d1f70d",
        ["tool_calls"],
        339,
        83,
        "weather",
        "openai",
    ),
    "anthropic-messages": Case(
        "anthropic-messages",
        [(FIXTURES / "anthropic/tool_use_response.txt").read_text(encoding="utf-8")],
        anthropic_frames(text="Done."),
        "claude-sonnet-4-20250514",
        "msg_019Q1hrJbZG26Fb9BQhrkHEr",
        ["tool_use"],
        377,
        65,
        "get_weather",
        "anthropic",
    ),
    "anthropic-thinking-composed": Case(
        "anthropic-messages",
        composed_anthropic_thinking_tool_use(),
        anthropic_frames(text="Done."),
        "claude-sonnet-4-5-20250929",
        "msg_01Y6V41gqPaKWEw7iPouH7iW",
        ["tool_use"],
        69,
        65,
        "get_weather",
        "anthropic",
        COMPOSED_THINKING,
    ),
    "openai-responses": Case(
        "openai-responses",
        data_frames(
            first_response("openai-responses/openai-reasoning-encrypted-content.1.chunks.txt")
        ),
        responses_frames(text="Done."),
        "gpt-5.1-codex-max",
        "resp_01830d662ab3856501693c321345c88190b0de00f3b9975691",
        ["completed"],
        134,
        28,
        "calculator",
        "openai",
    ),
}


def telemetry_settings(url: str, kind: str, **provider: Any) -> Any:
    return make_settings(
        providers={"up": {"kind": kind, "url": url, "model": "requested-model", **provider}},
        gateway={"default_provider": "up"},
        telemetry={"enabled": True},
    )


async def waiting_tool(client: httpx.AsyncClient) -> str:
    state = await wait_state(
        client,
        KEY,
        lambda s: any(t["status"] == "running" for t in s["agentState"]["toolCalls"].values()),
    )
    tool: dict[str, Any] = next(iter(state["agentState"]["toolCalls"].values()))
    return str(tool["id"])


async def run_to_end(gw: RunningGateway, client: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    answer = await client.get(f"/v1/conversations/{KEY}/runs/{run_id}/wait", params={"timeout": 10})
    record: dict[str, Any] = answer.json()
    assert record["status"] != "running", record
    return record


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
async def test_the_span_tree_of_a_run_with_reasoning_a_tool_call_and_usage(
    receiver: OtlpReceiver, start_gateway: StartGateway, case: Case
) -> None:
    async with serve_mock([case.first, case.second]) as upstream:
        gw = await start_gateway(telemetry_settings(upstream.url, case.kind))
        async with gw.client() as client, gw.client() as follower:
            following = asyncio.Event()
            stream = asyncio.create_task(
                collect_sse(
                    follower,
                    f"/v1/conversations/{KEY}/events",
                    stop=terminal,
                    first_frame=following,
                )
            )
            await asyncio.wait_for(following.wait(), 10)
            accepted = await client.post(
                f"/v1/conversations/{KEY}/runs",
                json={"input": {"prompt": "What is the weather in Paris?"}},
                headers={"traceparent": TRACEPARENT},
            )
            assert accepted.status_code == 202, accepted.text
            run_id = accepted.json()["runId"]
            tool_call_id = await waiting_tool(client)
            result = await client.post(
                f"/v1/conversations/{KEY}/tools/{tool_call_id}/result", json={"result": "sunny"}
            )
            assert result.status_code == 202
            record = await run_to_end(gw, client, run_id)
            assert record["status"] == "completed"
            events = events_of(await asyncio.wait_for(stream, 10))
        await gw.stop()  # the gateway's shutdown exports every span still pending
    spans = receiver.wait_for(lambda found: any(s.name == "invoke_agent up" for s in found))
    ours = [span for span in spans if span.trace_id == CALLER_TRACE]
    print(render(ours))  # the tree of README.md's "Tracing" section (with -s)
    request = one(ours, "POST /v1/conversations/{conversationKey}/runs")
    assert (request.kind, request.parent_span_id) == ("SERVER", CALLER_SPAN)
    assert request.attributes["http.response.status_code"] == 202
    assert request.resource["service.name"] == "gateway-under-test"

    run = one(ours, "invoke_agent up")
    assert (run.kind, run.parent_span_id, run.status) == ("INTERNAL", request.span_id, "UNSET")
    assert run.attributes["agent_gateway.run.id"] == run_id
    assert run.attributes["agent_gateway.provider"] == "up"
    assert run.attributes["agent_gateway.run.status"] == "completed"
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes["gen_ai.provider.name"] == case.provider_name
    hashed = run.attributes["gen_ai.conversation.id"]
    assert hashed == conversation_id("anonymous", KEY) and KEY not in hashed
    # It did not wait in a queue: its one event is the command the app sent.
    assert run.events == [("run.command", {"agent_gateway.command.type": "tool.submit_result"})]

    under_run = children(ours, run)
    calls = [span for span in under_run if span.kind == "CLIENT"]
    assert [span.name for span in calls] == ["chat requested-model", "chat requested-model"]
    first, second = calls
    assert first.attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": case.provider_name,
        "gen_ai.request.model": "requested-model",
        "server.address": "127.0.0.1",
        "server.port": int(upstream.url.split(":")[2].split("/")[0]),
        "gen_ai.response.model": case.response_model,
        "gen_ai.response.id": case.response_id,
        "gen_ai.response.finish_reasons": case.finish_reasons,
        "gen_ai.usage.input_tokens": case.input_tokens,
        "gen_ai.usage.output_tokens": case.output_tokens,
    }
    assert first.status == second.status == "UNSET"
    tool = one(under_run, f"execute_tool {case.tool}")
    assert tool.attributes["gen_ai.tool.call.id"] == tool_call_id
    assert tool.attributes["gen_ai.tool.name"] == case.tool
    # The model calls span their streams; the tool ran between them.
    assert first.end_ns <= tool.end_ns <= second.start_ns < second.end_ns <= run.end_ns
    # Each upstream request carried its own span's traceparent.
    sent = [headers.get("traceparent") for headers in upstream.headers]
    assert sent == [f"00-{CALLER_TRACE}-{call.span_id}-01" for call in calls]
    # No content without capture_content: the prompt and the tool's result are nowhere.
    for span in ours:
        text = repr((span.attributes, span.events))
        assert "Paris" not in text and "sunny" not in text
    if case.reasoning is not None:  # the run's reasoning is in its events, never in a span
        ran = [event for event in events if event.get("runId") == run_id]
        kinds = [event["type"] for event in ran]
        assert "reasoning.started" in kinds and "reasoning.completed" in kinds
        thought = "".join(e["payload"]["delta"] for e in ran if e["type"] == "reasoning.delta")
        assert thought == case.reasoning
        assert kinds.index("reasoning.completed") < kinds.index("tool.requested")
        for span in ours:
            assert case.reasoning[:40] not in repr((span.attributes, span.events))


async def test_a_failed_upstream_sets_error_on_the_call_and_the_run(
    receiver: OtlpReceiver, start_gateway: StartGateway
) -> None:
    refused = HttpStatus(429, {"error": {"message": "slow down", "type": "rate_limit"}})
    async with serve_mock([refused]) as upstream:
        gw = await start_gateway(telemetry_settings(upstream.url, "openai-chat"))
        async with gw.client() as client:
            accepted = await client.post(
                f"/v1/conversations/{KEY}/runs", json={"input": {"prompt": "hello"}}
            )
            record = await run_to_end(gw, client, accepted.json()["runId"])
            assert record["status"] == "failed"
            code = record["error"]["code"]
        await gw.stop()
    spans = receiver.wait_for(lambda found: any(s.name == "invoke_agent up" for s in found))
    run = one(spans, "invoke_agent up")
    assert (run.status, run.status_message) == ("ERROR", code)
    assert run.attributes["error.type"] == code
    assert run.attributes["agent_gateway.run.status"] == "failed"
    (call,) = [span for span in children(spans, run) if span.kind == "CLIENT"]
    assert (call.status, call.attributes["error.type"]) == ("ERROR", code)
    request = one(spans, "POST /v1/conversations/{conversationKey}/runs")
    assert request.span_id == run.parent_span_id and request.parent_span_id == ""


async def test_sampling_off_exports_no_span(
    receiver: OtlpReceiver, start_gateway: StartGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    async with serve_mock([openai_frames(text="Hello.")]) as upstream:
        gw = await start_gateway(telemetry_settings(upstream.url, "openai-chat"))
        async with gw.client() as client:
            accepted = await client.post(
                f"/v1/conversations/{KEY}/runs",
                json={"input": {"prompt": "hello"}},
                headers={"traceparent": TRACEPARENT.removesuffix("-01") + "-00"},
            )
            record = await run_to_end(gw, client, accepted.json()["runId"])
            assert record["status"] == "completed"
        await gw.stop()
        # The caller's trace goes on upstream, marked not sampled (W3C: the flags are 00).
        sent = upstream.headers[0]["traceparent"]
        assert sent.startswith(f"00-{CALLER_TRACE}-") and sent.endswith("-00")
    # The GenAI metrics still went out (their exporter ran at shutdown): the receiver heard
    # from this gateway, and no span came with it.
    await asyncio.to_thread(
        receiver.wait_for, lambda _: "gen_ai.client.operation.duration" in receiver.metric_names
    )
    assert receiver.spans == []


async def test_propagate_false_sends_no_traceparent_upstream(
    receiver: OtlpReceiver, start_gateway: StartGateway
) -> None:
    async with serve_mock([openai_frames(text="Hello.")]) as upstream:
        settings = telemetry_settings(upstream.url, "openai-chat", propagate=False)
        gw = await start_gateway(settings)
        async with gw.client() as client:
            accepted = await client.post(
                f"/v1/conversations/{KEY}/runs",
                json={"input": {"prompt": "hello"}},
                headers={"traceparent": TRACEPARENT},
            )
            assert (await run_to_end(gw, client, accepted.json()["runId"]))["status"] == "completed"
        await gw.stop()
        assert "traceparent" not in upstream.headers[0]
    spans = receiver.wait_for(lambda found: any(s.kind == "CLIENT" for s in found))
    (call,) = [span for span in spans if span.kind == "CLIENT"]
    assert call.trace_id == CALLER_TRACE  # traced all the same, only not propagated


async def test_a_queued_run_has_its_wait_as_an_event(
    receiver: OtlpReceiver, start_gateway: StartGateway
) -> None:
    provider = ScriptedProvider()
    settings = make_settings(telemetry={"enabled": True})
    gw = await start_gateway(settings, providers={"demo": provider})
    async with gw.client() as client:
        first = await client.post(
            f"/v1/conversations/{KEY}/runs", json={"input": {"prompt": "text:1 gate:go"}}
        )
        second = await client.post(
            f"/v1/conversations/{KEY}/runs",
            json={"input": {"prompt": "text:1"}, "multitask": "enqueue"},
        )
        assert second.json()["status"] == "queued"
        provider.gates["go"].set()
        await run_to_end(gw, client, second.json()["runId"])
    await gw.stop()
    spans = receiver.wait_for(lambda found: len([s for s in found if s.kind == "INTERNAL"]) >= 2)
    runs = {s.attributes["agent_gateway.run.id"]: s for s in spans if s.name == "invoke_agent demo"}
    assert runs[first.json()["runId"]].events == []
    ((name, waited),) = runs[second.json()["runId"]].events
    assert name == "run.queue_wait" and waited["agent_gateway.queue.wait_seconds"] > 0
