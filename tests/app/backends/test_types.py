"""The backend's plain values: log entries' frames and conversation refs as dict keys."""

from __future__ import annotations

from typing import Any, Literal

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from app.backends import ConversationRef, LogEntry

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
_events = st.fixed_dictionaries(
    {"type": st.sampled_from(["message.delta", "run.started", "run.completed", "x"])},
    optional={"runId": st.text(max_size=12), "payload": _json},
)
_cursors = st.from_regex(r"[A-Za-z0-9_]{1,12}-[0-9]{1,7}", fullmatch=True)


def test_an_event_frame_is_exactly_as_http_api_md_specifies() -> None:
    event = {"type": "message.delta", "runId": "r1", "payload": {"delta": "é\n"}}
    entry = LogEntry.for_event_at(b"abc-7", event)
    data = b'{"type":"message.delta","runId":"r1","payload":{"delta":"\xc3\xa9\\n"}}'
    assert entry.sse == b"id: abc-7\ndata: " + data + b"\n\n"
    assert (entry.cursor, entry.data, entry.kind) == ("abc-7", data, "event")
    assert (entry.event_type, entry.run_id, entry.is_run_terminal) == ("message.delta", "r1", False)
    assert entry.ws == '{"type":"event","cursor":"abc-7","event":' + data.decode() + "}"


@settings(deadline=None, max_examples=200)
@given(cursor=_cursors, event=_events)
def test_the_fast_event_entry_is_the_general_one(cursor: str, event: dict[str, Any]) -> None:
    """``for_event_at`` (the memory backend's path) builds the very entry the general
    constructor builds: same frame bytes, cursor, data, type, run and WebSocket frame."""
    fast = LogEntry.for_event_at(cursor.encode(), event)
    general = LogEntry(cursor, "event", orjson.dumps(event), event.get("type"), event.get("runId"))
    assert (
        fast.sse
        == general.sse
        == b"id: %s\ndata: %s\n\n"
        % (
            cursor.encode(),
            orjson.dumps(event),
        )
    )
    assert (fast.cursor, fast.data, fast.kind) == (general.cursor, general.data, general.kind)
    assert (fast.event_type, fast.run_id) == (general.event_type, general.run_id)
    assert fast.is_run_terminal == general.is_run_terminal
    assert fast.ws == general.ws
    assert orjson.loads(fast.data) == event
    assert LogEntry.for_event(cursor, event).sse == fast.sse


def _seen(entry: LogEntry) -> tuple[Any, ...]:
    return (
        entry.sse,
        entry.cursor,
        entry.data,
        entry.kind,
        entry.event_type,
        entry.run_id,
        entry.is_run_terminal,
        entry.ws,
    )


EntryFields = tuple[str, Literal["event", "extension"], bytes, str | None, str | None]


@st.composite
def _entry_fields(draw: st.DrawFn) -> EntryFields:
    """What a log entry is built from: cursor, kind, data, event type, run id (an event, or an
    extension value holding one)."""
    cursor, event = draw(_cursors), draw(_events)
    run_id = draw(st.none() | st.text(max_size=5))
    if draw(st.booleans()):
        return cursor, "extension", orjson.dumps({"key": "k", "value": event}), None, run_id
    return cursor, "event", orjson.dumps(event), str(event["type"]), run_id


@settings(deadline=None, max_examples=200)
@given(fields=_entry_fields())
def test_a_thawed_entry_is_the_entry_that_was_frozen(fields: EntryFields) -> None:
    """``thaw(frozen())`` (the memory backend's cold log) gives back what readers saw of the
    entry: frames, cursor, data, kind, type, run, WebSocket frame."""
    entry = LogEntry(*fields)
    assert _seen(LogEntry.thaw(entry.frozen())) == _seen(entry)


@settings(deadline=None, max_examples=200)
@given(fields=_entry_fields())
def test_an_entry_of_logged_data_is_the_general_one(fields: EntryFields) -> None:
    """``of_logged`` (the Redis owner's path, from JSON already serialized) builds the very
    entry the general constructor builds, for events and extension values alike."""
    cursor, kind, data, event_type, run_id = fields
    fast = LogEntry.of_logged(cursor.encode(), kind, data, event_type, run_id)
    assert _seen(fast) == _seen(LogEntry(*fields))


@settings(deadline=None, max_examples=100)
@given(
    a=st.tuples(st.text(max_size=6), st.text(max_size=6)),
    b=st.tuples(st.text(max_size=6), st.text(max_size=6)),
)
def test_refs_are_equal_exactly_when_principal_and_key_are(
    a: tuple[str, str], b: tuple[str, str]
) -> None:
    """As dict keys (the backend's, the follower's, the limits'), refs behave as before."""
    ref_a, ref_b = ConversationRef(*a), ConversationRef(*b)
    assert (ref_a == ref_b) == (a == b)
    assert (ref_a.digest == ref_b.digest) == (a == b)
    if a == b:
        assert hash(ref_a) == hash(ref_b)
        assert {ref_a: 1}[ConversationRef(a[0], a[1])] == 1
    assert (ref_a.principal, ref_a.key) == a


def test_a_ref_keeps_its_digest_and_repr() -> None:
    """The digest names Redis keys and archive rows: it must not move (value before the
    NamedTuple change)."""
    ref = ConversationRef(principal="alice", key="k1")
    assert ref.digest == "39b3df734c4ec5f52765505bc9fd73c4"
    assert repr(ref) == "ConversationRef(principal='alice', key='k1')"
