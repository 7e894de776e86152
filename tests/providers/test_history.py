"""derive_history (protocol.md §11)."""

from __future__ import annotations

from core.factory import EventFactory
from providers.history import derive_history, replay_events


def test_history_of_two_runs() -> None:
    first = EventFactory("s", "r1")
    second = EventFactory("s", "r2")
    events = [
        first.create("session.started", {}),
        first.create("run.started", {}),
        first.create("message.started", {"messageId": "u", "role": "user", "content": "hi"}),
        first.create("message.completed", {"messageId": "u"}),
        first.create("reasoning.started", {"reasoningId": "r"}),
        first.create("reasoning.delta", {"reasoningId": "r", "delta": "hmm"}),
        first.create("reasoning.completed", {"reasoningId": "r"}),
        # a turn that produced only tool calls
        first.create("tool.requested", {"toolCallId": "t1", "name": "search"}),
        first.create("tool.arguments_delta", {"toolCallId": "t1", "delta": '{"q":1}'}),
        first.create("tool.completed", {"toolCallId": "t1", "result": {"n": 1}}),
        first.create("tool.requested", {"toolCallId": "t2", "name": "fetch", "arguments": "{}"}),
        first.create("tool.failed", {"toolCallId": "t2", "error": {"message": "nope"}}),
        first.create("tool.requested", {"toolCallId": "t3", "name": "pending"}),
        first.create("message.started", {"messageId": "a", "role": "assistant"}),
        first.create("message.delta", {"messageId": "a", "delta": "done"}),
        first.create("message.completed", {"messageId": "a"}),
        first.create("run.completed", {}),
        second.create("run.started", {}),
        second.create("message.started", {"messageId": "u", "role": "user", "content": "more"}),
        second.create("message.completed", {"messageId": "u"}),
        second.create("message.started", {"messageId": "a", "role": "assistant"}),
        second.create("message.delta", {"messageId": "a", "delta": "partial"}),
        second.create("message.cancelled", {"messageId": "a"}),
        second.create("message.started", {"messageId": "s", "role": "assistant"}),
        second.create("run.cancelled", {}),
    ]
    history = derive_history(replay_events(events))
    assert history == [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "",
            "reasoning": [{"content": "hmm", "redacted": False}],
            "toolCalls": [
                {"id": "t1", "name": "search", "arguments": '{"q":1}'},
                {"id": "t2", "name": "fetch", "arguments": "{}"},
            ],
        },
        {"role": "tool", "toolCallId": "t1", "content": '{"n":1}'},
        {"role": "tool", "toolCallId": "t2", "content": "nope"},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "more"},
        {"role": "assistant", "content": "partial"},
    ]


def test_tool_after_assistant_attaches_to_it() -> None:
    f = EventFactory("s", "r")
    events = [
        f.create("run.started", {}),
        f.create("message.started", {"messageId": "a", "role": "assistant", "content": "let me"}),
        f.create("message.completed", {"messageId": "a"}),
        f.create("tool.requested", {"toolCallId": "t", "name": "x", "arguments": "{}"}),
        f.create("tool.completed", {"toolCallId": "t", "result": "plain"}),
    ]
    assert derive_history(replay_events(events)) == [
        {
            "role": "assistant",
            "content": "let me",
            "toolCalls": [{"id": "t", "name": "x", "arguments": "{}"}],
        },
        {"role": "tool", "toolCallId": "t", "content": "plain"},
    ]
