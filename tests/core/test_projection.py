"""Conformance case "Message projection" and ``is_requesting``."""

from __future__ import annotations

from core import AgentStore, EventFactory, entity_key, is_requesting, project_messages


def test_projection_statuses_and_skips() -> None:
    events = EventFactory("s", "r")
    store = AgentStore()
    store.batch(
        [
            events.create("run.started", {}),
            events.create("message.started", {"messageId": "u1", "role": "user"}),
            events.create("message.started", {"messageId": "u2", "role": "user", "content": "hi"}),
            events.create("message.completed", {"messageId": "u2"}),
            events.create("reasoning.started", {"reasoningId": "x"}),
            events.create("message.started", {"messageId": "a1", "role": "assistant"}),
            events.create("message.completed", {"messageId": "a1", "content": "done"}),
            events.create("message.started", {"messageId": "a2", "role": "assistant"}),
            events.create("message.failed", {"messageId": "a2", "error": {"message": "x"}}),
            events.create("message.started", {"messageId": "a3", "role": "assistant"}),
            events.create("message.cancelled", {"messageId": "a3"}),
            events.create("message.started", {"messageId": "a4", "role": "assistant"}),
            events.create("tool.requested", {"toolCallId": "t", "name": "n"}),
        ]
    )
    state = store.get_snapshot()
    assert is_requesting(state)
    projected = project_messages(state)
    assert [(item["id"], item["status"]) for item in projected] == [
        (entity_key("r", "u1"), "local"),
        (entity_key("r", "u2"), "local"),
        (entity_key("r", "a1"), "success"),
        (entity_key("r", "a2"), "error"),
        (entity_key("r", "a3"), "abort"),
        (entity_key("r", "a4"), "updating"),
    ]
    assert projected[2]["message"] == state["messages"][entity_key("r", "a1")]

    # A failed user message is "error" (failed is checked before the role).
    failed_user = {**state["messages"][entity_key("r", "u1")], "status": "failed"}
    doctored = {
        **state,
        "messages": {**state["messages"], entity_key("r", "u1"): failed_user},
        "order": [*state["order"], {"kind": "message", "id": "ghost", "runId": "r"}],
    }
    statuses = [item["status"] for item in project_messages(doctored)]
    assert statuses[0] == "error" and len(statuses) == 6  # the missing entity is skipped


def test_is_requesting_follows_runs() -> None:
    store = AgentStore()
    assert not is_requesting(store.get_snapshot())
    events = EventFactory("s", "r")
    store.dispatch(events.create("run.started", {}))
    assert is_requesting(store.get_snapshot())
    store.dispatch(events.create("run.cancelled", {"reason": "aborted"}))
    assert not is_requesting(store.get_snapshot())
