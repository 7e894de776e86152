"""Selectors (reference ``agent/selectors``)."""

from __future__ import annotations

from core import AgentStore, EventFactory, entity_key
from core.selectors import (
    parse_tool_arguments,
    select_agent_timeline,
    select_approval,
    select_run,
    select_running_runs,
    select_tool_call,
)


def _state() -> dict[str, object]:
    one = EventFactory("s", "r1")
    two = EventFactory("s", "r2")
    other = EventFactory("s-other", "r3")
    store = AgentStore()
    store.batch(
        [
            one.create("session.started", {}),
            one.create("run.started", {}),
            one.create("message.started", {"messageId": "m", "role": "assistant"}),
            one.create("reasoning.started", {"reasoningId": "x", "redacted": True}),
            one.create("reasoning.delta", {"reasoningId": "x", "delta": "secret"}),
            one.create("reasoning.started", {"reasoningId": "y"}),
            one.create("reasoning.delta", {"reasoningId": "y", "delta": "visible"}),
            one.create("tool.requested", {"toolCallId": "t", "name": "n", "arguments": '{"a":'}),
            one.create("approval.requested", {"approvalId": "a", "toolCallId": "t"}),
            one.create("task.created", {"taskId": "k", "title": "T"}),
            two.create("run.started", {}),
            two.create("message.started", {"messageId": "m", "role": "user"}),
            two.create("run.completed", {}),
            other.create("run.started", {}),
        ]
    )
    return store.get_snapshot()


def test_entity_selectors() -> None:
    state = _state()
    assert select_run(state, "r1")["status"] == "running"
    assert select_run(state, "nope") is None
    assert select_tool_call(state, "r1", "t")["name"] == "n"
    assert select_tool_call(state, "r2", "t") is None
    assert select_approval(state, "r1", "a")["toolCallId"] == "t"
    assert [run["id"] for run in select_running_runs(state, "s")] == ["r1"]
    assert [run["id"] for run in select_running_runs(state, "s-other")] == ["r3"]


def test_timeline() -> None:
    state = _state()
    timeline = select_agent_timeline(state, "r1")
    assert [(e["kind"], e["entity"]["id"]) for e in timeline] == [
        ("message", "m"),
        ("reasoning", "x"),
        ("reasoning", "y"),
        ("tool", "t"),
        ("approval", "a"),
    ]
    assert timeline[1]["entity"]["content"] == ""  # redacted
    assert state["reasoning"][entity_key("r1", "x")]["content"] == "secret"  # type: ignore[index]
    assert timeline[2]["entity"]["content"] == "visible"
    without = select_agent_timeline(state, "r1", include_reasoning=False)
    assert [e["kind"] for e in without] == ["message", "tool", "approval"]
    assert [e["entity"]["role"] for e in select_agent_timeline(state, "r2")] == ["user"]
    ghost = {**state, "order": [{"kind": "message", "id": "ghost", "runId": "r1"}]}
    assert select_agent_timeline(ghost, "r1") == []


def test_parse_tool_arguments() -> None:
    assert parse_tool_arguments({"arguments": '{"q": "x"}'}) == (True, {"q": "x"})
    assert parse_tool_arguments({"arguments": '{"q":'}) == (False, None)
    assert parse_tool_arguments({"arguments": ""}) == (True, {})
    assert parse_tool_arguments({}) == (True, {})
    assert parse_tool_arguments({"arguments": 3}) == (False, None)
