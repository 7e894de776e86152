"""Property tests: random streams of valid and invalid events."""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core import (
    AgentProtocolError,
    AgentStore,
    DispatchOutcome,
    EventValidationError,
    create_agent_state,
    dump_event,
    parse_event,
    project_messages,
    reduce_agent_state,
    validate_event,
)
from tests.core.naive import naive_fold
from tests.core.strategies import any_streams, lifecycle_streams

SETTINGS = settings(max_examples=100, deadline=None)


def pure_fold(events: list[Any]) -> dict[str, Any]:
    return functools.reduce(reduce_agent_state, events, create_agent_state())


@SETTINGS
@given(any_streams())
def test_record_mode_never_raises_and_matches_the_naive_fold(events: list[Any]) -> None:
    expected = naive_fold(events)
    assert pure_fold(events) == expected
    store = AgentStore()
    for event in events:
        store.dispatch(event)
    assert store.get_snapshot() == expected
    batched = AgentStore()
    batched.batch(events)
    assert batched.get_snapshot() == expected
    project_messages(expected)


@SETTINGS
@given(any_streams(), st.lists(st.integers(0, 60), max_size=6))
def test_snapshots_read_mid_stream_match_the_fold_at_that_point(
    events: list[Any], read_points: list[int]
) -> None:
    store = AgentStore()
    points = set(read_points)
    for index, event in enumerate(events):
        store.dispatch(event)
        if index in points:
            assert store.get_snapshot() == naive_fold(events[: index + 1])
    assert store.get_snapshot() == naive_fold(events)


@SETTINGS
@given(any_streams())
def test_state_survives_a_json_round_trip(events: list[Any]) -> None:
    store = AgentStore()
    store.batch(events)
    state = store.get_snapshot()
    assert json.loads(json.dumps(state)) == state
    # A store restored from the JSON goes on exactly like the original.
    restored = AgentStore(json.loads(json.dumps(state)))
    assert restored.get_snapshot() == state


@SETTINGS
@given(any_streams())
def test_replaying_twice_equals_once(events: list[Any]) -> None:
    once = pure_fold(events)
    assert pure_fold(events + events) == once
    store = AgentStore()
    store.batch(events)
    snapshot = store.get_snapshot()
    calls: list[int] = []
    store.subscribe(lambda: calls.append(1))
    store.batch(events)
    assert store.get_snapshot() is snapshot
    assert calls == []


def _shifted(events: list[Any], offset: int = 1000) -> list[Any]:
    """The same events with sequences moved up, so they can follow another stream."""
    out: list[Any] = []
    for event in events:
        if isinstance(event, dict) and type(event.get("sequence")) is int:
            event = {**event, "sequence": event["sequence"] + offset}
        out.append(event)
    return out


def _poison(index: int) -> dict[str, Any]:
    """A valid event that is always an issue: a delta for a message that never exists."""
    return {
        "protocolVersion": "0.1",
        "type": "message.delta",
        "eventId": f"poison-{index}",
        "sessionId": "s1",
        "runId": "r1",
        "sequence": 10**6 + index,
        "timestamp": 0,
        "payload": {"messageId": "never", "delta": "x"},
    }


@SETTINGS
@given(lifecycle_streams(max_steps=60), st.data())
def test_strict_batch_is_all_or_nothing(stream: list[Any], data: Any) -> None:
    split = data.draw(st.integers(0, len(stream)))
    prefix, events = stream[:split], stream[split:]
    seed = AgentStore()
    seed.batch(prefix)
    before = seed.get_snapshot()
    # The events a record store would accept after ``before``, in order: a batch that applies.
    trial = AgentStore(before)
    accepted = [e for e in events if trial.dispatch(e) is DispatchOutcome.ACCEPTED]
    poison_at = data.draw(st.one_of(st.none(), st.integers(0, len(accepted))))
    batch = list(accepted)
    if poison_at is not None:
        batch.insert(poison_at, _poison(poison_at))

    store = AgentStore(before, mode="strict")
    before_json = json.dumps(store.get_snapshot(), sort_keys=True)
    calls: list[int] = []
    store.subscribe(lambda: calls.append(1))
    if poison_at is not None:
        with pytest.raises(AgentProtocolError) as info:
            store.batch(batch)
        assert info.value.issue["eventId"] == f"poison-{poison_at}"
        assert store.get_snapshot() == before
        assert json.dumps(store.get_snapshot(), sort_keys=True) == before_json
        assert calls == []
        # After the rollback the store goes on exactly like a fresh one.
        store.batch(accepted)
    else:
        store.batch(batch)
        assert calls == ([1] if accepted else [])
    assert store.get_snapshot() == naive_fold(accepted, before)


@SETTINGS
@given(any_streams(max_size=20), any_streams(max_size=20))
def test_strict_batch_of_random_events(prefix: list[Any], events: list[Any]) -> None:
    events = _shifted(events)
    seed = AgentStore()
    seed.batch(prefix)
    before = seed.get_snapshot()
    store = AgentStore(before, mode="strict")
    calls: list[int] = []
    store.subscribe(lambda: calls.append(1))
    try:
        store.batch(events)
    except (AgentProtocolError, EventValidationError):
        assert store.get_snapshot() == before
        assert calls == []
        return
    after = store.get_snapshot()
    assert after == naive_fold(events, before)
    assert after["issues"] == before["issues"]
    assert calls == ([1] if after != before else [])


@SETTINGS
@given(any_streams())
def test_pure_reducer_never_mutates_its_input(events: list[Any]) -> None:
    state = create_agent_state()
    for event in events:
        frozen = json.dumps(state, sort_keys=True)
        nxt = reduce_agent_state(state, event)
        assert json.dumps(state, sort_keys=True) == frozen
        state = nxt


@SETTINGS
@given(any_streams())
def test_parse_event_agrees_with_validate_event_and_round_trips(events: list[Any]) -> None:
    for event in events:
        error = validate_event(event)
        if error is None:
            assert dump_event(parse_event(event)) == event
        else:
            with pytest.raises(EventValidationError) as info:
                parse_event(event)
            assert (info.value.path, info.value.reason) == (error.path, error.reason)


@SETTINGS
@given(any_streams())
def test_dispatch_of_validated_events_folds_like_dispatch(events: list[Any]) -> None:
    """``dispatch(event, validated=True)`` (the runner already checked it) skips only the
    validation: for every valid event the state and outcomes are those of ``dispatch``."""
    valid = [event for event in events if validate_event(event) is None]
    checked, plain = AgentStore(), AgentStore()
    for event in valid:
        assert checked.dispatch(event, validated=True) == plain.dispatch(event)
        assert checked.last_issue == plain.last_issue
    assert checked.get_snapshot() == plain.get_snapshot() == naive_fold(valid)
