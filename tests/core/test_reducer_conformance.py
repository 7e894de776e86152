"""Conformance cases "Reducer" 1-8 (reduceAgentState.test.ts), against every fold."""

from __future__ import annotations

import json
from typing import Any

from core import EventFactory, create_agent_state, entity_key, reduce_agent_state
from tests.core.folds import Fold


def _full_lifecycle() -> list[dict[str, Any]]:
    events = EventFactory("session-1", "run-1", now=lambda: 10)
    return [
        events.create("run.started", {"input": {"prompt": "hello"}}),
        events.create("message.started", {"messageId": "message-1", "role": "assistant"}),
        events.create("message.delta", {"messageId": "message-1", "delta": "hel"}),
        events.create("message.delta", {"messageId": "message-1", "delta": "lo"}),
        events.create("message.completed", {"messageId": "message-1"}),
        events.create("reasoning.started", {"reasoningId": "reasoning-1"}),
        events.create("reasoning.delta", {"reasoningId": "reasoning-1", "delta": "check"}),
        events.create("reasoning.completed", {"reasoningId": "reasoning-1", "summary": "checked"}),
        events.create(
            "tool.requested", {"toolCallId": "tool-1", "name": "search", "arguments": '{"q":'}
        ),
        events.create("tool.arguments_delta", {"toolCallId": "tool-1", "delta": '"x"}'}),
        events.create("tool.running", {"toolCallId": "tool-1"}),
        events.create("tool.completed", {"toolCallId": "tool-1", "result": ["result"]}),
        events.create(
            "approval.requested",
            {"approvalId": "approval-1", "toolCallId": "tool-1", "risk": "high"},
        ),
        events.create("approval.resolved", {"approvalId": "approval-1", "decision": "approved"}),
        events.create("task.created", {"taskId": "task-1", "title": "Analyze"}),
        events.create("task.updated", {"taskId": "task-1", "progress": 50}),
        events.create("task.completed", {"taskId": "task-1", "result": "done"}),
        events.create(
            "artifact.created",
            {"artifactId": "artifact-1", "name": "report.md", "content": "draft"},
        ),
        events.create(
            "artifact.updated", {"artifactId": "artifact-1", "content": "final", "version": 2}
        ),
        events.create("artifact.completed", {"artifactId": "artifact-1"}),
        events.create("run.completed", {"output": "ok", "usage": {"inputTokens": 10}}),
    ]


def test_1_full_lifecycle(fold: Fold) -> None:
    sequence = _full_lifecycle()
    assert len(sequence) == 21
    state = fold(sequence)
    assert state["issues"] == []
    message = state["messages"][entity_key("run-1", "message-1")]
    assert message["content"] == "hello" and message["status"] == "completed"
    reasoning = state["reasoning"][entity_key("run-1", "reasoning-1")]
    assert (reasoning["content"], reasoning["summary"], reasoning["status"]) == (
        "check",
        "checked",
        "completed",
    )
    tool = state["toolCalls"][entity_key("run-1", "tool-1")]
    assert tool["arguments"] == '{"q":"x"}'
    assert tool["result"] == ["result"] and tool["status"] == "completed"
    approval = state["approvals"][entity_key("run-1", "approval-1")]
    assert approval["decision"] == "approved" and approval["status"] == "completed"
    task = state["tasks"][entity_key("run-1", "task-1")]
    assert task["progress"] == 50 and task["status"] == "completed"
    artifact = state["artifacts"][entity_key("run-1", "artifact-1")]
    assert (artifact["content"], artifact["version"], artifact["status"]) == (
        "final",
        2,
        "completed",
    )
    run = state["runs"]["run-1"]
    assert run["status"] == "completed"
    assert run["output"] == "ok" and run["usage"] == {"inputTokens": 10}
    assert [f"{ref['kind']}:{ref['id']}" for ref in state["order"]] == [
        "message:message-1",
        "reasoning:reasoning-1",
        "tool:tool-1",
        "approval:approval-1",
        "task:task-1",
        "artifact:artifact-1",
    ]
    assert json.loads(json.dumps(state)) == state


def test_1_full_lifecycle_exact_state() -> None:
    """The whole state, key for key, as the reference reducer holds it (undefined = absent)."""
    state = reduce_agent_state
    result = create_agent_state()
    for event in _full_lifecycle():
        result = state(result, event)
    key = "5:run-1"
    assert result["runs"] == {
        "run-1": {
            "id": "run-1",
            "sessionId": "session-1",
            "status": "completed",
            "input": {"prompt": "hello"},
            "createdAt": 10,
            "updatedAt": 10,
            "output": "ok",
            "usage": {"inputTokens": 10},
        }
    }
    assert result["messages"] == {
        f"{key}message-1": {
            "id": "message-1",
            "runId": "run-1",
            "role": "assistant",
            "content": "hello",
            "status": "completed",
            "createdAt": 10,
            "updatedAt": 10,
        }
    }
    assert result["reasoning"][f"{key}reasoning-1"] == {
        "id": "reasoning-1",
        "runId": "run-1",
        "content": "check",
        "redacted": False,
        "status": "completed",
        "createdAt": 10,
        "updatedAt": 10,
        "summary": "checked",
    }
    assert result["toolCalls"][f"{key}tool-1"] == {
        "id": "tool-1",
        "runId": "run-1",
        "name": "search",
        "arguments": '{"q":"x"}',
        "attempt": 1,
        "status": "completed",
        "createdAt": 10,
        "updatedAt": 10,
        "result": ["result"],
    }
    assert result["approvals"][f"{key}approval-1"] == {
        "id": "approval-1",
        "runId": "run-1",
        "toolCallId": "tool-1",
        "risk": "high",
        "status": "completed",
        "createdAt": 10,
        "updatedAt": 10,
        "decision": "approved",
    }
    assert result["tasks"][f"{key}task-1"] == {
        "id": "task-1",
        "runId": "run-1",
        "title": "Analyze",
        "status": "completed",
        "createdAt": 10,
        "updatedAt": 10,
        "progress": 50,
        "result": "done",
    }
    assert result["artifacts"][f"{key}artifact-1"] == {
        "id": "artifact-1",
        "runId": "run-1",
        "name": "report.md",
        "content": "final",
        "status": "completed",
        "createdAt": 10,
        "updatedAt": 10,
        "version": 2,
    }
    assert result["lastSequenceByRun"] == {"run-1": 20}
    assert list(result["processedEventIds"]) == [
        f"{key}run-1:{i}:{event['type']}" for i, event in enumerate(_full_lifecycle())
    ]
    assert set(result["processedEventIds"].values()) == {True}


def test_2_already_processed_returns_the_same_object() -> None:
    event = EventFactory("s", "r").create("run.started", {})
    state = reduce_agent_state(create_agent_state(), event)
    assert reduce_agent_state(state, event) is state


def test_3_same_event_id_in_two_runs(fold: Fold) -> None:
    first = EventFactory("s", "first")
    second = EventFactory("s", "second")
    state = fold(
        [
            first.create("run.started", {}, event_id="shared-event"),
            second.create("run.started", {}, event_id="shared-event"),
        ]
    )
    assert list(state["runs"]) == ["first", "second"]
    assert state["issues"] == []


def test_4_same_message_id_in_two_runs(fold: Fold) -> None:
    first = EventFactory("s", "first")
    second = EventFactory("s", "second")
    image = {"type": "image", "url": "https://example.com/image.png"}
    state = fold(
        [
            first.create("run.started", {}),
            first.create("message.started", {"messageId": "shared", "role": "assistant"}),
            first.create("message.delta", {"messageId": "shared", "delta": "first"}),
            first.create("message.completed", {"messageId": "shared"}),
            first.create("run.completed", {}),
            second.create("run.started", {}),
            second.create(
                "message.started",
                {
                    "messageId": "shared",
                    "role": "assistant",
                    "content": [{"type": "text", "text": "second"}],
                },
            ),
            second.create("message.delta", {"messageId": "shared", "delta": [image]}),
            second.create("message.completed", {"messageId": "shared"}),
            second.create("run.completed", {}),
        ]
    )
    assert state["issues"] == []
    assert state["messages"][entity_key("first", "shared")]["content"] == "first"
    assert state["messages"][entity_key("second", "shared")]["content"] == [
        {"type": "text", "text": "second"},
        image,
    ]


def test_4b_string_delta_then_parts_becomes_a_parts_list(fold: Fold) -> None:
    events = EventFactory("s", "r")
    image = {"type": "image", "url": "u"}
    state = fold(
        [
            events.create("run.started", {}),
            events.create("message.started", {"messageId": "m", "role": "assistant"}),
            events.create("message.delta", {"messageId": "m", "delta": "he"}),
            events.create("message.delta", {"messageId": "m", "delta": "llo"}),
            events.create("message.delta", {"messageId": "m", "delta": [image]}),
            events.create("message.delta", {"messageId": "m", "delta": "tail"}),
        ]
    )
    assert state["messages"][entity_key("r", "m")]["content"] == [
        {"type": "text", "text": "hello"},
        image,
        {"type": "text", "text": "tail"},
    ]


def test_5_orphan_out_of_order_and_terminal_issues(fold: Fold) -> None:
    events = EventFactory("s", "r")
    state = fold(
        [
            events.create("message.delta", {"messageId": "missing", "delta": "x"}),
            events.create("run.started", {}),
            events.create("run.completed", {}),
            events.create("message.started", {"messageId": "late", "role": "assistant"}),
            events.create("task.created", {"taskId": "old", "title": "old"}, sequence=1),
        ]
    )
    assert [issue["code"] for issue in state["issues"]] == [
        "missing_entity",
        "invalid_transition",
        "invalid_sequence",
    ]
    assert entity_key("r", "late") not in state["messages"]
    assert [issue["message"] for issue in state["issues"]] == [
        'Message "missing" does not exist.',
        'Run "r" is already completed.',
        'Sequence 1 must be greater than 2 for run "r".',
    ]
    assert state["issues"][0] == {
        "code": "missing_entity",
        "eventId": "r:0:message.delta",
        "runId": "r",
        "message": 'Message "missing" does not exist.',
    }
    # A rejected event is processed but does not move lastSequenceByRun.
    assert state["lastSequenceByRun"] == {"r": 2}
    assert len(state["processedEventIds"]) == 5


def test_6_failed_and_cancelled_terminals(fold: Fold) -> None:
    failed = EventFactory("s", "failed")
    error = {"code": "offline", "message": "offline", "retryable": True}
    state = fold(
        [
            failed.create("run.started", {}),
            failed.create("message.started", {"messageId": "mf", "role": "assistant"}),
            failed.create("message.failed", {"messageId": "mf", "error": error}),
            failed.create("reasoning.started", {"reasoningId": "rf", "redacted": True}),
            failed.create("reasoning.failed", {"reasoningId": "rf", "error": error}),
            failed.create("tool.requested", {"toolCallId": "tf", "name": "tool"}),
            failed.create("tool.failed", {"toolCallId": "tf", "error": error}),
            failed.create("task.created", {"taskId": "taskf", "title": "Task"}),
            failed.create("task.failed", {"taskId": "taskf", "error": error}),
            failed.create("artifact.created", {"artifactId": "af", "name": "file"}),
            failed.create("artifact.failed", {"artifactId": "af", "error": error}),
            failed.create("run.failed", {"error": error}),
        ]
    )
    assert state["issues"] == []
    for map_name, entity_id in [
        ("messages", "mf"),
        ("reasoning", "rf"),
        ("toolCalls", "tf"),
        ("tasks", "taskf"),
        ("artifacts", "af"),
    ]:
        entity = state[map_name][entity_key("failed", entity_id)]
        assert entity["status"] == "failed" and entity["error"] == error
    assert state["reasoning"][entity_key("failed", "rf")]["redacted"] is True
    assert state["runs"]["failed"]["status"] == "failed"
    assert state["runs"]["failed"]["error"] == error

    cancelled = EventFactory("s", "cancelled")
    state = fold(
        [
            cancelled.create("run.started", {}),
            cancelled.create("message.started", {"messageId": "mc", "role": "assistant"}),
            cancelled.create("message.cancelled", {"messageId": "mc", "reason": "stop"}),
            cancelled.create("reasoning.started", {"reasoningId": "rc"}),
            cancelled.create("reasoning.cancelled", {"reasoningId": "rc", "reason": "stop"}),
            cancelled.create("tool.requested", {"toolCallId": "tc", "name": "tool"}),
            cancelled.create("tool.cancelled", {"toolCallId": "tc", "reason": "stop"}),
            cancelled.create("task.created", {"taskId": "taskc", "title": "Task"}),
            cancelled.create("task.cancelled", {"taskId": "taskc", "reason": "stop"}),
            cancelled.create("run.cancelled", {"reason": "stop"}),
        ]
    )
    assert state["issues"] == []
    for map_name, entity_id in [
        ("messages", "mc"),
        ("reasoning", "rc"),
        ("toolCalls", "tc"),
        ("tasks", "taskc"),
    ]:
        entity = state[map_name][entity_key("cancelled", entity_id)]
        assert entity["status"] == "cancelled" and entity["reason"] == "stop"
    assert state["runs"]["cancelled"]["status"] == "cancelled"
    assert state["runs"]["cancelled"]["reason"] == "stop"


def test_7_duplicate_starts_and_post_terminal_updates(fold: Fold) -> None:
    events = EventFactory("s", "r")
    error = {"message": "failed"}
    state = fold(
        [
            events.create("session.started", {"title": "Session"}),
            events.create("session.started", {}),
            events.create("run.started", {}),
            events.create("run.started", {}),
            events.create("message.started", {"messageId": "m", "role": "assistant"}),
            events.create("message.started", {"messageId": "m", "role": "assistant"}),
            events.create("message.completed", {"messageId": "m", "content": "final"}),
            events.create("message.failed", {"messageId": "m", "error": error}),
            events.create("reasoning.started", {"reasoningId": "reason"}),
            events.create("reasoning.started", {"reasoningId": "reason"}),
            events.create("reasoning.completed", {"reasoningId": "reason", "content": "final"}),
            events.create("reasoning.delta", {"reasoningId": "reason", "delta": "late"}),
            events.create("tool.requested", {"toolCallId": "tool", "name": "tool"}),
            events.create("tool.requested", {"toolCallId": "tool", "name": "tool"}),
            events.create("tool.completed", {"toolCallId": "tool"}),
            events.create("tool.running", {"toolCallId": "tool"}),
            events.create("approval.requested", {"approvalId": "approval", "data": "original"}),
            events.create("approval.requested", {"approvalId": "approval"}),
            events.create("approval.resolved", {"approvalId": "approval", "decision": "modified"}),
            events.create("approval.resolved", {"approvalId": "approval", "decision": "approved"}),
            events.create("task.created", {"taskId": "task", "title": "Task"}),
            events.create("task.created", {"taskId": "task", "title": "Task"}),
            events.create("task.completed", {"taskId": "task"}),
            events.create("task.updated", {"taskId": "task", "progress": 100}),
            events.create("artifact.created", {"artifactId": "artifact", "name": "file"}),
            events.create("artifact.created", {"artifactId": "artifact", "name": "file"}),
            events.create("artifact.completed", {"artifactId": "artifact", "content": "final"}),
            events.create("artifact.updated", {"artifactId": "artifact", "content": "late"}),
        ]
    )
    codes = [issue["code"] for issue in state["issues"]]
    assert codes.count("duplicate_entity") == 8
    assert codes.count("invalid_transition") == 6
    assert len(codes) == 14
    assert state["messages"][entity_key("r", "m")]["content"] == "final"
    assert state["approvals"][entity_key("r", "approval")]["data"] == "original"
    messages = [issue["message"] for issue in state["issues"]]
    assert messages == [
        'Session "s" already exists.',
        'Run "r" already exists.',
        'Message "m" already exists.',
        'Message "m" is already completed.',
        'Reasoning "reason" already exists.',
        'Reasoning "reason" is already completed.',
        'Tool call "tool" already exists.',
        'Tool call "tool" is already completed.',
        'Approval "approval" already exists.',
        'Approval "approval" is already resolved.',
        'Task "task" already exists.',
        'Task "task" is already completed.',
        'Artifact "artifact" already exists.',
        'Artifact "artifact" is already completed.',
    ]


def test_8_missing_run_and_missing_entities(fold: Fold) -> None:
    no_run = EventFactory("s", "missing-run")
    state = fold(
        [
            no_run.create("run.completed", {}),
            no_run.create("message.started", {"messageId": "m", "role": "assistant"}),
            no_run.create("reasoning.started", {"reasoningId": "r"}),
            no_run.create("tool.requested", {"toolCallId": "tool", "name": "tool"}),
            no_run.create("approval.requested", {"approvalId": "approval"}),
            no_run.create("task.created", {"taskId": "task", "title": "Task"}),
            no_run.create("artifact.created", {"artifactId": "artifact", "name": "file"}),
            no_run.create("run.failed", {"error": {"message": "x"}}),
            no_run.create("run.cancelled", {}),
        ]
    )
    assert [issue["code"] for issue in state["issues"]] == ["missing_run"] * 9
    assert (
        state["issues"][0]["message"] == 'Run "missing-run" must be started before "run.completed".'
    )
    assert state["order"] == []

    missing = EventFactory("s", "r")
    follow_ups: list[tuple[str, dict[str, Any]]] = [
        ("message.delta", {"messageId": "missing", "delta": "x"}),
        ("message.completed", {"messageId": "missing"}),
        ("reasoning.delta", {"reasoningId": "missing", "delta": "x"}),
        ("tool.arguments_delta", {"toolCallId": "missing", "delta": "x"}),
        ("tool.running", {"toolCallId": "missing"}),
        ("tool.completed", {"toolCallId": "missing"}),
        ("approval.resolved", {"approvalId": "missing", "decision": "rejected"}),
        ("task.updated", {"taskId": "missing"}),
        ("task.cancelled", {"taskId": "missing"}),
        ("artifact.updated", {"artifactId": "missing", "content": "x"}),
        ("artifact.completed", {"artifactId": "missing"}),
    ]
    state = fold(
        [missing.create("run.started", {})]
        + [missing.create(etype, payload) for etype, payload in follow_ups]
    )
    assert [issue["code"] for issue in state["issues"]] == ["missing_entity"] * len(follow_ups)
