"""local-demo passes the contract helper in every scenario (protocol.md §6, §9)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from providers.local_demo import KEYWORDS, LocalDemoProvider, features_of
from providers.registry import create_provider
from providers.testing import assert_provider_contract, make_options


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def demo() -> LocalDemoProvider:
    return LocalDemoProvider("demo", delay_ms=0)


def text_of(events: list[dict[str, Any]], message_id: str) -> str:
    return "".join(
        e["payload"]["delta"]
        for e in events
        if e["type"] == "message.delta" and e["payload"]["messageId"] == message_id
    )


def test_keywords_are_documented_and_all_expands() -> None:
    import providers.local_demo as module

    for word in KEYWORDS:
        assert f"``{word}``" in (module.__doc__ or "")
    assert features_of("do ALL of it") >= {"think", "search", "weather", "approve", "task"}


async def test_plain_prompt_streams_text() -> None:
    events = await assert_provider_contract(
        demo(), input={"prompt": "hello"}, expect_terminal="run.completed"
    )
    assert text_of(events, "msg-1") == "You said: hello. This is the local demo runtime."
    assert "user" in {e["payload"].get("messageId") for e in events}


@pytest.mark.parametrize("word", ["think", "search", "task", "artifact"])
async def test_runtime_families(word: str) -> None:
    events = await assert_provider_contract(
        demo(), input={"prompt": word}, expect_terminal="run.completed"
    )
    family = {"think": "reasoning", "search": "tool", "task": "task", "artifact": "artifact"}[word]
    assert any(t.startswith(family + ".") for t in types(events))


async def test_artifact_versions_and_task_progress() -> None:
    events = await assert_provider_contract(demo(), input={"prompt": "task artifact"})
    versions = [e["payload"]["version"] for e in events if e["type"] == "artifact.updated"]
    progress = [e["payload"]["progress"] for e in events if e["type"] == "task.updated"]
    assert versions == [1, 2, 3]
    assert progress == [0, 25, 50, 75, 100]


async def test_app_tool_result_continues_the_run() -> None:
    events = await assert_provider_contract(
        demo(),
        input={"prompt": "weather please"},
        commands=[
            ("tool.submit_result", {"toolCallId": "call-weather", "result": {"sky": "sunny"}})
        ],
        expect_terminal="run.completed",
    )
    requested = next(e for e in events if e["type"] == "tool.requested")
    assert requested["meta"] == {"executor": "app"}
    # The reply quotes the result as JSON, the way the app sent it.
    assert 'answered: {"sky": "sunny"}.' in text_of(events, "msg-2")


@pytest.mark.parametrize(
    ("decision", "expected"),
    [("approved", "Deployed"), ("rejected", "will not deploy"), ("modified", "Deployed")],
)
async def test_approval_decisions(decision: str, expected: str) -> None:
    events = await assert_provider_contract(
        demo(),
        input={"prompt": "approve"},
        commands=[("approval.resolve", {"approvalId": "approval-1", "decision": decision})],
        expect_terminal="run.completed",
    )
    resolved = next(e for e in events if e["type"] == "approval.resolved")
    assert resolved["payload"]["decision"] == decision
    assert expected in text_of(events, "msg-2")


async def test_approval_expired_by_expires_at_via_runner() -> None:
    class Expiring(LocalDemoProvider):
        def handle_chunk(self, chunk: Any, ctx: Any) -> None:
            name, args, kwargs = chunk
            if name == "request_approval":
                kwargs = {**kwargs, "expires_at": 1000.0 + 30}
            super().handle_chunk((name, args, kwargs), ctx)

    events = await assert_provider_contract(
        Expiring("demo", delay_ms=0),
        input={"prompt": "approve"},
        expect_terminal="run.completed",
    )
    resolved = next(e for e in events if e["type"] == "approval.resolved")
    assert resolved["payload"]["decision"] == "expired"
    assert "expired" in text_of(events, "msg-2")


async def test_approval_wait_timeout_fails_run() -> None:
    events = await assert_provider_contract(
        demo(),
        input={"prompt": "approve and weather"},
        options=make_options(wait_timeout_seconds=0.05),
        expect_terminal="run.failed",
    )
    assert events[-1]["payload"]["error"]["code"] == "wait_timeout"
    closing = {e["type"]: e["payload"] for e in events[-3:-1]}
    assert closing["approval.resolved"]["decision"] == "expired"
    assert closing["tool.failed"]["error"]["code"] == "tool_result_timeout"


async def test_abort_while_waiting() -> None:
    options = make_options()
    loop = asyncio.get_running_loop()
    events = await assert_provider_contract(
        demo(),
        input={"prompt": "all"},
        options=options,
        abort_when=lambda evs: (
            evs[-1]["type"] == "approval.requested"
            and bool(loop.call_later(0.02, options.signal.abort))
        ),
        expect_terminal="run.cancelled",
    )
    assert types(events)[-3:] == ["approval.resolved", "tool.cancelled", "run.cancelled"]


async def test_abort_mid_stream_slow() -> None:
    options = make_options()
    events = await assert_provider_contract(
        LocalDemoProvider("demo", delay_ms=1),
        input={"prompt": "slow"},
        options=options,
        abort_when=lambda evs: sum(e["type"] == "message.delta" for e in evs) == 3,
        expect_terminal="run.cancelled",
    )
    assert types(events)[-2:] == ["message.cancelled", "run.cancelled"]


async def test_everything_with_all_commands() -> None:
    events = await assert_provider_contract(
        demo(),
        input={"prompt": "all"},
        commands=[
            ("tool.submit_result", {"toolCallId": "call-weather", "result": {"c": 21}}),
            ("approval.resolve", {"approvalId": "approval-1", "decision": "approved"}),
        ],
        expect_terminal="run.completed",
    )
    kinds = {t.split(".")[0] for t in types(events)}
    assert kinds == {"run", "message", "reasoning", "tool", "approval", "task", "artifact"}


async def test_fail_keyword_fails_cleanly() -> None:
    events = await assert_provider_contract(
        demo(), input={"prompt": "fail"}, expect_terminal="run.failed"
    )
    assert events[-1]["payload"]["error"]["code"] == "upstream_error"


def test_registry_builds_local_demo() -> None:
    provider = create_provider("demo", "local-demo", {"delay_ms": 0})
    assert isinstance(provider, LocalDemoProvider)
    assert provider.id == "demo"
