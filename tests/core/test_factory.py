"""Conformance cases "Event factory" 1-3 (factory.test.ts) and factory details."""

from __future__ import annotations

import pytest

from core import EventFactory, is_agent_event, validate_event


def test_first_event_then_parent_and_meta() -> None:
    factory = EventFactory("session-1", "run-1", now=lambda: 100)
    assert factory.sequence == -1
    first = factory.create("message.started", {"messageId": "m", "role": "assistant"})
    assert first == {
        "protocolVersion": "0.1",
        "type": "message.started",
        "eventId": "run-1:0:message.started",
        "sessionId": "session-1",
        "runId": "run-1",
        "sequence": 0,
        "timestamp": 100,
        "payload": {"messageId": "m", "role": "assistant"},
    }
    assert "parentId" not in first and "meta" not in first
    second = factory.create(
        "message.delta",
        {"messageId": "m", "delta": "x"},
        parent_id="parent",
        meta={"provider": "p", "x-extra": {"k": 1}},
    )
    assert second["parentId"] == "parent"
    assert second["meta"] == {"provider": "p", "x-extra": {"k": 1}}
    assert second["eventId"] == "run-1:1:message.delta"
    assert factory.sequence == 1
    assert is_agent_event(first) and is_agent_event(second)


def test_explicit_sequence_moves_the_next_generated_one() -> None:
    factory = EventFactory("s", "r", now=lambda: 1)
    assert factory.create("run.started", {}, sequence=10)["sequence"] == 10
    nxt = factory.create("run.completed", {})
    assert nxt["sequence"] == 11
    assert nxt["eventId"] == "r:11:run.completed"
    # A lower explicit sequence does not move the counter back (Math.max in the reference).
    assert factory.create("run.completed", {}, sequence=3)["sequence"] == 3
    assert factory.sequence == 11
    assert factory.create("run.completed", {})["sequence"] == 12


@pytest.mark.parametrize("bad", [-1, 1.5, float("nan"), float("inf"), True, "1"])
def test_bad_sequence_raises(bad: object) -> None:
    factory = EventFactory("s", "r", now=lambda: 1)
    with pytest.raises(ValueError, match="non-negative integer"):
        factory.create("run.started", {}, sequence=bad)  # type: ignore[arg-type]
    assert factory.sequence == -1


def test_integral_float_sequence_is_written_as_integer() -> None:
    factory = EventFactory("s", "r", now=lambda: 1)
    event = factory.create("run.started", {}, sequence=3.0)  # type: ignore[arg-type]
    assert event["eventId"] == "r:3:run.started"
    assert event["sequence"] == 3 and isinstance(event["sequence"], int)


def test_explicit_event_id_and_timestamp() -> None:
    factory = EventFactory("s", "r", now=lambda: 1)
    event = factory.create("run.started", {}, event_id="custom", timestamp=42.5)
    assert event["eventId"] == "custom" and event["timestamp"] == 42.5


def test_default_clock_is_epoch_milliseconds() -> None:
    import time

    before = time.time() * 1000
    event = EventFactory("s", "r").create("run.started", {})
    assert before - 1 <= event["timestamp"] <= time.time() * 1000 + 1


def test_invalid_envelopes_from_the_reference_test() -> None:
    assert not is_agent_event({"type": "run.started"})
    factory = EventFactory("s", "r", now=lambda: 1)
    assert not is_agent_event(factory.create("message.started", {}))
    error = validate_event(factory.create("message.started", {}))
    assert error is not None and error.path == "$.payload.messageId"
    unknown = factory.create("unknown.event", {})
    assert not is_agent_event(unknown)
    error = validate_event(unknown)
    assert error is not None and error.path == "$.type"


def test_generated_events_equal_the_general_path_at_every_sequence() -> None:
    fast = EventFactory("s", "r", now=lambda: 5.0)
    general = EventFactory("s", "r", now=lambda: 5.0)
    for seq in range(3):
        meta = {"k": seq} if seq == 1 else None
        parent = "p" if seq == 2 else None
        made = fast.create("message.delta", {"messageId": "m", "delta": "x"}, meta=meta,
                           parent_id=parent)  # fmt: skip
        assert made == general.create(
            "message.delta", {"messageId": "m", "delta": "x"}, meta=meta, parent_id=parent,
            sequence=seq,
        )  # fmt: skip
        assert made["eventId"] == f"r:{seq}:message.delta"
        assert type(made["sequence"]) is int
    assert fast.sequence == general.sequence == 2


def test_sequence_past_the_safe_integers_still_uses_js_number_text() -> None:
    factory = EventFactory("s", "r", now=lambda: 5.0, initial_sequence=2**53 - 2)
    event = factory.create("run.started", {})
    assert event["sequence"] == 2**53 - 1
    assert event["eventId"] == f"r:{2**53 - 1}:run.started"
    beyond = EventFactory("s", "r", now=lambda: 5.0, initial_sequence=10**21)
    assert beyond.create("run.started", {})["eventId"] == "r:1e+21:run.started"


@pytest.mark.parametrize("initial", [-1, 0, 41, 2**53 - 4, 2**53 - 3, 2**53 - 2, 10**21])
def test_next_event_is_create_without_options(initial: int) -> None:
    """``next_event`` (the streamed deltas' call) gives exactly ``create``'s event, key order
    included, and moves the sequence the same way, across the safe-integer edge."""
    fast = EventFactory("s", "r", now=lambda: 5.0, initial_sequence=initial)
    general = EventFactory("s", "r", now=lambda: 5.0, initial_sequence=initial)
    for n in range(4):
        payload = {"messageId": "m", "delta": str(n)}
        made = fast.next_event("message.delta", payload)
        expected = general.create("message.delta", dict(payload))
        assert list(made.items()) == list(expected.items())
        assert fast.sequence == general.sequence


def test_next_event_reads_the_default_clock_or_the_given_one() -> None:
    import time

    before = time.time() * 1000
    event = EventFactory("s", "r").next_event("run.started", {})
    assert before - 1 <= event["timestamp"] <= time.time() * 1000 + 1
    ticks = iter([7.0, 8.5])
    clocked = EventFactory("s", "r", now=lambda: next(ticks))
    assert [clocked.next_event("run.started", {})["timestamp"] for _ in range(2)] == [7.0, 8.5]
