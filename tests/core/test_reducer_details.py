"""Field-level agreement with reduceAgentState.ts (phase 2): what is stored, and how."""

from __future__ import annotations

from typing import Any

from core import EventFactory, entity_key
from tests.core.folds import Fold


def _run(*events: tuple[str, dict[str, Any]], run_id: str = "r", **options: Any) -> list[Any]:
    factory = EventFactory("s", run_id, now=iter(range(100, 1000)).__next__)
    out = [factory.create("run.started", {})]
    for etype, payload in events:
        out.append(factory.create(etype, payload, **options))
    return out


def test_run_terminals_store_only_their_own_fields(fold: Fold) -> None:
    everything = {"output": 1, "usage": {"a": 1}, "error": {"message": "e"}, "reason": "x"}
    for etype, kept in [
        ("run.completed", {"output": 1, "usage": {"a": 1}}),
        ("run.failed", {"error": {"message": "e"}}),
        ("run.cancelled", {"reason": "x"}),
    ]:
        state = fold(_run((etype, everything)))
        run = state["runs"]["r"]
        assert {k: run[k] for k in everything if k in run} == kept, etype
        assert run["status"] == etype[4:]
        assert (run["createdAt"], run["updatedAt"]) == (100, 101)
    state = fold(_run(("run.completed", {})))
    assert set(state["runs"]["r"]) == {"id", "sessionId", "status", "createdAt", "updatedAt"}


def test_approval_fields_and_data_coalescing(fold: Fold) -> None:
    request = {
        "approvalId": "a",
        "toolCallId": "t",
        "description": "",
        "risk": "high",
        "data": {"v": 1},
        "editable": True,
        "expiresAt": 5.5,
        "version": 3,
    }
    state = fold(
        _run(
            ("approval.requested", request),
            ("approval.resolved", {"approvalId": "a", "decision": "rejected", "data": None}),
        )
    )
    approval = state["approvals"][entity_key("r", "a")]
    assert approval == {
        "id": "a",
        "runId": "r",
        "toolCallId": "t",
        "description": "",
        "risk": "high",
        "data": {"v": 1},  # data: null keeps the previous data (??)
        "editable": True,
        "expiresAt": 5.5,
        "version": 3,
        "status": "completed",
        "createdAt": 101,
        "updatedAt": 102,
        "decision": "rejected",
    }
    state = fold(
        _run(
            ("approval.requested", {"approvalId": "a"}),
            ("approval.resolved", {"approvalId": "a", "decision": "expired", "data": None}),
            ("approval.requested", {"approvalId": "b", "data": None}),
            ("approval.resolved", {"approvalId": "b", "decision": "modified", "data": [2]}),
        )
    )
    assert "data" not in state["approvals"][entity_key("r", "a")]
    assert state["approvals"][entity_key("r", "a")]["status"] == "completed"
    assert state["approvals"][entity_key("r", "b")]["data"] == [2]


def test_tool_phase_two_fields(fold: Fold) -> None:
    state = fold(
        _run(
            ("tool.requested", {"toolCallId": "t", "name": "n"}),
            ("tool.completed", {"toolCallId": "t"}),
            (
                "tool.requested",
                {"toolCallId": "t2", "name": "n", "attempt": 2, "retryOf": "t", "index": 0},
            ),
            ("tool.completed", {"toolCallId": "t2", "result": None}),
        )
    )
    first = state["toolCalls"][entity_key("r", "t")]
    assert first["attempt"] == 1 and "retryOf" not in first and "index" not in first
    assert "result" not in first and first["status"] == "completed"
    second = state["toolCalls"][entity_key("r", "t2")]
    assert (second["attempt"], second["retryOf"], second["index"]) == (2, "t", 0)
    assert second["result"] is None and "result" in second
    assert list(second) == [
        "id",
        "runId",
        "name",
        "arguments",
        "index",
        "attempt",
        "retryOf",
        "status",
        "createdAt",
        "updatedAt",
        "result",
    ]


def test_pending_tool_may_complete_without_running(fold: Fold) -> None:
    state = fold(
        _run(
            ("tool.requested", {"toolCallId": "t", "name": "n"}),
            ("tool.running", {"toolCallId": "t"}),
            ("tool.running", {"toolCallId": "t"}),
            ("tool.requested", {"toolCallId": "u", "name": "n"}),
            ("tool.failed", {"toolCallId": "u", "error": {"message": "m", "retryable": True}}),
        )
    )
    assert state["issues"] == []
    assert state["toolCalls"][entity_key("r", "t")]["status"] == "running"
    assert state["toolCalls"][entity_key("r", "u")]["error"]["retryable"] is True


def test_artifact_content_and_version(fold: Fold) -> None:
    state = fold(
        _run(
            ("artifact.created", {"artifactId": "f", "name": "n", "mediaType": "text/plain"}),
            ("artifact.updated", {"artifactId": "f", "content": None, "version": "v1"}),
            ("artifact.updated", {"artifactId": "f", "content": {"x": 1}, "version": None}),
            ("artifact.completed", {"artifactId": "f", "content": None}),
        )
    )
    artifact = state["artifacts"][entity_key("r", "f")]
    assert artifact["content"] == {"x": 1}
    assert artifact["version"] == "v1"
    assert artifact["status"] == "completed" and artifact["mediaType"] == "text/plain"
    state = fold(
        _run(
            ("artifact.created", {"artifactId": "f", "name": "n"}),
            ("artifact.updated", {"artifactId": "f", "content": None}),
        )
    )
    artifact = state["artifacts"][entity_key("r", "f")]
    assert artifact["content"] is None and artifact["status"] == "streaming"
    assert "version" not in artifact


def test_task_merge_and_status(fold: Fold) -> None:
    state = fold(
        _run(
            ("task.created", {"taskId": "k", "title": "T", "description": "d"}),
            ("task.updated", {"taskId": "k", "progress": 0}),
            ("task.updated", {"taskId": "k", "title": "", "progress": 2.5}),
            ("task.completed", {"taskId": "k", "result": None}),
        )
    )
    task = state["tasks"][entity_key("r", "k")]
    assert (task["title"], task["description"], task["progress"]) == ("", "d", 2.5)
    assert task["status"] == "completed" and task["result"] is None
    state = fold(
        _run(("task.created", {"taskId": "k", "title": "T"}), ("task.updated", {"taskId": "k"}))
    )
    task = state["tasks"][entity_key("r", "k")]
    assert task["status"] == "running" and "progress" not in task and "description" not in task


def test_reasoning_completion_and_redaction(fold: Fold) -> None:
    state = fold(
        _run(
            ("reasoning.started", {"reasoningId": "x", "redacted": True}),
            ("reasoning.delta", {"reasoningId": "x", "delta": "a"}),
            ("reasoning.completed", {"reasoningId": "x", "content": "full", "summary": ""}),
            ("reasoning.started", {"reasoningId": "y"}),
            ("reasoning.delta", {"reasoningId": "y", "delta": "kept"}),
            ("reasoning.completed", {"reasoningId": "y"}),
        )
    )
    x = state["reasoning"][entity_key("r", "x")]
    assert (x["content"], x["summary"], x["redacted"]) == ("full", "", True)
    y = state["reasoning"][entity_key("r", "y")]
    assert y["content"] == "kept" and "summary" not in y and y["redacted"] is False


def test_message_completed_content_replaces_and_parts_are_kept(fold: Fold) -> None:
    parts = [{"type": "text", "text": "a"}, {"type": "agui.state", "data": {"k": [1]}}]
    state = fold(
        _run(
            ("message.started", {"messageId": "m", "role": "assistant", "content": "x"}),
            ("message.delta", {"messageId": "m", "delta": "y"}),
            ("message.completed", {"messageId": "m", "content": parts}),
            ("message.started", {"messageId": "n", "role": "tool", "content": parts}),
            ("message.delta", {"messageId": "n", "delta": ""}),
            ("message.cancelled", {"messageId": "n"}),
        )
    )
    assert state["messages"][entity_key("r", "m")]["content"] == parts
    n = state["messages"][entity_key("r", "n")]
    assert n["content"] == [*parts, {"type": "text", "text": ""}]
    assert n["status"] == "cancelled" and "reason" not in n


def test_parent_and_meta_come_from_the_start_event(fold: Fold) -> None:
    factory = EventFactory("s", "r", now=lambda: 1)
    state = fold(
        [
            factory.create("run.started", {}, meta={"run": True}),
            factory.create(
                "message.started",
                {"messageId": "m", "role": "assistant"},
                parent_id="",
                meta={"provider": "p", "x-unknown": {"deep": [1]}},
            ),
            factory.create(
                "message.delta", {"messageId": "m", "delta": "d"}, parent_id="q", meta={"z": 1}
            ),
        ]
    )
    message = state["messages"][entity_key("r", "m")]
    assert message["parentId"] == ""
    assert message["meta"] == {"provider": "p", "x-unknown": {"deep": [1]}}
    assert "meta" not in state["runs"]["r"]


def test_session_started_moves_the_run_sequence_and_session_mismatch(fold: Fold) -> None:
    a = EventFactory("s1", "r")
    b = EventFactory("s2", "r")
    state = fold(
        [
            a.create("session.started", {"title": "t"}),
            a.create("run.started", {}),
            b.create("message.started", {"messageId": "m", "role": "user"}, sequence=5),
            b.create("session.started", {}, sequence=6),
            a.create("run.completed", {}, sequence=7),
            b.create("run.started", {}, sequence=8),
        ]
    )
    assert state["lastSequenceByRun"] == {"r": 7}
    assert list(state["sessions"]) == ["s1", "s2"]
    assert "title" not in state["sessions"]["s2"]
    assert [(i["code"], i["message"]) for i in state["issues"]] == [
        ("invalid_transition", 'Run "r" belongs to session "s1", not "s2".'),
        ("invalid_transition", 'Run "r" belongs to session "s1", not "s2".'),
    ]


def test_utf16_keys_and_run_scoping(fold: Fold) -> None:
    state = fold(
        _run(("message.started", {"messageId": "m", "role": "user"}), run_id="r😀")
        + _run(("message.started", {"messageId": "m", "role": "user"}), run_id="r")
    )
    assert list(state["messages"]) == ["3:r😀m", "1:rm"]
    assert "3:r😀r😀:0:run.started" in state["processedEventIds"]


def test_float_sequences_compare_and_format_like_javascript(fold: Fold) -> None:
    factory = EventFactory("s", "r")
    events = [factory.create("run.started", {})]
    events[0]["sequence"] = 3.0
    late = factory.create("message.started", {"messageId": "m", "role": "user"}, sequence=2)
    state = fold([*events, late])
    assert state["issues"][0]["message"] == 'Sequence 2 must be greater than 3 for run "r".'
