"""``core.processed.ProcessedIds``: the same keys, membership and order as the reference's
``processedEventIds`` dict, in about a byte per factory-made event id."""

from __future__ import annotations

import tracemalloc
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from core.events import EVENT_TYPE_LIST
from core.factory import EventFactory
from core.keys import event_key, run_key_prefix
from core.processed import ProcessedIds
from core.reducer import create_agent_state, reduce_agent_state
from core.store import AgentStore

RUNS = st.sampled_from(["r", "run:1", "😀r", "r2"])
TYPES = st.sampled_from(["message.delta", "run.started", "run.failed", "nope"])
SEQUENCES = st.one_of(
    st.integers(0, 20),
    st.sampled_from([100, 10**15 - 1, 10**15, 10**21]),
)


@st.composite
def event_ids(draw: Any) -> tuple[str, str, Any, str]:
    """(runId, eventId, sequence hint, type hint): factory-shaped ids mostly, odd ones too."""
    run_id = draw(RUNS)
    seq = draw(SEQUENCES)
    etype = draw(TYPES)
    shape = draw(st.integers(0, 5))
    if shape == 0:
        event_id = draw(
            st.sampled_from(["e1", "", "x:1:message.delta", f"{run_id}:01:run.started"])
        )
    elif shape == 1:
        event_id = f"{run_id}:{seq}:{etype}"
        seq = draw(SEQUENCES)  # the hint differs from the id
    else:
        event_id = f"{run_id}:{seq}:{etype}"
    hint_type = etype if etype in EVENT_TYPE_LIST else "message.delta"
    return run_id, event_id, seq, hint_type


@settings(max_examples=300, deadline=None, database=None)
@given(ops=st.lists(st.tuples(event_ids(), st.booleans()), max_size=60))
def test_same_keys_membership_and_order_as_a_dict(ops: list[Any]) -> None:
    ids = ProcessedIds()
    oracle: dict[str, bool] = {}
    added: list[tuple[Any, str]] = []
    for (run_id, event_id, seq, etype), roll_back in ops:
        prefix = run_key_prefix(run_id)
        key = prefix + event_id
        token = ids.token(prefix, run_id, event_id, seq, etype)
        assert (token in ids) == (key in oracle)
        assert (ids.new_token(prefix, run_id, event_id, seq, etype) is None) == (key in oracle)
        assert ids.has_key(key) == (key in oracle)
        if key in oracle:
            continue
        ids.add(token)
        oracle[key] = True
        added.append((token, key))
        if roll_back:  # a strict batch undoing its last insertion
            ids.pop_last(token)
            del oracle[key]
            added.pop()
        assert len(ids) == len(oracle)
    assert list(ids.to_dict().items()) == list(oracle.items())
    assert list(ProcessedIds.from_dict(oracle).to_dict().items()) == list(oracle.items())
    for token, key in reversed(added):
        ids.pop_last(token)
        del oracle[key]
        assert list(ids.keys()) == list(oracle)


def test_store_snapshot_equals_the_reference_reducer_byte_for_byte() -> None:
    factory = EventFactory("s", "r", now=lambda: 1.0)
    events: list[dict[str, Any]] = [
        factory.create("session.started", {}),
        factory.create("run.started", {}),
        factory.create("message.started", {"messageId": "m", "role": "assistant"}),
    ]
    events += [factory.create("message.delta", {"messageId": "m", "delta": "x"}) for _ in range(5)]
    odd = {**events[-1], "eventId": "upstream-7", "sequence": 50}  # not factory-shaped
    events += [odd, events[3]]  # and a duplicate
    events.append(factory.create("message.completed", {"messageId": "m"}))
    store = AgentStore()
    state = create_agent_state()
    for event in events:
        store.dispatch(event)
        state = reduce_agent_state(state, event)
    assert orjson.dumps(store.get_snapshot()) == orjson.dumps(state)
    assert store.has_processed("r", "upstream-7") and store.has_processed("r", "r:3:message.delta")
    assert not store.has_processed("r", "r:3:message.started")
    # A store loaded from that state keeps it as is.
    assert orjson.dumps(AgentStore(state).get_snapshot()) == orjson.dumps(state)


def test_strict_batch_rollback_forgets_its_ids() -> None:
    factory = EventFactory("s", "r", now=lambda: 1.0)
    store = AgentStore(mode="strict")
    store.batch([factory.create("session.started", {}), factory.create("run.started", {})])
    good = factory.create("message.started", {"messageId": "m", "role": "assistant"})
    bad = factory.create("message.delta", {"messageId": "ghost", "delta": "x"})
    before = orjson.dumps(store.get_snapshot())
    try:
        store.batch([good, bad])
    except Exception:
        pass
    assert orjson.dumps(store.get_snapshot()) == before
    assert not store.has_processed("r", good["eventId"])
    store.dispatch(good)  # not a duplicate after the rollback
    assert store.has_processed("r", good["eventId"])


def test_factory_ids_take_about_a_byte_each() -> None:
    run_id = "run_0123456789abcdef0123456789"
    prefix = run_key_prefix(run_id)
    n = 50_000
    tracemalloc.start()
    try:
        ids = ProcessedIds()
        for seq in range(n):
            etype = "message.delta"
            ids.add(ids.token(prefix, run_id, f"{run_id}:{seq}:{etype}", seq, etype))
        compact, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        baseline = dict.fromkeys(
            (event_key(run_id, f"{run_id}:{seq}:message.delta") for seq in range(n)), True
        )
        plain, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(ids) == len(baseline) == n
    assert compact < 4 * n  # bytes: the dict of key strings takes > 100 per id
    assert plain - compact > 100 * n


@settings(max_examples=300, deadline=None, database=None)
@given(ops=st.lists(event_ids(), max_size=60))
def test_add_next_adds_as_add_would_or_declines_untouched(ops: list[Any]) -> None:
    """``add_next`` (the engine's hot path) either adds exactly as ``add`` would, or changes
    nothing; it never adds an id that is already there."""
    fast, plain = ProcessedIds(), ProcessedIds()
    for run_id, event_id, seq, etype in ops:
        prefix = run_key_prefix(run_id)
        token = fast.new_token(prefix, run_id, event_id, seq, etype)
        assert (token is None) == (plain.new_token(prefix, run_id, event_id, seq, etype) is None)
        if isinstance(token, tuple):
            before = fast.keys()
            if fast.add_next(*token):
                assert token[1] == len(token[0].codes) - 1
            else:
                assert fast.keys() == before
                fast.add(token)
        elif token is not None:
            fast.add(token)
        if token is not None:
            plain.add(plain.token(prefix, run_id, event_id, seq, etype))
        assert fast.keys() == plain.keys()
        assert len(fast) == len(plain)


def test_add_next_declines_a_processed_or_out_of_turn_sequence() -> None:
    ids = ProcessedIds()
    prefix = run_key_prefix("r")
    first = ids.new_token(prefix, "r", "r:0:message.delta", 0, "message.delta")
    assert isinstance(first, tuple)
    assert ids.add_next(*first)
    assert not ids.add_next(*first)  # already there
    later = ids.token(prefix, "r", "r:5:message.delta", 5, "message.delta")
    assert isinstance(later, tuple)
    assert not ids.add_next(*later)  # not the next sequence
    ids.add("odd-key")
    nxt = ids.token(prefix, "r", "r:1:message.delta", 1, "message.delta")
    assert isinstance(nxt, tuple)
    assert not ids.add_next(*nxt)  # string keys present: the general path decides
    assert ids.keys() == [f"{prefix}r:0:message.delta", "odd-key"]


@settings(max_examples=300, deadline=None, database=None)
@given(
    ops=st.lists(
        st.tuples(event_ids(), st.integers(0, 3), st.booleans(), st.booleans()), max_size=60
    )
)
def test_to_dict_built_on_the_previous_one_equals_a_fresh_build(ops: list[Any]) -> None:
    """``to_dict`` extends the dict it returned last; with insertions, roll-backs (several in
    a row) and reads in any order it gives the keys and order a fresh build gives, and never
    changes a dict it returned before."""
    ids = ProcessedIds()
    oracle: dict[str, bool] = {}
    added: list[tuple[Any, str]] = []
    returned: list[tuple[dict[str, bool], list[str]]] = []
    for (run_id, event_id, seq, etype), roll_backs, read_before, read_after in ops:
        if read_before:
            got = ids.to_dict()
            returned.append((got, list(got)))
            assert list(got.items()) == list(oracle.items())
        prefix = run_key_prefix(run_id)
        key = prefix + event_id
        token = ids.new_token(prefix, run_id, event_id, seq, etype)
        if token is not None:
            ids.add(token)
            oracle[key] = True
            added.append((token, key))
        for _ in range(min(roll_backs - 1, len(added))):  # a strict batch rolling back
            token, key = added.pop()
            ids.pop_last(token)
            del oracle[key]
        if read_after:
            got = ids.to_dict()
            returned.append((got, list(got)))
            assert list(got.items()) == list(oracle.items())
    assert list(ids.to_dict().items()) == list(oracle.items())
    for got, keys in returned:
        assert list(got) == keys
    every = ids.keys()
    for count in range(len(every) + 1):  # only the new keys are formatted
        assert ids._newest(count) == every[len(every) - count :]
