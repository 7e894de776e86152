"""Conformance cases "Store" 1-4 (createAgentStore.test.ts) and the store's own API."""

from __future__ import annotations

from typing import Any

import pytest

from core import (
    AgentProtocolError,
    AgentStore,
    DispatchOutcome,
    EventFactory,
    EventValidationError,
    entity_key,
)


class Counter:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


def test_1_batch_notifies_once() -> None:
    events = EventFactory("s", "r")
    store = AgentStore()
    listener = Counter()
    store.subscribe(listener)
    outcomes = store.batch(
        [
            events.create("run.started", {}),
            events.create("message.started", {"messageId": "m", "role": "assistant"}),
            events.create("message.delta", {"messageId": "m", "delta": "hello"}),
        ]
    )
    assert outcomes == [DispatchOutcome.ACCEPTED] * 3
    assert listener.calls == 1
    assert store.get_snapshot()["messages"][entity_key("r", "m")]["content"] == "hello"


def test_2_strict_dispatch_raises_without_committing() -> None:
    events = EventFactory("s", "r")
    store = AgentStore(mode="strict")
    listener = Counter()
    store.subscribe(listener)
    orphan = events.create("message.delta", {"messageId": "missing", "delta": "x"})
    with pytest.raises(AgentProtocolError) as info:
        store.dispatch(orphan)
    assert info.value.issue["code"] == "missing_entity"
    assert str(info.value) == 'Message "missing" does not exist.'
    assert store.get_snapshot()["issues"] == []
    assert store.get_snapshot()["processedEventIds"] == {}
    assert store.last_outcome is DispatchOutcome.REJECTED
    assert store.last_issue == info.value.issue
    assert listener.calls == 0


def test_3_strict_batch_rolls_back_everything() -> None:
    events = EventFactory("s", "r")
    store = AgentStore(mode="strict")
    listener = Counter()
    store.subscribe(listener)
    before = store.get_snapshot()
    with pytest.raises(AgentProtocolError):
        store.batch(
            [
                events.create("run.started", {}),
                events.create("message.delta", {"messageId": "missing", "delta": "x"}),
            ]
        )
    snapshot = store.get_snapshot()
    assert snapshot["runs"] == {} and snapshot["messages"] == {} and snapshot["issues"] == []
    assert snapshot == before
    assert snapshot["processedEventIds"] == {} and snapshot["lastSequenceByRun"] == {}
    assert listener.calls == 0


def test_4_reset_unsubscribe_destroy() -> None:
    events = EventFactory("s", "r")
    store = AgentStore()
    listener = Counter()
    unsubscribe = store.subscribe(listener)
    store.dispatch(events.create("run.started", {}))
    store.reset()
    unsubscribe()
    store.reset()
    store.destroy()
    assert listener.calls == 2
    # As in the reference, the snapshot stays readable after destroy.
    assert store.get_snapshot()["runs"] == {}
    assert store.destroyed
    for call in (
        lambda: store.dispatch(events.create("run.started", {})),
        lambda: store.batch([]),
        lambda: store.reset(),
        lambda: store.subscribe(Counter()),
    ):
        with pytest.raises(RuntimeError, match=r"^AgentStore has been destroyed\.$"):
            call()


def test_duplicate_dispatch_is_silent() -> None:
    events = EventFactory("s", "r")
    store = AgentStore()
    listener = Counter()
    store.subscribe(listener)
    event = events.create("run.started", {})
    assert store.dispatch(event) is DispatchOutcome.ACCEPTED
    snapshot = store.get_snapshot()
    assert store.dispatch(event) is DispatchOutcome.DUPLICATE
    assert store.get_snapshot() is snapshot
    assert listener.calls == 1
    # A batch of duplicates only notifies nobody either.
    assert store.batch([event, event]) == [DispatchOutcome.DUPLICATE] * 2
    assert listener.calls == 1


def test_strict_mode_ignores_duplicates() -> None:
    event = EventFactory("s", "r").create("run.started", {})
    store = AgentStore(mode="strict")
    store.dispatch(event)
    assert store.dispatch(event) is DispatchOutcome.DUPLICATE


def test_record_mode_reports_issue_and_notifies() -> None:
    store = AgentStore()
    listener = Counter()
    store.subscribe(listener)
    orphan = EventFactory("s", "r").create("message.delta", {"messageId": "m", "delta": "x"})
    assert store.dispatch(orphan) is DispatchOutcome.REJECTED
    assert store.last_issue is not None and store.last_issue["code"] == "missing_entity"
    assert store.issue_count == 1 and store.issues() == [store.last_issue]
    assert listener.calls == 1


def test_invalid_event_changes_nothing_in_record_mode_and_raises_in_strict() -> None:
    store = AgentStore()
    listener = Counter()
    store.subscribe(listener)
    snapshot = store.get_snapshot()
    bad: dict[str, Any] = {"type": "run.started"}
    assert store.dispatch(bad) is DispatchOutcome.INVALID
    assert store.last_error is not None and store.last_error.path == "$.protocolVersion"
    assert store.get_snapshot() is snapshot and listener.calls == 0

    strict = AgentStore(mode="strict")
    events = EventFactory("s", "r")
    with pytest.raises(EventValidationError):
        strict.batch([events.create("run.started", {}), bad])
    assert strict.get_snapshot()["runs"] == {}


def test_batch_rolls_back_on_a_listener_free_exception_mid_batch() -> None:
    """Any exception in a strict batch (here: a non-mapping event) rolls everything back."""
    events = EventFactory("s", "r")
    store = AgentStore(mode="strict")
    store.dispatch(events.create("run.started", {}))
    store.dispatch(events.create("message.started", {"messageId": "m", "role": "assistant"}))
    store.dispatch(events.create("message.delta", {"messageId": "m", "delta": "keep"}))
    before = store.get_snapshot()
    with pytest.raises(AgentProtocolError):
        store.batch(
            [
                events.create("message.delta", {"messageId": "m", "delta": " more"}),
                events.create(
                    "message.delta", {"messageId": "m", "delta": [{"type": "a.b", "data": 1}]}
                ),
                events.create("reasoning.started", {"reasoningId": "x"}),
                events.create("reasoning.delta", {"reasoningId": "x", "delta": "t"}),
                events.create("tool.requested", {"toolCallId": "t", "name": "n"}),
                events.create("tool.arguments_delta", {"toolCallId": "t", "delta": "{"}),
                events.create("task.created", {"taskId": "k", "title": "T"}),
                events.create("task.updated", {"taskId": "k", "progress": 5}),
                events.create("session.started", {}),
                events.create("run.completed", {}),
                events.create("run.started", {}),  # duplicate_entity -> raise
            ]
        )
    after = store.get_snapshot()
    assert after == before
    assert store.get_entity("message", "r", "m") == before["messages"][entity_key("r", "m")]
    # The rolled-back store keeps working and matches a fresh fold.
    store.dispatch(events.create("message.delta", {"messageId": "m", "delta": "!"}))
    assert store.get_entity("message", "r", "m")["content"] == "keep!"  # type: ignore[index]


def test_snapshots_are_cached_and_never_aliased() -> None:
    events = EventFactory("s", "r")
    store = AgentStore()
    store.batch(
        [
            events.create("run.started", {}),
            events.create("message.started", {"messageId": "m", "role": "assistant"}),
            events.create("message.delta", {"messageId": "m", "delta": "a"}),
        ]
    )
    first = store.get_snapshot()
    assert store.get_snapshot() is first
    store.dispatch(events.create("message.delta", {"messageId": "m", "delta": "b"}))
    second = store.get_snapshot()
    assert second is not first
    assert first["messages"][entity_key("r", "m")]["content"] == "a"
    assert second["messages"][entity_key("r", "m")]["content"] == "ab"
    assert len(first["processedEventIds"]) == 3 and len(second["processedEventIds"]) == 4
    # Unchanged maps are shared between snapshots.
    assert second["runs"] is first["runs"]


def test_read_helpers() -> None:
    events = EventFactory("s", "r")
    store = AgentStore()
    store.batch(
        [
            events.create("session.started", {"title": "T"}),
            events.create("run.started", {"input": 1}),
            events.create("tool.requested", {"toolCallId": "t", "name": "n", "arguments": "{"}),
            events.create("tool.arguments_delta", {"toolCallId": "t", "delta": "}"}),
        ]
    )
    for kind in ("tool", "toolCall", "toolCalls"):
        tool = store.get_entity(kind, "r", "t")
        assert tool is not None and tool["arguments"] == "{}"
    assert store.get_entity("message", "r", "t") is None
    with pytest.raises(KeyError):
        store.get_entity("nope", "r", "t")
    run = store.get_run("r")
    assert run is not None and run["status"] == "running" and run["input"] == 1
    assert store.get_run("other") is None
    session = store.get_session("s")
    assert session == {"id": "s", "title": "T", "createdAt": session["createdAt"]}  # type: ignore[index]
    assert store.get_session("x") is None
    assert store.last_sequence("r") == 3 and store.last_sequence("x") is None
    assert store.has_processed("r", "r:0:session.started")
    assert not store.has_processed("other", "r:0:session.started")
    assert store.is_requesting()
    store.dispatch(events.create("tool.completed", {"toolCallId": "t"}))
    store.dispatch(events.create("run.completed", {}))
    assert not store.is_requesting()


def test_initial_state_and_reset_with_state_continue_streaming() -> None:
    events = EventFactory("s", "r")
    source = AgentStore()
    source.batch(
        [
            events.create("run.started", {}),
            events.create("message.started", {"messageId": "m", "role": "assistant"}),
            events.create("message.delta", {"messageId": "m", "delta": "he"}),
            events.create("reasoning.started", {"reasoningId": "x"}),
            events.create(
                "message.started",
                {"messageId": "p", "role": "assistant", "content": [{"type": "text", "text": "a"}]},
            ),
        ]
    )
    snapshot = source.get_snapshot()
    tail = [
        events.create("message.delta", {"messageId": "m", "delta": "llo"}),
        events.create("reasoning.delta", {"reasoningId": "x", "delta": "r"}),
        events.create("message.delta", {"messageId": "p", "delta": "b"}),
    ]
    restored = AgentStore(snapshot)
    restored.batch(tail)
    source.batch(tail)
    assert restored.get_snapshot() == source.get_snapshot()
    # The snapshot handed in is not mutated by the restored store.
    assert snapshot["messages"][entity_key("r", "m")]["content"] == "he"
    assert snapshot["messages"][entity_key("r", "p")]["content"] == [{"type": "text", "text": "a"}]

    listener = Counter()
    other = AgentStore()
    other.subscribe(listener)
    other.reset(snapshot)
    assert listener.calls == 1
    assert other.get_snapshot() == snapshot


def test_same_listener_subscribed_twice_is_called_once() -> None:
    store = AgentStore()
    listener = Counter()
    store.subscribe(listener)
    store.subscribe(listener)
    store.reset()
    assert listener.calls == 1


def test_listener_exception_propagates_after_commit() -> None:
    store = AgentStore()

    def boom() -> None:
        raise ValueError("listener")

    store.subscribe(boom)
    with pytest.raises(ValueError, match="listener"):
        store.dispatch(EventFactory("s", "r").create("run.started", {}))
    assert "r" in store.get_snapshot()["runs"]


def test_bad_mode() -> None:
    with pytest.raises(ValueError):
        AgentStore(mode="loose")  # type: ignore[arg-type]


def test_long_streams_stay_exact_across_merges_snapshots_and_rollbacks() -> None:
    events = EventFactory("s", "r")
    store = AgentStore(mode="strict")
    store.batch(
        [
            events.create("run.started", {}),
            events.create("message.started", {"messageId": "m", "role": "assistant"}),
            events.create("tool.requested", {"toolCallId": "t", "name": "n"}),
        ]
    )
    expected_text = []
    expected_args = []
    for i in range(1000):
        piece = f"{i},"
        store.dispatch(events.create("message.delta", {"messageId": "m", "delta": piece}))
        store.dispatch(events.create("tool.arguments_delta", {"toolCallId": "t", "delta": piece}))
        expected_text.append(piece)
        expected_args.append(piece)
        if i % 97 == 0:
            snapshot = store.get_snapshot()
            assert snapshot["messages"][entity_key("r", "m")]["content"] == "".join(expected_text)
        if i % 131 == 0:
            with pytest.raises(AgentProtocolError):
                store.batch(
                    [
                        *(
                            events.create("message.delta", {"messageId": "m", "delta": "x"})
                            for _ in range(70)
                        ),
                        events.create("message.delta", {"messageId": "zz", "delta": "x"}),
                    ]
                )
    message = store.get_entity("message", "r", "m")
    tool = store.get_entity("tool", "r", "t")
    assert message is not None and message["content"] == "".join(expected_text)
    assert tool is not None and tool["arguments"] == "".join(expected_args)


def test_odd_mapping_is_invalid_not_an_exception() -> None:
    class Weird(dict[str, Any]):
        def get(self, *args: Any) -> Any:
            raise RuntimeError("odd")

    store = AgentStore()
    assert store.dispatch(Weird()) is DispatchOutcome.INVALID
    assert store.last_error is not None and store.last_error.path == "$"


def test_streamed_text_merges_only_its_newest_chunks() -> None:
    """Every 64 deltas the newest ones are joined; text merged before is never copied again
    (O(1) per delta on long answers) and the content stays exact."""
    from core.engine import _MERGE_EVERY, Text

    events = EventFactory("s", "r")
    store = AgentStore()
    store.dispatch(events.create("run.started", {}))
    store.dispatch(events.create("message.started", {"messageId": "m", "role": "assistant"}))
    deltas = [f"{i};" for i in range(3 * _MERGE_EVERY + 5)]
    record = None
    first_merge = None
    for n, delta in enumerate(deltas, 1):
        store.dispatch(events.create("message.delta", {"messageId": "m", "delta": delta}))
        record = store._engine.entities["messages"][entity_key("r", "m")]
        text = record["content"]
        assert isinstance(text, Text)
        if n == 2 * _MERGE_EVERY:
            first_merge = text.chunks[1]
    assert record is not None and first_merge is not None
    chunks = record["content"].chunks
    assert chunks[1] is first_merge  # not joined into a larger string since
    assert len(chunks) == 1 + 3 + 5  # the first delta, three merges, five since
    assert store.get_entity("message", "r", "m")["content"] == "".join(deltas)  # type: ignore[index]
