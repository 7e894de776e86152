"""RunEventLog: a run's events with delta runs merged fold to the same history."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from providers.context import RunContext
from providers.history import derive_run_history, replay_events
from providers.run_events import MERGE_EVERY, RunEventLog
from providers.testing import make_options

OPS = st.lists(
    st.tuples(
        st.sampled_from(["m1", "m2", "r1", "t1", "meta"]),
        st.text(alphabet="ab é\n{}", min_size=0, max_size=4),
    ),
    max_size=40,
)


def _play(ops: list[tuple[str, str]]) -> tuple[RunContext, list[dict[str, Any]]]:
    ctx = RunContext(make_options(), "test")
    ctx.begin({"prompt": "hi"})
    opened: set[str] = set()
    for target, text in ops:
        if target == "meta":  # a delta with meta never merges with one without
            if "m1" in opened:
                ctx.message_delta("m1", text, meta={"k": 1})
            continue
        if target not in opened:
            opened.add(target)
            if target.startswith("m"):
                ctx.open_message(target)
            elif target == "r1":
                ctx.open_reasoning(target)
            else:
                ctx.request_tool(target, "lookup")
        if target.startswith("m"):
            ctx.message_delta(target, text)
        elif target == "r1":
            ctx.reasoning_delta(target, text)
        else:
            ctx.tool_arguments(target, text)
    for target in sorted(opened):
        if target.startswith("m"):
            ctx.complete_message(target)
        elif target == "r1":
            ctx.complete_reasoning(target)
        else:
            ctx.complete_tool(target, {"ok": True})
    return ctx, ctx.take()


@settings(deadline=None, max_examples=150)
@given(OPS)
def test_merged_events_give_the_same_history_and_text(ops: list[tuple[str, str]]) -> None:
    ctx, emitted = _play(ops)
    kept = list(ctx.events)
    assert len(ctx.events) == len(emitted)
    assert len(kept) <= len(emitted)
    assert derive_run_history(kept) == derive_run_history(emitted)
    merged_state, full_state = replay_events(kept), replay_events(emitted)
    assert merged_state["messages"] == full_state["messages"]
    assert merged_state.get("tools") == full_state.get("tools")
    assert merged_state.get("reasoning") == full_state.get("reasoning")


def test_a_long_answer_is_kept_as_one_delta() -> None:
    ctx, emitted = _play([("m1", "x")] * 1000)
    kept = list(ctx.events)
    deltas = [e for e in kept if e["type"] == "message.delta"]
    assert len(deltas) == 1
    assert deltas[0]["payload"]["delta"] == "x" * 1000
    last = [e for e in emitted if e["type"] == "message.delta"][-1]
    assert deltas[0]["eventId"] == last["eventId"]
    assert deltas[0]["sequence"] == last["sequence"]


def test_iterating_does_not_close_the_open_group() -> None:
    log = RunEventLog()
    ctx, emitted = _play([("m1", "a"), ("m1", "b")])
    deltas = [e for e in emitted if e["type"] == "message.delta"]
    log.append(deltas[0])
    assert [e["payload"]["delta"] for e in log] == ["a"]
    log.append(deltas[1])
    assert [e["payload"]["delta"] for e in log] == ["ab"]
    assert len(log) == 2
    _ = ctx


def test_a_long_delta_run_is_kept_merged_and_reads_back_the_same_text() -> None:
    """Deltas are joined every MERGE_EVERY (a long answer holds few strings, not one per
    delta); the merged event carries exactly the text of all of them, in order."""
    log = RunEventLog()
    deltas = [f"{i};" for i in range(5 * MERGE_EVERY + 7)]
    events = [
        {
            "type": "message.delta",
            "eventId": f"e{i}",
            "sequence": i,
            "payload": {"messageId": "m", "delta": d},
        }
        for i, d in enumerate(deltas)
    ]
    for event in events:
        log.append(event)
    (merged,) = list(log)
    assert merged["payload"]["delta"] == "".join(deltas)
    assert merged["eventId"] == events[-1]["eventId"]
    # one string per MERGE_EVERY deltas, then the ones since the last merge
    assert len(log._chunks) == len(deltas) // MERGE_EVERY + len(deltas) % MERGE_EVERY
    assert len(log) == len(events)
