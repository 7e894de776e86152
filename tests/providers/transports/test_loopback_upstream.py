"""Abort reaches a REAL loopback upstream (SSE and WebSocket), upstream faults end cleanly, and
the native agent-event provider continues a run after a command."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from providers.agent_event import AgentEventProvider
from providers.contract import Command, RunOptions
from providers.signal import AbortSignal
from providers.testing import make_options, run_collect
from providers.transports import SSETransport, UpstreamRequest, WebSocketTransport
from providers.validator import validate_agent_provider_events
from tests.providers.support.loopback import Loopback, serve_loopback
from tests.support import free_port

ABORT_BOUND_SECONDS = 2.0  # generous: the machine is shared; real figures in bench/


def sse_provider(url: str, **kw: Any) -> AgentEventProvider:
    return AgentEventProvider("native", url, SSETransport(**kw), headers={"x-key": "secret-k"})


def ws_provider(url: str, **kw: Any) -> AgentEventProvider:
    return AgentEventProvider("native", url, WebSocketTransport(**kw))


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def assert_clean(provider: AgentEventProvider, events: list[dict[str, Any]]) -> None:
    assert validate_agent_provider_events(provider.capabilities, events) == []


async def _abort_case(
    loopback: Loopback,
    provider: AgentEventProvider,
    *,
    wait_for_deltas: int,
) -> tuple[list[dict[str, Any]], float]:
    options = make_options(now=None)
    events: list[dict[str, Any]] = []
    deltas = asyncio.Event()

    async def run() -> None:
        def watch(evs: list[dict[str, Any]]) -> bool:
            events[:] = evs
            if sum(e["type"] == "message.delta" for e in evs) >= wait_for_deltas:
                deltas.set()
            return False

        events[:] = await run_collect(provider, {"prompt": "go"}, options=options, abort_when=watch)

    task = asyncio.create_task(run())
    if wait_for_deltas:
        await asyncio.wait_for(deltas.wait(), 10)
    else:
        await asyncio.wait_for(loopback.connected.wait(), 10)
        await asyncio.sleep(0.05)
    aborted_at = time.monotonic()
    options.signal.abort()
    await asyncio.wait_for(task, 10)
    await asyncio.wait_for(loopback.disconnected.wait(), 5)
    return events, loopback.disconnects[0] - aborted_at


@pytest.mark.parametrize("mid_stream", [True, False], ids=["mid-stream", "before-first-chunk"])
async def test_sse_abort_closes_upstream(mid_stream: bool) -> None:
    async with serve_loopback() as loopback:
        query = "delay=0.05" if mid_stream else "first_delay=30"
        provider = sse_provider(f"http://{loopback.url}/sse/slow?{query}")
        events, delay = await _abort_case(
            loopback, provider, wait_for_deltas=3 if mid_stream else 0
        )
    assert delay < ABORT_BOUND_SECONDS
    assert events[-1]["type"] == "run.cancelled"
    if mid_stream:
        assert types(events)[-2] == "message.cancelled"
    assert_clean(provider, events)


@pytest.mark.parametrize("mid_stream", [True, False], ids=["mid-stream", "before-first-chunk"])
async def test_websocket_abort_closes_upstream_with_1000(mid_stream: bool) -> None:
    async with serve_loopback() as loopback:
        query = "delay=0.05" if mid_stream else "first_delay=30"
        provider = ws_provider(f"ws://{loopback.url}/ws/slow?{query}")
        events, delay = await _abort_case(
            loopback, provider, wait_for_deltas=3 if mid_stream else 0
        )
        assert loopback.close_codes == [1000]
    assert delay < ABORT_BOUND_SECONDS
    assert events[-1]["type"] == "run.cancelled"
    if mid_stream:
        assert types(events)[-2] == "message.cancelled"
    assert_clean(provider, events)


@pytest.mark.parametrize(("status", "retryable"), [(401, False), (429, True), (500, True)])
async def test_http_status_before_stream(status: int, retryable: bool) -> None:
    async with serve_loopback() as loopback:
        provider = sse_provider(f"http://{loopback.url}/sse/status?code={status}")
        events = await run_collect(provider, {"prompt": "go"})
    error = events[-1]["payload"]["error"]
    assert events[-1]["type"] == "run.failed"
    assert error["code"] == "upstream_http_error"
    assert error["details"]["status"] == status
    assert error["retryable"] is retryable
    assert f"status {status}" in error["details"]["body"]
    assert "secret-k" not in str(events)
    assert_clean(provider, events)


@pytest.mark.parametrize(
    ("scenario", "code"),
    [
        ("malformed", "upstream_malformed_chunk"),
        ("drop", "upstream_dropped"),
        ("invalid", "upstream_protocol_error"),
        ("no-terminal", "upstream_dropped"),
    ],
)
async def test_stream_faults_fail_cleanly(scenario: str, code: str) -> None:
    async with serve_loopback() as loopback:
        provider = sse_provider(f"http://{loopback.url}/sse/{scenario}")
        events = await run_collect(provider, {"prompt": "go"})
    assert events[-1]["type"] == "run.failed"
    assert events[-1]["payload"]["error"]["code"] == code
    assert types(events)[-2] == "message.failed"  # the open message closed first
    assert_clean(provider, events)


async def test_idle_stall_fails_with_idle_timeout() -> None:
    async with serve_loopback() as loopback:
        provider = sse_provider(f"http://{loopback.url}/sse/stall", idle_timeout_seconds=0.3)
        started = time.monotonic()
        events = await run_collect(provider, {"prompt": "go"})
        elapsed = time.monotonic() - started
    assert events[-1]["payload"]["error"]["code"] == "upstream_idle_timeout"
    assert types(events)[-2] == "message.failed"
    assert elapsed < 5
    assert_clean(provider, events)


async def test_websocket_invalid_event_fails_with_protocol_error() -> None:
    async with serve_loopback() as loopback:
        provider = ws_provider(f"ws://{loopback.url}/ws/invalid")
        events = await run_collect(provider, {"prompt": "go"})
    assert events[-1]["payload"]["error"]["code"] == "upstream_protocol_error"
    assert_clean(provider, events)


async def test_connect_refused() -> None:
    provider = sse_provider(f"http://127.0.0.1:{free_port()}/sse/slow")
    events = await run_collect(provider, {"prompt": "go"})
    assert events[-1]["payload"]["error"]["code"] == "upstream_connect_error"
    assert_clean(provider, events)


@pytest.mark.parametrize("transport", ["sse", "websocket"])
async def test_native_approval_continues_same_run(transport: str) -> None:
    async with serve_loopback() as loopback:
        if transport == "sse":
            provider = sse_provider(f"http://{loopback.url}/sse/approval")
        else:
            provider = ws_provider(f"ws://{loopback.url}/ws/approval")
        options: RunOptions = make_options(start_session=True)
        events = await run_collect(
            provider,
            {"prompt": "deploy?"},
            options=options,
            commands=[Command("approval.resolve", {"approvalId": "a1", "decision": "approved"})],
        )
        requests = list(loopback.requests)
    assert_clean(provider, events)
    assert events[-1]["type"] == "run.completed"
    assert events[-1]["payload"] == {"output": "approved"}
    resolved = next(e for e in events if e["type"] == "approval.resolved")
    assert resolved["payload"] == {"approvalId": "a1", "decision": "approved"}
    first = requests[0]
    assert first["sessionId"] == "ses_test" and first["runId"] == "run_test"
    assert first["history"][0]["role"] == "user"
    if transport == "sse":
        assert requests[1]["commands"] == [
            {"type": "approval.resolve", "payload": {"approvalId": "a1", "decision": "approved"}}
        ]
    else:
        assert requests[1] == {
            "command": {
                "type": "approval.resolve",
                "payload": {"approvalId": "a1", "decision": "approved"},
            }
        }
    started = next(e for e in events if e["type"] == "approval.requested")
    assert started["sessionId"] == "ses_test"
    assert started["meta"]["upstream"]["runId"] == "up-run"


@pytest.mark.parametrize("transport", ["sse", "websocket"])
async def test_event_too_large(transport: str) -> None:
    async with serve_loopback() as loopback:
        if transport == "sse":
            provider = sse_provider(f"http://{loopback.url}/sse/big")
        else:
            provider = ws_provider(f"ws://{loopback.url}/ws/big")
        options = make_options(max_upstream_event_bytes=1024)
        events = await run_collect(provider, {"prompt": "go"}, options=options)
    assert events[-1]["payload"]["error"]["code"] == "upstream_event_too_large"
    assert types(events)[-2] == "message.failed"
    assert_clean(provider, events)


async def test_whole_request_timeout() -> None:
    async with serve_loopback() as loopback:
        provider = sse_provider(f"http://{loopback.url}/sse/slow?delay=0.02", timeout_seconds=0.3)
        started = time.monotonic()
        events = await run_collect(provider, {"prompt": "go"})
        elapsed = time.monotonic() - started
        await asyncio.wait_for(loopback.disconnected.wait(), 5)
    assert events[-1]["payload"]["error"]["code"] == "upstream_timeout"
    assert types(events)[-2] == "message.failed"
    assert elapsed < 3
    assert_clean(provider, events)


async def test_websocket_abort_while_waiting_closes_socket() -> None:
    async with serve_loopback() as loopback:
        provider = ws_provider(f"ws://{loopback.url}/ws/approval")
        options = make_options()
        loop = asyncio.get_running_loop()

        def abort_on_approval(evs: list[dict[str, Any]]) -> bool:
            if evs[-1]["type"] == "approval.requested":
                loop.call_later(0.05, options.signal.abort)
            return False

        events = await run_collect(
            provider, {"prompt": "go"}, options=options, abort_when=abort_on_approval
        )
        await asyncio.wait_for(loopback.disconnected.wait(), 5)
        assert loopback.close_codes == [1000]
    assert types(events)[-2:] == ["approval.resolved", "run.cancelled"]
    assert events[-2]["payload"]["decision"] == "expired"
    assert_clean(provider, events)


def test_sse_abort_closes_upstream_on_uvloop() -> None:
    """uvicorn runs on uvloop, whose sockets are pseudo-sockets without ``shutdown``."""
    import uvloop  # installed with uvicorn[standard]

    import providers.transports.sse as sse_module

    used: list[tuple[str, bool]] = []
    original = sse_module.shutdown_socket

    def spy(sock: Any) -> bool:
        result = original(sock)
        used.append((type(sock).__name__, result))
        return result

    async def scenario() -> tuple[list[dict[str, Any]], float]:
        async with serve_loopback() as loopback:
            provider = sse_provider(f"http://{loopback.url}/sse/slow?delay=0.05")
            return await _abort_case(loopback, provider, wait_for_deltas=3)

    sse_module.shutdown_socket = spy
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            events, delay = runner.run(scenario())
    finally:
        sse_module.shutdown_socket = original
    assert used and all(ok for _name, ok in used)
    assert delay < ABORT_BOUND_SECONDS
    assert events[-1]["type"] == "run.cancelled"


async def test_native_sse_continuation_carries_every_command_in_order() -> None:
    async with serve_loopback() as loopback:
        provider = sse_provider(f"http://{loopback.url}/sse/tools")
        commands = [
            Command("tool.submit_result", {"toolCallId": "t1", "result": {"lat": 1}}),
            Command("approval.resolve", {"approvalId": "a1", "decision": "rejected"}),
        ]
        events = await run_collect(provider, {"prompt": "go"}, commands=commands)
        requests = list(loopback.requests)
    assert_clean(provider, events)
    assert len(requests) == 2
    sent = [{"type": c.type, "payload": dict(c.payload)} for c in commands]
    assert requests[1]["commands"] == sent
    assert events[-1]["payload"]["output"] == sent
    assert types(events)[-5:] == [
        "approval.requested",
        "tool.running",  # arguments complete at the end of the stream: handed to the app
        "tool.completed",
        "approval.resolved",
        "run.completed",
    ]


async def test_open_batches_groups_the_same_events_as_open() -> None:
    async with serve_loopback() as loopback:
        transport = SSETransport()
        request = UpstreamRequest(f"http://{loopback.url}/sse/slow?count=40&delay=0", json={})
        singles = [e.data async for e in transport.open(request, AbortSignal())]
        batches = [b async for b in transport.open_batches(request, AbortSignal())]
        await transport.aclose()
    assert all(batches)  # every batch is one read's non-empty list
    assert [e.data for batch in batches for e in batch] == singles
    assert len(singles) == 44  # opening (2) + 40 deltas + completed + run.completed
