"""ProviderBase: opening events, closure table (flush/error/abort/wait timeout), commands."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from providers.context import RunContext
from providers.contract import AgentEvent, Command
from providers.errors import UpstreamDropped, UpstreamMalformedChunk
from providers.testing import assert_provider_contract, make_options, run_collect
from providers.transports import IterableTransport
from tests.providers.support.helpers import ScriptProvider


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


async def test_first_run_opens_session_run_and_user_message() -> None:
    options = make_options(start_session=True)
    events = await assert_provider_contract(
        ScriptProvider(),
        ("open_message", "a1"),
        ("message_delta", "a1", "hi"),
        input={"prompt": "x" * 100},
        options=options,
    )
    assert types(events) == [
        "session.started",
        "run.started",
        "message.started",
        "message.completed",
        "message.started",
        "message.delta",
        "message.completed",
        "run.completed",
    ]
    assert events[0]["payload"] == {"title": "x" * 80}
    assert events[2]["payload"] == {"messageId": "user", "role": "user", "content": "x" * 100}
    assert [e["sequence"] for e in events] == list(range(8))


async def test_no_user_message_on_continuation_runs() -> None:
    options = make_options(emit_user_message=False)
    events = await assert_provider_contract(ScriptProvider(), options=options)
    assert types(events) == ["run.started", "run.completed"]


async def test_flush_closes_in_reverse_order_by_the_table() -> None:
    events = await assert_provider_contract(
        ScriptProvider(),
        ("open_message", "m"),
        ("open_reasoning", "r"),
        ("create_task", "t", "Task"),
        ("create_artifact", "a", "file.txt"),
        ("request_tool", "tool", "search"),
        input={},
    )
    tail = [(e["type"], e["payload"]) for e in events[-6:]]
    assert tail == [
        (
            "tool.failed",
            {
                "toolCallId": "tool",
                "error": {"code": "tool_incomplete", "message": "The tool call did not complete."},
            },
        ),
        ("artifact.completed", {"artifactId": "a"}),
        (
            "task.failed",
            {
                "taskId": "t",
                "error": {"code": "task_incomplete", "message": "The task did not complete."},
            },
        ),
        ("reasoning.completed", {"reasoningId": "r"}),
        ("message.completed", {"messageId": "m"}),
        ("run.completed", {}),
    ]


async def test_error_closes_everything_with_the_run_error() -> None:
    events = await assert_provider_contract(
        ScriptProvider(),
        ("open_message", "m"),
        ("kw", "request_approval", ("ap",), {"description": "ok?"}),
        ("create_artifact", "a", "f"),
        ("raise", UpstreamMalformedChunk()),
        input={},
    )
    error = events[-1]["payload"]["error"]
    assert error["code"] == "upstream_malformed_chunk"
    assert types(events)[-4:] == [
        "artifact.failed",
        "approval.resolved",
        "message.failed",
        "run.failed",
    ]
    assert events[-3]["payload"]["decision"] == "expired"
    assert events[-2]["payload"]["error"] == error


async def test_provider_bug_becomes_provider_error_without_its_text() -> None:
    events = await assert_provider_contract(
        ScriptProvider(), ("raise", KeyError("sk-secret")), input={}
    )
    error = events[-1]["payload"]["error"]
    assert error["code"] == "provider_error"
    assert "sk-secret" not in str(error)


async def test_upstream_end_hook_can_fail_the_run() -> None:
    class Dropping(ScriptProvider):
        def on_upstream_end(self, ctx: RunContext) -> None:
            raise UpstreamDropped()

    events = await assert_provider_contract(Dropping(), ("open_message", "m"), input={})
    assert types(events)[-2:] == ["message.failed", "run.failed"]
    assert events[-1]["payload"]["error"]["code"] == "upstream_dropped"


async def test_app_tool_waits_then_result_completes_run() -> None:
    events = await assert_provider_contract(
        ScriptProvider(),
        ("kw", "request_tool", ("call1", "lookup"), {"executor": "app"}),
        ("tool_arguments", "call1", '{"q":1}'),
        input={},
        commands=[Command("tool.submit_result", {"toolCallId": "call1", "result": {"ok": 1}})],
    )
    assert types(events) == [
        "run.started",
        "tool.requested",
        "tool.arguments_delta",
        "tool.running",
        "tool.completed",
        "run.completed",
    ]
    assert events[1]["meta"] == {"executor": "app"}
    assert events[4]["payload"] == {"toolCallId": "call1", "result": {"ok": 1}}


async def test_app_tool_error_result_fails_the_tool() -> None:
    events = await assert_provider_contract(
        ScriptProvider(),
        ("kw", "request_tool", ("c", "lookup", "{}"), {"executor": "app"}),
        input={},
        commands=[("tool.submit_result", {"toolCallId": "c", "result": "boom", "isError": True})],
    )
    assert types(events)[-2:] == ["tool.failed", "run.completed"]
    assert events[-2]["payload"]["error"]["message"] == "boom"


async def test_continuation_opens_transport_again_in_same_run() -> None:
    provider = ScriptProvider(continuation=[])
    events = await assert_provider_contract(
        provider,
        input={},
        turns=[
            [("kw", "request_approval", ("ap",), {"description": "go?"})],
            [("open_message", "m2"), ("message_delta", "m2", "done")],
        ],
        commands=[("approval.resolve", {"approvalId": "ap", "decision": "approved"})],
    )
    assert types(events) == [
        "run.started",
        "approval.requested",
        "approval.resolved",
        "message.started",
        "message.delta",
        "message.completed",
        "run.completed",
    ]
    assert len({e["runId"] for e in events}) == 1


async def test_wait_timeout_closure() -> None:
    options = make_options(wait_timeout_seconds=0.05)
    events = await assert_provider_contract(
        ScriptProvider(),
        ("kw", "request_tool", ("c", "lookup", "{}"), {"executor": "app"}),
        ("kw", "request_approval", ("ap",), {}),
        ("create_task", "t", "Task"),
        input={},
        options=options,
    )
    # the task failed at flush (task_incomplete); the waiting ones close by "wait timeout"
    assert types(events)[-3:] == ["approval.resolved", "tool.failed", "run.failed"]
    assert events[-2]["payload"]["error"]["code"] == "tool_result_timeout"
    assert events[-1]["payload"]["error"]["code"] == "wait_timeout"


async def test_approval_expires_at_sends_internal_expire() -> None:
    now = [1000.0]
    options = make_options(now=lambda: now[0], wait_timeout_seconds=5)
    events = await assert_provider_contract(
        ScriptProvider(),
        ("kw", "request_approval", ("ap",), {"expires_at": 1050.0}),
        input={},
        options=options,
    )
    assert types(events)[-2:] == ["approval.resolved", "run.completed"]
    assert events[-2]["payload"]["decision"] == "expired"


async def test_abort_while_waiting_cancels() -> None:
    options = make_options()
    provider = ScriptProvider()
    requested = asyncio.Event()

    def observe(events: list[AgentEvent]) -> bool:
        if events[-1]["type"] == "tool.requested":
            requested.set()
        return False

    async def abort_once_waiting() -> None:
        # Woken after the provider's task yielded past tool.requested: it waits on the app.
        await requested.wait()
        options.signal.abort("interrupted")

    task = asyncio.create_task(abort_once_waiting())
    events = await assert_provider_contract(
        provider,
        ("open_message", "m"),
        ("kw", "request_tool", ("c", "lookup", "{}"), {"executor": "app"}),
        input={},
        options=options,
        abort_when=observe,
    )
    await task
    assert types(events)[-2:] == ["tool.cancelled", "run.cancelled"]
    assert events[-1]["payload"] == {"reason": "interrupted"}


async def test_retry_of_failed_app_tool() -> None:
    events = await assert_provider_contract(
        ScriptProvider(),
        ("kw", "request_tool", ("c", "lookup", "{}"), {"executor": "app"}),
        ("kw", "request_approval", ("ap",), {}),
        input={},
        commands=[
            ("tool.submit_result", {"toolCallId": "c", "result": "x", "isError": True}),
            ("tool.retry", {"toolCallId": "c"}),
            ("tool.submit_result", {"toolCallId": "c~retry2", "result": 1}),
            ("approval.resolve", {"approvalId": "ap", "decision": "rejected"}),
        ],
    )
    retry = next(e for e in events if e["type"] == "tool.requested" and e["payload"].get("retryOf"))
    assert retry["payload"]["attempt"] == 2
    assert retry["payload"]["toolCallId"] == "c~retry2"
    assert types(events)[-1] == "run.completed"


async def test_emit_after_terminal_is_refused() -> None:
    events = await run_collect(ScriptProvider(), {}, commands=[])
    assert types(events) == ["run.started", "run.completed"]
    ctx = ScriptProvider().create_context(make_options())
    ctx.begin({})
    ctx.finish()
    with pytest.raises(Exception, match="after the run ended"):
        ctx.open_message("late")


async def test_stale_commands_are_ignored() -> None:
    events = await assert_provider_contract(
        ScriptProvider(),
        ("kw", "request_tool", ("c", "lookup", "{}"), {"executor": "app"}),
        input={},
        commands=[
            ("approval.resolve", {"approvalId": "nope", "decision": "approved"}),
            ("tool.retry", {"toolCallId": "c"}),  # not failed
            ("tool.submit_result", {"toolCallId": "c", "result": 1}),
        ],
    )
    assert types(events) == [
        "run.started",
        "tool.requested",
        "tool.running",
        "tool.completed",
        "run.completed",
    ]


async def test_run_cancel_command_cancels() -> None:
    events = await assert_provider_contract(
        ScriptProvider(),
        ("kw", "request_approval", ("ap",), {}),
        input={},
        commands=[("run.cancel", {})],
        expect_terminal="run.cancelled",
    )
    assert types(events)[-2:] == ["approval.resolved", "run.cancelled"]


async def test_extensions_reach_on_extension_and_consumer_errors_propagate_while_waiting() -> None:
    seen: list[tuple[str, Any]] = []

    async def on_extension(key: str, value: Any) -> None:
        seen.append((key, value))

    options = make_options(on_extension=on_extension)
    await assert_provider_contract(
        ScriptProvider(), ("extension", "agui.state", {"n": 1}), input={}, options=options
    )
    assert seen == [("agui.state", {"n": 1})]

    boom = RuntimeError("consumer")

    async def on_event(event: dict[str, Any]) -> None:
        if event["type"] == "tool.completed":
            raise boom

    from providers.runner import run_agent_provider

    provider = ScriptProvider()
    provider.transport = IterableTransport(
        [("kw", "request_tool", ("c", "lookup", "{}"), {"executor": "app"})]
    )
    options = make_options()
    options.commands.put_nowait(Command("tool.submit_result", {"toolCallId": "c", "result": 1}))
    with pytest.raises(RuntimeError) as caught:
        await run_agent_provider(provider, {}, options, on_event)
    assert caught.value is boom
